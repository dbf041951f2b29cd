"""An ad hoc COUNT(DISTINCT person) with a condition on a child table's rows (issue 32): no
workload statement declared its per-person flag, so the engine adds a table of it (the
person's own columns and the 0/1 flag, one row per person) and a session under policy
'measure' measures it on demand — previewed, consented to, charged before any noise — and
answers it equal to DuckDB's exact COUNT(DISTINCT) at a near-infinite budget.  Refused shapes
keep their SQLSTATE and hint, and nothing refused spends."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

import dpsql  # noqa: E402

JOIN_CO = "customers c JOIN orders o ON o.custkey = c.custkey"
JOIN_COL = JOIN_CO + " JOIN lineitem l ON l.orderkey = o.orderkey"
# nothing in the workload conditions persons on orders or line items
WORKLOAD = [f"SELECT o.status, COUNT(*) FROM {JOIN_CO} GROUP BY o.status",
            "SELECT nation, COUNT(*) FROM customers GROUP BY nation"]
AD_HOC = [
    f"SELECT c.nation, COUNT(DISTINCT c.custkey) AS n FROM {JOIN_CO} WHERE o.priority = 2 AND c.nation <= 3 "
    "GROUP BY c.nation",
    f"SELECT COUNT(DISTINCT o.custkey) AS n FROM {JOIN_COL} WHERE l.flag IN ('A', 'R') AND o.status <> 'P'",
    "SELECT nation, COUNT(DISTINCT customers.custkey) AS n FROM customers JOIN orders "
    "ON orders.custkey = customers.custkey WHERE status LIKE 'F%' AND customers.nation < 4 GROUP BY nation",
]


@pytest.fixture(scope="module")
def shop_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shop")
    return shop.write_parquet(shop.shop_rows(customers=60), tmp)


def _exact(files, sql):
    con = duckdb.connect()
    for t, p in files.items():
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{p}')")
    return con.execute(sql).fetchall()


def _connect(files, tmp_path, epsilon=1e7, **extra):
    spec = shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                       bounds={"orders": 20, "lineitem": 200}, workload={"queries": WORKLOAD},
                       policy={"unsupported": "measure", "epsilon": epsilon}, **extra)
    return dpsql.connect(spec, budget={"epsilon": 1e8, "delta": 1e-6, "per_user": {"epsilon": 1e8}})


def _spent(con) -> list:
    return [(e.kind, e.rho) for e in con.session.engine.ledger.entries()]


def test_an_ad_hoc_condition_is_measured_on_demand_and_equals_duckdb(shop_files, tmp_path):
    con = _connect(shop_files, tmp_path)
    cur = con.cursor()
    cur.execute("SET dpsql.allow_spend = 'on'")
    cur.execute("SET dpsql.estimator = 'least_squares'")
    for sql in AD_HOC:
        before = len(_spent(con))
        cur.execute(sql)
        assert len(_spent(con)) > before, sql        # charged: a new measurement
        groups = len(cur.description) - 1
        got = {tuple(r[:groups]): (r[groups], e[groups]) for r, e in zip(cur.fetchall(), cur.stderr)}
        for row in _exact(shop_files, sql):
            value, se = got.pop(tuple(row[:groups]))
            assert abs(value - row[groups]) <= 6 * se + 1e-6, (sql, row, value, se)
        assert all(abs(v) <= 6 * se + 1e-6 for v, se in got.values()), (sql, got)   # groups with no person
        # asked again: answered from that release, nothing more spent
        spent = _spent(con)
        cur.execute(sql)
        assert _spent(con) == spent
    con.close()


def test_the_measured_flag_answers_a_later_session_without_spending(shop_files, tmp_path):
    """A new process (a new connection) finds the release in the ledger under the flag's
    table identity: the same condition written with other aliases is answered, free, even
    under policy 'informed'."""
    con = _connect(shop_files, tmp_path)
    cur = con.cursor()
    cur.execute("SET dpsql.allow_spend = 'on'")
    cur.execute(AD_HOC[0])
    con.close()
    con = _connect(shop_files, tmp_path)
    spent = _spent(con)
    # `dpsql budget` in a process that has not seen the statement: the release is in use
    flags = [r for r in con.session.engine.releases() if "__has_" in r.table]
    assert len(flags) == 1 and flags[0].current, flags
    cur = con.cursor()
    cur.execute("SET dpsql.policy = 'informed'")
    cur.execute("SELECT x.nation, COUNT(DISTINCT x.custkey) AS n FROM customers x JOIN orders y "
                "ON y.custkey = x.custkey WHERE y.priority = 2 AND x.nation <= 3 GROUP BY x.nation")
    assert len(cur.fetchall()) == 4 and _spent(con) == spent
    con.close()


def test_without_consent_nothing_is_spent(shop_files, tmp_path):
    con = _connect(shop_files, tmp_path)
    spent = _spent(con)
    cur = con.cursor()
    with pytest.raises(dpsql.Error) as info:        # no approver, allow_spend off
        cur.execute(AD_HOC[1])
    assert info.value.sqlstate == "42501" and "nothing was spent" in str(info.value)
    assert _spent(con) == spent
    asked = []
    con.session.approve = lambda request: asked.append(request) or False    # declined
    with pytest.raises(dpsql.Error, match="declined"):
        cur.execute(AD_HOC[1])
    assert len(asked) == 1 and asked[0].rho > 0 and _spent(con) == spent
    con.close()


def test_under_another_policy_the_refusal_says_how_to_measure_it(shop_files, tmp_path):
    con = _connect(shop_files, tmp_path)
    spent = _spent(con)
    cur = con.cursor()
    cur.execute("SET dpsql.policy = 'informed'")
    with pytest.raises(dpsql.Error) as info:
        cur.execute(AD_HOC[0])
    assert info.value.sqlstate == "0A000" and '"priority" = 2' in str(info.value)
    assert "dpsql.policy = 'measure'" in info.value.hint and "[workload]" in info.value.hint
    assert _spent(con) == spent
    con.close()


@pytest.mark.parametrize("condition, words", [
    ("o.priority * 2 = 4", "constants"),
    ("abs(o.priority) = 2", "constants"),
    ("o.status LIKE o.status", "constants"),
    ("o.orderkey > 5", "declared (domain) columns"),
    ("o.status IN (SELECT status FROM orders)", "own columns"),
    # a column compared with another, or with a constant of another type: the engine would
    # convert every value of the column, and fail on some (on main: a failure with the data)
    ("o.priority = c.nation", "compare each column with constants"),
    ("o.status = c.segment", "compare each column with constants"),
    ("o.status = 5", "constant of its own type"),
    ("o.status IN ('F', 3)", "constant of its own type"),
    ("o.status IS TRUE", "constant of its own type"),
    ("o.priority LIKE '1%'", "constant of its own type"),
    ("o.priority BETWEEN 1 AND CAST('2020-01-01' AS DATE)", "constant of its own type"),
    # a constant DuckDB cannot convert: it converts it at each row the condition reaches, so
    # the measurement failed only when some order had status 'P' (on main: this one was
    # charged and answered, the same with 'P' failed with 58000)
    ("o.status = 'X' AND o.priority = 'abc'", "a constant its column's type holds"),
    ("o.status = 'X' AND o.priority = CAST(99999999999 AS INTEGER)", "a constant its column's type holds"),
    # a function in a constant's cast: DuckDB evaluates it at each row the condition reaches,
    # so this one (ln(0) = -inf does not cast) fails with probability 1 - 2^-n, n the orders
    # with status 'X' (on main: a constant's cast passed whatever it held)
    ("o.status = 'X' AND o.priority = CAST(ln(floor(random() * 2)) AS INTEGER)", "constants"),
    ("o.priority = -(CAST(random() AS INTEGER))", "constants"),
    # a LIKE pattern PostgreSQL reads as it matches: 'P\' fails only on a status starting
    # with P (checked on PostgreSQL 15), Spark refuses '\x'; on main these were measured
    ("o.status LIKE 'P\\'", "escape only"),
    ("o.status LIKE 'F\\x%'", "escape only"),
    # a decimal constant widens the column to DECIMAL(38, 29): fails on a priority ≥ 10⁹
    ("o.priority = 1.12345678901234567890123456789", "decimal places"),
])
def test_a_condition_of_a_refused_shape_spends_nothing(shop_files, tmp_path, condition, words):
    con = _connect(shop_files, tmp_path)
    spent = _spent(con)
    cur = con.cursor()
    cur.execute("SET dpsql.allow_spend = 'on'")
    with pytest.raises(dpsql.Error) as info:
        cur.execute(f"SELECT COUNT(DISTINCT c.custkey) FROM {JOIN_CO} WHERE {condition}")
    assert info.value.sqlstate == "0A000" and words in info.value.hint, (info.value, info.value.hint)
    assert _spent(con) == spent
    assert not [t for t in con.session.engine.tables if "__has_" in t]
    con.close()


def test_a_workload_flag_comparing_a_text_column_with_a_number_is_refused_before_counting(shop_files, tmp_path):
    """A workload statement's flag is evaluated in every measurement of the person's view
    (an analyst's on-demand one included): ``o.status = 5`` made DuckDB convert every status
    to a number and fail on 'P' (58000 on main: whether it failed depended on the values).
    Now the schema check refuses it from the source's types (F0000) before any row is read,
    and nothing is spent."""
    spec = shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in shop_files.items()},
                       workload={"queries": [f"SELECT COUNT(DISTINCT c.custkey) FROM {JOIN_CO} WHERE o.status = 5"]})
    con = dpsql.connect(spec)
    spent = _spent(con)
    with pytest.raises(dpsql.Error) as info:
        con.session.measure("customers")
    assert info.value.sqlstate == "F0000" and "with a number" in str(info.value)
    assert "constant of its own type" in info.value.hint
    assert _spent(con) == spent
    con.close()


def test_duckdb_converts_a_flag_constant_at_each_row_so_such_constants_are_refused():
    """The premise of the refusals above, on DuckDB itself: whether these conditions fail
    depends on the rows (a row reaching the comparison, a value of ten digits), and
    ``flag_type_problem`` refuses them from the column types alone; the same conditions
    with constants DuckDB converts (or a float) pass."""
    from dpsql.measure.backend import constant_error
    from dpsql.measure.flag_types import flag_type_problem
    from dpsql.sql.people import parse_condition

    def problem(cond, types):
        return flag_type_problem("orders", parse_condition(cond), types, "duckdb", constant_error)

    con = duckdb.connect()
    con.execute("CREATE TABLE o (status VARCHAR, priority INTEGER)")
    con.execute("INSERT INTO o VALUES ('P', 2)")
    types = {"status": "VARCHAR", "priority": "INTEGER"}
    for cond, fails_on in [("status = 'X' AND priority = 'abc'", "INSERT INTO o VALUES ('X', 1)"),
                           ("priority = 1.12345678901234567890123456789", "INSERT INTO o VALUES ('P', 2000000000)")]:
        con.execute("DELETE FROM o WHERE status <> 'P' OR priority > 2")
        assert con.execute(f"SELECT COUNT(*) FROM o WHERE {cond}").fetchall() == [(0,)]
        con.execute(fails_on)
        with pytest.raises(duckdb.ConversionException):
            con.execute(f"SELECT COUNT(*) FROM o WHERE {cond}").fetchall()
        assert problem(cond, types) is not None, cond
    for cond in ["status = 'X' AND priority = '5'", "priority = 1.5", "priority = 1.12345678901234567890123456789e0",
                 "priority BETWEEN 1 AND 3 AND status IN ('P', 'F')"]:
        assert problem(cond, types) is None, cond
    # the column's integer digits and the constant's decimal places: 38 digits in all
    assert problem("priority < 0.5", {"priority": "DECIMAL(38,0)"}) is not None
    assert problem("priority < 0.5", {"priority": "DECIMAL(37,0)"}) is None
    assert problem("priority < 0.5", {"priority": "HUGEINT"}) is not None


def test_a_date_column_compared_with_a_constant_of_another_time_type_is_refused():
    """DuckDB converts a DATE column to a TIMESTAMPTZ constant's type row by row, and a date
    of year 5,000,000 has no timestamp: the count fails only when such a row exists (on
    main flag_type_problem let it pass).  A string or a DATE constant is converted instead,
    and a DATE beyond the year 9999 is refused (PostgreSQL converts it at each row)."""
    from dpsql.measure.backend import constant_error
    from dpsql.measure.flag_types import flag_type_problem
    from dpsql.sql.people import parse_condition

    cond = "d < CAST('2020-01-01' AS TIMESTAMPTZ)"
    con = duckdb.connect()
    con.execute("CREATE TABLE o (d DATE, ts TIMESTAMP)")
    con.execute("INSERT INTO o VALUES ('2020-01-01', '2020-01-01')")
    assert con.execute(f"SELECT COUNT(*) FROM o WHERE {cond}").fetchall() == [(0,)]
    con.execute("INSERT INTO o VALUES ('5000000-01-01', '2020-01-01')")
    with pytest.raises(duckdb.ConversionException):
        con.execute(f"SELECT COUNT(*) FROM o WHERE {cond}").fetchall()
    types = {"d": "DATE", "ts": "TIMESTAMP"}
    for dialect in ("duckdb", "postgres"):
        evaluate = constant_error if dialect == "duckdb" else None
        for bad in (cond, "ts < CAST('2020-01-01' AS TIMESTAMPTZ)", "ts < DATE '300000-01-01'"):
            assert flag_type_problem("orders", parse_condition(bad), types, dialect, evaluate) is not None, bad
        for good in ("d < '2020-01-01'", "d < DATE '2020-01-01'", "ts < DATE '2020-01-01'",
                     "ts BETWEEN TIMESTAMP '2020-01-01 10:00' AND '2020-02-01'"):
            assert flag_type_problem("orders", parse_condition(good), types, dialect, evaluate) is None, good
