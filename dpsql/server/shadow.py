"""The schema-only "shadow" PostgreSQL that answers catalog and introspection queries.

psql's ``\\d``, SQLAlchemy's Inspector and pgjdbc's DatabaseMetaData send large catalog
queries (``pg_class``, ``format_type``, ``regclass`` casts, ``_pg_expandarray`` …) that only
a real PostgreSQL answers faithfully (research note ``bi_backend.md`` §2.5).  So
``dpsql serve`` starts a private PostgreSQL (``catalogdb.CatalogCluster``: lifecycle,
hardening) listening only on a Unix socket in a fresh 0700 temp directory, with one
database named like the served one, and in it ``CREATE TABLE`` for each private table from
its *public* domain declaration — with **zero rows**.  The shadow therefore cannot leak
private data: it never enters it.

``ShadowClient`` is a small asyncio PostgreSQL client built on ``codec``; statements are
forwarded with the client's own parameter bytes and result format codes, so the shadow does
all type encoding, and its replies (RowDescription, DataRow, errors) are relayed unchanged.
``ShadowPool`` keeps each analyst's statements on connections of their own role.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field

from dpsql.server import codec
from dpsql.server.catalogdb import (SHADOW_ROLE, CatalogCluster, ShadowUnavailable, find_bindir, ident,
                                    role_name, role_sql)

__all__ = ["ShadowClient", "ShadowPool", "ShadowCluster", "ShadowError", "ShadowUnavailable", "find_bindir",
           "schema_ddl", "catalog_type"]


class ShadowError(Exception):
    """An ErrorResponse from the shadow, relayed to the client field by field."""

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__(fields.get("M", "catalog query failed"))
        self.fields = fields


def catalog_type(attribute) -> str:
    """The PostgreSQL type of a column in the catalog: the type of the values the engine returns
    for it, so typed clients decode what they were promised.

    One rule: a column is what ``GROUP BY column`` returns (``dpsql.sql.grouping``).  Integer
    domains in bins of one value and categorical columns whose labels are all integers are
    ``bigint``; every other column is ``text`` holding its cell labels (``'[1, 49999]'`` for
    a wide integer bin, ``'[0.0, 10.0)'`` for a real-valued range), because the value inside a
    bin is not known."""
    from dpsql.sql.grouping import column_key_values
    _, kind = column_key_values(attribute)
    return {"integer": "bigint", "double precision": "double precision", "boolean": "boolean"}.get(kind, "text")


def schema_ddl(catalog) -> list[str]:
    """``CREATE TABLE`` statements for the public schema of every private table."""
    out = []
    for name, schema in sorted(catalog.items()):
        cols = []
        for attr in schema.attributes:
            null = "" if getattr(attr, "nullable", False) else " NOT NULL"
            cols.append(f"{ident(attr.name)} {catalog_type(attr)}{null}")
        out.append(f"CREATE TABLE public.{ident(name)} ({', '.join(cols)})")
        out.append(f"COMMENT ON TABLE public.{ident(name)} IS "
                   "'dpsql private table: aggregate queries only, answers are differentially private'")
    return out


@dataclass
class ShadowResult:
    description: bytes | None          # raw RowDescription message, or None (NoData)
    rows: list[bytes] = field(default_factory=list)   # raw DataRow messages
    tag: str = ""
    empty: bool = False


# Sent ahead of every client statement in the same write: whatever a previous statement on
# this connection could have left (settings, prepared statements, cursors, locks, LISTEN)
# is gone before the next one runs.
_RESET = codec.encode_query("DISCARD ALL")


class ShadowClient:
    """One connection to the shadow (Unix socket, trust auth inside a private directory)."""

    def __init__(self) -> None:
        self.pid = 0
        self.secret = b""
        self.parameters: dict[str, str] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.broken = False
        self.role = ""

    @classmethod
    async def connect(cls, socket_path: str, database: str, user: str = SHADOW_ROLE) -> "ShadowClient":
        self = cls()
        self.role = user
        self._reader, self._writer = await asyncio.open_unix_connection(socket_path)
        self._writer.write(codec.encode_startup({"user": user, "database": database,
                                                 "application_name": "dpsql-shadow"}))
        await self._writer.drain()
        while True:
            kind, body = await self._read()
            if kind == b"R":
                code, _ = codec.decode_auth(body)
                if code != 0:
                    raise ShadowUnavailable(f"shadow asked for authentication method {code}")
            elif kind == b"S":
                r = codec.BodyReader(body)
                name = r.cstring()
                self.parameters[name] = r.cstring()
            elif kind == b"K":
                r = codec.BodyReader(body)
                self.pid = r.int32()
                self.secret = r.rest()
            elif kind == b"E":
                raise ShadowError(codec.decode_fields(body))
            elif kind == b"Z":
                return self

    async def _read(self) -> tuple[bytes, bytes]:
        assert self._reader is not None
        try:
            head = await self._reader.readexactly(5)
            length = int.from_bytes(head[1:5], "big")
            body = await self._reader.readexactly(length - 4)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.broken = True
            raise ShadowUnavailable("the shadow catalog connection closed") from None
        return head[0:1], body

    async def _roundtrip(self, payload: bytes, syncs: int = 1) -> list[tuple[bytes, bytes]]:
        """Send messages ending in ``syncs`` Sync/Query messages; collect replies up to the last
        ReadyForQuery."""
        assert self._writer is not None
        self._writer.write(payload)
        await self._writer.drain()
        replies = []
        while True:
            kind, body = await self._read()
            if kind == b"Z":
                syncs -= 1
                if syncs == 0:
                    return replies
                continue
            if kind in (b"N", b"S", b"A"):
                continue  # notices and parameter changes of the shadow are not the client's
            replies.append((kind, body))

    @staticmethod
    def _raise_error(replies) -> None:
        for kind, body in replies:
            if kind == b"E":
                raise ShadowError(codec.decode_fields(body))

    async def simple(self, sql: str) -> list[tuple[bytes, bytes]]:
        replies = await self._roundtrip(codec.encode_query(sql))
        self._raise_error(replies)
        return replies

    async def describe(self, sql: str, param_oids=()) -> tuple[tuple[int, ...], bytes | None]:
        """Parameter OIDs and raw RowDescription (None for NoData) of ``sql``, without running it."""
        replies = await self._roundtrip(_RESET + codec.encode_parse("", sql, param_oids)
                                        + codec.encode_describe("S", "") + codec.SYNC, syncs=2)
        self._raise_error(replies)
        oids: tuple[int, ...] = ()
        description = None
        for kind, body in replies:
            if kind == b"t":
                oids = codec.decode_parameter_description(body)
            elif kind == b"T":
                description = codec.message(b"T", body)
        return oids, description

    async def execute(self, sql: str, param_oids, param_formats, params, result_formats) -> ShadowResult:
        payload = (_RESET + codec.encode_parse("", sql, param_oids)
                   + codec.encode_bind("", "", param_formats, params, result_formats)
                   + codec.encode_describe("P", "") + codec.encode_execute("", 0) + codec.SYNC)
        replies = await self._roundtrip(payload, syncs=2)
        self._raise_error(replies)
        result = ShadowResult(None)
        for kind, body in replies:
            if kind == b"T":
                result.description = codec.message(b"T", body)
            elif kind == b"D":
                result.rows.append(codec.message(b"D", body))
            elif kind == b"C":
                result.tag = codec.BodyReader(body).cstring()
            elif kind == b"I":
                result.empty = True
        return result

    async def close(self) -> None:
        if self._writer is not None:
            try:
                self._writer.write(codec.TERMINATE)
                self._writer.close()
                await self._writer.wait_closed()
            except (ConnectionError, OSError):
                pass
            self._writer = None




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
        for role, idle in self._idle.items():
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
