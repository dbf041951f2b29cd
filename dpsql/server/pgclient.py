"""A small asyncio PostgreSQL client for the server's private catalog database.

Built on ``codec``; statements are forwarded with the client's own parameter bytes and result
format codes, so the catalog PostgreSQL does all type encoding and its replies (RowDescription,
DataRow, errors) are relayed unchanged.  It sits below both ``catalogdb`` (which loads the
schema through it) and ``shadow`` (which pools it per analyst role).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from dpsql.server import codec

__all__ = ["ShadowClient", "ShadowError", "ShadowReplyTooLarge", "ShadowResult", "ShadowUnavailable"]


class ShadowUnavailable(RuntimeError):
    """PostgreSQL binaries are missing or the catalog database failed to start."""


class ShadowError(Exception):
    """An ErrorResponse from the shadow, relayed to the client field by field."""

    def __init__(self, fields: dict[str, str]) -> None:
        super().__init__(fields.get("M", "catalog query failed"))
        self.fields = fields


class ShadowReplyTooLarge(Exception):
    """A catalog reply passed the caller's byte limit; the connection is left broken (closed by
    the pool: its backend notices at its next write and stops)."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"catalog reply of more than {limit} bytes")
        self.size = size
        self.limit = limit


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
        self.user = ""          # the analyst a pooled connection serves (shadow.py)
        self._limit: int | None = None      # bytes the current reply may take (``execute``)
        self._taken = 0

    @classmethod
    async def connect(cls, socket_path: str, database: str, user: str) -> ShadowClient:
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
            if self._limit is not None:
                # checked before the body is read: a single 300 MB value never enters memory
                self._taken += length + 1
                if self._taken > self._limit:
                    self.broken = True
                    raise ShadowReplyTooLarge(self._taken, self._limit)
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
        replies: list = []
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

    async def execute(self, sql: str, param_oids, param_formats, params, result_formats,
                      max_bytes: int | None = None) -> ShadowResult:
        """Run ``sql``; with ``max_bytes``, ``ShadowReplyTooLarge`` once its reply passes that many bytes."""
        payload = (_RESET + codec.encode_parse("", sql, param_oids)
                   + codec.encode_bind("", "", param_formats, params, result_formats)
                   + codec.encode_describe("P", "") + codec.encode_execute("", 0) + codec.SYNC)
        self._limit, self._taken = max_bytes, 0
        try:
            replies = await self._roundtrip(payload, syncs=2)
        finally:
            self._limit = None
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
