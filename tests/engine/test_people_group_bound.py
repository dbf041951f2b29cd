"""A people view's group bound (issue 32): configuration, the exact L2 factor, the noise the
measurement calibrates with it, and what ``dpsql plan`` shows (docs/privacy.md §2a, "Groups
per person").  The cross-engine brute force is tests/measure/test_people_group_engines.py."""

from __future__ import annotations

import itertools
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

from dpsql.engine.config import load_config  # noqa: E402
from dpsql.engine.engine import Engine  # noqa: E402
from dpsql.engine.people_plan import people_plan  # noqa: E402
from dpsql.errors import ConfigError  # noqa: E402
from dpsql.measure import release as rel  # noqa: E402
from dpsql.plan.views import GroupBound, grouped_l2_sq  # noqa: E402

WORKLOAD = ["SELECT status, COUNT(*) FROM orders GROUP BY status",
            "SELECT priority, COUNT(*) FROM orders GROUP BY priority"]
GROUPED = {"group_by": ["status"], "max_groups": 2, "max_rows_per_group": 1}


@pytest.fixture
def spec(tmp_path):
    files = shop.write_parquet(shop.shop_rows(customers=200), tmp_path)
    return shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                       workload={"queries": WORKLOAD}, policy="refuse")


def _grouped(spec, **over):
    spec["people"]["tables"]["orders"].update({**GROUPED, **over})
    return spec


@pytest.mark.parametrize("k, g, r", [(k, g, r) for k in range(1, 8) for g in range(1, 5) for r in range(1, 8)])
def test_grouped_l2_is_the_largest_change_over_every_spread_of_rows(k, g, r):
    """Brute force over every vector of per-group counts: ≤ g non-zero, each ≤ r, sum ≤ k."""
    best = 0
    for n in itertools.product(range(min(r, k) + 1), repeat=g):
        if sum(n) <= k:
            best = max(best, sum(x * x for x in n))
    assert grouped_l2_sq(k, g, r) == best
    assert best <= min(k * k, g * r * r, k * r)


def test_a_block_separates_the_groups_only_when_it_reads_one_group_per_value():
    groups = GroupBound(("status",), 2, 1)
    eye, total, prefix = np.eye(4, dtype=np.int64), np.ones((1, 4), dtype=np.int64), np.tril(np.ones((4, 4), np.int64))
    five = np.eye(5, dtype=np.int64)
    assert rel.rows_sq(("status",), [eye], 3, groups) == 2
    assert rel.rows_sq(("status", "priority"), [eye, five], 3, groups) == 2
    assert rel.rows_sq(("status", "priority"), [eye, np.ones((1, 5), np.int64)], 3, groups) == 2
    # summing statuses (a Total or prefix factor on the group attribute), or not reading it
    assert rel.rows_sq(("status",), [total], 3, groups) == 9
    assert rel.rows_sq(("status",), [prefix], 3, groups) == 9
    assert rel.rows_sq(("priority",), [five], 3, groups) == 9
    assert rel.rows_sq(("status",), [eye], 3, None) == 9


def test_calibration_charges_the_grouped_l2_exactly(spec):
    """The same block at the same ρ: σ² is 2/9 of max_rows' (k = 3, g = 2, r = 1), and the
    exact cost never exceeds ρ."""
    block = rel.LatticeBlock(("status",), (np.eye(4, dtype=np.int64),), 1.0, 1.0)
    rho = Fraction(1, 10)
    plain = rel.calibrate([block], rho, unit_rows=3)
    grouped = rel.calibrate([block], rho, unit_rows=3, groups=GroupBound(("status",), 2, 1))
    assert float(grouped.params[0] / plain.params[0]) == pytest.approx(2 / 9, rel=1e-8)
    assert grouped.rho <= rho and grouped.rho == Fraction(2) / (2 * grouped.params[0])


@pytest.mark.slow   # plans the workload twice
def test_the_measurement_and_the_plan_use_the_grouped_sensitivity(spec):
    plain = Engine(load_config(spec))
    grouped = Engine(load_config(_grouped(spec)))
    rho = Fraction(1, 2)
    p_plain, p_grouped = plain.plan("orders", rho=rho), grouped.plan("orders", rho=rho)
    blocks = {}
    for name, engine in (("plain", plain), ("grouped", grouped)):
        strategy = engine.optimize_counted(engine.workload_for("orders")[0], rho, 3)
        with engine._lock:
            engine._sync("orders")
            blocks[name] = engine.measuring.release_plan("orders", strategy, rho, "workload")
    # the release's noise is smaller, at the same exact cost
    (_, n1, _), (_, n2, _) = blocks["plain"], blocks["grouped"]
    assert n2.rho <= rho and n1.rho <= rho
    assert float(sum(n2.params)) < float(sum(n1.params))
    # the status marginal separates the groups: its error is √2 rows of noise, not 3
    status = [q for q in p_grouped.per_query if "status" in q.sql][0]
    status0 = [q for q in p_plain.per_query if "status" in q.sql][0]
    assert status.stderr < status0.stderr
    rows2 = grouped.rows_sq("orders", p_grouped.strategy)
    assert 2 <= rows2 < 9
    # the grouped plan chooses its strategy with the factor (tests/engine/test_people_group_plan.py):
    # never worse in the planner's objective than the plain plan's strategy under the same bound
    assert p_grouped.strategy.expected_error * rows2 <= p_plain.strategy.expected_error * grouped.rows_sq(
        "orders", p_plain.strategy) * (1 + 1e-9)
    text = "\n".join(people_plan(grouped).lines())
    assert "at most 3 rows per person in at most 2 groups of (status), 1 per group" in text
    assert "L2 sensitivity 1.414 rows for marginals over the groups, 3 otherwise" in text


def test_the_group_bound_is_part_of_the_release_identity(spec):
    plain = Engine(load_config(spec)).identity("orders")
    grouped = Engine(load_config(_grouped(spec))).identity("orders")
    assert plain.key() != grouped.key()
    assert "the privacy unit changed" in grouped.differences(plain)


@pytest.mark.parametrize("change, words", [
    ({"max_groups": 2}, "needs group_by and max_rows_per_group"),
    ({**GROUPED, "max_groups": 0}, "max_groups must be positive"),
    ({**GROUPED, "group_by": []}, "group_by must be a list"),
    ({**GROUPED, "group_by": ["nope"]}, "group_by names 'nope'"),
    ({**GROUPED, "max_rows_per_group": 4}, "above max_rows = 3"),
])
def test_group_bound_mistakes_are_refused_with_a_hint(spec, change, words):
    spec["people"]["tables"]["orders"].update(change)
    with pytest.raises(ConfigError) as info:
        load_config(spec)
    assert words in str(info.value) and info.value.hint
