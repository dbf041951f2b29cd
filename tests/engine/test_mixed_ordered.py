"""A workload mixing a fine column's quantile and CDF counts with ordinary queries (issue 35
item 4): split into the ordered part (a tree or Toeplitz root over the column) and the
rest (HDMM / ResidualPlanner), the table's ρ divided between the two releases to minimise
the total expected error, measured by one ``measure`` in the engine's order (preview, count,
durable charges, noise, releases) and answered from the right release.

Before: planning refused the workload ("the CDF and range queries over 'income' … also ask
about ['sex']"), so no such table could be measured.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.engine.measuring import KILL_AT_ENV
from dpsql.errors import BudgetExhaustedError, OperationalError
from dpsql.sql.postprocess import Z95
from dpsql.testing import income_columns, write_config, write_domain

from measured import close as _close
from privacy_order import spied

ROOT = Path(__file__).resolve().parents[2]

QUERIES = [
    "SELECT quantile_cont(income, 0.5) FROM t",
    "SELECT sex, COUNT(*) FROM t GROUP BY sex",
    "SELECT COUNT(*) FROM t WHERE income <= 2000",
]


def _table(tmp: Path, cells: int = 5_000, rows: int = 3_001, seed: int = 7) -> None:
    # 3,001 rows: q·N is no integer for the quantiles asked, no tie for float rounding to break
    rng = np.random.default_rng(seed)
    x = np.clip(rng.lognormal(np.log(cells) - 1.5, 0.7, rows).astype(np.int64), 0, cells - 1)
    sex = rng.choice(["F", "M"], rows)
    age = rng.integers(0, 100, rows)
    (tmp / "t.csv").write_text("income,sex,age\n" + "\n".join(f"{a},{b},{c}" for a, b, c in zip(x, sex, age)) + "\n")
    write_domain(tmp / "d.toml", "t", income_columns(cells), source={"csv": "t.csv"})


def _config(tmp: Path, epsilon: float, queries=QUERIES) -> dict:
    return {"dpsql": {"ledger": str(tmp / "t.ledger"), "cache_dir": str(tmp / "cache")},
            "budget": {"epsilon": epsilon, "delta": 1e-6},
            "tables": {"t": {"domain": str(tmp / "d.toml"), "source": {"csv": str(tmp / "t.csv")}, "rows": 3_001}},
            "workload": {"queries": list(queries)}}


def _toml(tmp: Path, epsilon: float) -> Path:
    return write_config(tmp, queries=QUERIES, epsilon=epsilon, ledger=tmp / "t.ledger", table="t",
                        domain=tmp / "d.toml", table_options={"rows": 3001})


def _exact(tmp: Path, sql: str):
    return duckdb.connect().execute(sql.replace("FROM t", f"FROM read_csv('{tmp / 't.csv'}')")).fetchall()


@pytest.fixture
def small(tmp_path):
    _table(tmp_path)
    return tmp_path


def test_the_plan_splits_the_workload_and_the_budget_exactly(small):
    con = dpsql.connect(_config(small, 1.0), user="tester")
    try:
        engine = con.session.engine
        report = con.session.plan()
        strategy = report.strategy
        assert strategy.operator == "split"
        ordered, rest = strategy.parts
        assert ordered.ordered and ordered.name == "ordered income"
        assert ordered.strategy.operator in ("tree", "toeplitz")
        assert not rest.ordered and rest.strategy.operator not in ("tree", "toeplitz")
        # the quantile in the ordered part, the GROUP BY sex in the rest, and the CDF count
        # too: the root left it above its per-query baseline (mixed.thin_above_baseline)
        assert {report.per_query[j].sql for j in ordered.parts} == {QUERIES[0]}
        assert {report.per_query[j].sql for j in rest.parts} == {QUERIES[1], QUERIES[2]}
        rho = engine.workload_rho("t")
        shares = strategy.shares(rho)
        assert all(isinstance(s, Fraction) and s > 0 for s in shares)
        assert sum(shares, Fraction(0)) == rho                      # exactly the budget
        # ρ_v ∝ √(k²·E_v): the error-minimising split (dpsql.plan.views.split_budget)
        # unless that leaves a part above its queries' baselines: then the least shares that
        # keep them (mixed.split_fractions(least=…)), here the rest's, the moved count's
        e_o, e_r = ordered.strategy.expected_error, rest.strategy.expected_error
        optimum = math.sqrt(e_o) / (math.sqrt(e_o) + math.sqrt(e_r))
        if float(ordered.fraction) != pytest.approx(optimum, rel=1e-9):
            assert float(ordered.fraction) < optimum
            assert all(q.stderr <= q.baseline * (1 + 1e-6) for q in report.per_query)
        total = e_o / float(ordered.fraction) + e_r / float(rest.fraction)
        assert strategy.expected_error == pytest.approx(total)
        # the report shows both parts with their shares and expected errors
        assert [p.name for p in report.parts] == ["ordered income", "rest"]
        assert sum(p.rho for p in report.parts) == pytest.approx(float(rho))
        assert all(p.rmse > 0 and math.isfinite(p.rmse) for p in report.parts)
        text = "\n".join(report.part_lines())
        assert "ordered income:" in text and "rest:" in text and "of the budget" in text
        # planning is free: no ledger entry
        assert not (small / "t.ledger").exists() or engine.ledger.spent(None) == 0
    finally:
        _close(con)


def test_dpsql_plan_prints_both_parts(small):
    r = subprocess.run([sys.executable, "-m", "dpsql.cli", "plan", "--config", str(_toml(small, 1.0))],
                       env={**os.environ, "PYTHONPATH": str(ROOT)}, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "strategy split" in r.stdout
    assert "ordered income:" in r.stdout and "  rest:" in r.stdout, r.stdout
    assert "% of the budget" in r.stdout and "expected RMSE per row" in r.stdout


@pytest.mark.slow
def test_both_kinds_are_answered_from_their_release_and_equal_duckdb(small):
    con = dpsql.connect(_config(small, 1e7), user="tester")
    try:
        engine = con.session.engine
        report = con.session.measure()
        assert not report.reused and report.rho == engine.workload_rho("t")
        assert engine.ledger.spent(None) == engine.workload_rho("t")    # both shares, exactly
        charges = [e for e in engine.ledger.entries() if e.kind == "charge"]
        releases = [e for e in engine.ledger.entries() if e.kind == "release"]
        assert len(charges) == 2 and sorted(r.charge_id for r in releases) == sorted(c.seq for c in charges)
        links = [c.mechanism["part_of"] for c in charges]
        assert [link["part"] for link in links] == [0, 1] and links[0]["keys"] == links[1]["keys"]
        assert sum(Fraction(s) for s in links[0]["shares"]) == Fraction(links[0]["rho"]) == engine.workload_rho("t")
        cur = con.cursor()
        for sql in QUERIES + ["SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY income) FROM t",
                              "SELECT COUNT(*) FROM t WHERE income BETWEEN 500 AND 1500",
                              "SELECT sex, COUNT(*) FROM t WHERE sex = 'F' GROUP BY sex"]:
            cur.execute(sql)
            got = sorted(cur.fetchall())
            want = sorted(_exact(small, sql))
            assert cur.result.cost == 0, sql
            ordered = "sex" not in sql and sql != QUERIES[2]      # that one moved to the rest
            assert cur.result.model.startswith("ordered") == ordered, (sql, cur.result.model)
            assert len(got) == len(want), sql
            # quantile_cont interpolates between cells by its own rank convention
            slack = Z95 * cur.result.stderr[0][0] if "quantile_cont" in sql else 0.0
            for g, w in zip(got, want):
                assert g[:-1] == w[:-1] and g[-1] == pytest.approx(float(w[-1]), abs=0.5 + slack), sql
        # measuring again re-uses both releases
        again = con.session.measure()
        assert again.reused and again.rho == 0
    finally:
        _close(con)


def test_one_measure_previews_counts_charges_both_then_draws_noise(small, monkeypatch):
    con = dpsql.connect(_config(small, 1.0), user="tester")
    try:
        con.session.plan()
        events: list[str] = []
        spied(con, events, monkeypatch)
        report = con.session.measure()
        assert report.rho == con.session.engine.workload_rho("t")
        assert events[0] == "preview" and events.count("preview") == 1
        assert events.count("count") == 2 and events.count("charge") == 2 and events.count("record_release") == 2
        # every count before the first charge, both charges before any noise
        assert max(i for i, e in enumerate(events) if e == "count") < events.index("charge")
        assert max(i for i, e in enumerate(events) if e == "charge") < events.index("noise")
        assert max(i for i, e in enumerate(events) if e == "noise") < events.index("record_release")
    finally:
        _close(con)


def test_over_the_budget_nothing_is_read_or_spent(small, monkeypatch):
    con = dpsql.connect(_config(small, 1.0), user="tester")
    try:
        engine = con.session.engine
        con.session.plan()
        events: list[str] = []
        spied(con, events, monkeypatch)
        with pytest.raises(BudgetExhaustedError):
            engine.measure("t", rho=engine.ledger.remaining(None) * 2)
        assert events == ["preview"], events
        assert engine.ledger.spent(None) == 0
    finally:
        _close(con)


@pytest.mark.parametrize("fail_on", [1, 2])
def test_a_failing_count_of_either_part_spends_nothing(small, monkeypatch, fail_on):
    con = dpsql.connect(_config(small, 1.0), user="tester")
    try:
        con.session.plan()
        events: list[str] = []
        spied(con, events, monkeypatch, fail_on=fail_on)
        with pytest.raises(OperationalError):
            con.session.measure()
        assert events[-1] == "count" and "charge" not in events and "noise" not in events
        assert con.session.engine.ledger.spent(None) == 0
    finally:
        _close(con)


@pytest.mark.slow
@pytest.mark.parametrize("step", ["charged", "released"])
def test_a_crash_is_completed_under_the_charges_made(small, step):
    """Killed after both charges (or after the first release), the next ``dpsql measure``
    releases what is missing under the charges already made: two charges, two releases,
    the budget spent exactly once."""
    config = _toml(small, 1.0)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "dpsql.cli", "measure", "--config", str(config), "--yes", "--no-fit"]
    crashed = subprocess.run(cmd, env={**env, KILL_AT_ENV: step}, capture_output=True, text=True, timeout=300)
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    env.pop(KILL_AT_ENV, None)
    again = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    con = dpsql.connect(str(config))
    try:
        engine = con.session.engine
        entries = engine.ledger.entries()
        charges = [e for e in entries if e.kind == "charge"]
        releases = [e for e in entries if e.kind == "release"]
        assert len(charges) == 2 and sorted(r.charge_id for r in releases) == sorted(c.seq for c in charges)
        assert engine.ledger.spent(None) == engine.workload_rho("t")
        cur = con.cursor()
        cur.execute(QUERIES[0])
        assert cur.result.model.startswith("ordered")
        cur.execute(QUERIES[2])
        assert not cur.result.model.startswith("ordered")
        cur.execute(QUERIES[1])
        assert not cur.result.model.startswith("ordered") and len(cur.fetchall()) == 2
    finally:
        _close(con)


@pytest.mark.slow
def test_the_cli_answers_both_kinds(small):
    config = _toml(small, 1e7)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-m", "dpsql.cli", "measure", "--config", str(config), "--yes", "--no-fit"],
                       env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    for sql in ("SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY income) FROM t",
                "SELECT COUNT(*) FROM t WHERE sex = 'F'"):
        r = subprocess.run([sys.executable, "-m", "dpsql.cli", "query", "--config", str(config), sql],
                           env=env, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stderr
        got = re.search(r"([\d,.]+) ±", r.stdout)
        assert got is not None, (sql, r.stdout)
        assert float(got.group(1).replace(",", "")) == pytest.approx(float(_exact(small, sql)[0][0]), abs=0.5), r.stdout


@pytest.mark.parametrize("queries", [QUERIES, [QUERIES[0], QUERIES[2]]], ids=["mixed", "column alone"])
def test_an_increment_after_the_measurement_measures_nothing_again(small, queries, monkeypatch):
    """The ordered release supports the column's queries: ``dpsql measure --increment`` finds
    nothing to measure, after a mixed workload and after a workload of the column alone
    (before, the model's support alone counted: ``unsupported_workload`` listed every query
    the ordered release answers, and an increment charged for the column's CDF again).  The
    ordered and direct releases are read once per call (they were read again per block)."""
    con = dpsql.connect(_config(small, 1.0, queries=queries), user="tester")
    try:
        engine = con.session.engine
        con.session.measure()
        spent = engine.ledger.spent(None)
        read, estimates, direct = [], engine.ordered_estimates, engine.direct_releases
        monkeypatch.setattr(engine, "ordered_estimates", lambda table: read.append(table) or estimates(table))
        monkeypatch.setattr(engine, "direct_releases", lambda table: read.append(table) or direct(table))
        assert engine.unsupported_workload("t") == []
        assert read == ["t", "t"]   # the ordered and direct releases read once per call, not once per block
        monkeypatch.undo()
        assert engine.measure_increment("t", Fraction(1, 100)) is None
        assert engine.ledger.spent(None) == spent
    finally:
        _close(con)


def test_the_split_is_chosen_only_when_its_expected_error_is_lower(small):
    """The other candidate is one strategy for the whole workload (the ordered strategy per
    group of the other columns asked).  For the quantile, CDF count and GROUP BY sex above
    the split is better (the CDF measured once, not per sex); when many of the column's
    queries are themselves per sex, the ordered strategy per sex answers the sex counts at
    less than the split's cost (its part's share), and one strategy wins.  Both choices name
    the other candidate's error."""
    con = dpsql.connect(_config(small, 1.0), user="tester")
    try:
        split = con.session.plan()
        assert split.strategy.operator == "split"
        mixed = split.strategy
        whole = float(mixed.explanation.rsplit("expected error ", 1)[1].rstrip("."))
        assert mixed.expected_error < whole          # k = 1: the errors compare as printed
        grouped = [f"SELECT sex, COUNT(*) FROM t WHERE income <= {200 * (i + 1)} GROUP BY sex" for i in range(6)] \
            + ["SELECT sex, quantile_cont(income, 0.5) FROM t GROUP BY sex", "SELECT sex, COUNT(*) FROM t GROUP BY sex"]
        one = con.session.plan(queries=grouped)
        # the ordered strategy per sex had the lower total error, but it leaves the thin
        # counts per sex above their per-query baselines: no longer a candidate (issue 35)
        assert one.strategy.operator == "split"
        assert "not a candidate: it leaves thin counts above their per-query baselines" in one.strategy.explanation
        assert all(q.stderr <= q.baseline * (1 + 1e-6) for q in one.per_query)
    finally:
        _close(con)


def test_the_rests_queries_stay_within_their_baselines_at_its_share(small):
    """Each part is planned against its queries' per-query baselines at the part's share of
    the budget (``mixed.sub_workload``), not at the whole budget: the ordinary queries keep
    within theirs.  Before, the rest was balanced as if it had the whole budget, and at its
    share GROUP BY sex came out at 1.17× its baseline (and at n = 10⁴ in bench/fine_mixed.py
    age >= 65 at 1.21×)."""
    queries = [QUERIES[0], QUERIES[2], "SELECT COUNT(*) FROM t WHERE income BETWEEN 1000 AND 3000",
               QUERIES[1], "SELECT age, sex, COUNT(*) FROM t GROUP BY age, sex",
               "SELECT COUNT(*) FROM t WHERE age >= 65"]
    con = dpsql.connect(_config(small, 1.0, queries=queries), user="tester")
    try:
        report = con.session.plan()
        assert report.strategy.operator == "split"
        ordered, rest = report.strategy.parts
        assert sorted(rest.parts) == [1, 2, 3, 4, 5]       # the thin counts moved there
        for j in rest.parts:
            q = report.per_query[j]
            assert q.stderr <= q.baseline * (1 + 1e-6), (q.sql, q.stderr, q.baseline)
        # the shares are still the error-minimising split of the parts as planned
        e_o, e_r = ordered.strategy.expected_error, rest.strategy.expected_error
        assert float(ordered.fraction / rest.fraction) == pytest.approx(math.sqrt(e_o / e_r), rel=1e-9)
    finally:
        _close(con)


THIN = ["SELECT COUNT(*) FROM t WHERE income <= 2000", "SELECT COUNT(*) FROM t WHERE income BETWEEN 1000 AND 3000"]
FINE_MIXED = ["SELECT quantile_cont(income, 0.5) FROM t",
              "SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY income) FROM t", *THIN,
              QUERIES[1], "SELECT age, sex, COUNT(*) FROM t GROUP BY age, sex",
              "SELECT COUNT(*) FROM t WHERE age >= 65"]


def _split_within_baselines(tmp: Path, queries) -> tuple[set[str], set[str]]:
    """The statements of the ordered part and of the rest of ``queries``' plan at ε = 1,
    checked to be a split of two parts with every statement within its per-query baseline
    and shares adding up to the table's budget exactly."""
    con = dpsql.connect(_config(tmp, 1.0, queries=queries), user="tester")
    try:
        report = con.session.plan()
        for q in report.per_query:
            assert q.stderr <= q.baseline * (1 + 1e-6), (q.sql, q.stderr / q.baseline)
        strategy = report.strategy
        assert strategy.operator == "split"
        ordered, rest = strategy.parts
        rho = con.session.engine.workload_rho("t")
        assert sum(strategy.shares(rho), Fraction(0)) == rho
        return ({report.per_query[j].sql for j in ordered.parts}, {report.per_query[j].sql for j in rest.parts})
    finally:
        _close(con)


def test_thin_counts_over_the_column_stay_within_their_baselines(small):
    """Issue 35 item 6: a thin count (``x <= c``, ``BETWEEN``) answered from the tree or root
    had 2.55× and 3.46× its per-query baseline (bench/fine_mixed.py at n = 10⁴; here 2.52×).
    No weighting of the ordered strategy gives one range the error of its row measured alone
    at ρ/m: such a count moves to the rest, whose share is no less than what keeps its
    queries within their baselines."""
    ordered, rest = _split_within_baselines(small, FINE_MIXED)
    assert ordered == set(FINE_MIXED[:2]) and set(THIN) <= rest


def _answered_as_planned(tmp: Path, queries, ordered) -> None:
    """Measure ``queries`` at ε = 10⁷ and check what users see: the measurement spends
    exactly the table's budget, the statements ``ordered`` are answered from the ordered
    release and the others from the rest's model, the thin counts (``THIN``) within their
    plan baselines, and every answer is DuckDB's (a ``quantile_cont`` within its 95%
    interval: an interpolation between noisy CDF cells)."""
    con = dpsql.connect(_config(tmp, 1e7, queries=queries), user="tester")
    try:
        engine = con.session.engine
        baseline = {q.sql: q.baseline for q in con.session.plan().per_query}
        con.session.measure()
        assert engine.ledger.spent(None) == engine.workload_rho("t")
        cur = con.cursor()
        for sql in queries:
            cur.execute(sql)
            got, want = cur.fetchall(), _exact(tmp, sql)
            assert cur.result.model.startswith("ordered") == (sql in ordered), (sql, cur.result.model)
            stderr = cur.result.stderr[0][0]      # a quantile's is in the column's units
            assert sql not in THIN or stderr <= baseline[sql] * (1 + 1e-6), (sql, stderr, baseline[sql])
            slack = Z95 * stderr if "quantile_cont" in sql else 0.0
            assert len(got) == len(want), sql
            for g, w in zip(sorted(got), sorted(want)):
                assert g[:-1] == w[:-1] and g[-1] == pytest.approx(float(w[-1]), abs=0.5 + slack), sql
    finally:
        _close(con)


@pytest.mark.slow
def test_thin_counts_are_answered_within_their_baselines_and_equal_duckdb(small):
    """What users see: the moved counts are answered from the rest's model (its standard
    error the lower one, at most the plan's baseline), the quantiles from the ordered
    release, and at ε = 10⁷ every answer equals DuckDB's."""
    _answered_as_planned(small, FINE_MIXED, FINE_MIXED[:2])


FINE_ALONE = ["SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY income) FROM t",
              "SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY income) FROM t",
              "SELECT percentile_disc(0.99) WITHIN GROUP (ORDER BY income) FROM t", *THIN]


def test_thin_counts_of_a_column_alone_stay_within_their_baselines(small):
    """Issue 35 item 6, a workload of the fine column alone (bench/fine.py's SQL workload):
    one ordered strategy left its thin counts above their per-query baselines (1.69× and
    2.23× at n = 10⁴; here above 1 too), as there was no rest to move them to.  They are now
    a rest of their own, and every statement's plan stderr is within its baseline."""
    ordered, rest = _split_within_baselines(small, FINE_ALONE)
    assert ordered == set(FINE_ALONE[:3]) and rest == set(THIN)


@pytest.mark.slow
def test_thin_counts_of_a_column_alone_are_answered_within_their_baselines(small):
    """What users see of that plan: the thin counts come from the rest's model within their
    baselines, the quantiles from the ordered release, every answer DuckDB's at ε = 10⁷,
    and the measurement spends exactly the table's budget."""
    _answered_as_planned(small, FINE_ALONE, FINE_ALONE[:3])
