"""Real engines for the cross-engine tests and bench/measure_scale.py: a throw-away
PostgreSQL cluster (initdb in a temp dir, unix socket only) and a Spark ``local[2]``
session, plus loaders that put the same typed rows into DuckDB/Parquet, PostgreSQL and
Spark."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import duckdb

from dpsql.server.catalogdb import find_bindir as pg_bindir

ADULT_DIR = Path(__file__).resolve().parents[2] / "examples" / "adult"


class PgServer:
    """``initdb`` + ``postgres`` in a 0700 temp directory, reachable only by its unix socket;
    run as the ``postgres`` account when we are root.  ``url`` connects as the superuser
    ``dpsql`` to database ``dpsql`` (trust auth: no password anywhere)."""

    def __init__(self, settings: dict | None = None) -> None:
        self.bindir = pg_bindir()
        self.settings = settings or {}
        self.dir: str | None = None
        self.proc: subprocess.Popen | None = None
        self._as: dict = {}

    @property
    def url(self) -> str:
        return f"postgresql://dpsql@/dpsql?host={self.dir}&port=5432"

    def start(self) -> PgServer:
        if self.bindir is None:
            raise RuntimeError("PostgreSQL server binaries not installed (apt-get install postgresql)")
        self.dir = tempfile.mkdtemp(prefix="dpsql-test-pg-")
        if os.geteuid() == 0:
            pw = pwd.getpwnam("postgres")
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        data = os.path.join(self.dir, "data")
        subprocess.run([str(self.bindir / "initdb"), "-D", data, "-U", "dpsql", "--auth=trust",
                        "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync"],
                       check=True, capture_output=True, timeout=120, **self._as)
        settings = {"listen_addresses": "", "unix_socket_directories": self.dir, "port": "5432",
                    "fsync": "off", "synchronous_commit": "off", "full_page_writes": "off",
                    "log_min_messages": "fatal", **self.settings}
        args = [str(self.bindir / "postgres"), "-D", data]
        for k, v in settings.items():
            args += ["-c", f"{k}={v}"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, **self._as)
        deadline = time.monotonic() + 60
        while not os.path.exists(os.path.join(self.dir, ".s.PGSQL.5432")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("postgres did not start")
            time.sleep(0.05)
        import psycopg
        for _ in range(200):
            try:
                with psycopg.connect(f"postgresql://dpsql@/postgres?host={self.dir}&port=5432",
                                     autocommit=True) as conn:
                    conn.execute("CREATE DATABASE dpsql")
                break
            except psycopg.OperationalError:
                time.sleep(0.05)
        return self

    def execute(self, *statements: str) -> None:
        import psycopg
        with psycopg.connect(self.url, autocommit=True) as conn:
            for s in statements:
                conn.execute(s)

    def load(self, table: str, ddl: str, rows) -> None:
        """CREATE TABLE ``table`` (``ddl``) and COPY ``rows`` into it."""
        import psycopg
        with psycopg.connect(self.url) as conn:
            conn.execute(f"DROP TABLE IF EXISTS {table}")
            conn.execute(f"CREATE TABLE {table} ({ddl})")
            with conn.cursor().copy(f"COPY {table} FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
            conn.execute(f"ANALYZE {table}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self.dir is not None:
            shutil.rmtree(self.dir, ignore_errors=True)
            self.dir = None


def spark_available() -> bool:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        return False
    return shutil.which("java") is not None or bool(os.environ.get("JAVA_HOME"))


def spark_session(warehouse: Path, master: str = "local[2]"):
    """The local session every Spark test shares (the backend's getOrCreate finds it)."""
    from pyspark.sql import SparkSession
    return (SparkSession.builder.master(master).appName("dpsql-tests")
            .config("spark.ui.enabled", "false").config("spark.log.level", "OFF")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.sql.shuffle.partitions", "4").config("spark.driver.memory", "1g")
            .config("spark.sql.warehouse.dir", str(warehouse))
            .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={warehouse}")
            .getOrCreate())


# --- the adult table, typed ------------------------------------------------------------------

ADULT_TYPES = {
    "age": "INTEGER", "workclass": "VARCHAR", "fnlwgt": "INTEGER", "education": "VARCHAR",
    "education_num": "INTEGER", "marital_status": "VARCHAR", "occupation": "VARCHAR",
    "relationship": "VARCHAR", "race": "VARCHAR", "sex": "VARCHAR", "capital_gain": "INTEGER",
    "capital_loss": "INTEGER", "hours_per_week": "INTEGER", "native_country": "VARCHAR", "income": "VARCHAR",
}
PG_TYPES = {"INTEGER": "integer", "BIGINT": "bigint", "VARCHAR": "text", "DOUBLE": "double precision",
            "FLOAT": "real", "BOOLEAN": "boolean", "DECIMAL(10,3)": "numeric(10,3)"}


def adult_relation(con: duckdb.DuckDBPyConnection, repeat: int = 1, ids: int | None = None) -> str:
    """SQL of the public adult extract with typed columns (empty fields are NULL), repeated
    ``repeat`` times; with ``ids``, a leading ``pid`` column (row number modulo ``ids``,
    so ids repeat)."""
    cols = ", ".join(f"'{k}': '{v}'" for k, v in ADULT_TYPES.items())
    base = (f"SELECT * FROM read_csv('{ADULT_DIR / 'adult.csv'}', header = true, auto_detect = false, "
            f"columns = {{{cols}}}, nullstr = '', delim = ',', quote = '\"')")
    if repeat > 1:
        base = f"SELECT a.* FROM ({base}) AS a CROSS JOIN range({int(repeat)})"
    if ids:
        base = f"SELECT CAST((row_number() OVER () - 1) % {int(ids)} AS BIGINT) AS pid, * FROM ({base}) AS b"
    return base


def write_parquet(con, select_sql: str, path: Path, row_group_size: int = 1_000_000) -> Path:
    con.execute(f"COPY ({select_sql}) TO '{path}' (FORMAT parquet, ROW_GROUP_SIZE {row_group_size})")
    return path


def pg_ddl(con, select_sql: str) -> str:
    """Column definitions for PostgreSQL from a DuckDB relation's types."""
    out = []
    for name, dtype, *_ in con.execute(f"DESCRIBE {select_sql}").fetchall():
        out.append(f'"{name}" {PG_TYPES.get(str(dtype), "text")}')
    return ", ".join(out)


__all__ = ["PgServer", "pg_bindir", "spark_available", "spark_session", "adult_relation", "write_parquet",
           "pg_ddl", "ADULT_DIR", "ADULT_TYPES"]
