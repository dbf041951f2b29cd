"""Issue 17, items 1 and 4: honest inferred answers, and settings and budgets that do what
they say.  Each test reproduces a reported failure on the adult example."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import dpsql
from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
from dpsql.engine.session import Session
from dpsql.measure.exact import ExactOracle
from dpsql.privacy import noise

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adult"
CONFIG = EXAMPLE / "dpsql.toml"
MARGINALS = ["SELECT sex, COUNT(*) FROM adult GROUP BY sex",
             "SELECT race, COUNT(*) FROM adult GROUP BY race",
             "SELECT age, COUNT(*) FROM adult GROUP BY age",
             "SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income"]
US = "SELECT COUNT(*) FROM adult WHERE native_country = 'United-States'"
AVG_AGE_BY_RACE = "SELECT race, AVG(age) FROM adult GROUP BY race"


def connect(tmp: Path, **kw):
    kw.setdefault("budget", {"epsilon": 1.0, "delta": 1e-6})
    return dpsql.connect(CONFIG, user="ana", ledger=str(tmp / "t.ledger"),
                         cache_dir=str(tmp / "cache"), **kw)


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trust")
    con = connect(tmp, workload=MARGINALS)
    # Seeded noise bits: the calibration test below counts how many of ~10 supported 95%
    # intervals cover the truth, and on fresh OS noise a correct interval set misses the 90%
    # bar in ~9% of releases (P[X <= 8 | n = 10, p = 0.95]): it failed 2 of 7 full runs.
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(noise, "_SYSTEM", noise.SeededBitSource(17))
        con.session.measure()
    cfg = load_config(CONFIG)
    oracle = ExactOracle(cfg.tables, cfg.sources)
    yield con, oracle
    oracle.close()
    con.close()


def _truth(oracle, sql):
    return {tuple(r[:-1]): r[-1] for r in oracle.query(sql)}


# -- item 1: inferred values that carry no information ----------------------------------------

def test_an_unmeasured_attribute_is_refused_with_what_to_measure(measured):
    con, _ = measured
    with pytest.raises(dpsql.UnsupportedQueryError) as info:
        con.cursor().execute(US)
    assert "native_country was never measured" in info.value.message
    assert "GROUP BY native_country" in info.value.hint
    with pytest.raises(dpsql.UnsupportedQueryError) as info:
        con.cursor().execute("SELECT relationship, COUNT(*) FROM adult GROUP BY relationship")
    assert "relationship was never measured" in info.value.message


def test_attributes_never_measured_together_are_refused(measured):
    con, _ = measured
    with pytest.raises(dpsql.UnsupportedQueryError) as info:
        con.cursor().execute(AVG_AGE_BY_RACE)
    assert "age and race were never measured together" in info.value.message


def test_inferred_values_carry_their_range_to_the_cursor(measured):
    con, oracle = measured
    cur = con.cursor()
    cur.execute("SET dpsql.policy = 'infer'")
    cur.execute(US)
    (value,), = cur.fetchall()
    assert cur.inferred == [True] and math.isnan(cur.stderr[0][0])
    lo, hi = cur.bounds[0][0]
    truth = _truth(oracle, US)[()]
    n = 48842
    # nothing touches native_country: the range is [0, N], N from the measured total
    assert lo == 0 and abs(hi - n) < 200 and lo <= value <= hi and lo <= truth <= hi
    cur.execute(AVG_AGE_BY_RACE)
    for (_, avg), bound in zip(cur.fetchall(), cur.bounds):
        lo, hi = bound[1]
        assert 17 - 1e-6 <= lo <= avg <= hi <= 90 + 1e-6   # the declared range of age
    cur.execute("RESET dpsql.policy")


def test_read_sql_returns_values_errors_ranges_and_flags(measured):
    pytest.importorskip("pandas")
    con, _ = measured
    con.cursor().execute("SET dpsql.policy = 'infer'")
    frame = dpsql.read_sql("SELECT sex, race, COUNT(*) AS n FROM adult GROUP BY sex, race", con)
    assert list(frame.columns) == ["sex", "race", "n", "n_stderr", "n_lower", "n_upper", "inferred"]
    assert frame["inferred"].all() and frame["n_stderr"].isna().all()
    assert (frame["n_lower"] <= frame["n"]).all() and (frame["n"] <= frame["n_upper"]).all()
    frame = dpsql.read_sql("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", con, errors="ci95")
    assert not frame["inferred"].any() and (frame["n_ci95"] > 0).all() and frame["n_lower"].isna().all()
    con.cursor().execute("RESET dpsql.policy")


def test_read_sql_after_set_error_columns(measured):
    """Issue 29 item 7: the README's DB-API example ends with SET dpsql.error_columns; read_sql
    then raised IndexError (the appended columns had no standard-error entry)."""
    pytest.importorskip("pandas")
    con, _ = measured
    cur = con.cursor()
    cur.execute("SET dpsql.error_columns = 'ci95'")
    try:
        frame = dpsql.read_sql("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", con)
        assert list(frame.columns) == ["sex", "n", "n_stderr", "n_lower", "n_upper", "inferred"]
        assert (frame["n_stderr"] > 0).all()
        # the cursor's errors stay aligned with its (longer) rows
        cur.execute("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex")
        assert [d[0] for d in cur.description] == ["sex", "n", "n_ci95"]
        assert all(len(e) == len(r) == 3 for e, r in zip(cur.stderr, cur.fetchall()))
        assert all(e[2] is None for e in cur.stderr)
    finally:
        cur.execute("RESET dpsql.error_columns")


def test_ranges_always_contain_the_truth_and_intervals_cover(measured):
    """Calibration on held-out queries (none is in the workload): every inferred range holds
    the true value, and the 95% intervals of supported values cover at least 90%."""
    con, oracle = measured
    cur = con.cursor()
    cur.execute("SET dpsql.policy = 'infer'")
    held_out = ["SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race",
                "SELECT race, income, COUNT(*) FROM adult GROUP BY race, income",
                "SELECT age, sex, COUNT(*) FROM adult WHERE age BETWEEN 20 AND 40 GROUP BY age, sex",
                "SELECT income, COUNT(*) FROM adult WHERE race = 'White' GROUP BY income",
                "SELECT COUNT(*) FROM adult WHERE age > 50 AND sex = 'Female'",
                "SELECT income, COUNT(*) FROM adult GROUP BY income",
                "SELECT COUNT(*) FROM adult WHERE age BETWEEN 30 AND 45",
                "SELECT sex, COUNT(*) FROM adult WHERE income = '>50K' GROUP BY sex",
                "SELECT race, COUNT(*) FROM adult GROUP BY race"]
    inferred = covered = supported = 0
    missed = []
    for sql in held_out:
        cur.execute(sql)
        truth = _truth(oracle, sql)
        for row, err, bound, flag in zip(cur.fetchall(), cur.stderr, cur.bounds, cur.inferred):
            t = truth.get(tuple(row[:-1]), 0)
            if flag:
                inferred += 1
                lo, hi = bound[-1]
                assert lo <= t <= hi, (sql, row, bound, t)
            else:
                supported += 1
                ok = abs(row[-1] - t) <= 1.959964 * err[-1]
                covered += ok
                if not ok:
                    missed.append((sql, tuple(row), err[-1], t))
    cur.execute("RESET dpsql.policy")
    assert inferred >= 30 and supported >= 10
    assert covered / supported >= 0.9, (con.session.engine.tables["adult"].strategy, missed)


# -- item 4: settings and budgets --------------------------------------------------------------

def test_unknown_settings_are_rejected_with_the_valid_names(measured):
    con, _ = measured
    with pytest.raises(dpsql.ProgrammingError) as info:
        con.cursor().execute("SET dpsql.nonsense = 1")
    assert "dpsql.policy" in info.value.hint and "dpsql.error_columns" in info.value.hint
    with pytest.raises(dpsql.ProgrammingError):
        con.cursor().execute("SET dpsql.policy = 'sometimes'")


def test_set_policy_refuse_is_obeyed_and_spends_nothing(tmp_path):
    con = connect(tmp_path, workload={"queries": MARGINALS[:1], "epsilon": 1.0},
                  budget={"epsilon": 2.0, "delta": 1e-6, "per_user": {"epsilon": 2.0}},
                  policy={"unsupported": "measure", "epsilon": 0.5, "allow_spend": True})
    con.session.measure()
    spent = con.session.budget()["total_spent_rho"]
    cur = con.cursor()
    cur.execute("SET dpsql.policy = 'refuse'")
    assert cur.execute("SHOW dpsql.policy").fetchall() == [("refuse",)]
    with pytest.raises(dpsql.UnsupportedQueryError):
        cur.execute("SELECT race, COUNT(*) FROM adult GROUP BY race")
    assert con.session.budget()["total_spent_rho"] == spent


def test_a_policy_that_would_spend_beyond_the_cap_cannot_be_set(tmp_path):
    con = connect(tmp_path, workload=MARGINALS[:1],
                  budget={"epsilon": 5.0, "delta": 1e-6, "per_user": {"epsilon": 0.1}},
                  policy={"unsupported": "informed", "epsilon": 1.0})
    with pytest.raises(dpsql.PrivacyViolationError) as info:
        con.cursor().execute("SET dpsql.policy = 'measure'")
    assert "more than" in info.value.message


def test_a_per_user_cap_does_not_block_the_workload_measurement(tmp_path):
    con = connect(tmp_path, workload={"queries": MARGINALS[:2], "epsilon": 1.0},
                  budget={"epsilon": 2.0, "delta": 1e-6, "per_user": {"epsilon": 0.05}})
    report = con.session.measure()
    assert report.rho > 0
    b = con.session.budget()
    assert b["spent_rho"] == 0 and b["workload_spent_rho"] == pytest.approx(report.rho)


def test_a_long_lived_session_sees_releases_made_elsewhere(tmp_path):
    cfg = load_config(CONFIG, ledger=str(tmp_path / "shared.ledger"), cache_dir=str(tmp_path / "c"),
                      budget={"epsilon": 1.0, "delta": 1e-6}, workload=MARGINALS[:1])
    early = Session(Engine(cfg), "ana")          # a shell opened before anything was measured
    with pytest.raises(dpsql.OperationalError):
        early.execute(MARGINALS[0])
    other = Engine(cfg)                          # another process measures
    Session(other, "op").measure()
    result = early.execute(MARGINALS[0])         # the open session now answers, for free
    assert len(result.rows) == 2 and result.cost == 0 and not any(result.inferred)


def test_a_workload_can_be_extended_after_spending(tmp_path):
    """The workload measurement spends its budget and leaves the rest as a reserve; a query
    added later is measured alone, re-using every earlier release."""
    con = connect(tmp_path, workload={"queries": MARGINALS[:1], "epsilon": 0.5},
                  budget={"epsilon": 1.0, "delta": 1e-6})
    con.session.measure()
    engine, table = con.session.engine, "adult"
    added = MARGINALS[:1] + ["SELECT race, COUNT(*) FROM adult GROUP BY race"]
    assert len(engine.unsupported_workload(table, added)) == 1
    rho = float(engine.ledger.remaining(None)) * 0.5
    report = engine.measure_increment(table, rho, added, requested_by="op")
    assert 0 < report.rho <= rho and engine.unsupported_workload(table, added) == []
    assert engine.measure_increment(table, rho, added) is None     # nothing left to measure
    assert not any(con.cursor().execute(added[1]).inferred)
