"""A count over an OR (or a NOT over several columns) measured as one count per group
(engine/direct_sums.py, issue 35 item 6).

Such a WHERE is K disjoint boxes, K Kronecker terms of one query part.  The planner kept each
box within the per-query baseline, but the statement shows their sum: on main this workload
reported 14.6 for the three-way OR against its baseline 10.1 (the per-query mechanism
measured each box on its own), 13.4 for the NOT; bench/reported_errors.py found the same on
salary (1.82×) and titanic (1.45×).
"""

from __future__ import annotations

from fractions import Fraction

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.privacy import noise
from dpsql.testing import ADULT, write_config

ORS = ["SELECT COUNT(*) FROM adult WHERE sex = 'Female' OR income = '>50K' OR race = 'White'",
       "SELECT race, COUNT(*) FROM adult WHERE NOT (sex = 'Female' AND income = '>50K') GROUP BY race"]
QUERIES = ORS + ["SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income",
                 "SELECT race, COUNT(*) FROM adult GROUP BY race",
                 "SELECT COUNT(*) FROM adult"]


def _connect(tmp_path, epsilon: float):
    config = write_config(tmp_path, queries=QUERIES, epsilon=epsilon, planner={"restarts": 1, "seed": 0})
    return dpsql.connect(config, user="alice")


def _close(con) -> None:
    con.close()
    dpsql.dbapi._engines.clear()


def _exact(sql: str):
    return sorted(duckdb.connect().execute(sql.replace("FROM adult", f"FROM read_csv('{ADULT / 'adult.csv'}')"))
                  .fetchall())


@pytest.mark.slow      # plans and measures the adult table (~3 CPU-s)
def test_an_or_count_is_planned_and_reported_within_its_baseline(tmp_path, monkeypatch):
    monkeypatch.setattr(noise, "_SYSTEM", noise.SeededBitSource(7))
    con = _connect(tmp_path, 1.0)
    try:
        report = con.session.plan()
        con.session.measure()
        cur = con.cursor()
        for j, sql in enumerate(ORS):
            cur.execute(sql)
            base = report.per_query[j].baseline
            se = [s[-1] for s in cur.result.stderr]
            # reported within the baseline (the statement measured on its own); on main 14.6 and
            # 13.4 against 10.1: the boxes measured apart, their errors added
            assert max(se) <= base * (1 + 1e-9), (sql, se, base)
            # and what the plan promised: the sum's error, the direct part's at its share
            assert se == pytest.approx([report.per_query[j].stderr] * len(se), rel=1e-9), sql
            assert cur.result.model == "direct", sql
        for q in report.per_query:
            assert q.stderr <= q.baseline * (1 + 1e-9), (q.sql, q.stderr, q.baseline)
        strategy = report.strategy
        assert strategy.operator == "split"
        direct = [p for p in strategy.parts if p.direct]
        assert len(direct) == 1 and {report.per_query[j].sql for j in direct[0].parts} == set(ORS)
        # one joint block per statement: the boxes' sum over its columns' joint cells
        assert [b.clique for b in direct[0].strategy.blocks] == [("race", "sex", "income"), ("race", "sex", "income")]
    finally:
        _close(con)


@pytest.mark.slow
def test_or_answers_at_a_near_infinite_budget_are_duckdbs_and_the_charge_is_the_plans(tmp_path):
    con = _connect(tmp_path, 1e7)
    try:
        engine = con.session.engine
        report = con.session.plan()
        con.session.measure()
        rho = engine.workload_rho("adult")
        # every part charged its exact share, adding up to the planned budget
        charges = [e for e in engine.ledger.entries() if e.kind == "charge"]
        assert engine.ledger.spent(None) == rho
        shares = report.strategy.shares(rho) if hasattr(report.strategy, "shares") else [rho]
        assert sorted(Fraction(c.rho) for c in charges) == sorted(shares)
        cur = con.cursor()
        for sql in ORS:
            cur.execute(sql)
            got, want = sorted(cur.fetchall()), _exact(sql)
            assert [g[:-1] for g in got] == [w[:-1] for w in want], sql
            assert [g[-1] for g in got] == pytest.approx([float(w[-1]) for w in want], abs=0.5), sql
            assert cur.result.model == "direct" and cur.result.cost == 0, sql
        # an increment finds nothing left: the released sums answer the OR statements
        assert engine.unsupported_workload("adult") == []
    finally:
        _close(con)
    # a new process reads the released sums back from the ledger
    con = _connect(tmp_path, 1e7)
    try:
        cur = con.cursor()
        for sql in ORS:
            cur.execute(sql)
            assert cur.result.model == "direct" and cur.result.cost == 0, sql
            assert [g[-1] for g in sorted(cur.fetchall())] == \
                pytest.approx([float(w[-1]) for w in _exact(sql)], abs=0.5), sql
    finally:
        _close(con)


def _boxes_workload():
    """An OR over a (3, 4, 2)-cell domain grouped by the last attribute: three disjoint boxes."""
    from dpsql.domain import Domain
    from dpsql.linalg import Explicit, Identity, Kron, Total, Union
    from dpsql.plan import QuerySpec, Workload

    a, b = np.array([[1.0, 0, 0]]), np.array([[0.0, 1, 1, 0]])
    boxes = Union([Kron([Explicit(a), Total(4), Identity(2)]),
                   Kron([Explicit(1 - a), Explicit(b), Identity(2)]),
                   Kron([Explicit(1 - a), Explicit(1 - b), Identity(2)])])
    other = Kron([Identity(3), Total(4), Total(2)])
    return Workload.of_queries(Domain(["x", "y", "g"], [3, 4, 2]), [QuerySpec("or", boxes), QuerySpec("x", other)])


@pytest.mark.parametrize("kind", ["marginals", "residuals", "kron"])
def test_the_planned_error_of_a_sum_of_boxes_is_the_dense_one(kind):
    """``sum_tse``'s per-eigenspace and per-attribute forms against tr(S (AᵀA)⁺ Sᵀ) densely."""
    from dpsql.engine.direct_sums import _algebra_exact, _source_exact
    from dpsql.linalg.rowscaled import GramPinv
    from dpsql.plan.algebra import residual_factor
    from dpsql.plan.error import _dense_union
    from dpsql.plan.strategy import KronBlock

    W = _boxes_workload()
    terms = W.terms
    I3, I4, I2 = np.eye(3), np.eye(4), np.eye(2)
    T3, T4, T2 = np.ones((1, 3)), np.ones((1, 4)), np.ones((1, 2))
    if kind == "marginals":
        blocks = [KronBlock(1.0, (I3, I4, I2)), KronBlock(2.0, (I3, T4, I2)), KronBlock(0.5, (T3, T4, T2))]
    elif kind == "residuals":
        R3, R4, R2 = residual_factor(3), residual_factor(4), residual_factor(2)
        blocks = [KronBlock(1.0, (T3, T4, T2)), KronBlock(0.7, (R3, T4, T2)), KronBlock(0.6, (T3, R4, T2)),
                  KronBlock(0.5, (T3, T4, R2)), KronBlock(0.4, (R3, R4, T2)), KronBlock(0.3, (R3, T4, R2)),
                  KronBlock(0.2, (T3, R4, R2)), KronBlock(0.9, (R3, R4, R2)), KronBlock(1.5, (I3, I4, I2))]
    else:
        blocks = [KronBlock(1.3, (np.array([[1.0, 1, 0], [0, 1, 1], [1, 0, 1]]), np.tril(np.ones((4, 4))), I2))]
    S = sum(t.weight * np.kron(np.kron(np.asarray(t.factors[0].dense()), np.asarray(t.factors[1].dense())),
                               np.asarray(t.factors[2].dense())) for t in terms.terms[:3])
    g = GramPinv(_dense_union(blocks))
    want = float(np.sum((S @ g.factor) ** 2))
    # the structured forms, not the dense one (the domain is small enough for both)
    assert (_algebra_exact(terms, [0, 1, 2], blocks) is None) == (kind == "kron")
    got = _source_exact(terms, [0, 1, 2], blocks)
    assert got == pytest.approx(want, rel=1e-9)


@pytest.mark.slow      # plans and measures the adult table (~3 CPU-s)
def test_the_plan_promises_an_or_counts_sum_error_where_the_model_keeps_it(tmp_path):
    """Under OPT_M the two boxes of ``sex = 'Female' OR income = '>50K'`` are correlated and
    their sum stays within the baseline: the statement stays in the model, and the plan
    report promises the error users then see (least squares, the sum's: 8.33), where on
    main it promised the boxes' per-row error (6.42)."""
    queries = ["SELECT COUNT(*) FROM adult WHERE sex = 'Female' OR income = '>50K'",
               "SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income",
               "SELECT sex, COUNT(*) FROM adult GROUP BY sex",
               "SELECT income, COUNT(*) FROM adult GROUP BY income",
               "SELECT COUNT(*) FROM adult",
               "SELECT race, COUNT(*) FROM adult GROUP BY race"]
    config = write_config(tmp_path, queries=queries, planner={"restarts": 1, "seed": 0})
    con = dpsql.connect(config, user="alice")
    try:
        report = con.session.plan()
        assert not any(getattr(p, "direct", False) for p in getattr(report.strategy, "parts", ()))
        con.session.measure()
        cur = con.cursor()
        cur.execute("SET dpsql.estimator = 'least_squares'")
        cur.execute(queries[0])
        assert cur.stderr[0][-1] == pytest.approx(report.per_query[0].stderr, rel=1e-6)
        assert report.per_query[0].stderr <= report.per_query[0].baseline
    finally:
        _close(con)


def _income_sex_age(tmp_path, cut: int) -> int:
    """t.csv and d.toml: 3,001 rows of a fine income (5,000 cells), sex, and age in two wide
    bins split at ``cut`` (a SUM over it has binning offsets); the rows' count."""
    from dpsql.testing import income_columns, write_domain

    rng = np.random.default_rng(7)
    rows = 3_001
    income = np.clip(rng.lognormal(np.log(5_000) - 1.5, 0.7, rows).astype(np.int64), 0, 4_999)
    sex, age = rng.choice(["F", "M"], rows), rng.integers(0, 100, rows)
    (tmp_path / "t.csv").write_text("income,sex,age\n" + "".join(f"{a},{b},{c}\n" for a, b, c in zip(income, sex, age)))
    columns = income_columns(5_000)
    columns["age"] = {**columns["age"], "edges": [0, cut]}
    write_domain(tmp_path / "d.toml", "t", columns, source={"csv": "t.csv"})
    return rows


def test_an_or_count_beside_a_sums_offsets_in_a_mixed_plan_keeps_its_baseline(tmp_path, monkeypatch):
    """A fine column's quantile makes the plan mixed (``engine/mixed.py``), ``SUM(age)`` over
    two wide bins (0..19, 20..99) gives the rest part binning offsets (30% of its share), and
    the OR's sum stays near its baseline.  The check measured the rest's sums at the part's
    whole share, so the OR stayed in the model and was reported at 1.114× its baseline
    (12.37 against 11.10); at the counts' share (1 − t), as a plain plan's, it is measured
    on its own."""
    monkeypatch.setattr(noise, "_SYSTEM", noise.SeededBitSource(3))
    rows = _income_sex_age(tmp_path, 20)
    OR = "SELECT COUNT(*) FROM t WHERE sex = 'F' OR age >= 20"
    queries = ["SELECT quantile_cont(income, 0.5) FROM t", "SELECT sex, SUM(age) FROM t GROUP BY sex", OR,
               "SELECT sex, COUNT(*) FROM t GROUP BY sex", "SELECT COUNT(*) FROM t WHERE age >= 20",
               "SELECT sex, COUNT(*) FROM t WHERE age >= 20 GROUP BY sex"]
    config = write_config(tmp_path, queries=queries, table="t", domain=tmp_path / "d.toml",
                          table_options={"rows": rows}, planner={"restarts": 1, "seed": 0})
    con = dpsql.connect(config, user="alice")
    try:
        report = con.session.plan()
        assert report.strategy.operator == "split" and report.offsets_rho > 0
        q = report.per_query[2]
        assert q.sql == OR and q.stderr <= q.baseline * (1 + 1e-9), (q.stderr, q.baseline)
        con.session.measure()
        cur = con.cursor()
        cur.execute(OR)
        assert cur.stderr[0][-1] <= q.baseline * (1 + 1e-9), (cur.stderr, q.baseline)
        assert cur.stderr[0][-1] == pytest.approx(q.stderr, rel=1e-9)
    finally:
        _close(con)


@pytest.mark.parametrize("cut, queries", [
    (20, ["SELECT quantile_cont(income, 0.5) FROM t", "SELECT sex, SUM(age) FROM t GROUP BY sex",
          "SELECT COUNT(*) FROM t WHERE sex = 'F' OR age >= 20", "SELECT sex, COUNT(*) FROM t GROUP BY sex",
          "SELECT COUNT(*) FROM t WHERE age >= 20", "SELECT sex, COUNT(*) FROM t WHERE age >= 20 GROUP BY sex"]),
    (50, ["SELECT quantile_cont(income, 0.5) FROM t", "SELECT sex, SUM(age) FROM t GROUP BY sex",
          "SELECT COUNT(*) FROM t WHERE sex = 'F' OR age >= 50", "SELECT COUNT(*) FROM t"])])
def test_a_mixed_plans_rest_with_binning_offsets_keeps_every_query_within_its_baseline(tmp_path, monkeypatch,
                                                                                       cut, queries):
    """The split's rest (ordered income beside it) holds SUM(age)'s binning offsets, measured
    from the rest's share: ``MixedPlanner.keep_baselines`` raised that share only as far as
    its counts needed, so the offsets' share then left SUM(age) at 1.134× its baseline and
    ``COUNT(*) WHERE age >= 20`` at 1.081× (cut 20), SUM and COUNT(*) at 1.076× (cut 50)."""
    monkeypatch.setattr(noise, "_SYSTEM", noise.SeededBitSource(5))
    rows = _income_sex_age(tmp_path, cut)
    config = write_config(tmp_path, queries=queries, table="t", domain=tmp_path / "d.toml",
                          table_options={"rows": rows}, planner={"restarts": 1, "seed": 0})
    con = dpsql.connect(config, user="alice")
    try:
        report = con.session.plan()
        assert report.strategy.operator == "split" and report.offsets_rho > 0
        above = [(q.sql, q.stderr / q.baseline) for q in report.per_query if q.stderr > q.baseline * (1 + 1e-9)]
        assert not above, above
        con.session.measure()
        cur = con.cursor()
        for q in report.per_query[1:]:
            cur.execute(q.sql)
            se = max(s[-1] for s in cur.stderr)
            assert se <= q.baseline * (1 + 1e-9), (q.sql, se, q.baseline)
    finally:
        _close(con)
