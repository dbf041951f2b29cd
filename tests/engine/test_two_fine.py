"""Thin statements over two fine columns (issue 35 item 4): the adult example's capital
gains to the dollar (100,000 cells) and capital losses to the dollar (5,000 cells) in one
WHERE (``COUNT(*) … WHERE capital_gain > 5000 AND capital_loss > 0``, the same per sex).
They are measured directly as a part of their own (``dpsql/engine/direct.py``): the two
columns merged into the few runs the statements' predicates cut, the per-query mechanism at
the least share keeping each within its per-query baseline, in the same ``measure_parts``
as the other parts, and each statement answered from its own block.

Before: such a workload was refused, by the planner's marginal cap (ModelTooLargeError, a
10⁹-cell marginal) for the counts alone, and beside quantiles of the two columns by the
ordered split ("a strategy is planned over one column of more than 4,096 cells at a time").
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.errors import UnsupportedQueryError
from dpsql.privacy import noise
from dpsql.sql.postprocess import Z95

import adult_fine
from measured import close as _close

THIN = ["SELECT COUNT(*) FROM a WHERE capital_gain > 5000 AND capital_loss > 0",
        "SELECT sex, COUNT(*) FROM a WHERE capital_gain BETWEEN 1 AND 9999 AND capital_loss < 1000 GROUP BY sex"]
MIXED = ["SELECT quantile_cont(capital_gain, 0.95) FROM a",
         "SELECT quantile_cont(capital_loss, 0.97) FROM a",
         "SELECT sex, COUNT(*) FROM a GROUP BY sex"] + THIN
# a quantile of one fine column under a predicate on the other (per group too)
UNDER = ["SELECT quantile_cont(capital_gain, 0.97) FROM a WHERE capital_loss = 0",
         "SELECT sex, quantile_cont(capital_loss, 0.99) FROM a WHERE capital_gain < 100 GROUP BY sex"]


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return adult_fine.write_table(tmp_path_factory.mktemp("two_fine"), ("capital_gain", "capital_loss", "sex"))


_connect = adult_fine.connect


def _exact(data: Path, sql: str):
    return sorted(duckdb.connect().execute(sql.replace("FROM a", f"FROM read_csv('{data / 'a.csv'}')")).fetchall())


@pytest.mark.parametrize("queries", [THIN, MIXED], ids=["alone", "beside quantiles"])
def test_thin_statements_over_two_fine_columns_are_planned_within_their_baselines(data, tmp_path, queries):
    con = _connect(data, tmp_path / "a.ledger", 1.0, queries)
    try:
        report = con.session.plan()
        strategy = report.strategy
        assert strategy.operator == "split"
        direct = [p for p in strategy.parts if p.direct]
        assert len(direct) == 1 and direct[0].name == "direct" and direct[0].strategy.operator == "direct"
        assert {report.per_query[j].sql for j in direct[0].parts} == set(THIN)
        # the two columns merged into the runs the predicates cut: 1 | 5000 | 9999 and 0 | 999
        assert {a: len(s) for a, s in direct[0].strategy.starts.items()} == {"capital_gain": 4, "capital_loss": 3}
        # every query within its per-query baseline; the thin ones at it (their own mechanism)
        assert all(q.stderr <= q.baseline * (1 + 1e-6) for q in report.per_query), \
            [(q.sql, q.stderr, q.baseline) for q in report.per_query]
        for j in direct[0].parts:
            q = report.per_query[j]
            assert q.stderr == pytest.approx(q.baseline, rel=1e-6)
        # exact shares adding up to the budget, the direct part's k/m of it (+ the 1e-9 margin)
        rho = con.session.engine.workload_rho("a")
        shares = strategy.shares(rho)
        assert all(isinstance(s, Fraction) and s > 0 for s in shares) and sum(shares, Fraction(0)) == rho
        assert float(direct[0].fraction) == pytest.approx(len(THIN) / len(queries), rel=1e-6)
        if queries is MIXED:
            assert [p.name for p in strategy.parts] == ["ordered capital_gain", "ordered capital_loss", "rest",
                                                        "direct"]
    finally:
        _close(con)


@pytest.mark.slow
def test_answers_at_a_near_infinite_budget_are_duckdbs_from_one_measurement(data, tmp_path):
    ledger = tmp_path / "a.ledger"
    con = _connect(data, ledger, 1e7, MIXED)
    try:
        engine = con.session.engine
        plan = con.session.plan()
        con.session.measure()
        rho = engine.workload_rho("a")
        assert engine.ledger.spent(None) == rho
        charges = [e for e in engine.ledger.entries() if e.kind == "charge"]
        releases = [e for e in engine.ledger.entries() if e.kind == "release"]
        assert len(charges) == 4 and sorted(r.charge_id for r in releases) == sorted(c.seq for c in charges)
        assert [(c.mechanism["part_of"]["part"], c.mechanism["part_of"]["of"]) for c in charges] == \
            [(0, 4), (1, 4), (2, 4), (3, 4)]
        cur = con.cursor()
        for j, sql in enumerate(MIXED):
            cur.execute(sql)
            got, want = sorted(cur.fetchall()), _exact(data, sql)
            assert cur.result.cost == 0
            if "quantile" in sql:
                assert got[0][0] == pytest.approx(float(want[0][0]), abs=1.0), sql
                continue
            assert [g[:-1] for g in got] == [w[:-1] for w in want], sql
            assert [g[-1] for g in got] == pytest.approx([float(w[-1]) for w in want], abs=0.5), sql
            if sql in THIN:
                assert cur.result.model == "direct", sql
                # the reported standard error is the one the plan promised (its baseline)
                se = [s[-1] for s in cur.result.stderr]
                assert se == pytest.approx([plan.per_query[j].stderr] * len(se), rel=1e-6), sql
    finally:
        _close(con)
    # a new process reads the direct release back from the ledger
    con = _connect(data, ledger, 1e7, MIXED)
    try:
        cur = con.cursor()
        for sql in THIN:
            cur.execute(sql)
            assert cur.result.model == "direct" and cur.result.cost == 0
            assert [g[-1] for g in sorted(cur.fetchall())] == \
                pytest.approx([float(w[-1]) for w in _exact(data, sql)], abs=0.5)
        # measured: an increment finds nothing of the workload left to measure
        assert con.session.engine.unsupported_workload("a") == []
    finally:
        _close(con)


@pytest.mark.slow
def test_the_reported_errors_are_honest_over_seeded_releases(data, tmp_path, monkeypatch):
    # at ε = 1 each released count's error against DuckDB's is N(0, se²) (discrete Gaussian,
    # variance ≤ σ²): over seeded releases (deterministic, never flaky) the z-scores are of
    # unit size and none is extreme
    z = []
    for k in range(6):
        monkeypatch.setattr(noise, "_SYSTEM", noise.SeededBitSource(1000 + k))
        con = _connect(data, tmp_path / f"a{k}.ledger", 1.0, THIN)
        try:
            con.session.measure()
            cur = con.cursor()
            for sql in THIN:
                cur.execute(sql)
                assert cur.result.model == "direct"
                got = cur.fetchall()
                order = sorted(range(len(got)), key=lambda i: got[i][:-1])
                want = _exact(data, sql)
                for i, w in zip(order, want):
                    z.append((got[i][-1] - float(w[-1])) / cur.result.stderr[i][-1])
        finally:
            _close(con)
    z = np.array(z)
    assert z.size == 18 and np.all(np.abs(z) < 4.5), z
    assert 0.25 < float(np.mean(z ** 2)) < 2.5, z


def test_a_group_by_every_value_of_two_fine_columns_is_refused_with_a_hint(data, tmp_path):
    # both columns asked for every value: no merge makes either few-celled
    con = _connect(data, tmp_path / "a.ledger", 1.0,
                   ["SELECT capital_gain, capital_loss, COUNT(*) FROM a GROUP BY capital_gain, capital_loss"] + THIN)
    try:
        with pytest.raises(UnsupportedQueryError) as err:
            con.session.plan()
        # the compiler's refusal (a 5·10⁸-group GROUP BY), before any planning or spending
        assert err.value.sqlstate == "0A000" and "capital_gain" in err.value.message \
            and "capital_loss" in err.value.message and "coarser" in err.value.hint
        assert not (tmp_path / "a.ledger").exists() or con.session.engine.ledger.spent(None) == 0
    finally:
        _close(con)


def test_a_quantile_under_a_predicate_on_another_fine_column_is_an_ordered_part_over_merged_cells(data, tmp_path):
    queries = UNDER + THIN[:1] + ["SELECT sex, COUNT(*) FROM a GROUP BY sex"]
    con = _connect(data, tmp_path / "a.ledger", 1.0, queries)
    try:
        report = con.session.plan()
        parts = {p.name: p for p in report.strategy.parts}
        assert set(parts) == {"ordered capital_gain (merged)", "ordered capital_loss (merged)", "rest", "direct"}
        gain, loss = parts["ordered capital_gain (merged)"].strategy, parts["ordered capital_loss (merged)"].strategy
        # the ordered strategy over the one column, per cell of the other merged to its predicate
        assert gain.inner.attribute == "capital_gain" and gain.inner.groups == ("capital_loss",)
        assert gain.inner.group_shape == (2,) and gain.schema.attribute("capital_loss").size == 2
        assert loss.inner.attribute == "capital_loss" and set(loss.inner.groups) == {"capital_gain", "sex"}
        assert all(q.stderr <= q.baseline * (1 + 1e-6) for q in report.per_query), \
            [(q.sql, q.stderr, q.baseline) for q in report.per_query]
        rho = con.session.engine.workload_rho("a")
        assert sum(report.strategy.shares(rho), Fraction(0)) == rho
    finally:
        _close(con)


@pytest.mark.slow
def test_quantiles_under_a_predicate_on_another_fine_column_are_duckdbs_at_a_near_infinite_budget(data, tmp_path,
                                                                                                 monkeypatch):
    monkeypatch.setattr(noise, "_SYSTEM", noise.SeededBitSource(11))
    ledger = tmp_path / "a.ledger"
    queries = UNDER + THIN[:1]
    con = _connect(data, ledger, 1e7, queries)
    try:
        con.session.measure()
        assert len([e for e in con.session.engine.ledger.entries() if e.kind == "charge"]) == 3
        cur = con.cursor()
        for sql in UNDER:
            cur.execute(sql)
            assert cur.result.model.startswith("ordered") and cur.result.model.endswith("(merged)"), sql
            got, want = sorted(zip(cur.fetchall(), cur.result.stderr)), _exact(data, sql)
            assert [g[:-1] for g, _ in got] == [w[:-1] for w in want] and all(float(w[-1]) > 0 for w in want)
            for (g, se), w in zip(got, want):
                # quantile_cont interpolates across empty cells by its own rank convention: within
                # one value and the interval (as tests/engine/test_mixed_columns.py)
                assert abs(g[-1] - float(w[-1])) <= 1.0 + Z95 * se[-1] + 1e-6, (sql, g, w, se)
    finally:
        _close(con)
    con = _connect(data, ledger, 1e7, queries)      # read back from the ledger
    try:
        cur = con.cursor()
        cur.execute(UNDER[0])
        assert cur.result.cost == 0 and cur.fetchall()[0][0] == pytest.approx(float(_exact(data, UNDER[0])[0][0]),
                                                                               abs=1.0)
        assert con.session.engine.unsupported_workload("a") == []
    finally:
        _close(con)


@pytest.mark.slow
def test_the_quantile_intervals_under_a_predicate_cover_over_seeded_releases(data, tmp_path, monkeypatch):
    # at ε = 1, each seeded release's 95% interval (± Z95·se) holds DuckDB's quantile
    # (deterministic seeds: never flaky; the intervals come from the CDF band, conservative)
    want = {sql: _exact(data, sql) for sql in UNDER}
    covered = []
    for k in range(5):
        monkeypatch.setattr(noise, "_SYSTEM", noise.SeededBitSource(2000 + k))
        con = _connect(data, tmp_path / f"a{k}.ledger", 1.0, UNDER)
        try:
            con.session.measure()
            cur = con.cursor()
            for sql in UNDER:
                cur.execute(sql)
                got = sorted(zip(cur.fetchall(), cur.result.stderr))
                for (row, se), w in zip(got, want[sql]):
                    # a band within one value's cells is an interval of width 0 (7688 is common)
                    assert row[:-1] == w[:-1] and 0 <= se[-1] < 1000, (sql, row, se)
                    covered.append(abs(row[-1] - float(w[-1])) <= Z95 * se[-1] + 1.0)
        finally:
            _close(con)
    assert len(covered) == 15 and sum(covered) >= 14, covered


def test_the_merged_columns_count_the_same_rows():
    # a count over the merged columns is the fine count: every run holds whole cells, the
    # NULL cell its own, values outside clamp to the same end runs (dpsql.engine.direct)
    from dpsql.domain import IntegerRange, Numeric
    from dpsql.engine.direct import coarse_attribute

    fine = IntegerRange("x", 0, 99999, nullable=True)
    coarse = coarse_attribute(fine, (0, 1, 5001, 10000, fine.size - 1))
    rng = np.random.default_rng(0)
    values = [None, -5, 0, 1, 5000, 5001, 9999, 10000, 99999, 200000] + [int(v) for v in rng.integers(-10, 10**5, 200)]
    runs = np.cumsum(np.isin(np.arange(fine.size), [1, 5001, 10000, fine.size - 1]))
    assert coarse.size == 5
    assert [coarse.index_of(v) for v in values] == [int(runs[fine.index_of(v)]) for v in values]
    real = Numeric("y", [0.0, 0.5, 1.0, 1.5, 2.0])
    merged = coarse_attribute(real, (0, 2))
    assert merged.edges == (0.0, 1.0, 2.0)
    assert [merged.index_of(v) for v in (-1.0, 0.7, 1.0, 1.9, 3.0)] == [0, 0, 1, 1, 1]


@pytest.mark.slow
def test_sums_and_averages_of_one_fine_column_under_a_predicate_on_the_other(data, tmp_path, monkeypatch):
    # a SUM's value row over capital_gain cuts it into every cell (100,000 runs) and the
    # predicate on capital_loss into 2 or 3: a marginal of 300,000 cells, counted directly;
    # its noise is the per-query mechanism's (sensitivity 99,999: se 44.8 at ε = 10⁷)
    monkeypatch.setattr(noise, "_SYSTEM", noise.SeededBitSource(7))
    sums = ["SELECT SUM(capital_gain) FROM a WHERE capital_loss > 0",
            "SELECT sex, AVG(capital_gain) FROM a WHERE capital_loss BETWEEN 1 AND 2000 GROUP BY sex",
            THIN[0]]
    con = _connect(data, tmp_path / "a.ledger", 1e7, sums)
    try:
        report = con.session.plan()
        assert all(q.stderr <= q.baseline * (1 + 1e-6) for q in report.per_query)
        con.session.measure()
        cur = con.cursor()
        for sql in sums:
            cur.execute(sql)
            assert cur.result.model == "direct", sql
            got, want = sorted(cur.fetchall()), _exact(data, sql)
            assert [g[:-1] for g in got] == [w[:-1] for w in want]
            for g, w, se in zip(got, want, sorted(cur.result.stderr)):
                assert 0 < se[-1] < 50 and abs(g[-1] - float(w[-1])) <= 4 * se[-1] + 1e-6, (sql, g, w, se)
    finally:
        _close(con)


def test_sums_over_each_of_two_fine_columns_beside_each_other_are_refused_before_spending(data, tmp_path):
    # each cuts the other's column into every cell: 100,000 × 5,000 merged cells
    con = _connect(data, tmp_path / "a.ledger", 1.0, ["SELECT SUM(capital_gain) FROM a WHERE capital_loss > 0",
                                                      "SELECT SUM(capital_loss) FROM a WHERE capital_gain > 0"])
    try:
        with pytest.raises(UnsupportedQueryError) as err:
            con.session.plan()
        assert "500,000,000 merged cells" in err.value.message and "workload of its own" in err.value.hint
    finally:
        _close(con)


def test_a_quantile_under_another_fine_columns_predicate_with_gaps_in_its_own_is_refused_before_spending(
        data, tmp_path):
    # the ordered release answers a quantile over one run of its column's cells, and no model
    # holds two fine columns: it would have been charged and then never answered
    con = _connect(data, tmp_path / "a.ledger", 1.0,
                   ["SELECT quantile_cont(capital_gain, 0.5) FROM a "
                    "WHERE (capital_gain < 3000 OR capital_gain > 8000) AND capital_loss = 0"])
    try:
        with pytest.raises(UnsupportedQueryError) as err:
            con.session.plan()
        assert "with gaps" in err.value.message and "BETWEEN" in err.value.hint
    finally:
        _close(con)


@pytest.mark.slow
def test_a_statement_the_direct_release_did_not_measure_is_refused_as_unsupported(data, tmp_path):
    con = _connect(data, tmp_path / "a.ledger", 1e7, THIN)
    try:
        con.session.measure()
        with pytest.raises(UnsupportedQueryError) as err:     # before: "nothing has been measured"
            con.cursor().execute("SELECT COUNT(*) FROM a WHERE capital_gain > 6000 AND capital_loss > 0")
        assert "measured other statements" in err.value.message and "workload" in err.value.hint
    finally:
        _close(con)



@pytest.mark.slow
def test_a_timestamp_to_the_minute_and_an_income_to_the_dollar_in_one_where(tmp_path):
    # the timestamp's cells are computed by its own SQL arithmetic and are not merged: its
    # 5,760 minutes are counted densely beside the income's 4 runs (23,040 cells); a quantile
    # of the income under a predicate on it would need it as a few-celled group: refused
    import datetime as dt
    rng = np.random.default_rng(5)
    start, rows = dt.datetime(2024, 1, 1), 4000
    minutes = np.clip(rng.normal(2 * 1440, 0.6 * 1440, rows).astype(np.int64), 0, 4 * 1440 - 1)
    income = np.clip(rng.lognormal(10, 1, rows).astype(np.int64), 0, 99999)
    (tmp_path / "t.csv").write_text("ts,income\n" + "\n".join(
        f"{(start + dt.timedelta(minutes=int(m))).isoformat(' ')},{i}" for m, i in zip(minutes, income)) + "\n")
    (tmp_path / "d.toml").write_text('[tables.t.columns.ts]\ntype = "timestamp"\nlo = 2024-01-01\n'
                                     'hi = 2024-01-04\nbin = "minute"\n[tables.t.columns.income]\n'
                                     'type = "integer"\nlo = 0\nhi = 99999\n')
    queries = ["SELECT COUNT(*) FROM t WHERE ts >= '2024-01-02 06:00' AND income > 50000",
               "SELECT COUNT(*) FROM t WHERE ts < '2024-01-03' AND income BETWEEN 1000 AND 20000"]

    def connect(qs, name):
        return dpsql.connect({"dpsql": {"ledger": str(tmp_path / name), "cache_dir": str(tmp_path / "cache")},
                              "budget": {"epsilon": 1e7, "delta": 1e-6},
                              "tables": {"t": {"domain": str(tmp_path / "d.toml"),
                                               "source": {"csv": str(tmp_path / "t.csv")}, "rows": rows}},
                              "workload": {"queries": qs}}, user="tester")
    con = connect(queries, "a.ledger")
    try:
        direct = [p for p in con.session.plan().strategy.parts if p.direct]
        assert [set(p.strategy.starts) for p in direct] == [{"income"}]
        con.session.measure()
        cur = con.cursor()
        for sql in queries:
            cur.execute(sql)
            want = duckdb.connect().execute(sql.replace("FROM t", f"FROM read_csv('{tmp_path / 't.csv'}')")).fetchall()
            assert cur.result.model == "direct" and cur.fetchall()[0][0] == pytest.approx(float(want[0][0]), abs=0.5)
    finally:
        _close(con)
    con = connect(queries + ["SELECT quantile_cont(income, 0.5) FROM t WHERE ts >= '2024-01-02'"], "b.ledger")
    try:
        with pytest.raises(UnsupportedQueryError) as err:
            con.session.plan()
        assert "'ts'" in err.value.message and "coarser bins" in err.value.hint
    finally:
        _close(con)


def test_every_part_is_counted_then_charged_then_noised_in_one_measurement(data, tmp_path, monkeypatch):
    # the direct part (over merged cells) and the merged ordered part in the same measure_parts
    # as the table's other parts: one preview, every count before the first charge, every
    # charge (durable) before any noise
    from privacy_order import spied

    con = _connect(data, tmp_path / "a.ledger", 1.0,
                   UNDER[:1] + THIN[:1] + ["SELECT sex, COUNT(*) FROM a GROUP BY sex"])
    try:
        con.session.plan()
        events: list[str] = []
        spied(con, events, monkeypatch)
        con.session.measure()
        assert events[0] == "preview" and events.count("preview") == 1
        assert events.count("count") == 3 and events.count("charge") == 3 and events.count("record_release") == 3
        assert max(i for i, e in enumerate(events) if e == "count") < events.index("charge")
        assert max(i for i, e in enumerate(events) if e == "charge") < events.index("noise")
    finally:
        _close(con)


@pytest.mark.slow
def test_a_crash_after_the_charges_is_completed_under_them(data, tmp_path):
    import os
    import signal
    import subprocess
    import sys

    from dpsql.engine.measuring import KILL_AT_ENV
    from dpsql.testing import write_config

    root = Path(__file__).resolve().parents[2]
    queries = UNDER[:1] + THIN[:1]
    config = write_config(tmp_path, table="a", domain=data / "d.toml", source={"csv": data / "a.csv"},
                          epsilon=1e7, queries=queries)
    env = {**os.environ, "PYTHONPATH": str(root)}
    cmd = [sys.executable, "-m", "dpsql.cli", "measure", "--config", str(config), "--yes", "--no-fit"]
    crashed = subprocess.run(cmd, env={**env, KILL_AT_ENV: "charged"}, capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    env.pop(KILL_AT_ENV, None)
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    con = dpsql.connect(str(config))
    try:
        engine = con.session.engine
        charges = [e for e in engine.ledger.entries() if e.kind == "charge"]
        releases = [e for e in engine.ledger.entries() if e.kind == "release"]
        assert len(charges) == 2 and sorted(r.charge_id for r in releases) == sorted(c.seq for c in charges)
        assert engine.ledger.spent(None) == engine.workload_rho("a")
        cur = con.cursor()
        for sql in queries:
            cur.execute(sql)
            assert cur.result.cost == 0 and cur.fetchall()[0][0] == pytest.approx(float(_exact(data, sql)[0][0]),
                                                                                   abs=1.0), sql
    finally:
        _close(con)
