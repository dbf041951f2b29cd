"""Planning and measuring across the views of a people schema (issue 32 item 3)."""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

import dpsql  # noqa: E402
from dpsql.engine.config import load_config  # noqa: E402
from dpsql.engine.engine import Engine  # noqa: E402
from dpsql.engine.people_plan import people_plan  # noqa: E402

WORKLOAD = ["SELECT segment, COUNT(*) FROM customers GROUP BY segment",
            "SELECT status, COUNT(*) FROM orders GROUP BY status",
            "SELECT customers__segment, flag, COUNT(*) FROM lineitem GROUP BY customers__segment, flag"]


@pytest.fixture
def spec(tmp_path):
    files = shop.write_parquet(shop.shop_rows(customers=200), tmp_path)
    return shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                       workload={"queries": WORKLOAD}, policy="refuse")


def test_the_plan_reports_errors_at_the_rows_one_unit_contributes(adult_config):
    """max_rows multiplies every noise standard deviation (release.calibrate): the plan's
    expected errors must say so (before issue 32 they were those of max_rows = 1)."""
    q = ["SELECT sex, COUNT(*) FROM adult GROUP BY sex"]
    one = Engine(load_config(adult_config(queries=q))).plan("adult")
    three = Engine(load_config(adult_config(
        queries=q, table_options={"privacy_unit": {"id": "age", "max_rows": 3}}))).plan("adult")
    assert three.rmse == pytest.approx(3 * one.rmse, rel=1e-9)
    assert three.per_query[0].stderr == pytest.approx(3 * one.per_query[0].stderr, rel=1e-9)


def test_views_share_the_budget_to_minimise_the_total_error(spec):
    engine = Engine(load_config(spec))
    total = engine.workload_rho()
    shares = engine.view_shares(total)
    assert set(shares) == {"customers", "orders", "lineitem"}
    assert sum(shares.values(), Fraction(0)) == total
    assert shares == {t: engine.workload_rho(t) for t in shares}
    # under the default relative objective ρ_v ∝ √(n_v·E_v), E_v of each view's strategy
    # and n_v its number of queries (the bound cancels: ViewCost)
    from dpsql.engine.people_plan import view_costs
    costs = view_costs(engine, total)
    weights = {t: math.sqrt(c.queries * c.expected_error) for t, c in costs.items()}
    assert {t: c.queries for t, c in costs.items()} == {"customers": 1, "orders": 1, "lineitem": 1}
    for t in shares:
        assert float(shares[t] / total) == pytest.approx(weights[t] / sum(weights.values()), rel=1e-12)
    plan = people_plan(engine)
    assert plan.total_error < plan.even_error
    text = "\n".join(plan.lines())
    assert "customers -> orders -> lineitem, at most 5 rows per person" in text
    assert "rho share" in text


def test_under_the_relative_objective_a_views_bound_does_not_buy_it_budget(spec):
    """Each query's error is judged against its own baseline, which carries the same bound:
    a view's max_rows multiplies both, so the split must not depend on it (before, ρ_v ∝
    k_v·√E_v gave the line items' view 10× the share at max_rows 50 than at 5)."""
    shares = {}
    for k in (5, 50):
        spec["people"]["tables"]["lineitem"]["max_rows"] = k
        engine = Engine(load_config(spec))
        shares[k] = engine.view_shares(engine.workload_rho())
    assert shares[5] == shares[50]


def test_under_the_absolute_objective_the_split_weights_views_by_their_bound(spec):
    """Absolute squared errors: every σ of a view is k_v times the unit one, ρ_v ∝ k_v·√E_v."""
    spec["planner"] = {"objective": "absolute"}
    engine = Engine(load_config(spec))
    total = engine.workload_rho()
    shares = engine.view_shares(total)
    from dpsql.engine.people_plan import view_costs
    costs = view_costs(engine, total)
    weights = {t: c.max_rows * math.sqrt(c.expected_error) for t, c in costs.items()}
    for t in shares:
        assert float(shares[t] / total) == pytest.approx(weights[t] / sum(weights.values()), rel=1e-12)


def test_measuring_every_view_spends_exactly_the_total_and_answers_with_the_planned_error(spec):
    con = dpsql.connect(spec, budget={"epsilon": 50.0, "delta": 1e-6})
    session = con.session
    engine = session.engine
    planned = {t: engine.plan(t) for t in ("customers", "orders", "lineitem")}
    for t in planned:
        report = session.measure(t)
        assert report.rho == engine.workload_rho(t)
    assert engine.ledger.remaining(None) == 0
    cur = con.cursor()
    # HDMM's unbiased least-squares answers: each one's standard error is the plan's per-row
    # error, which carries the view's bound k = 3 (the model's answers may move near an
    # empty cell, which it clamps at 0)
    cur.execute("SET dpsql.estimator = 'least_squares'")
    cur.execute(WORKLOAD[1])
    assert cur.stderr[0][1] == pytest.approx(planned["orders"].per_query[0].stderr, rel=1e-6)
    con.close()


def test_public_sizes_bound_the_rows_a_view_drops(spec):
    spec["tables"]["customers"]["rows"] = 200
    spec["tables"]["lineitem"]["rows"] = 2000
    plan = people_plan(Engine(load_config(spec)))
    dropped = {v.table: v.dropped_at_least for v in plan.views}
    assert dropped["lineitem"] == 2000 - 5 * 200
    assert dropped["orders"] is None
    assert "at least 1,000 rows of lineitem are dropped" in "\n".join(plan.lines())


def test_a_join_measured_on_demand_charges_the_query_budget_to_the_deepest_view(spec):
    """Under the measure policy a join no release supports is measured on demand: on the
    deepest table's view, at the per-query budget, with noise for that view's bound."""
    spec["policy"] = {"unsupported": "measure", "epsilon": 0.5, "allow_spend": True}
    spec["budget"]["per_user"] = {"epsilon": 1.0}
    con = dpsql.connect(spec)
    engine = con.session.engine
    cur = con.cursor()
    sql = ("SELECT o.status, l.flag, COUNT(*) FROM customers c JOIN orders o ON o.custkey = c.custkey "
           "JOIN lineitem l ON l.orderkey = o.orderkey GROUP BY o.status, l.flag")
    cur.execute("SET dpsql.estimator = 'least_squares'")
    cur.execute(sql)
    assert cur.cost == engine.config.query_budget.rho
    assert [r.table for r in engine.releases()] == ["lineitem"]
    # the answers' errors carry the view's bound k = 5: five times those of a marginal of
    # the person's view (one row per person) at the same budget, both measured cell by cell
    one_row = engine.plan("customers", queries=["SELECT segment, COUNT(*) FROM customers GROUP BY segment"],
                          rho=engine.config.query_budget.rho)
    assert [e[2] for e in cur.stderr] == pytest.approx([5 * one_row.per_query[0].stderr] * 16, rel=1e-6)
    con.close()
