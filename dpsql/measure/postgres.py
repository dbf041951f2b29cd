"""The PostgreSQL backend: marginals counted inside the server that holds the table.

``source = { postgres = "postgresql://dpsql@db:5432/hr", table = "public.people",
version_query = "SELECT max(updated_at) FROM public.people" }`` (``docs/config.md``).  The only
module importing psycopg: it also holds ``WireClient``, the client of ``dpsql serve`` that the
shell uses as an analyst (``dpsql shell --connect``; PostgreSQL's client for both uses).

* Credentials never come from dpsql.toml (a URL holding a password is refused when the
  configuration is read): libpq takes them from the environment (``PGPASSWORD``,
  ``PGPASSFILE``, ``~/.pgpass``) or the declared ``passfile``.
* Every read is one ``REPEATABLE READ READ ONLY`` transaction with a transaction-local
  ``statement_timeout``: the source can never be written, a runaway scan is cancelled, and
  the version check and the count see the same snapshot, so a count is never taken from
  content other than the one its release identity names.
* Column names and types come from ``pg_attribute`` (metadata), never from rows.
* The counting statement is the portable AST (``dpsql.measure.counting``) rendered by
  sqlglot's postgres dialect; its rows (one per non-empty cell) are streamed through a
  server-side cursor.  The bounding key is bound by ``set_config`` as a parameter, so it is
  never part of any SQL text.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
from typing import Any

from dpsql import errors
from dpsql.errors import ConfigError, QueryCanceledError
from dpsql.measure.counting import SqlBackend, changed_error, engine_error
from dpsql.measure.source import Source
from dpsql.sql.syntax import exp

try:
    import psycopg
    HAVE_PSYCOPG = True
except ImportError:  # pragma: no cover - the optional extra is missing
    HAVE_PSYCOPG = False

_COLUMNS_SQL = """
SELECT a.attname,
       format_type(CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE a.atttypid END,
                   CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END)
FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_type t ON t.oid = a.atttypid
WHERE a.attrelid = to_regclass(%s) AND a.attnum > 0 AND NOT a.attisdropped
ORDER BY a.attnum"""

FETCH_ROWS = 10_000
MAX_VERSION_ROWS = 1_000


def table_name(source: Source) -> str:
    """The table as PostgreSQL reads it (unquoted parts fold to lower case, as in psql)."""
    return exp.to_table(source.table_name, dialect="postgres").sql("postgres")


class PostgresBackend(SqlBackend):
    """Counts marginals of ``postgres`` sources (module doc); one connection per read."""

    dialect = "postgres"
    engine = "PostgreSQL"

    def __init__(self, sources) -> None:
        super().__init__(sources)
        if not HAVE_PSYCOPG:
            raise ConfigError("a postgres source needs psycopg", hint="pip install 'dpsql[postgres]'")
        for name, source in self._sources.items():
            if source.kind != "postgres":
                raise ConfigError(f"table {name!r}: a {source.kind} source is not read by PostgreSQL")

    # -- connections ---------------------------------------------------------------------------
    def _connect(self, source: Source) -> psycopg.Connection:
        kwargs: dict[str, Any] = {"autocommit": False, "application_name": "dpsql"}
        if "connect_timeout" not in source.address:
            kwargs["connect_timeout"] = 30
        if source.passfile is not None:
            kwargs["passfile"] = str(source.passfile)
        try:
            conn = psycopg.connect(source.address, **kwargs)
        except psycopg.Error as exc:
            raise engine_error("PostgreSQL", "connecting to the source database", exc,
                               hint="check source.postgres, the credentials (PGPASSWORD, PGPASSFILE, "
                                    "~/.pgpass or source.passfile) and that the server is up") from None
        conn.read_only = True
        conn.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        return conn

    @contextlib.contextmanager
    def _transaction(self, source: Source, what: str):
        """A read-only snapshot with the source's statement timeout; engine errors withheld."""
        conn = self._connect(source)
        try:
            with conn.cursor() as cur:
                cur.execute("SELECT set_config('statement_timeout', %s, true)",
                            [str(max(1, int(source.statement_timeout * 1000)))])
            yield conn
        except psycopg.errors.QueryCanceled:
            raise QueryCanceledError(
                f"{what} ran longer than source.statement_timeout ({source.statement_timeout:g} s) "
                "and was cancelled by PostgreSQL",
                hint="nothing was charged; the operator may raise statement_timeout in the source") from None
        except psycopg.Error as exc:
            raise engine_error("PostgreSQL", what, exc, source.hash_key) from None
        finally:
            try:
                conn.rollback()
            finally:
                conn.close()

    # -- metadata ------------------------------------------------------------------------------
    def _describe(self, source: Source) -> dict[str, str]:
        with self._transaction(source, "reading the source schema") as conn, conn.cursor() as cur:
            cur.execute(_COLUMNS_SQL, [table_name(source)])
            rows = cur.fetchall()
        if not rows:
            raise ConfigError(f"PostgreSQL has no table {source.table!r} (or this role may not see it)",
                              hint="check source.table (schema.table; quote mixed-case names as in SQL: "
                                   "'\"People\"') and the role's USAGE and SELECT privileges")
        return {str(name): str(kind) for name, kind in rows}

    def _version(self, conn: psycopg.Connection, source: Source) -> dict:
        query = source.version_query
        if query is None:       # from_config requires data_version or version_query
            raise ConfigError("a postgres source needs data_version or version_query to name its content")
        with conn.cursor() as cur:
            cur.execute(query)
            rows = cur.fetchmany(MAX_VERSION_ROWS + 1)
        if len(rows) > MAX_VERSION_ROWS:
            raise ConfigError(f"source.version_query returned more than {MAX_VERSION_ROWS} rows",
                              hint="a table statistic is one row, e.g. SELECT max(updated_at) FROM t")
        # only a hash is kept: the statistic may itself be a private value
        text = json.dumps([[None if v is None else str(v) for v in row] for row in rows])
        return {"version_query": hashlib.sha256(text.encode()).hexdigest()}

    def _fingerprint(self, source: Source) -> dict:
        with self._transaction(source, "reading the source's version") as conn:
            return self._version(conn, source)

    # -- reads ---------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _read(self, table: str, source: Source, expect: dict | None):
        with self._transaction(source, "the measurement query") as conn:
            if expect is not None and source.data_version is None and self._version(conn, source) != expect:
                raise changed_error(table, while_reading=False)
            yield _PgRead(conn, exp.to_table(source.table_name, dialect="postgres"))

    @contextlib.contextmanager
    def _read_source(self, table: str, source: Source, expect: dict | None):
        """A person view is read in one transaction: every table on its path, and every
        table's version, in the same snapshot (the join reads them together)."""
        view = source.view
        if view is None:
            with self._read(table, source, expect) as rd:
                yield rd
            return
        with self._transaction(view.hops[0].source, "the measurement query") as conn:
            for hop in view.members:
                want = None if expect is None else expect.get(hop.table, {"missing": True})
                if want is not None and hop.source.data_version is None and self._version(conn, hop.source) != want:
                    raise changed_error(table, while_reading=False)
            scans = [exp.to_table(h.source.table_name, dialect="postgres") for h in view.members]
            yield _PgRead(conn, view.relation(scans).subquery("__view"))


    # -- public tables (issue 31) ---------------------------------------------------------------
    def read_public(self, table: str) -> tuple[list[tuple[str, str]], list[tuple]]:
        """Columns (name, DuckDB type) and every row of the public table ``table``, read in one
        read-only snapshot.  Its content is public metadata (docs/privacy.md §7.4): it is read
        in the clear, once, when the configuration is loaded.  Types come from pg_attribute
        (:func:`public_column`), never from the rows."""
        source = self._source(table)
        with self._transaction(source, f"reading public table {table!r}") as conn, conn.cursor() as cur:
            cur.execute(_COLUMNS_SQL, [table_name(source)])
            described = cur.fetchall()
            if not described:
                raise ConfigError(f"public table {table!r}: PostgreSQL has no table {source.table!r} (or this role "
                                  "may not see it)", hint="check source.table and the role's SELECT privilege")
            columns, items = [], []
            for name, pg_type in described:
                duck, item = public_column(str(name), str(pg_type))
                columns.append((str(name), duck))
                items.append(item)
            cur.execute(f"SELECT {', '.join(items)} FROM {table_name(source)}")
            rows = [tuple(r) for r in cur.fetchall()]
        return columns, rows


_PUBLIC_TYPES = {"smallint": "SMALLINT", "integer": "INTEGER", "bigint": "BIGINT", "boolean": "BOOLEAN",
                 "real": "FLOAT", "double precision": "DOUBLE", "date": "DATE", "text": "VARCHAR",
                 "name": "VARCHAR"}


def public_column(name: str, pg_type: str) -> tuple[str, str]:
    """(DuckDB type, select item) of a public table's column of PostgreSQL type ``pg_type``
    (``format_type``'s spelling).  Text of any length is VARCHAR; ``numeric(p, s)`` is
    DECIMAL(p, s) and a bare ``numeric`` a double; a timestamp with time zone is read as its
    UTC timestamp (dpsql's session zone is UTC, docs/sql.md "Time"); a type DuckDB has no
    counterpart for (json, inet, arrays, …) is read as PostgreSQL's text of it."""
    col = '"' + name.replace('"', '""') + '"'
    if pg_type in _PUBLIC_TYPES:
        return _PUBLIC_TYPES[pg_type], col
    if re.fullmatch(r"(character varying|character|bpchar)(\(\d+\))?", pg_type):
        return "VARCHAR", col
    m = re.fullmatch(r"numeric\((\d+),(\d+)\)", pg_type)
    if m and int(m.group(1)) <= 38:
        return f"DECIMAL({m.group(1)},{m.group(2)})", col
    if pg_type.startswith("numeric"):
        return "DOUBLE", f"CAST({col} AS double precision)"
    if re.fullmatch(r"timestamp(\(\d\))? without time zone", pg_type):
        return "TIMESTAMP", col
    if re.fullmatch(r"timestamp(\(\d\))? with time zone", pg_type):
        return "TIMESTAMP", f"({col} AT TIME ZONE 'UTC')"
    if re.fullmatch(r"time(\(\d\))? without time zone", pg_type):
        return "TIME", col
    return "VARCHAR", f"CAST({col} AS text)"


class _PgRead:
    def __init__(self, conn: psycopg.Connection, scan: exp.Expr) -> None:
        self.conn, self.scan, self._n = conn, scan, 0

    def run(self, query: exp.Expr, key: str | None = None, what: str = "the measurement query") -> list[tuple]:
        if key is not None:
            with self.conn.cursor() as cur:
                cur.execute("SELECT set_config('dpsql.hash_key', %s, true)", [key])
        self._n += 1
        # no parameters: psycopg sends the text as is (a '%' in a label stays a '%')
        with self.conn.cursor(name=f"dpsql_read_{self._n}") as cur:
            cur.itersize = FETCH_ROWS
            cur.execute(query.sql("postgres"))
            return [tuple(r) for r in cur]


# PostgreSQL type OIDs as dpsql's result columns name their types
_WIRE_TYPES = {16: "boolean", 20: "integer", 21: "integer", 23: "integer", 700: "double", 701: "double",
               1700: "double"}


class WireReply:
    """One statement's reply: ``columns`` as (name, "integer" | "double" | "text" | "boolean"),
    ``rows``, the command tag (``status``: "SELECT 2", "SET"), and the server's NOTICEs sent
    with it (``notices``: their messages; dpsql serve's truncation figures, docs/server.md)."""

    def __init__(self, columns: list[tuple[str, str]], rows: list[tuple], status: str,
                 notices: tuple[str, ...] = ()) -> None:
        self.columns, self.rows, self.status, self.notices = columns, rows, status, notices


class WireClient:
    """A client of ``dpsql serve`` (or any PostgreSQL) on one autocommit connection.

    ``conninfo`` is a libpq URL or ``key=value`` string; ``**options`` are libpq parameters
    (``host``, ``port``, ``user``, ``password``, ``options`` …).  Credentials come from the
    arguments or libpq's own sources (``PGPASSWORD``, ``~/.pgpass``).  Errors are dpsql errors
    of the server's SQLSTATE, with its message, hint, detail and position."""

    def __init__(self, conninfo: str = "", **options: Any) -> None:
        if not HAVE_PSYCOPG:
            raise errors.InterfaceError("talking to dpsql serve needs psycopg",
                                        hint="pip install 'dpsql[postgres]'")
        options.setdefault("connect_timeout", 10)
        try:
            self._conn = psycopg.connect(conninfo, autocommit=True, **options)
        except psycopg.Error as exc:
            raise wire_error(exc) from None
        info = self._conn.info
        self.user, self.host, self.port = info.user, info.host, info.port
        self._notices: list[str] = []
        self._conn.add_notice_handler(lambda diag: self._notices.append(diag.message_primary or ""))

    def execute(self, sql: str, params=None) -> WireReply:
        self._notices.clear()
        try:
            # no parameters: the text goes as it is (a '%' in a label stays a '%')
            cur = self._conn.execute(sql, params)
            columns = [(d.name, _WIRE_TYPES.get(d.type_code, "text")) for d in cur.description or ()]
            rows = [tuple(r) for r in cur.fetchall()] if cur.description else []
        except psycopg.Error as exc:
            raise wire_error(exc) from None
        return WireReply(columns, rows, cur.statusmessage or "", tuple(self._notices))

    def cancel(self) -> None:
        """Ask the server to cancel the running statement (from another thread)."""
        try:
            self._conn.cancel()
        except psycopg.Error:
            pass

    def close(self) -> None:
        self._conn.close()


def wire_error(exc) -> errors.Error:
    """A psycopg error as the dpsql error of its SQLSTATE (the server's message, hint, detail
    and position); a failure without one (no connection) is an OperationalError."""
    diag = getattr(exc, "diag", None)
    code = getattr(exc, "sqlstate", None)
    message = (diag.message_primary if diag is not None else None) or str(exc).strip() or type(exc).__name__
    fields: dict[str, Any] = {}
    if diag is not None:
        position = diag.statement_position
        fields = {"hint": diag.message_hint, "detail": diag.message_detail,
                  "position": int(position) if position and position.isdigit() else None}
    if not code:
        return errors.OperationalError(message, **fields)
    cls = errors.error_for_sqlstate(code)
    try:
        out = cls(message, **fields)
    except TypeError:    # a class that needs more than the wire carries: its category
        out = getattr(errors, errors.category_of(code), errors.DatabaseError)(message, **fields)
    if out.sqlstate != code:
        out.sqlstate = code   # type: ignore[misc]  # the server's own code, whichever class carries it
    return out


__all__ = ["PostgresBackend", "WireClient", "WireReply", "public_column", "table_name", "wire_error"]
