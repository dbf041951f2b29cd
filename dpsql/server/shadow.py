"""The schema-only "shadow" PostgreSQL that answers catalog and introspection queries.

psql's ``\\d``, SQLAlchemy's Inspector and pgjdbc's DatabaseMetaData send large catalog
queries (``pg_class``, ``format_type``, ``regclass`` casts, ``_pg_expandarray`` …) that only
a real PostgreSQL answers faithfully (research note ``bi_backend.md`` §2.5).  So
``dpsql serve`` starts a private PostgreSQL (``catalogdb.CatalogCluster``: lifecycle,
hardening) listening only on a Unix socket in a fresh 0700 temp directory, with one
database named like the served one, and in it ``CREATE TABLE`` for each private table from
its *public* domain declaration — with **zero rows**.  The shadow therefore cannot leak
private data: it never enters it.

``ShadowClient`` (``pgclient``) is a small asyncio PostgreSQL client built on ``codec``; statements are
forwarded with the client's own parameter bytes and result format codes, so the shadow does
all type encoding, and its replies (RowDescription, DataRow, errors) are relayed unchanged.
``ShadowPool`` keeps each analyst's statements on connections of their own role.
"""

from __future__ import annotations

import asyncio
import secrets

from dpsql import labels as wording
from dpsql.server import codec
from dpsql.server.catalogdb import (SHADOW_ROLE, CatalogCluster, ShadowUnavailable, find_bindir, ident,
                                    literal, role_name, role_sql)
from dpsql.server.router import BUDGET_COLUMNS, BUDGET_VIEW, COLUMNS_VIEW
from dpsql.server.pgclient import ShadowClient, ShadowError, ShadowReplyTooLarge

__all__ = ["ShadowClient", "ShadowPool", "ShadowCluster", "ShadowError", "ShadowReplyTooLarge", "ShadowUnavailable",
           "find_bindir", "schema_ddl", "catalog_type"]


def catalog_type(attribute) -> str:
    """The PostgreSQL type of a column in the catalog: the one rule of ``dpsql.labels.catalog_type``
    (what the column can be aggregated as), which the shell's ``\\d`` shows too."""
    return wording.catalog_type(attribute)


_SEE_ALL = f"{COLUMNS_VIEW}.labels lists all"
#: (name, PostgreSQL type) of the view's columns.
COLUMNS_VIEW_COLUMNS = (("table_name", "text"), ("column_name", "text"), ("ordinal_position", "integer"),
                        ("data_type", "text"), ("kind", "text"), ("is_nullable", "boolean"),
                        ("cells", "bigint"), ("lo", "numeric"), ("hi", "numeric"), ("bin_width", "bigint"),
                        ("edges", "numeric[]"), ("labels", "text[]"), ("open", "boolean"),
                        ("description", "text"))


def _value(value, pg_type: str) -> str:
    """A SQL literal with its type (every VALUES row typed alike, NULLs included)."""
    if value is None:
        return f"NULL::{pg_type}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return f"ARRAY[{', '.join(literal(str(v)) for v in value)}]::{pg_type}"
    return f"{literal(str(value))}::{pg_type}"


def _column_row(table: str, position: int, attr) -> str:
    """One row of ``dpsql_columns``: the declared domain only (public metadata)."""
    lo = hi = width = edges = labels = None
    if attr.kind == "integer":
        lo, hi = attr.lo, attr.hi
        width, edges = (None, list(attr.edges)) if attr.edges else (attr.bin_width, None)
    elif attr.kind == "numeric":
        lo, hi, edges = attr.edges[0], attr.edges[-1], [repr(float(e)) for e in attr.edges]
    else:
        labels = wording.declared_labels(attr)
    values = (table, attr.name, position, catalog_type(attr), attr.kind, attr.nullable, attr.size, lo, hi, width,
              edges, labels, wording.is_open(attr), wording.column_comment(attr, _SEE_ALL))
    return "(" + ", ".join(_value(v, t) for v, (_, t) in zip(values, COLUMNS_VIEW_COLUMNS)) + ")"


def _public_column_row(table: str, position: int, public, column) -> str:
    """One row of ``dpsql_columns`` for a public table's column: its real type, kind ``public``
    and no domain (its values are the public rows themselves, read exactly)."""
    at = position - 1
    nullable = any(row[at] is None for row in public.rows)    # public rows: no privacy at stake
    values = (table, column.name, position, column.type, "public", nullable, None, None, None, None, None, None,
              None, "public table column: exact values, at no privacy cost")
    return "(" + ", ".join(_value(v, t) for v, (_, t) in zip(values, COLUMNS_VIEW_COLUMNS)) + ")"


def schema_ddl(catalog) -> list[str]:
    """``CREATE TABLE`` statements for the public schema of every private table, a comment on
    each column with its declared domain (psql's ``\\d+``), and the ``dpsql_columns`` view
    of the same domains as rows (issue 33 item 3: labels and bin edges were found only by
    provoking errors).  All of it is the public domain declaration; no row is read."""
    out = []
    rows = []
    for name, schema in sorted(catalog.items()):
        cols = []
        for attr in schema.attributes:
            null = "" if attr.nullable else " NOT NULL"
            cols.append(f"{ident(attr.name)} {catalog_type(attr)}{null}")
        out.append(f"CREATE TABLE public.{ident(name)} ({', '.join(cols)})")
        out.append(f"COMMENT ON TABLE public.{ident(name)} IS "
                   "'dpsql private table: aggregate queries only, answers are differentially private'")
        for position, attr in enumerate(schema.attributes, 1):
            out.append(f"COMMENT ON COLUMN public.{ident(name)}.{ident(attr.name)} IS "
                       f"{literal(wording.column_comment(attr, _SEE_ALL))}")
            rows.append(_column_row(name, position, attr))
    for name, table in sorted(getattr(catalog, "public", {}).items()):
        # a public table: its real column types, so BI tools browse it like any table (its
        # rows are answered by the engine, exactly: every statement naming it is routed there)
        typed = ", ".join(f"{ident(c.name)} {c.type}" for c in table.columns)
        out.append(f"CREATE TABLE public.{ident(name)} ({typed})")
        out.append(f"COMMENT ON TABLE public.{ident(name)} IS "
                   "'dpsql public table: read exactly, at no privacy cost; joins with the private table on its "
                   "declared keys'")
        for position, column in enumerate(table.columns, 1):
            rows.append(_public_column_row(name, position, table, column))
    if rows and COLUMNS_VIEW not in catalog:
        names = ", ".join(n for n, _ in COLUMNS_VIEW_COLUMNS)
        out.append(f"CREATE VIEW public.{COLUMNS_VIEW} AS SELECT * FROM (VALUES {', '.join(rows)}) AS d({names})")
        out.append(f"COMMENT ON VIEW public.{COLUMNS_VIEW} IS 'the declared (public) domain of every column of "
                   "the private tables: types, bounds, bins, labels; and the public tables'' columns (kind public)'")
    if rows and BUDGET_VIEW not in catalog:
        # its columns for psql's \d and BI tools' reflection; no row: the router puts the connection's
        # own budget into every statement that reads it (router.budget_sql)
        nulls = ", ".join(f"CAST(NULL AS {t}) AS {n}" for n, t in BUDGET_COLUMNS)
        out.append(f"CREATE VIEW public.{BUDGET_VIEW} AS SELECT {nulls} WHERE false")
        out.append(f"COMMENT ON VIEW public.{BUDGET_VIEW} IS 'your remaining privacy budget (user_remaining), "
                   "all users together (total_remaining) and the next on-demand measurement (next_measurement), "
                   "in rho and in epsilon at delta; also SELECT * FROM dpsql_budget()'")
    return out


class ShadowPool:
    """Catalog connections, each logged in as one analyst's own role (``catalogdb.role_sql``).

    A connection only ever serves the analyst whose role it is, and every statement is
    preceded by ``DISCARD ALL``.  At most ``size`` connections are open (idle ones of other
    analysts are closed to make room) and at most ``per_role`` run at once for one analyst,
    which PostgreSQL backs up (the role's CONNECTION LIMIT).  Roles are created on first
    use through the superuser connection, which never runs client SQL."""

    def __init__(self, socket_path: str, database: str, size: int = 8, *, key: bytes | None = None,
                 per_role: int = 4, statement_timeout_ms: int = 10_000) -> None:
        self.socket_path = socket_path
        self.database = database
        self.size = size
        self.per_role = max(1, min(per_role, size))
        self.statement_timeout_ms = statement_timeout_ms
        self._key = key or secrets.token_bytes(32)
        self._idle: dict[str, list[ShadowClient]] = {}
        self._open = 0
        self._slots = asyncio.Semaphore(size)
        self._role_slots: dict[str, asyncio.Semaphore] = {}
        self._roles: dict[str, str] = {}
        self._admin: ShadowClient | None = None
        self._admin_lock = asyncio.Lock()
        self.server_version = ""

    async def start(self) -> None:
        """Connect the superuser connection (role management only) and learn the version."""
        async with self._admin_lock:
            if self._admin is None or self._admin.broken:
                # roles are cluster-wide; the catalog database itself is read-only even for its owner
                self._admin = await ShadowClient.connect(self.socket_path, "postgres", SHADOW_ROLE)
                self.server_version = self._admin.parameters.get("server_version", "")

    async def role(self, user: str) -> str:
        role = self._roles.get(user)
        if role is not None:
            return role
        role = role_name(user, self._key)
        await self.start()
        async with self._admin_lock:
            if user not in self._roles:
                assert self._admin is not None
                # a backstop above the pool's own bound (closing backends take a moment to go)
                for stmt in role_sql(role, self.statement_timeout_ms, 2 * self.per_role + 2):
                    await self._admin.simple(stmt)
                self._roles[user] = role
        return role

    async def acquire(self, user: str) -> ShadowClient:
        role_slots = self._role_slots.setdefault(user, asyncio.Semaphore(self.per_role))
        await role_slots.acquire()
        try:
            await self._slots.acquire()
            try:
                role = await self.role(user)
                idle = self._idle.get(role)
                if idle:
                    client = idle.pop()
                else:
                    if self._open >= self.size:
                        await self._evict()
                    self._open += 1
                    try:
                        client = await ShadowClient.connect(self.socket_path, self.database, role)
                    except BaseException:
                        self._open -= 1
                        raise
                client.user = user
                return client
            except BaseException:
                self._slots.release()
                raise
        except BaseException:
            role_slots.release()
            raise

    async def _evict(self) -> None:
        """Close one idle connection (some analyst's) to stay within ``size``."""
        for idle in self._idle.values():
            if idle:
                self._open -= 1
                await idle.pop(0).close()
                return

    def release(self, client: ShadowClient) -> None:
        if client.broken:
            self._open -= 1
            asyncio.ensure_future(client.close())
        else:
            self._idle.setdefault(client.role, []).append(client)
        self._slots.release()
        self._role_slots[client.user].release()

    async def cancel(self, client: ShadowClient) -> None:
        """Forward a cancel to the shadow backend running ``client``'s statement."""
        try:
            _, writer = await asyncio.open_unix_connection(self.socket_path)
            writer.write(codec.encode_cancel_request(client.pid, client.secret))
            await writer.drain()
            writer.close()
        except OSError:
            pass

    async def close(self) -> None:
        for idle in self._idle.values():
            while idle:
                self._open -= 1
                await idle.pop().close()
        if self._admin is not None:
            await self._admin.close()
            self._admin = None


class ShadowCluster(CatalogCluster):
    """The catalog PostgreSQL for a dpsql catalog (``{table: TableSchema}``)."""

    def __init__(self, catalog, database: str = "dpsql", **options) -> None:
        super().__init__(schema_ddl(catalog), database, **options)
        self.catalog = catalog
