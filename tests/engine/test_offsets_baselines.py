"""The binning offsets' share keeps every query within its per-query baseline (issue 35 item 6).

The offsets' share of ρ minimised the planner's objective summed over the workload, so beside
many counts it was small and a SUM over two wide bins got its offsets' noise at that small
share: TPC-H Q1's ``SUM(l_quantity)`` (bins 1..23, 24..50) was planned at 1.17× its baseline
(``bench/fit_stop.py``).  Here the adult table with ``hours_per_week`` in two bins (1..39,
40..99) and a SUM of it beside seven dashboard counts: before, the plan reported the SUM at
1.116× its baseline; now the share is the nearest one that keeps every query within it.
"""

from __future__ import annotations

import re
from fractions import Fraction

import numpy as np
import pytest

import dpsql
from dpsql.engine.offsets import within_baselines
from dpsql.engine.variance import Z95
from dpsql.privacy import noise
from dpsql.sql.split import split_statements
from dpsql.testing import ADULT, write_config

SUM = "SELECT sex, SUM(hours_per_week) FROM adult GROUP BY sex"
QUERIES = split_statements((ADULT / "dashboard.sql").read_text())[:7] + [SUM]


def _config(tmp_path):
    text = (ADULT / "adult.toml").read_text()
    text, n = re.subn(r"(\[tables\.adult\.columns\.hours_per_week\][^\[]*?)bin_width = 1", r"\1edges = [1, 40]",
                      text, flags=re.S)
    assert n == 1
    (tmp_path / "adult.toml").write_text(text)
    return write_config(tmp_path, queries=QUERIES, domain=tmp_path / "adult.toml",
                        planner={"restarts": 1, "seed": 0})


def test_share_moves_to_the_nearest_that_keeps_every_baseline():
    rho = Fraction(1, 2)
    # query 0 a count (no offsets), query 1 a SUM: c/(1−t) + o/t ≤ b
    counts, offsets, baselines = [0.5, 0.5], [0.0, 0.05], [1.0, 1.0]
    # at t = 0.01 the SUM is at 0.5/0.99 + 5 ≫ 1: moved up to its smallest feasible t
    got = within_baselines(rho / 100, rho, counts, offsets, baselines)
    t = float(got / rho)
    assert isinstance(got, Fraction)
    assert all(c / (1 - t) + o / t <= b * (1 + 1e-9) for c, o, b in zip(counts, offsets, baselines))
    # the smaller root of t² − 0.55·t + 0.05: (0.55 − √0.1025)/2
    assert t == pytest.approx((0.55 - 0.1025 ** 0.5) / 2, rel=1e-5)
    # a share already within every baseline is kept exactly
    assert within_baselines(rho / 5, rho, counts, offsets, baselines) == rho / 5
    # one exactly at a baseline is moved a millionth inside it: the release's calibration rounds
    # σ up by ~1e-9, and an answer a hair above its baseline keeps the model's widening whole
    edge = (0.55 - 0.1025 ** 0.5) / 2
    t = float(within_baselines(rho * Fraction(edge), rho, counts, offsets, baselines) / rho)
    assert 0.5 / (1 - t) + 0.05 / t <= 1 - 1e-6
    # no share keeps the SUM ((√0.5 + √0.1)² = 1.047 > 1 at best); the count alone needs t ≤ 0.1
    c, o = [0.9, 0.5], [0.0, 0.1]

    def ratios(t):
        return [c[0] / (1 - t), c[1] / (1 - t) + o[1] / t]
    # from t = 0.01 (the SUM at 10.5): the count kept (t ≤ 0.1), the SUM as low as that allows
    t = float(within_baselines(rho / 100, rho, c, o, [1.0, 1.0]) / rho)
    assert ratios(t)[0] <= 1 + 1e-9 and t == pytest.approx(0.1, rel=1e-5)
    assert ratios(t)[1] == pytest.approx(0.5 / 0.9 + 1.0, rel=1e-4)
    # from t = 0.3 (both above, the worst 1.29): keeping the count would put the SUM at 1.56,
    # worse than at 0.3, so both stay above, at the least largest ratio (the minimax share)
    t = float(within_baselines(rho * 3 / 10, rho, c, o, [1.0, 1.0]) / rho)
    grid = np.linspace(1e-3, 1 - 1e-3, 20001)
    minimax = np.maximum(0.9 / (1 - grid), 0.5 / (1 - grid) + 0.1 / grid).min()
    assert minimax * (1 - 1e-4) <= max(ratios(t)) <= minimax * (1 + 1e-9)


def test_plan_keeps_a_sum_over_two_wide_bins_within_its_baseline(tmp_path):
    con = dpsql.connect(_config(tmp_path), user="alice")
    try:
        report = con.session.plan()
        assert report.offsets_rho > 0          # the SUM's offsets are measured
        above = [(q.sql, q.stderr / q.baseline) for q in report.per_query if q.stderr > q.baseline * (1 + 1e-9)]
        assert not above, above
        assert not report.flagged
    finally:
        con.close()
        dpsql.dbapi._engines.clear()


@pytest.mark.slow      # measures and fits the adult table (~3 CPU-s)
def test_reported_errors_keep_the_plans_promise(tmp_path, monkeypatch):
    monkeypatch.setattr(noise, "_SYSTEM", noise.SeededBitSource(35))
    con = dpsql.connect(_config(tmp_path), user="alice")
    try:
        report = con.session.plan()
        con.session.measure()
        cur = con.cursor()
        checked = 0
        for q in report.per_query:
            cur.execute(q.sql)
            assert cur.fetchall(), q.sql
            # the se net of a binning bound (none here: the offsets are measured)
            se = np.array([e[-1] - (b[-1] or 0.0) / Z95 for e, b in zip(cur.stderr, cur.bias)], dtype=float)
            assert np.all(np.isfinite(se)), q.sql
            assert np.all(se <= q.baseline * (1 + 1e-9)), (q.sql, se.max(), q.baseline, q.stderr)
            checked += q.sql == SUM
        assert checked == 1
    finally:
        con.close()
        dpsql.dbapi._engines.clear()


# bench/reported_errors.py's mixed corpus: the first 26 dashboard counts and 5 SUM/AVG queries
MIXED = split_statements((ADULT / "dashboard.sql").read_text())[:26] + [
    "SELECT SUM(hours_per_week) FROM adult",
    "SELECT sex, AVG(age) FROM adult GROUP BY sex",
    "SELECT income, AVG(hours_per_week) FROM adult GROUP BY income",
    "SELECT race, SUM(capital_gain) FROM adult GROUP BY race",
    "SELECT AVG(education_num) FROM adult"]


@pytest.mark.slow      # plans 31 queries, some candidates twice (~3 CPU-s)
def test_the_strategy_leaves_the_offsets_a_share_that_keeps_every_baseline(tmp_path):
    """``race, SUM(capital_gain)`` (capital_gain in wide bins) is its bin query plus measured
    offsets.  OPT_M+ kept every count and that bin query at 0.91–1.00 of their baselines, so
    no share of ρ left the offsets room: the plan reported the SUM at 1.029× its baseline, and
    15 of its answers came out above it (bench/reported_errors.py).  The planner now judges
    candidates with the offsets' share (plan/shares.py) and plans again against tightened
    baselines; the counts' error must not jump to the per-query mechanism's (0.95×)."""
    con = dpsql.connect(write_config(tmp_path, queries=MIXED, planner={"restarts": 1, "seed": 0}), user="alice")
    try:
        report = con.session.plan()
        assert report.offsets_rho > 0
        ratios = {f"{q.sql} [{q.aggregate}]": q.stderr / q.baseline for q in report.per_query}
        assert "SELECT race, SUM(capital_gain) FROM adult GROUP BY race [SUM(capital_gain)]" in ratios
        above = {k: r for k, r in ratios.items() if r > 1 + 1e-9}
        assert not above, above
        assert not report.flagged
        counts = [u for u in report.units if u.unit == "counts"][0]
        # 0.582 on main (above), 0.593 at one tightened share, 0.580 at two; per-query 0.952
        assert counts.rmse / counts.baseline <= 0.60, counts.rmse / counts.baseline
        assert report.strategy.operator != "per-query"
    finally:
        con.close()
        dpsql.dbapi._engines.clear()
