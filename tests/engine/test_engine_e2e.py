"""End-to-end: plan → measure in DuckDB → fit → answer, through the DB-API driver.

At a near-infinite budget the noise is (almost surely) zero, so every answer must equal
DuckDB's exact answer on the binned data within 0.5.  Issue 17: the engine's fit used to stop
after its 1,000 iterations, 3.5 counts off 16,192 on this dashboard; it now runs to
convergence (estimated optimality gap in units of the noise, ``FitLimits.gap_atol/gap_rtol``) from a
least-squares start, with the engine's default settings.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import dpsql
from dpsql.engine.config import load_config
from dpsql.measure.exact import ExactOracle
from dpsql.sql.split import split_statements

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adult"
CONFIG = EXAMPLE / "dpsql.toml"
HUGE = {"epsilon": 1e7, "delta": 1e-6}
DASHBOARD = split_statements((EXAMPLE / "dashboard.sql").read_text())


def connect(tmp: Path, budget=HUGE, user="tester", **kw):
    return dpsql.connect(CONFIG, user=user, ledger=str(tmp / "t.ledger"), cache_dir=str(tmp / "cache"),
                         budget=budget, **kw)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    con = connect(tmp)
    con.session.measure()
    cfg = load_config(CONFIG)
    oracle = ExactOracle(cfg.tables, cfg.sources)
    yield tmp, con, oracle
    oracle.close()
    con.close()


def _close(private_rows, exact_rows, tol, rel=1e-4):
    exact = {tuple(r[:-1]): r[-1] for r in exact_rows}
    keys = [tuple(r[:-1]) for r in private_rows]
    assert set(exact) <= set(keys)  # every non-empty true group is returned (and empty ones too)
    for row in private_rows:
        truth = exact.get(tuple(row[:-1]), 0)
        assert abs(row[-1] - truth) <= tol + rel * abs(truth), (row, truth)


@pytest.mark.parametrize("sql", DASHBOARD)
def test_dashboard_answers_equal_exact_at_huge_budget(measured, sql):
    _, con, oracle = measured
    cur = con.cursor()
    cur.execute(sql)
    _close(cur.fetchall(), oracle.query(sql), tol=0.5, rel=0.0)


def test_stderr_aligned_with_rows_and_small_at_huge_budget(measured):
    _, con, _ = measured
    cur = con.cursor().execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex")
    rows, errs = cur.fetchall(), cur.stderr
    assert len(errs) == len(rows) == 2
    for _, (sex_err, count_err) in zip(rows, errs):
        assert sex_err is None
        assert 0 <= count_err < 1e-2
    assert cur.inferred == [False, False]
    assert cur.result.model == "exact junction tree"


def test_repeated_query_returns_identical_rows(measured):
    _, con, _ = measured
    sql = "SELECT race, COUNT(*) FROM adult GROUP BY race"
    a = con.cursor().execute(sql).fetchall()
    b = con.cursor().execute(sql).fetchall()
    assert a == b


def test_rejected_queries_spend_nothing(measured):
    tmp, con, _ = measured
    before = con.session.budget()["total_spent_rho"]
    for bad in ["SELECT * FROM adult", "SELECT age FROM adult", "SELECT COUNT(*) FROM nope",
                "SELECT COUNT(*) FROM adult WHERE sex = 'Robot'", "DELETE FROM adult"]:
        with pytest.raises(dpsql.Error) as info:
            con.cursor().execute(bad)
        assert info.value.sqlstate and info.value.hint
    assert con.session.budget()["total_spent_rho"] == before


def test_dbapi_surface(measured):
    _, con, _ = measured
    assert (dpsql.apilevel, dpsql.threadsafety, dpsql.paramstyle) == ("2.0", 1, "qmark")
    cur = con.cursor()
    cur.execute("SELECT sex, COUNT(*) AS n FROM adult WHERE age BETWEEN ? AND ? GROUP BY sex", (30, 40))
    names = [d[0] for d in cur.description]
    assert names == ["sex", "n"]
    assert cur.description[0][1] == dpsql.STRING and cur.description[1][1] == dpsql.NUMBER
    assert cur.rowcount == 2
    assert cur.fetchone() is not None and len(cur.fetchmany(5)) == 1 and cur.fetchall() == []
    with pytest.raises(dpsql.NotSupportedError):
        con.rollback()
    assert con.Error is dpsql.Error


def test_error_columns_setting(measured):
    _, con, _ = measured
    cur = con.cursor()
    cur.execute("SET dpsql.error_columns = 'ci95'")
    cur.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex")
    assert [d[0] for d in cur.description][-1].endswith("_ci95")
    assert all(len(r) == 3 for r in cur.fetchall())
    cur.execute("SET dpsql.error_columns = 'off'")
    cur.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex")
    assert all(len(r) == 2 for r in cur.fetchall())


def test_pandas_read_sql(measured):
    pd = pytest.importorskip("pandas")
    _, con, oracle = measured
    frame = pd.read_sql("SELECT income, COUNT(*) AS n FROM adult GROUP BY income", con)
    assert list(frame.columns) == ["income", "n"]
    exact = dict(oracle.query("SELECT income, COUNT(*) FROM adult GROUP BY income"))
    for income, n in zip(frame["income"], frame["n"]):
        assert abs(n - exact[income]) < 0.5


def test_restart_reuses_persisted_measurements(tmp_path):
    con = connect(tmp_path, workload=["SELECT sex, COUNT(*) FROM adult GROUP BY sex"])
    con.session.measure()
    spent = con.session.budget()["total_spent_rho"]
    rows = con.cursor().execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex").fetchall()
    con.close()
    dpsql.dbapi._engines.clear()  # a new process: nothing in memory
    con2 = connect(tmp_path, workload=["SELECT sex, COUNT(*) FROM adult GROUP BY sex"])
    assert con2.session.budget()["total_spent_rho"] == spent
    assert con2.cursor().execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex").fetchall() == rows
    report = con2.session.measure()  # the same strategy again: re-used, not paid twice
    assert report.reused and con2.session.budget()["total_spent_rho"] == spent


class CountingBackend:
    """Wraps the real backend and records whether private data was read."""

    def __init__(self, inner):
        self.inner, self.calls, self.dialect = inner, 0, inner.dialect

    def count_marginals(self, schema, cliques):
        self.calls += 1
        return self.inner.count_marginals(schema, cliques)

    def fingerprint(self, table):
        return self.inner.fingerprint(table)

    def close(self):
        self.inner.close()


def test_budget_exhaustion_is_refused_before_data_access(tmp_path):
    from dpsql.engine.engine import Engine
    from dpsql.engine.session import Session

    cfg = load_config(CONFIG, ledger=str(tmp_path / "x.ledger"), cache_dir=str(tmp_path / "c"),
                      budget={"rho": 0.001}, workload={"queries": ["SELECT sex, COUNT(*) FROM adult GROUP BY sex"],
                                                       "rho": 0.01})
    from dpsql.measure.backend import DuckDBBackend
    backend = CountingBackend(DuckDBBackend(cfg.sources))
    engine = Engine(cfg, backend=backend)
    session = Session(engine, "bob")
    with pytest.raises(dpsql.BudgetExhaustedError) as info:
        session.measure()
    assert backend.calls == 0
    assert info.value.sqlstate == "53400" and info.value.hint
    assert session.budget()["total_spent_rho"] == 0
    engine.close()


@pytest.mark.slow
def test_noise_at_moderate_budget_matches_reported_stderr(tmp_path):
    """At ε = 1 the observed errors of supported counts are consistent with the reported
    standard errors (a coverage check: ≥ 80% of 95% intervals contain the truth)."""
    con = connect(tmp_path, budget={"epsilon": 1.0, "delta": 1e-6})
    con.session.measure()
    cfg = load_config(CONFIG)
    oracle = ExactOracle(cfg.tables, cfg.sources)
    hits = total = 0
    for sql in DASHBOARD:
        cur = con.cursor().execute(sql)
        exact = {tuple(r[:-1]): r[-1] for r in oracle.query(sql)}
        for row, err in zip(cur.fetchall(), cur.stderr):
            se = err[-1]
            if se is None or math.isnan(se):
                continue
            truth = exact.get(tuple(row[:-1]), 0)
            hits += abs(row[-1] - truth) <= 1.96 * se + 1e-9
            total += 1
    oracle.close()
    assert total > 100
    assert hits / total >= 0.8, (hits, total)


def test_prior_answers_are_refused_by_default(measured):
    """The dashboard never asks race and sex together: the model could only assume them
    independent, so the default policy refuses and says what to measure."""
    _, con, _ = measured
    with pytest.raises(dpsql.UnsupportedQueryError) as info:
        con.cursor().execute("SELECT race, sex, COUNT(*) FROM adult GROUP BY race, sex")
    assert "race and sex were never measured together" in info.value.message
    assert "GROUP BY race, sex" in info.value.hint and "dpsql.policy" in info.value.hint


def test_unsupported_values_are_flagged_inferred_with_ranges(measured):
    _, con, oracle = measured
    cur = con.cursor()
    cur.execute("SET dpsql.policy = 'infer'")
    sql = "SELECT race, sex, COUNT(*) FROM adult GROUP BY race, sex"
    cur.execute(sql)
    rows = cur.fetchall()
    assert len(rows) == 10
    assert all(cur.inferred)
    assert all(math.isnan(err[-1]) for err in cur.stderr)
    truth = {tuple(r[:-1]): r[-1] for r in oracle.query(sql)}
    for row, bound in zip(rows, cur.bounds):
        lo, hi = bound[-1]
        assert lo <= row[-1] <= hi and lo <= truth.get(tuple(row[:-1]), 0) <= hi
    supported = con.cursor().execute("SELECT race, COUNT(*) FROM adult GROUP BY race")
    assert not any(supported.inferred) and all(b[-1] is None for b in supported.bounds)


def test_measure_cost_is_zero_once_released(measured):
    _, con, _ = measured
    assert con.session.measure_cost() == 0.0


SEX = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"
RACE_SEX = "SELECT race, sex, COUNT(*) FROM adult GROUP BY race, sex"


def test_policy_refuse_spends_nothing(tmp_path):
    con = connect(tmp_path, workload=[SEX], policy="refuse")
    con.session.measure()
    spent = con.session.budget()["total_spent_rho"]
    with pytest.raises(dpsql.UnsupportedQueryError) as info:
        con.cursor().execute(RACE_SEX)
    assert info.value.sqlstate == "0A000" and info.value.hint
    assert con.session.budget()["total_spent_rho"] == spent


def test_policy_measure_charges_the_user_once_and_answers_supported(tmp_path):
    budget = {"rho": 1e7, "per_user": {"rho": 1e7}}
    con = connect(tmp_path, workload={"queries": [SEX], "rho": 1e5}, budget=budget,
                  policy={"unsupported": "measure", "rho": 1e5})
    con.session.measure()
    before = con.session.budget()["spent_rho"]
    with pytest.raises(dpsql.PrivacyViolationError) as info:   # spending needs an opt-in
        con.cursor().execute(RACE_SEX)
    assert "nothing was spent" in info.value.message and "allow_spend" in info.value.hint
    assert con.session.budget()["spent_rho"] == before
    con.cursor().execute("SET dpsql.allow_spend = 'on'")
    cur = con.cursor().execute(RACE_SEX)
    assert cur.cost > 0 and not any(cur.inferred)
    after = con.session.budget()["spent_rho"]
    assert after == pytest.approx(before + cur.cost)
    again = con.cursor().execute(RACE_SEX)  # the repeat is answered from the release
    assert again.cost == 0 and con.session.budget()["spent_rho"] == after
    assert again.fetchall() == cur.fetchall()


def test_plan_reports_a_lower_bound_below_its_own_error(tmp_path):
    """The dashboard mixes filtered counts with marginals, so the floor is the SVD bound of
    its marginal queries: below the planned strategy's error, which is below the baseline."""
    con = connect(tmp_path, budget={"epsilon": 1.0, "delta": 1e-6})
    report = con.session.plan()
    assert report.bound_rmse is not None and not report.bound_exact
    assert 0 < report.bound_rmse <= report.rmse < report.baseline_rmse


@pytest.mark.slow
def test_quantiles_carry_a_standard_error(tmp_path):
    """A median by group gets a finite standard error, not flagged inferred; at ε = 1 the
    median age stays within a few of its standard errors of the exact binned median."""
    sql = "SELECT sex, percentile_disc(0.5) WITHIN GROUP (ORDER BY age) FROM adult GROUP BY sex"
    con = connect(tmp_path, budget={"epsilon": 1.0, "delta": 1e-6},
                  workload=["SELECT sex, age, COUNT(*) FROM adult GROUP BY sex, age"])
    con.session.measure()
    cur = con.cursor().execute(sql)
    rows, errs = cur.fetchall(), cur.stderr
    cfg = load_config(CONFIG)
    oracle = ExactOracle(cfg.tables, cfg.sources)
    exact = {r[0]: r[1] for r in oracle.query(sql)}
    oracle.close()
    assert len(rows) == 2 and not any(cur.inferred)
    for (sex, med), (_, se) in zip(rows, errs):
        assert se is not None and 0 <= se < 5
        assert abs(med - exact[sex]) <= 4 * se + 1


@pytest.mark.parametrize("large", [False, True])
def test_exact_models_of_every_size_are_fitted_to_the_gap_tolerance(tmp_path, monkeypatch, large):
    from dataclasses import replace

    from dpsql.pgm.limits import FitLimits

    con = connect(tmp_path, budget={"epsilon": 1.0, "delta": 1e-6},
                  workload=["SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income"])
    if large:   # the engine's model store passes its config's FitLimits to the fit
        engine = con.session.engine
        engine.config = engine.models.config = replace(engine.config,
                                                       fit_base_limits=FitLimits(discrepancy_above=0))
    con.session.measure()
    model, _, _ = con.session.engine.model("adult")
    # models over discrepancy_above cells stopped at the discrepancy principle, which left their
    # answers outside their reported errors (issue 35 item 6, tests/engine/test_fit_stop_honesty.py);
    # now every model runs to convergence (issue 17) or is solved with a certificate (one block
    # over the measured attributes, dpsql.pgm.polish.solve_clique)
    assert "discrepancy principle" not in model.stopped
    assert "converged" in model.stopped or "certificate" in model.stopped
    assert len(model.model.loss) - 1 < con.session.engine.config.fit_iters
