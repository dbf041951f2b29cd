"""Binning offsets of a group-bounded view (issue 32, gap 2; docs/privacy.md §2a and §7.1b):
an offset block that reads one group per value is calibrated with the grouped factor S²
instead of k², and removing one person with all their rows moves each planned offset block
by at most the factor its calibration declares (brute force over every person, DuckDB)."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import shop
from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
from dpsql.measure import release as rel
from dpsql.measure.router import open_backend
from dpsql.plan.views import grouped_l2_sq

sys.path.insert(0, str(Path(__file__).resolve().parent))

KEY = "group-offsets-key"
#: line items: 5 per person, in at most 2 flags, 2 in each (S² = 8 instead of 25)
GROUPED = {"group_by": ["flag"], "max_groups": 2, "max_rows_per_group": 2}
QUERIES = ["SELECT flag, SUM(qty) FROM lineitem GROUP BY flag",
           "SELECT SUM(qty) FROM lineitem"]


def _config(tmp: Path, rows, grouped=True):
    files = shop.write_parquet(rows, tmp)
    spec = shop.config(tmp, {t: {"parquet": str(p)} for t, p in files.items()}, bounds={"lineitem": 5},
                       workload={"queries": QUERIES}, policy="refuse", planner={"binning": "offsets"})
    # qty in bins of 10: its SUMs are completed by binning offsets
    (tmp / "shop.toml").write_text(shop.DOMAIN.replace("lo = 1\nhi = 50\n", "lo = 1\nhi = 50\nbin_width = 10\n"))
    key = tmp / "bound.key"
    key.write_text(KEY)
    spec["people"]["hash_key_file"] = str(key)
    if grouped:
        spec["people"]["tables"]["lineitem"].update(GROUPED)
    return load_config(spec)


def _offset_blocks(cfg):
    engine = Engine(cfg)
    report = engine.plan("lineitem")
    planned = engine.offset_plan("lineitem", report.strategy, engine.workload_rho("lineitem"))
    assert planned is not None, "the workload's SUMs must be completed by offsets"
    return engine, report.strategy, planned


def _sums(cfg, blocks) -> list[np.ndarray]:
    backend = open_backend(cfg.sources)
    try:
        sums = backend.sum_offsets(cfg.tables["lineitem"], [(b.clique, b.offsets) for b in blocks])
    finally:
        backend.close()
    return [b.apply(sums[(b.clique, b.offsets)]).astype(np.int64) for b in blocks]


@pytest.mark.slow   # one DuckDB count per person
def test_removing_a_person_moves_each_offset_block_by_at_most_its_declared_factor(tmp_path):
    rows = shop.shop_rows()
    cfg = _config(tmp_path / "full", rows)
    _, _, (blocks, _) = _offset_blocks(cfg)
    groups = cfg.people.views["lineitem"].groups
    declared = [rel.rows_sq(b.clique, b.factors, 5, groups) * b.l2_sensitivity_sq() for b in blocks]
    # the flag block separates the groups (S² = 8); the total sums them (k² = 25)
    by_clique = {b.clique: d // b.l2_sensitivity_sq() for b, d in zip(blocks, declared)}
    assert by_clique[("flag",)] == grouped_l2_sq(5, 2, 2) == 8 and by_clique[()] == 25, by_clique
    full = _sums(cfg, blocks)
    reached = [0] * len(blocks)
    for person in [c[0] for c in rows["customers"]]:
        other = _config(tmp_path / f"n{person}", shop.without(rows, person))
        after = _sums(other, blocks)
        for i, (a, b) in enumerate(zip(full, after)):
            moved = int(((a - b) ** 2).sum())
            assert moved <= declared[i], (person, blocks[i].clique, moved, declared[i])
            reached[i] = max(reached[i], moved)
    # some person moves the grouped block by more than k = 1 row's worth could (the check bites)
    flag = next(i for i, b in enumerate(blocks) if b.clique == ("flag",))
    assert reached[flag] > blocks[flag].l2_sensitivity_sq()


@pytest.mark.slow   # plans the workload twice
def test_offset_blocks_are_calibrated_with_the_grouped_factor(tmp_path):
    """The same offset blocks at the same share: σ² of the flag block is the factor the
    calibration declares, S²/k² = 8/25 of the σ² it would get at k per unit of weight.
    Before, the offsets were calibrated at k whatever the group bound."""
    rows = shop.shop_rows()
    cfg = _config(tmp_path / "g", rows)
    engine, strategy, (blocks, share) = _offset_blocks(cfg)
    rho = engine.workload_rho("lineitem")
    with engine._lock:
        engine._sync("lineitem")
        released, noise, _ = engine.measuring.release_plan("lineitem", strategy, rho, "workload", (blocks, share))
    offsets = [(b, p) for b, p in zip(released, noise.params) if b.offsets is not None]
    assert noise.rho <= rho
    groups = cfg.people.views["lineitem"].groups
    expected = rel.calibrate([b for b, _ in offsets], share, unit_rows=5, groups=groups)
    plain = rel.calibrate([b for b, _ in offsets], share, unit_rows=5)
    assert [p for _, p in offsets] == list(expected.params)
    assert float(sum(expected.params)) < float(sum(plain.params))
    # exact cost of the offsets' noise: Σ_b rows_sq_b·Δ_b²/(2σ_b²) ≤ their share
    cost = sum((Fraction(rel.rows_sq(b.clique, b.factors, 5, groups) * b.l2_sensitivity_sq()) / (2 * p)
                for b, p in offsets), Fraction(0))
    assert cost <= share
