"""The wire server in front of the real DP engine (adult example, temp ledger).

Privacy rules checked through real clients: the authenticated user is the budget
principal; Describe compiles but never runs or charges; repeats cost nothing and get the
same answer; row-level queries are refused with 42501 and a hint; budget exhaustion is
53400 with the engine's own message; a 50 x 20 load leaves the ledger equal to the sum of
the distinct queries' charges."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from dpsql.server import codec
from dpsql.server.server import serve

from server_fakes import PASSWORD
from server_fakes import ADULT_CONFIG
from server_pgclient import RawClient, error_fields
from test_clients import bounded
from test_load import load_bench

@pytest.fixture(scope="module")
def measure_server(users_file, tmp_path_factory):
    """Policy "measure": every unsupported query is measured for its user at 0.3 epsilon;
    bob may spend at most 0.5 epsilon."""
    ledger = tmp_path_factory.mktemp("ledger") / "measure.ledger"
    overrides = {"ledger": str(ledger), "policy": {"unsupported": "measure", "epsilon": 0.3, "allow_spend": True},
                 "budget": {"epsilon": 1e6, "delta": 1e-6, "users": {"bob": {"epsilon": 0.5}}}}
    thread = serve(ADULT_CONFIG, overrides=overrides, users_file=users_file, shadow=False)
    yield thread, overrides
    thread.stop()


def _psycopg(port, user="alice"):
    psycopg = pytest.importorskip("psycopg")
    return bounded(lambda: psycopg.connect(host="127.0.0.1", port=port, user=user, password=PASSWORD, dbname="dpsql",
                                           connect_timeout=10, autocommit=True, sslmode="disable"))


def test_psql_against_engine(engine_server):
    if shutil.which("psql") is None:
        pytest.skip("psql not installed (apt-get install postgresql-client)")
    thread, _ = engine_server
    env = dict(os.environ, PGPASSWORD=PASSWORD, PGCONNECT_TIMEOUT="10", PGSSLMODE="disable")
    base = ["psql", "-X", "-h", "127.0.0.1", "-p", str(thread.port), "-U", "alice", "-d", "dpsql"]
    r = subprocess.run(base + ["-At", "-c", "SELECT sex, COUNT(*) FROM adult GROUP BY sex"], capture_output=True,
                       text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
    rows = [line.split("|") for line in r.stdout.split()]
    assert sorted(row[0] for row in rows) == ["Female", "Male"] and all(float(row[1]) > 0 for row in rows)
    r = subprocess.run(base + ["-c", "SELECT * FROM adult"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode != 0 and "HINT:" in r.stderr
    r = subprocess.run(base + ["-c", r"\d adult"], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and "hours_per_week" in r.stdout


def test_psycopg_against_engine(engine_server):
    import psycopg
    thread, _ = engine_server
    conn = _psycopg(thread.port)
    try:
        sql = "SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN %s AND %s GROUP BY sex"
        first = bounded(lambda: conn.execute(sql, (30, 40)).fetchall())
        assert len(first) == 2 and all(isinstance(n, float) and n > 0 for _, n, *_ in first)   # + count_ci95, inferred
        assert bounded(lambda: conn.execute(sql, (30, 40), prepare=True).fetchall()) == first
        cur = conn.cursor(binary=True)
        assert bounded(lambda: cur.execute(sql, (30, 40)).fetchall()) == first
        with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
            bounded(lambda: conn.execute("SELECT * FROM adult"))
        assert info.value.diag.message_hint
        with pytest.raises(psycopg.errors.UndefinedColumn):
            bounded(lambda: conn.execute("SELECT salary, COUNT(*) FROM adult GROUP BY salary"))
        probe = bounded(lambda: conn.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex LIMIT 0"))
        # a schema probe has the answer's columns: the error columns too (they are on by default)
        assert [d.name for d in probe.description] == ["sex", "count", "count_ci95", "inferred"]
        assert probe.fetchall() == []
    finally:
        bounded(conn.close)


def test_describe_runs_and_charges_nothing(measure_server, tmp_path):
    import dpsql
    thread, overrides = measure_server
    engine = dpsql.connect(ADULT_CONFIG, **overrides).session.engine   # the server's engine (same ledger)
    before = engine.ledger.spent(None)
    c = RawClient(thread.port)
    try:
        c.startup("alice", PASSWORD)
        c.send(codec.encode_parse("s", "SELECT education, COUNT(*) FROM adult GROUP BY education")
               + codec.encode_describe("S", "s") + codec.encode_bind("p", "s", [], [], [])
               + codec.encode_describe("P", "p") + codec.SYNC)
        msgs = c.until()
        assert [k for k, _ in msgs] == [b"1", b"t", b"T", b"2", b"T", b"Z"], error_fields(msgs)
    finally:
        c.close()
    assert engine.ledger.spent(None) == before


def test_budget_principal_repeats_and_exhaustion(measure_server):
    import psycopg
    thread, overrides = measure_server
    import dpsql
    ledger = dpsql.connect(ADULT_CONFIG, **overrides).session.engine.ledger
    conn = _psycopg(thread.port, user="bob")
    try:
        sql = "SELECT race, COUNT(*) FROM adult GROUP BY race"
        first = bounded(lambda: conn.execute(sql).fetchall(), timeout=120)
        spent_once = ledger.spent("bob")
        assert spent_once > 0 and ledger.spent("alice") == 0   # the authenticated user pays
        assert bounded(lambda: conn.execute(sql).fetchall(), timeout=120) == first
        assert ledger.spent("bob") == spent_once                 # a repeat costs nothing
        with pytest.raises(psycopg.errors.ConfigurationLimitExceeded) as info:
            for attr in ("occupation", "workclass", "marital_status", "relationship"):
                bounded(lambda: conn.execute(f"SELECT {attr}, COUNT(*) FROM adult GROUP BY {attr}").fetchall(),
                        timeout=120)
        assert info.value.sqlstate == "53400" and "budget" in str(info.value).lower()
        assert ledger.spent("bob") <= ledger.remaining("bob") + ledger.spent("bob")
    finally:
        bounded(conn.close)


@pytest.mark.slow
def test_load_against_engine_leaves_ledger_consistent(engine_server):
    thread, admin = engine_server
    before = admin.session.budget()["total_spent_rho"]
    result = load_bench().run_load(thread.port, 50, 20, user="load", password=PASSWORD)
    assert result["alive"] == 0 and result["failures"] == [] and result["completed"] == 1000
    # the mix is answered from the released workload measurements: distinct queries charge 0
    assert admin.session.budget()["total_spent_rho"] == before


@pytest.mark.slow
def test_pgjdbc_against_engine(engine_server, tmp_path):
    from test_clients import check_jdbc_output, run_jdbc_probe
    thread, _ = engine_server
    check_jdbc_output(run_jdbc_probe(thread.port, tmp_path))


def test_sqlalchemy_pandas_against_engine(engine_server):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    pandas = pytest.importorskip("pandas")
    thread, _ = engine_server
    engine = sqlalchemy.create_engine(f"postgresql+psycopg://alice:{PASSWORD}@127.0.0.1:{thread.port}/dpsql",
                                      connect_args={"connect_timeout": 10, "sslmode": "disable"})
    try:
        insp = bounded(lambda: sqlalchemy.inspect(engine))
        assert bounded(insp.get_table_names) == ["adult"]
        assert "income" in [c["name"] for c in bounded(lambda: insp.get_columns("adult"))]
        frame = bounded(lambda: pandas.read_sql("SELECT income, COUNT(*) AS n FROM adult GROUP BY income", engine),
                        timeout=60)
        assert sorted(frame["income"]) == ["<=50K", ">50K"] and (frame["n"] > 0).all()
    finally:
        engine.dispose()


def test_text_parameters_and_error_columns(engine_server):
    thread, _ = engine_server
    conn = _psycopg(thread.port)
    try:
        bounded(lambda: conn.execute("SET dpsql.error_columns = 'off'"))   # on by default (issue 33)
        rows = bounded(lambda: conn.execute("SELECT sex, COUNT(*) FROM adult WHERE sex = %s GROUP BY sex",
                                            ("Male",)).fetchall())
        # every group of the public domain is reported (which groups are empty is private); the
        # filtered-out group's noisy count is near zero, the other one is not
        counts = dict(rows)
        assert counts["Male"] > 1000 > abs(counts.get("Female", 0))
        bounded(lambda: conn.execute("SET dpsql.error_columns = 'ci95'"))
        for binary in (False, True):
            cur = conn.cursor(binary=binary)
            # a dashboard query (supported by a measured block, so its interval is finite)
            rows = bounded(lambda: cur.execute(
                "SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN %s AND %s GROUP BY sex",
                (30, 40)).fetchall())
            assert [d.name for d in cur.description] == ["sex", "count", "count_ci95", "inferred"]
            assert [d.type_code for d in cur.description][-1] == 16   # bool
            assert all(isinstance(r[2], float) and r[2] > 0 and r[3] is False for r in rows)
        shown = bounded(lambda: conn.execute("SHOW dpsql.error_columns").fetchone())
        assert shown == ("ci95",)
    finally:
        bounded(conn.close)
