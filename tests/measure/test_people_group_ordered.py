"""An ordered strategy (a fine column's quantiles per group: I_G ⊗ T, dpsql/measure/ordered.py)
on a group-bounded view (issue 32, gap 2; docs/privacy.md §2a): its blocks are calibrated with
S² when the group attributes are among the strategy's (before, at k whatever the bound), and
removing one person with all their rows moves each block by at most that factor (brute force).
The plan's row factor is decided from the strategy's shape, never by densifying the fine
column's n×n factor."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import shop
from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
from dpsql.engine.ordered import is_ordered_strategy
from dpsql.measure import release as rel
from dpsql.measure.ordered import ordered_blocks
from dpsql.measure.router import open_backend
from dpsql.plan.views import grouped_l2_sq

QUERIES = ["SELECT flag, quantile_disc(qty, 0.5) FROM lineitem GROUP BY flag",
           "SELECT flag, COUNT(*) FROM lineitem WHERE qty <= 20 GROUP BY flag"]
#: line items: 5 per person, in at most 2 flags, 2 in each (S² = 8 instead of 25)
GROUPED = {"group_by": ["flag"], "max_groups": 2, "max_rows_per_group": 2}


def _config(tmp: Path, rows):
    files = shop.write_parquet(rows, tmp)
    spec = shop.config(tmp, {t: {"parquet": str(p)} for t, p in files.items()}, bounds={"lineitem": 5},
                       workload={"queries": QUERIES}, policy="refuse")
    # qty over 5,000 cells: a fine column, planned by an ordered strategy per flag
    (tmp / "shop.toml").write_text(shop.DOMAIN.replace("lo = 1\nhi = 50\n", "lo = 1\nhi = 5000\n"))
    spec["people"]["tables"]["lineitem"].update(GROUPED)
    return load_config(spec)


def _values(cfg, blocks) -> list[np.ndarray]:
    backend = open_backend(cfg.sources)
    try:
        counts = backend.count_marginals(cfg.tables["lineitem"], [blocks[0].clique])[blocks[0].clique]
    finally:
        backend.close()
    return [np.asarray(b.apply(counts), dtype=object) for b in blocks]


@pytest.mark.slow   # plans a fine column, counts once per person
def test_an_ordered_strategy_on_a_grouped_view_is_calibrated_with_the_grouped_factor(tmp_path):
    rows = shop.shop_rows()
    cfg = _config(tmp_path / "full", rows)
    engine = Engine(cfg)
    report = engine.plan("lineitem")
    strategy = report.strategy
    if strategy.operator == "split":   # the thin count goes to the rest part (82f43be)
        strategy = next(p.strategy for p in strategy.parts if p.ordered)
    assert is_ordered_strategy(strategy) and "flag" in strategy.groups
    assert engine.rows_sq("lineitem", strategy) == grouped_l2_sq(5, 2, 2) == 8
    rho = engine.workload_rho("lineitem")
    with engine._lock:
        engine._sync("lineitem")
        blocks, noise, _ = engine.measuring.release_plan("lineitem", strategy, rho, "workload")
    plain = rel.calibrate(blocks, rho, unit_rows=5)
    assert noise.rho <= rho
    for grouped_param, plain_param in zip(noise.params, plain.params):
        assert float(grouped_param / plain_param) == pytest.approx(8 / 25, rel=1e-8)
    # brute force: the exact values of every block move by at most S²·Δ₂² (L2²) when a person goes
    bound = cfg.table_rows.get("lineitem") or 10 ** 6
    blocks = ordered_blocks(strategy, bound)
    full = _values(cfg, blocks)
    reached = 0
    for person in [7, 14, 21, 28, 1, 2, 3]:
        after = _values(_config(tmp_path / f"n{person}", shop.without(rows, person)), blocks)
        for b, x, y in zip(blocks, full, after):
            moved = int(sum(int(v) * int(v) for v in (x - y)))
            assert moved <= 8 * b.l2_sensitivity_sq(), (person, moved, b.l2_sensitivity_sq())
            reached = max(reached, moved)
    assert reached > 0
    # and the measurement runs, at exactly the view's share
    assert engine.measure("lineitem").rho == Fraction(rho)
