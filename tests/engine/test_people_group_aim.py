"""AIM on a group-bounded view (issue 32, gap 2; docs/privacy.md §7.1a): a marginal whose
clique holds the group attributes is measured at σ²·S²/k², every round costs exactly what it
did (its measurement share pays S²/(2σ_c²) = k²/(2σ²)), and removing one person with all
their rows moves each marginal AIM measured by at most the factor its noise was calibrated
for (brute force over every person of the shop, DuckDB)."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

from dpsql.engine.aim import aim_options, measure_aim  # noqa: E402
from dpsql.engine.config import load_config  # noqa: E402
from dpsql.engine.engine import Engine  # noqa: E402
from dpsql.measure import release as rel  # noqa: E402
from dpsql.measure.router import open_backend  # noqa: E402
from dpsql.plan.views import grouped_l2_sq  # noqa: E402

WORKLOAD = ["SELECT status, priority, COUNT(*) FROM orders GROUP BY status, priority",
            "SELECT priority, COUNT(*) FROM orders GROUP BY priority"]
#: orders: 3 per person, in at most 2 statuses, 1 each: S² = 2 instead of k² = 9
GROUPED = {"group_by": ["status"], "max_groups": 2, "max_rows_per_group": 1}


def _config(tmp: Path, rows):
    files = shop.write_parquet(rows, tmp)
    spec = shop.config(tmp, {t: {"parquet": str(p)} for t, p in files.items()},
                       workload={"queries": WORKLOAD}, policy="refuse")
    spec["people"]["tables"]["orders"].update(GROUPED)
    return load_config(spec)


def _counts(cfg, cliques):
    backend = open_backend(cfg.sources)
    try:
        return backend.count_marginals(cfg.tables["orders"], cliques)
    finally:
        backend.close()


@pytest.mark.slow   # an AIM run, then one count per person
def test_aim_measures_the_group_marginals_with_the_grouped_factor_at_the_same_cost(tmp_path):
    rows = shop.shop_rows()
    cfg = _config(tmp_path / "full", rows)
    engine = Engine(cfg)
    rho = engine.workload_rho("orders")
    measure_aim(engine, "orders", engine.WORKLOAD_PRINCIPAL)
    ledger = engine.ledger
    measured: dict[tuple, int] = {}
    spent = Fraction(0)
    for entry in ledger.entries():
        m = entry.mechanism or {}
        if entry.kind != "charge" or m.get("purpose") != "aim":
            continue
        base = Fraction(m["sigma2"])
        eps = Fraction(m["epsilon"]) if m.get("epsilon") is not None else None
        released = rel.unpack(ledger.release(f"{entry.fingerprint}"))
        n = len(released)
        # the charge is what it was without the group bound: ε²/8 + n·k²/(2σ²), exactly
        assert entry.rho == n * Fraction(9) / (2 * base) + (eps * eps / 8 if eps is not None else 0)
        spent += entry.rho
        for block, _, sd in released:
            factor = 2 if "status" in block.clique else 9
            # σ_c² = σ²·S²/k² for a marginal over the groups, σ² otherwise: cost S²/(2σ_c²) = k²/(2σ²)
            assert sd * sd == pytest.approx(float(base) * factor / 9, rel=1e-12), (block.clique, sd, base)
            measured[block.clique] = factor
    assert spent <= rho
    assert ("status",) in measured and measured[("status",)] == 2   # the init round's one-way marginal
    # brute force: each measured marginal moves by at most its calibrated factor (L2²)
    cliques = sorted(measured)
    full = _counts(cfg, cliques)
    reached = dict.fromkeys(cliques, 0)
    for person in [c[0] for c in rows["customers"]]:
        after = _counts(_config(tmp_path / f"n{person}", shop.without(rows, person)), cliques)
        for c in cliques:
            moved = int(((np.asarray(full[c], dtype=np.int64) - np.asarray(after[c], dtype=np.int64)) ** 2).sum())
            assert moved <= measured[c], (person, c, moved, measured[c])
            reached[c] = max(reached[c], moved)
    assert reached[("status",)] == 2    # a heavy customer reaches S² exactly
    assert getattr(aim_options(engine, "orders"), "group_rows_sq", None) == grouped_l2_sq(3, 2, 1) == 2
