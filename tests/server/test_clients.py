"""Real clients against the server with the schema-only shadow catalog and the
deterministic fake engine link: psql, psycopg 3, SQLAlchemy + pandas, pgjdbc.

Every client call is bounded: subprocesses get ``timeout=``, psycopg calls run through
``bounded`` (a worker thread joined with a timeout)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from server_fakes import FakeLink

from server_fakes import PASSWORD

HERE = Path(__file__).resolve().parent
JDBC_JARS = ["/usr/share/java/postgresql.jar"]


def bounded(fn, timeout=30):
    out = {}

    def work():
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test thread
            out["error"] = exc
    t = threading.Thread(target=work, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), f"client call did not finish within {timeout}s"
    if "error" in out:
        raise out["error"]
    return out["value"]


def psql(port, *args, user="alice", password=PASSWORD):
    if shutil.which("psql") is None:
        pytest.skip("psql not installed (apt-get install postgresql-client)")
    env = dict(os.environ, PGPASSWORD=password, PGCONNECT_TIMEOUT="10", PGSSLMODE="disable")
    return subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", str(port), "-U", user, "-d", "dpsql", *args],
                          capture_output=True, text=True, env=env, timeout=30)


# -- psql -----------------------------------------------------------------------------------

def test_psql_meta_commands(shadow_server):
    r = psql(shadow_server.port, "-c", r"\d")
    assert r.returncode == 0, r.stderr
    relations = {tuple(c.strip() for c in line.split("|")[:3]) for line in r.stdout.splitlines() if "|" in line}
    # the private table, and the view of the declared domains (issue 33 item 3)
    assert {("public", "adult", "table"), ("public", "dpsql_columns", "view")} <= relations
    r = psql(shadow_server.port, "-c", r"\d adult")
    assert r.returncode == 0, r.stderr
    assert 'Table "public.adult"' in r.stdout and "education_num" in r.stdout and "| bigint |" in r.stdout
    r = psql(shadow_server.port, "-c", r"\d+ adult")   # Description: the declared domain
    assert r.returncode == 0, r.stderr
    assert "declared domain (categorical, 2 cells): 'Female', 'Male'" in r.stdout
    r = psql(shadow_server.port, "-c", r"\l")
    assert r.returncode == 0, r.stderr
    assert " dpsql " in r.stdout


def test_psql_aggregate_and_refusal(shadow_server):
    r = psql(shadow_server.port, "-At", "-c", "SELECT sex, COUNT(*) FROM adult GROUP BY sex")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert [line.split("|")[0] for line in lines] == ["Female", "Male"]
    r = psql(shadow_server.port, "-c", "SELECT * FROM adult")
    assert r.returncode != 0
    assert "ERROR:  SELECT * would reveal individual rows" in r.stderr and "HINT:" in r.stderr


def test_psql_wrong_password_and_unknown_user(shadow_server):
    for user, pw in (("alice", "nope"), ("nobody", PASSWORD)):
        r = psql(shadow_server.port, "-c", "SELECT 1", user=user, password=pw)
        assert r.returncode != 0
        assert f'password authentication failed for user "{user}"' in r.stderr


# -- psycopg 3 ------------------------------------------------------------------------------

@pytest.fixture
def pg(shadow_server):
    psycopg = pytest.importorskip("psycopg", reason="psycopg not installed (pip install -e '.[dev]')")
    conn = bounded(lambda: psycopg.connect(host="127.0.0.1", port=shadow_server.port, user="alice",
                                           password=PASSWORD, dbname="dpsql", connect_timeout=10,
                                           sslmode="disable", autocommit=True))
    yield conn
    bounded(conn.close)


def test_psycopg_parameters_prepared_and_binary(pg):
    import psycopg
    sql = "SELECT sex, COUNT(*) FROM adult WHERE age > %s GROUP BY sex"
    first = bounded(lambda: pg.execute(sql, (30,)).fetchall())
    assert [r[0] for r in first] == ["Female", "Male"] and all(isinstance(r[1], int) for r in first)
    for _ in range(3):
        assert bounded(lambda: pg.execute(sql, (30,), prepare=True).fetchall()) == first
    assert bounded(lambda: pg.execute("SELECT sex, COUNT(*) FROM adult WHERE sex = %s GROUP BY sex",
                                      ("Male",)).fetchall())
    cur = pg.cursor(binary=True)
    rows = bounded(lambda: cur.execute("SELECT race, AVG(age) AS a, COUNT(*) AS n FROM adult GROUP BY race").fetchall())
    assert rows and all(isinstance(r[1], float) and isinstance(r[2], int) for r in rows)
    assert [d.type_code for d in cur.description] == [25, 701, 20]
    with pytest.raises(psycopg.errors.InsufficientPrivilege) as info:
        bounded(lambda: pg.execute("SELECT * FROM adult"))
    assert info.value.diag.message_hint
    assert bounded(lambda: pg.execute("SELECT current_user").fetchone()) == ("alice",)


@contextlib.contextmanager
def held_engine_query(pg, sql):
    """``sql`` running on ``pg`` in a thread and held inside the (fake) engine until the block
    ends; yields the thread and a dict that gets ``"canceled"`` if the query is canceled."""
    import psycopg
    FakeLink.log.clear()
    FakeLink.gate = threading.Event()
    result = {}

    def run():
        try:
            pg.execute(sql).fetchall()
        except psycopg.errors.QueryCanceled as exc:
            result["canceled"] = exc
    try:
        worker = threading.Thread(target=run, daemon=True)
        worker.start()
        deadline = time.monotonic() + 10
        while not any(e[0] == "execute" for e in FakeLink.log) and time.monotonic() < deadline:
            time.sleep(0.01)
        yield worker, result
    finally:
        FakeLink.gate.set()
        FakeLink.gate = None


def test_psycopg_cancel_engine_query(pg):
    with held_engine_query(pg, "SELECT income, COUNT(*) FROM adult GROUP BY income") as (worker, result):
        bounded(lambda: pg.cancel_safe(timeout=5))
        worker.join(10)
        assert "canceled" in result
    assert bounded(lambda: pg.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex").fetchall())


def test_psycopg_cancel_catalog_query(pg):
    import psycopg
    result = {}

    def run():
        try:   # pg_sleep is not executable for analysts: a long scan of generated rows instead
            pg.execute("SELECT count(*) FROM pg_class a, pg_class b, pg_class c, pg_class d")
        except psycopg.errors.QueryCanceled as exc:
            result["canceled"] = exc
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    time.sleep(0.5)
    bounded(lambda: pg.cancel_safe(timeout=5))
    worker.join(15)
    assert "canceled" in result


def test_psycopg_transactions_and_pipeline(shadow_server):
    psycopg = pytest.importorskip("psycopg")
    conn = bounded(lambda: psycopg.connect(host="127.0.0.1", port=shadow_server.port, user="bob", password=PASSWORD,
                                           dbname="dpsql", connect_timeout=10, sslmode="disable"))
    try:
        assert bounded(lambda: conn.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex").fetchall())
        bounded(conn.rollback)

        def pipelined():
            with conn.pipeline():
                curs = [conn.execute("SELECT sex, COUNT(*) FROM adult WHERE age > %s GROUP BY sex", (a,))
                        for a in (20, 30, 40)]
            return [c.fetchall() for c in curs]
        assert len(bounded(pipelined)) == 3
        bounded(conn.commit)
    finally:
        bounded(conn.close)


# -- SQLAlchemy + pandas -------------------------------------------------------------------

def test_sqlalchemy_inspect_and_pandas(shadow_server):
    sqlalchemy = pytest.importorskip("sqlalchemy", reason="sqlalchemy not installed (pip install -e '.[dev]')")
    pytest.importorskip("psycopg")
    pandas = pytest.importorskip("pandas")
    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://alice:{PASSWORD}@127.0.0.1:{shadow_server.port}/dpsql",
        connect_args={"connect_timeout": 10, "sslmode": "disable"}, pool_pre_ping=True)
    try:
        insp = bounded(lambda: sqlalchemy.inspect(engine))
        assert bounded(insp.get_table_names) == ["adult"]
        columns = bounded(lambda: insp.get_columns("adult"))
        assert [c["name"] for c in columns][:3] == ["age", "workclass", "fnlwgt"]
        assert str(columns[0]["type"]) == "BIGINT" and columns[1]["nullable"] is True
        # issue 33 item 2: fnlwgt (bins of 50,000) is a number BI tools may average, not text
        types = {c["name"]: type(c["type"]).__name__ for c in columns}
        assert types["fnlwgt"] == "BIGINT" and types["sex"] == "TEXT", types
        frame = bounded(lambda: pandas.read_sql("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", engine))
        assert list(frame.columns) == ["sex", "n"] and list(frame["sex"]) == ["Female", "Male"]
    finally:
        engine.dispose()


# -- pgjdbc ---------------------------------------------------------------------------------

_JDBC_BUILD: dict = {}


def run_jdbc_probe(port, tmp_path):
    """Compile JdbcProbe.java (once per session) and run it; skips without a JDK or pgjdbc."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("no JDK (apt-get install default-jdk-headless)")
    jar = next((j for j in JDBC_JARS if Path(j).exists()), None)
    if jar is None:
        pytest.skip("pgjdbc not installed (apt-get install libpostgresql-jdbc-java)")
    if "dir" not in _JDBC_BUILD:
        shutil.copy(HERE / "JdbcProbe.java", tmp_path / "JdbcProbe.java")
        subprocess.run(["javac", "-cp", jar, "JdbcProbe.java"], cwd=tmp_path, check=True, timeout=90,
                       capture_output=True)
        _JDBC_BUILD["dir"] = tmp_path
    url = f"jdbc:postgresql://127.0.0.1:{port}/dpsql?sslmode=disable"
    r = subprocess.run(["java", "-cp", f"{jar}:{_JDBC_BUILD['dir']}", "JdbcProbe", url, "alice", PASSWORD],
                       capture_output=True, text=True, timeout=90)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout.splitlines()


def check_jdbc_output(lines):
    assert "TABLE adult" in lines
    assert "COLUMN age int8" in lines and "COLUMN sex text" in lines
    rows = [line for line in lines if line.startswith("ROW ")]
    assert len(rows) == 8 and len({line.split(" ", 2)[2] for line in rows}) == 2  # same answers every time
    assert "REFUSED 42501" in lines


@pytest.mark.slow
def test_pgjdbc_metadata_and_prepared_statement(shadow_server, tmp_path):
    check_jdbc_output(run_jdbc_probe(shadow_server.port, tmp_path))


def test_superset_style_terminate_cancels_own_sessions_only(shadow_server, pg):
    import psycopg
    pid = bounded(lambda: pg.execute("SELECT pg_backend_pid()").fetchone()[0])
    assert pid == pg.info.backend_pid
    other = bounded(lambda: psycopg.connect(host="127.0.0.1", port=shadow_server.port, user="bob", password=PASSWORD,
                                            dbname="dpsql", connect_timeout=10, autocommit=True, sslmode="disable"))
    sql = f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid='{pid}'"
    try:
        with held_engine_query(pg, "SELECT workclass, COUNT(*) FROM adult GROUP BY workclass") as (worker, result):
            assert bounded(lambda: other.execute(sql).fetchone()) == (False,)   # bob cannot touch alice
            same = bounded(lambda: psycopg.connect(host="127.0.0.1", port=shadow_server.port, user="alice",
                                                   password=PASSWORD, dbname="dpsql", connect_timeout=10,
                                                   autocommit=True, sslmode="disable"))
            try:
                assert bounded(lambda: same.execute(sql).fetchone()) == (True,)
            finally:
                bounded(same.close)
            worker.join(10)
            assert "canceled" in result
    finally:
        bounded(other.close)


def test_shadow_runs_client_sql_without_superuser_powers(pg):
    import psycopg
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        bounded(lambda: pg.execute("SELECT pg_read_file('/etc/hostname')"))
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        bounded(lambda: pg.execute("SELECT pg_ls_dir('.')"))
    rolsuper = "SELECT rolsuper FROM pg_roles WHERE rolname = current_user"
    assert bounded(lambda: pg.execute(rolsuper).fetchone()) == (False,)
    # the public tables are visible (information_schema lists only what the role may read) and empty
    assert bounded(lambda: pg.execute("SELECT n_live_tup FROM pg_stat_user_tables WHERE relname = 'adult'")
                   .fetchall()) == [(0,)]
    tables = bounded(lambda: pg.execute("SELECT table_name FROM information_schema.tables "
                                        "WHERE table_schema = 'public'").fetchall())
    # dpsql_budget: the empty view the analyst's budget rows replace (issue 33), for reflection
    assert sorted(tables) == [("adult",), ("dpsql_budget",), ("dpsql_columns",)]


def test_psycopg_protocol_negotiation(shadow_server):
    psycopg = pytest.importorskip("psycopg")
    if psycopg.pq.version() < 180000:
        pytest.skip("libpq < 18 cannot request protocol 3.2")
    conn = bounded(lambda: psycopg.connect(host="127.0.0.1", port=shadow_server.port, user="alice", password=PASSWORD,
                                           dbname="dpsql", connect_timeout=10, sslmode="disable",
                                           max_protocol_version="3.2", require_auth="scram-sha-256"))
    try:
        assert bounded(lambda: conn.execute("SELECT current_user").fetchone()) == ("alice",)
    finally:
        bounded(conn.close)
