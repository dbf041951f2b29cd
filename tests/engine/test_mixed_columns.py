"""A mixed workload over two fine columns of a real table (issue 35 item 4): the adult
example's capital gains to the dollar (100,000 cells) and capital losses to the dollar
(5,000 cells), each with a quantile, beside ordinary counts.  Each fine column gets an
ordered (tree/Toeplitz) part of its own, the rest its part, the budget split three ways
exactly, three linked charges, and each column's quantiles and CDF counts are answered from
its own ordered release within what the plan promised.

Before: only the first column had a part; the second went to the rest, planned as one
ordered strategy over capital_loss per group of sex and race (the counts then 4.7× and 3.0×
their baselines), and the engine answered from its latest ordered release only."""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest

from dpsql.engine.mixed import MixedStrategy, StrategyPart, split_fractions
from dpsql.errors import OperationalError, ProgrammingError

sys.path.insert(0, str(Path(__file__).resolve().parent))
from privacy_order import spied  # noqa: E402
import adult_fine  # noqa: E402
from measured import close as _close  # noqa: E402
from dpsql.sql.postprocess import Z95

QUERIES = ["SELECT quantile_cont(capital_gain, 0.95) FROM a",
           "SELECT quantile_cont(capital_loss, 0.97) FROM a",
           "SELECT sex, COUNT(*) FROM a GROUP BY sex",
           "SELECT race, COUNT(*) FROM a GROUP BY race"]
FINE = {"capital_gain": 0, "capital_loss": 1}      # column: its quantile's index in QUERIES


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return adult_fine.write_table(tmp_path_factory.mktemp("adult_fine"))


def _connect(data: Path, tmp: Path, epsilon: float):
    return adult_fine.connect(data, tmp / "a.ledger", epsilon, QUERIES)


def _exact(data: Path, sql: str):
    return duckdb.connect().execute(sql.replace("FROM a", f"FROM read_csv('{data / 'a.csv'}')")).fetchall()


def test_each_fine_column_gets_its_own_part_and_share(data, tmp_path):
    con = _connect(data, tmp_path, 1.0)
    try:
        engine = con.session.engine
        report = con.session.plan()
        strategy = report.strategy
        assert strategy.operator == "split"
        assert [p.name for p in strategy.parts] == ["ordered capital_gain", "ordered capital_loss", "rest"]
        *ordered, rest = strategy.parts
        for part, column in zip(ordered, FINE):
            assert part.ordered and part.strategy.operator in ("tree", "toeplitz")
            assert part.strategy.attribute == column and not part.strategy.groups
            assert {report.per_query[j].sql for j in part.parts} == {QUERIES[FINE[column]]}
        assert not rest.ordered and {report.per_query[j].sql for j in rest.parts} == set(QUERIES[2:])
        # exact shares adding up to the budget; the error-minimising split (ρ_v ∝ √(k²·E_v))
        # or the least shares keeping every query within its baseline (mixed.split_fractions)
        rho = engine.workload_rho("a")
        shares = strategy.shares(rho)
        assert all(isinstance(s, Fraction) and s > 0 for s in shares) and sum(shares, Fraction(0)) == rho
        costs = {p.name: float(p.strategy.expected_error) for p in strategy.parts}
        optimum = split_fractions(costs)
        assert [p.fraction for p in strategy.parts] == [optimum[p.name] for p in strategy.parts] or \
            all(q.stderr <= q.baseline * (1 + 1e-6) for q in report.per_query)
        assert strategy.expected_error == pytest.approx(sum(c / float(p.fraction)
                                                            for c, p in zip(costs.values(), strategy.parts)))
        # every query within its per-query baseline (before: the rest's counts at 1.3×)
        assert all(q.stderr <= q.baseline * (1 + 1e-6) for q in report.per_query), \
            [(q.sql, q.stderr, q.baseline) for q in report.per_query]
        assert [p.name for p in report.parts] == ["ordered capital_gain", "ordered capital_loss", "rest"]
        text = "\n".join(report.part_lines())       # what `dpsql plan` prints
        assert text.startswith("three releases") and all(f"  {p.name}: " in text for p in report.parts), text
        assert sum(p.rho for p in report.parts) == pytest.approx(float(rho))
    finally:
        _close(con)


@pytest.mark.slow
def test_each_column_is_answered_from_its_own_release_within_the_promise(data, tmp_path):
    con = _connect(data, tmp_path, 1e7)
    try:
        engine = con.session.engine
        plan = con.session.plan()
        measured = con.session.measure()
        rho = engine.workload_rho("a")
        assert measured.rho == rho and engine.ledger.spent(None) == rho      # the three shares, exactly
        charges = [e for e in engine.ledger.entries() if e.kind == "charge"]
        releases = [e for e in engine.ledger.entries() if e.kind == "release"]
        assert len(charges) == 3 and sorted(r.charge_id for r in releases) == sorted(c.seq for c in charges)
        links = [c.mechanism["part_of"] for c in charges]
        assert [(link["part"], link["of"]) for link in links] == [(0, 3), (1, 3), (2, 3)]
        assert all(link["keys"] == links[0]["keys"] for link in links)
        assert sum(Fraction(s) for s in links[0]["shares"]) == Fraction(links[0]["rho"]) == rho
        estimates = {e.strategy.attribute: e for e in engine.ordered_estimates("a")}
        assert set(estimates) == set(FINE)
        cur = con.cursor()
        for column, q in FINE.items():
            estimate = estimates[column]
            # the release keeps the plan's promise: its CDF rows' RMS standard error is the
            # planned one of the quantile (a quantile plans its column's CDF)
            _, var = estimate.cdf()
            promised = plan.per_query[q].stderr
            assert math.sqrt(float(np.mean(var))) == pytest.approx(promised, rel=1e-3)
            cut = 5000 if column == "capital_gain" else 1800
            for sql in (QUERIES[q], f"SELECT COUNT(*) FROM a WHERE {column} <= {cut}",
                        f"SELECT COUNT(*) FROM a WHERE {column} BETWEEN 100 AND {cut}"):
                cur.execute(sql)
                got, want = cur.fetchall(), _exact(data, sql)
                assert cur.result.cost == 0 and cur.result.model.startswith("ordered"), (sql, cur.result.model)
                se = cur.result.stderr[0][0]
                if "quantile" in sql:
                    assert got[0][0] == pytest.approx(float(want[0][0]), abs=1.0 + Z95 * se), sql
                    continue
                assert got[0][0] == pytest.approx(float(want[0][0]), abs=0.5), sql
                # the count's standard error is the column's release's, no larger than the
                # largest of the CDF rows the plan promised (a range: two of them)
                rows = 1 if "<=" in sql else 2
                assert se <= math.sqrt(rows * float(np.max(var))) * (1 + 1e-6), sql
                if rows == 1:
                    assert se == pytest.approx(math.sqrt(float(var[cut])), rel=1e-6), sql
        for sql in QUERIES[2:]:
            cur.execute(sql)
            assert not cur.result.model.startswith("ordered"), sql
            got, want = sorted(cur.fetchall()), sorted(_exact(data, sql))
            assert [g[0] for g in got] == [w[0] for w in want]
            assert [g[1] for g in got] == pytest.approx([float(w[1]) for w in want], abs=0.5), sql
    finally:
        _close(con)


@pytest.mark.parametrize("costs, least", [
    ({"a": 4.0, "b": 1.0, "c": 1.0}, {"a": 0.1, "b": 0.3, "c": 0.35}),     # two parts raised to their least
    ({"a": 9.0, "b": 1.0, "c": 0.25}, {"a": 0.0, "b": 0.0, "c": 0.2}),     # one
    ({"a": 1.0, "b": 1.0, "c": 1.0}, {"a": 0.1, "b": 0.1, "c": 0.1}),      # none: the optimum keeps them
])
def test_the_shares_of_k_parts_are_the_constrained_optimum(costs, least):
    f = split_fractions(costs, least)
    assert all(isinstance(v, Fraction) for v in f.values()) and sum(f.values(), Fraction(0)) == 1
    assert all(f[v] >= Fraction(least[v]) for v in costs)
    # against a brute-force search of the simplex (step 1/400) under the same floors
    def total(x):
        return sum(c / x[v] for v, c in costs.items())
    grid = np.arange(1, 400) / 400
    best = min((total({"a": a, "b": b, "c": 1 - a - b}), a, b) for a in grid for b in grid
               if 1 - a - b > 0 and a >= least["a"] and b >= least["b"] and 1 - a - b >= least["c"])
    assert total({v: float(x) for v, x in f.items()}) <= best[0] * (1 + 1e-9)
    assert float(f["a"]) == pytest.approx(best[1], abs=2.5e-3) and float(f["b"]) == pytest.approx(best[2], abs=2.5e-3)


@pytest.mark.parametrize("costs, least", [
    ({"a": 1.0, "b": 4.0}, {"a": 1.0, "b": 0.0}),                  # a part's least clamped to 1
    ({"a": 1.0, "b": 4.0, "c": 1.0}, {"a": 0.25, "b": 0.75}),       # two leasts adding up to exactly 1
])
def test_least_shares_taking_the_whole_budget_leave_no_part_a_zero_share(costs, least):
    # the constrained optimum would give the other parts 0 (the planner then divided its
    # expected error by 0.0); as when the leasts exceed 1, the error-minimising split is kept
    f = split_fractions(costs, least)
    assert sum(f.values(), Fraction(0)) == 1 and all(x > 0 for x in f.values())
    assert f == split_fractions(costs)
    with pytest.raises(ProgrammingError):
        MixedStrategy((StrategyPart("a", None, Fraction(1), (0,), None),
                       StrategyPart("b", None, Fraction(0), (1,), None)))


@pytest.mark.slow
def test_the_three_parts_are_counted_then_charged_before_any_noise(data, tmp_path, monkeypatch):
    con = _connect(data, tmp_path, 1.0)
    try:
        con.session.plan()
        events: list[str] = []
        spied(con, events, monkeypatch)
        report = con.session.measure()
        assert report.rho == con.session.engine.workload_rho("a")
        assert events.count("preview") == 1 and events[0] == "preview"
        assert events.count("count") == 3 and events.count("charge") == 3 and events.count("record_release") == 3
        # every count before the first charge, every charge (durable) before any noise
        assert max(i for i, e in enumerate(events) if e == "count") < events.index("charge")
        assert max(i for i, e in enumerate(events) if e == "charge") < events.index("noise")
        assert max(i for i, e in enumerate(events) if e == "noise") < events.index("record_release")
    finally:
        _close(con)


@pytest.mark.slow
def test_a_failing_count_of_the_last_part_spends_nothing(data, tmp_path, monkeypatch):
    con = _connect(data, tmp_path, 1.0)
    try:
        con.session.plan()
        events: list[str] = []
        spied(con, events, monkeypatch, fail_on=3)
        with pytest.raises(OperationalError):
            con.session.measure()
        assert events.count("count") == 3 and "charge" not in events and "noise" not in events
        assert con.session.engine.ledger.spent(None) == 0
    finally:
        _close(con)
