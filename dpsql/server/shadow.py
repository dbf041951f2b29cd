"""The schema-only "shadow" PostgreSQL that answers catalog and introspection queries.

psql's ``\\d``, SQLAlchemy's Inspector and pgjdbc's DatabaseMetaData send large catalog
queries (``pg_class``, ``format_type``, ``regclass`` casts, ``_pg_expandarray`` …) that only
a real PostgreSQL answers faithfully (research note ``bi_backend.md`` §2.5).  So
``dpsql serve`` starts a private PostgreSQL (``initdb`` + ``pg_ctl`` from the system
package) listening only on a Unix socket in a fresh 0700 temp directory, creates one
database named like the served one, and in it ``CREATE TABLE`` for each private table from
its *public* domain declaration — with **zero rows**.  The shadow therefore cannot leak
anything: the private data never enters it.  The database is made read-only afterwards.

``ShadowClient`` is a small asyncio PostgreSQL client built on ``codec``; statements are
forwarded with the client's own parameter bytes and result format codes, so the shadow does
all type encoding, and its replies (RowDescription, DataRow, errors) are relayed unchanged.
"""

from __future__ import annotations

import asyncio
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from dpsql.server import codec

SHADOW_ROLE = "dpsql"            # owner and superuser: only used to build the schema
READER_ROLE = "dpsql_reader"     # what client catalog queries run as: no superuser powers


class ShadowUnavailable(RuntimeError):
    """PostgreSQL binaries are missing or the shadow failed to start."""


class ShadowError(Exception):
    """An ErrorResponse from the shadow, relayed to the client field by field."""

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__(fields.get("M", "catalog query failed"))
        self.fields = fields


def find_bindir() -> Path | None:
    """The newest PostgreSQL server bin directory (Debian layout first, then $PATH)."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    return None


def _pg_type(attribute) -> str:
    kind = getattr(attribute, "kind", "categorical")
    if kind == "integer":
        return "bigint"
    if kind == "numeric":
        return "double precision"
    return "text"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def schema_ddl(catalog) -> list[str]:
    """``CREATE TABLE`` statements for the public schema of every private table."""
    out = []
    for name, schema in sorted(catalog.items()):
        cols = []
        for attr in schema.attributes:
            null = "" if getattr(attr, "nullable", False) else " NOT NULL"
            cols.append(f"{_ident(attr.name)} {_pg_type(attr)}{null}")
        out.append(f"CREATE TABLE public.{_ident(name)} ({', '.join(cols)})")
        out.append(f"COMMENT ON TABLE public.{_ident(name)} IS "
                   "'dpsql private table: aggregate queries only, answers are differentially private'")
    return out


@dataclass
class ShadowResult:
    description: bytes | None          # raw RowDescription message, or None (NoData)
    rows: list[bytes] = field(default_factory=list)   # raw DataRow messages
    tag: str = ""
    empty: bool = False


class ShadowClient:
    """One connection to the shadow (Unix socket, trust auth inside a private directory)."""

    def __init__(self) -> None:
        self.pid = 0
        self.secret = b""
        self.parameters: dict[str, str] = {}
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.broken = False

    @classmethod
    async def connect(cls, socket_path: str, database: str, user: str = SHADOW_ROLE) -> "ShadowClient":
        self = cls()
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

    async def _roundtrip(self, payload: bytes) -> list[tuple[bytes, bytes]]:
        """Send messages ending in Sync; collect replies up to ReadyForQuery."""
        assert self._writer is not None
        self._writer.write(payload)
        await self._writer.drain()
        replies = []
        while True:
            kind, body = await self._read()
            if kind == b"Z":
                return replies
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
        replies = await self._roundtrip(codec.encode_parse("", sql, param_oids) + codec.encode_describe("S", "")
                                        + codec.SYNC)
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
        payload = (codec.encode_parse("", sql, param_oids)
                   + codec.encode_bind("", "", param_formats, params, result_formats)
                   + codec.encode_describe("P", "") + codec.encode_execute("", 0) + codec.SYNC)
        replies = await self._roundtrip(payload)
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
    """A bounded pool of shadow connections; statements are stateless, so any one will do."""

    def __init__(self, socket_path: str, database: str, size: int = 4) -> None:
        self.socket_path = socket_path
        self.database = database
        self.size = size
        self._idle: list[ShadowClient] = []
        self._slots = asyncio.Semaphore(size)
        self.server_version = ""

    async def acquire(self) -> ShadowClient:
        await self._slots.acquire()
        try:
            if self._idle:
                return self._idle.pop()
            client = await ShadowClient.connect(self.socket_path, self.database, READER_ROLE)
            self.server_version = client.parameters.get("server_version", self.server_version)
            return client
        except BaseException:
            self._slots.release()
            raise

    def release(self, client: ShadowClient) -> None:
        if client.broken:
            asyncio.ensure_future(client.close())
        else:
            self._idle.append(client)
        self._slots.release()

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
        while self._idle:
            await self._idle.pop().close()


class ShadowCluster:
    """Lifecycle of the shadow PostgreSQL: initdb, start, load the public DDL, stop."""

    def __init__(self, catalog, database: str = "dpsql", *, bindir: Path | None = None) -> None:
        self.catalog = catalog
        self.database = database
        self.bindir = bindir or find_bindir()
        self.dir: str | None = None
        self.port = 5432
        self._run_as: dict = {}

    @property
    def socket_path(self) -> str:
        assert self.dir is not None
        return os.path.join(self.dir, f".s.PGSQL.{self.port}")

    def _run(self, args, timeout: float = 60) -> None:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **self._run_as)
        if proc.returncode != 0:
            raise ShadowUnavailable(f"{Path(args[0]).name} failed: {proc.stderr.strip()[-500:]}")

    def start(self) -> None:
        if self.bindir is None:
            raise ShadowUnavailable("PostgreSQL server binaries (initdb, pg_ctl) not found; "
                                    "install the `postgresql` package")
        self.dir = tempfile.mkdtemp(prefix="dpsql-shadow-")
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root; run it as the packaged `postgres` account
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise ShadowUnavailable("running as root but no `postgres` user exists") from None
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._run_as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        os.chmod(self.dir, 0o700)
        data = os.path.join(self.dir, "data")
        self._run([str(self.bindir / "initdb"), "-D", data, "-U", SHADOW_ROLE, "--auth=trust",
                   "--encoding=UTF8", "--locale=C", "--no-sync"], timeout=120)
        opts = (f"-c listen_addresses='' -c unix_socket_directories='{self.dir}' -p {self.port} "
                "-c max_connections=60 -c fsync=off -c synchronous_commit=off -c full_page_writes=off "
                "-c shared_buffers=16MB -c statement_timeout=30s -c log_min_messages=fatal")
        self._run([str(self.bindir / "pg_ctl"), "-D", data, "-o", opts, "-l",
                   os.path.join(self.dir, "postgres.log"), "-w", "-t", "60", "start"], timeout=90)
        asyncio.run(self._load())

    async def _load(self) -> None:
        admin = await ShadowClient.connect(self.socket_path, "postgres")
        try:
            await admin.simple(f"CREATE DATABASE {_ident(self.database)}")
        finally:
            await admin.close()
        db = await ShadowClient.connect(self.socket_path, self.database)
        try:
            for stmt in schema_ddl(self.catalog):
                await db.simple(stmt)
            # Client SQL reaches the shadow, so it must not run as a superuser: that would expose
            # pg_read_file, pg_ls_dir, lo_import … on the server host.  The reader may only read the
            # catalog and the empty tables (SELECT makes them visible in information_schema).
            reader = _ident(READER_ROLE)
            await db.simple(f"CREATE ROLE {reader} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION")
            await db.simple(f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {reader}")
            await db.simple(f"REVOKE CREATE ON SCHEMA public FROM PUBLIC")
            await db.simple(f"REVOKE TEMPORARY ON DATABASE {_ident(self.database)} FROM PUBLIC")
            await db.simple(f"ALTER ROLE {reader} SET default_transaction_read_only = on")
            await db.simple(f"ALTER ROLE {reader} SET statement_timeout = '30s'")
            # belt and braces: even a bug in routing cannot write into the shadow
            await db.simple(f"ALTER DATABASE {_ident(self.database)} SET default_transaction_read_only = on")
        finally:
            await db.close()

    def stop(self) -> None:
        if self.dir is None:
            return
        data = os.path.join(self.dir, "data")
        if self.bindir is not None and os.path.isdir(data):
            try:
                self._run([str(self.bindir / "pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"], timeout=60)
            except (ShadowUnavailable, subprocess.TimeoutExpired):
                pass
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None
