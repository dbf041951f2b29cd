"""The rows a view's bound drops are released with noise, charged before release (issue 32:
truncation bias reported beside noise; dpsql/engine/people_truncation.py)."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

import dpsql  # noqa: E402
from dpsql.engine.config import load_config  # noqa: E402
from dpsql.engine.people_plan import people_plan  # noqa: E402
from dpsql.engine.people_truncation import TRUNCATION_PREFIX, noise_param, released_truncation  # noqa: E402
from dpsql.measure.router import open_backend  # noqa: E402

WORKLOAD = ["SELECT status, COUNT(*) FROM orders GROUP BY status",
            "SELECT flag, COUNT(*) FROM lineitem GROUP BY flag"]


def _spec(tmp_path: Path, tag: str, share=0.2, rows=None):
    files = shop.write_parquet(rows or shop.shop_rows(customers=200), tmp_path / "data")
    d = tmp_path / tag
    d.mkdir(exist_ok=True)
    spec = shop.config(d, {t: {"parquet": str(p)} for t, p in files.items()},
                       workload={"queries": WORKLOAD}, policy="refuse")
    spec["people"]["truncation_share"] = share
    # public sizes that force no drop: the plan must not also say the figure is not released
    spec["tables"]["customers"]["rows"] = 1000
    spec["tables"]["orders"]["rows"] = 1000
    return spec


def _exact(spec, table):
    cfg = load_config(spec)
    backend = open_backend(cfg.sources)
    try:
        return backend.truncation(cfg.tables[table], cfg.people.bound(table))
    finally:
        backend.close()


@pytest.mark.slow   # two measurements
def test_the_dropped_rows_are_released_with_noise_and_charged_before_release(tmp_path):
    figures = []
    for tag in ("a", "b"):
        con = dpsql.connect(_spec(tmp_path, tag), budget={"epsilon": 5.0, "delta": 1e-6})
        engine = con.session.engine
        share = engine.view_shares(engine.workload_rho())["orders"]
        slice_ = engine.truncation_rho("orders")
        assert slice_ == share * Fraction(1, 5) and engine.workload_rho("orders") == share - slice_
        assert engine.measure_cost("orders") == share
        report = con.session.measure("orders")
        assert report.rho == share                       # the counts and the truncation slice
        entries = engine.ledger.entries()
        charges = [e for e in entries if e.kind == "charge" and e.fingerprint.startswith(TRUNCATION_PREFIX)]
        releases = [e for e in entries if e.kind == "release" and e.key.startswith(TRUNCATION_PREFIX)]
        assert len(charges) == len(releases) == 1
        assert charges[0].rho == slice_ and charges[0].seq < releases[0].seq
        assert releases[0].charge_id == charges[0].seq
        assert engine.ledger.spent(None) == share
        # a repeat spends nothing and shows the same figure
        assert engine.measure_cost("orders") == 0 and con.session.measure("orders").rho == 0
        shown = released_truncation(engine, "orders")
        assert shown is not None and shown.reused
        # beside the answers of a query over the view (cursor.result.notes; dpsql query prints them)
        cur = con.cursor()
        cur.execute(WORKLOAD[0])
        assert cur.result.notes == (f"orders: {shown.line()}",)
        text = "\n".join(people_plan(engine).lines())
        assert "released with noise" in text and f"about {shown.dropped:,.0f} rows dropped" in text
        assert "how many it drops is not released" not in text
        figures.append((shown.dropped, shown.kept, shown.stddev))
        con.close()
    dropped, kept = _exact(_spec(tmp_path, "x"), "orders")
    assert dropped > 0
    # noisy: the two ledgers' figures differ, with the calibrated noise (σ² = k²/ρ_slice)
    assert figures[0][:2] != figures[1][:2]
    assert figures[0][2] == pytest.approx(float(noise_param(3, slice_, "gaussian")) ** 0.5)
    assert all(abs(f[0] - dropped) < 8 * f[2] and abs(f[1] - kept) < 8 * f[2] for f in figures)


def test_the_plan_says_what_the_slice_will_release_before_it_is_made(tmp_path):
    con = dpsql.connect(_spec(tmp_path, "p"), budget={"epsilon": 5.0, "delta": 1e-6})
    text = "\n".join(people_plan(con.session.engine).lines())
    assert "releases, with noise, how many rows the bound drops when it is measured (not released yet)" in text
    assert "truncation bias unknown" not in text
    con.close()


@pytest.mark.slow   # 31 databases counted
def test_one_person_moves_the_released_counts_by_at_most_the_bound(tmp_path):
    """(D, K) of each view moves by at most k per coordinate when a person and all their rows
    are removed (the sensitivity the release is calibrated with)."""
    rows = shop.shop_rows()
    full = {t: _exact(_spec(tmp_path / "full", "f", rows=rows), t) for t in ("orders", "lineitem")}
    bounds = {"orders": 3, "lineitem": 5}
    moved = {t: 0 for t in bounds}
    for c in rows["customers"]:
        p = c[0]
        spec = _spec(tmp_path / f"n{p}", "n", rows=shop.without(rows, p))
        for t, k in bounds.items():
            d, kk = _exact(spec, t)
            step = max(abs(full[t][0] - d), abs(full[t][1] - kk))
            assert step <= k, (p, t, step, k)
            moved[t] = max(moved[t], step)
    assert moved == bounds        # the heavy customers reach it


def test_a_share_outside_zero_one_is_refused(tmp_path):
    spec = _spec(tmp_path, "bad", share=1.0)
    with pytest.raises(dpsql.Error) as info:
        load_config(spec)
    assert "truncation_share" in str(info.value)
    np.testing.assert_equal(load_config(_spec(tmp_path, "ok", share=0)).people.truncation_share, 0)
