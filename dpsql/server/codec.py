"""Sans-IO codec for the PostgreSQL frontend/backend protocol, version 3.0.

Framing (``FrameReader``) turns a byte stream into messages and enforces the size limit;
the ``encode_*`` functions build backend messages and the ``decode_*`` functions parse
frontend message bodies.  The shadow-catalog client (``shadow.py``) speaks the other side,
so the frontend encoders and backend decoders it needs live here too.  Nothing in this
module touches a socket, which is what lets the state machine be tested on byte strings.

Reference: PostgreSQL documentation, chapter 55 "Frontend/Backend Protocol" (message
formats in 55.7).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

PROTOCOL_3_0 = 196608          # (3 << 16) | 0
SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102
DEFAULT_MAX_MESSAGE = 16 * 1024 * 1024
MAX_STARTUP_PACKET = 10_000

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
_U32 = struct.Struct("!I")


class ProtocolViolation(Exception):
    """The peer broke the framing or sent a malformed body (SQLSTATE 08P01)."""

    sqlstate = "08P01"


# -- framing -----------------------------------------------------------------------------------

class Oversize:
    """Stands for the body of a message longer than the statement limit: the body was
    discarded as it arrived (never buffered) and the message is answered with 54000."""

    def __init__(self, size: int, limit: int) -> None:
        self.size = size
        self.limit = limit

    def __len__(self) -> int:
        return self.size


class FrameReader:
    """Accumulates bytes and yields complete messages; never buffers past the size limits.

    Messages longer than ``max_message`` break the connection (08P01).  Typed messages whose
    body is longer than ``max_statement`` (when set) are yielded at once as ``(kind,
    Oversize(n))`` and their remaining bytes are dropped as they arrive, so a client may send
    a too-long statement, get 54000 and carry on, without the server holding or parsing it."""

    def __init__(self, max_message: int = DEFAULT_MAX_MESSAGE, max_statement: int | None = None) -> None:
        self._buf = bytearray()
        self.max_message = max_message
        self.max_statement = max_statement
        self._skip = 0
        self.discarded = 0          # bytes of oversize messages dropped so far (the server throttles them)

    def feed(self, data: bytes) -> None:
        if self._skip:
            n = min(self._skip, len(data))
            self._skip -= n
            self.discarded += n
            data = data[n:]
        self._buf += data

    @property
    def skipping(self) -> bool:
        return self._skip > 0

    @property
    def buffered(self) -> int:
        return len(self._buf)

    def needed(self, typed: bool) -> int:
        """How many more bytes the next message needs (at least 1 when incomplete)."""
        head = 5 if typed else 4
        if len(self._buf) < head:
            return head - len(self._buf)
        length = _I32.unpack_from(self._buf, head - 4)[0]
        return max(0, head - 4 + length - len(self._buf))

    def next_startup(self) -> bytes | None:
        """The body of an untyped startup-phase packet (code + payload), or None if incomplete."""
        if len(self._buf) < 4:
            return None
        length = _I32.unpack_from(self._buf, 0)[0]
        if length < 8 or length > MAX_STARTUP_PACKET:
            raise ProtocolViolation(f"invalid startup packet length {length}")
        if len(self._buf) < length:
            return None
        body = bytes(self._buf[4:length])
        del self._buf[:length]
        return body

    def next_message(self) -> tuple[bytes, bytes | Oversize] | None:
        """``(type, body)`` of the next typed message, or None if incomplete."""
        if len(self._buf) < 5:
            return None
        length = _I32.unpack_from(self._buf, 1)[0]
        if length < 4:
            raise ProtocolViolation(f"invalid message length {length}")
        if length > self.max_message:
            raise ProtocolViolation(f"message of {length} bytes exceeds the limit of {self.max_message}")
        if self.max_statement is not None and length - 4 > self.max_statement:
            kind = bytes(self._buf[0:1])
            take = min(len(self._buf) - 5, length - 4)
            del self._buf[:5 + take]
            self.discarded += 5 + take
            self._skip = length - 4 - take
            return kind, Oversize(length - 4, self.max_statement)
        if len(self._buf) < 1 + length:
            return None
        kind = bytes(self._buf[0:1])
        body = bytes(self._buf[5:1 + length])
        del self._buf[:1 + length]
        return kind, body


def message(kind: bytes, body: bytes = b"") -> bytes:
    return kind + _I32.pack(len(body) + 4) + body


def cstr(text: str) -> bytes:
    data = text.encode("utf-8")
    if b"\0" in data:
        raise ProtocolViolation("string contains a NUL byte")
    return data + b"\0"


class BodyReader:
    """Cursor over one message body; every read is bounds-checked (08P01 otherwise)."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.pos = 0

    def _take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.body):
            raise ProtocolViolation("message body is shorter than its fields")
        out = self.body[self.pos:self.pos + n]
        self.pos += n
        return out

    def int16(self) -> int:
        return _I16.unpack(self._take(2))[0]

    def int32(self) -> int:
        return _I32.unpack(self._take(4))[0]

    def uint32(self) -> int:
        return _U32.unpack(self._take(4))[0]

    def byte(self) -> bytes:
        return self._take(1)

    def cstring(self) -> str:
        end = self.body.find(b"\0", self.pos)
        if end < 0:
            raise ProtocolViolation("unterminated string")
        raw = self.body[self.pos:end]
        self.pos = end + 1
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolViolation("invalid UTF-8 in string") from None

    def raw(self, n: int) -> bytes:
        return self._take(n)

    def rest(self) -> bytes:
        return self._take(len(self.body) - self.pos)

    def done(self) -> None:
        if self.pos != len(self.body):
            raise ProtocolViolation("unexpected bytes after the message fields")


# -- startup-phase packets (frontend) ---------------------------------------------------------

@dataclass(frozen=True)
class Startup:
    major: int
    minor: int
    params: dict[str, str]


@dataclass(frozen=True)
class CancelKey:
    pid: int
    secret: bytes


def decode_startup(body: bytes) -> Startup | CancelKey | str:
    """A StartupMessage, a CancelRequest, or ``"ssl"`` / ``"gssenc"`` for the encryption probes."""
    r = BodyReader(body)
    code = r.int32()
    if code == SSL_REQUEST:
        r.done()
        return "ssl"
    if code == GSSENC_REQUEST:
        r.done()
        return "gssenc"
    if code == CANCEL_REQUEST:
        pid = r.int32()
        secret = r.rest()
        if not 4 <= len(secret) <= 256:
            raise ProtocolViolation("invalid cancel key length")
        return CancelKey(pid, secret)
    major, minor = code >> 16, code & 0xFFFF
    params: dict[str, str] = {}
    while True:
        name = r.cstring()
        if name == "":
            break
        params[name] = r.cstring()
    r.done()
    return Startup(major, minor, params)


def encode_startup(params: dict[str, str]) -> bytes:
    body = _I32.pack(PROTOCOL_3_0) + b"".join(cstr(k) + cstr(v) for k, v in params.items()) + b"\0"
    return _I32.pack(len(body) + 4) + body


def encode_cancel_request(pid: int, secret: bytes) -> bytes:
    body = _I32.pack(CANCEL_REQUEST) + _I32.pack(pid) + secret
    return _I32.pack(len(body) + 4) + body


# -- frontend message bodies (decoded by the server) ---------------------------------------

@dataclass(frozen=True)
class Parse:
    name: str
    query: str
    param_oids: tuple[int, ...]


@dataclass(frozen=True)
class Bind:
    portal: str
    statement: str
    param_formats: tuple[int, ...]
    params: tuple[bytes | None, ...]
    result_formats: tuple[int, ...]


def decode_parse(body: bytes) -> Parse:
    r = BodyReader(body)
    name, query = r.cstring(), r.cstring()
    n = r.int16()
    oids = tuple(r.uint32() for _ in range(max(n, 0)))
    r.done()
    return Parse(name, query, oids)


def decode_bind(body: bytes) -> Bind:
    r = BodyReader(body)
    portal, statement = r.cstring(), r.cstring()
    formats = tuple(r.int16() for _ in range(max(r.int16(), 0)))
    params: list[bytes | None] = []
    for _ in range(max(r.int16(), 0)):
        size = r.int32()
        params.append(None if size == -1 else r.raw(size))
    results = tuple(r.int16() for _ in range(max(r.int16(), 0)))
    r.done()
    if any(f not in (0, 1) for f in formats + results):
        raise ProtocolViolation("format codes must be 0 (text) or 1 (binary)")
    return Bind(portal, statement, formats, tuple(params), results)


def decode_target(body: bytes) -> tuple[str, str]:
    """Describe and Close: ``(kind, name)`` with kind ``"S"`` or ``"P"``."""
    r = BodyReader(body)
    kind = r.byte().decode("ascii", "replace")
    name = r.cstring()
    r.done()
    if kind not in ("S", "P"):
        raise ProtocolViolation(f"invalid Describe/Close target {kind!r}")
    return kind, name


def decode_execute(body: bytes) -> tuple[str, int]:
    r = BodyReader(body)
    portal, max_rows = r.cstring(), r.int32()
    r.done()
    return portal, max_rows


def decode_query(body: bytes) -> str:
    r = BodyReader(body)
    sql = r.cstring()
    r.done()
    return sql


def decode_sasl_initial(body: bytes) -> tuple[str, bytes]:
    r = BodyReader(body)
    mechanism = r.cstring()
    size = r.int32()
    data = b"" if size == -1 else r.raw(size)
    r.done()
    return mechanism, data


# -- frontend encoders (used by the shadow client and by tests) ----------------------------

def encode_query(sql: str) -> bytes:
    return message(b"Q", cstr(sql))


def encode_parse(name: str, query: str, oids=()) -> bytes:
    return message(b"P", cstr(name) + cstr(query) + _I16.pack(len(oids))
                   + b"".join(_U32.pack(o) for o in oids))


def encode_bind(portal: str, statement: str, param_formats, params, result_formats) -> bytes:
    body = [cstr(portal), cstr(statement), _I16.pack(len(param_formats))]
    body += [_I16.pack(f) for f in param_formats]
    body.append(_I16.pack(len(params)))
    for p in params:
        body.append(_I32.pack(-1) if p is None else _I32.pack(len(p)) + p)
    body.append(_I16.pack(len(result_formats)))
    body += [_I16.pack(f) for f in result_formats]
    return message(b"B", b"".join(body))


def encode_describe(kind: str, name: str) -> bytes:
    return message(b"D", kind.encode("ascii") + cstr(name))


def encode_close(kind: str, name: str) -> bytes:
    return message(b"C", kind.encode("ascii") + cstr(name))


def encode_execute(portal: str, max_rows: int = 0) -> bytes:
    return message(b"E", cstr(portal) + _I32.pack(max_rows))


SYNC = message(b"S")
FLUSH = message(b"H")
TERMINATE = message(b"X")


# -- backend encoders ------------------------------------------------------------------------

@dataclass(frozen=True)
class Field:
    """One RowDescription entry."""

    name: str
    type_oid: int
    type_size: int = -1
    type_modifier: int = -1
    format: int = 0
    table_oid: int = 0
    column: int = 0


AUTH_OK = message(b"R", _I32.pack(0))
AUTH_CLEARTEXT = message(b"R", _I32.pack(3))
PARSE_COMPLETE = message(b"1")
BIND_COMPLETE = message(b"2")
CLOSE_COMPLETE = message(b"3")
NO_DATA = message(b"n")
EMPTY_QUERY = message(b"I")
PORTAL_SUSPENDED = message(b"s")


def encode_auth_sasl(mechanisms) -> bytes:
    return message(b"R", _I32.pack(10) + b"".join(cstr(m) for m in mechanisms) + b"\0")


def encode_auth_sasl_continue(data: bytes) -> bytes:
    return message(b"R", _I32.pack(11) + data)


def encode_auth_sasl_final(data: bytes) -> bytes:
    return message(b"R", _I32.pack(12) + data)


def encode_parameter_status(name: str, value: str) -> bytes:
    return message(b"S", cstr(name) + cstr(value))


def encode_backend_key(pid: int, secret: bytes) -> bytes:
    return message(b"K", _I32.pack(pid) + secret)


def encode_ready(status: str) -> bytes:
    return message(b"Z", status.encode("ascii"))


def encode_negotiate_version(minor: int, unrecognized) -> bytes:
    return message(b"v", _I32.pack((3 << 16) | minor) + _I32.pack(len(unrecognized))
                   + b"".join(cstr(o) for o in unrecognized))


def encode_row_description(fields) -> bytes:
    parts = [_I16.pack(len(fields))]
    for f in fields:
        parts.append(cstr(f.name) + struct.pack("!IhIhih", f.table_oid, f.column, f.type_oid,
                                                f.type_size, f.type_modifier, f.format))
    return message(b"T", b"".join(parts))


def encode_parameter_description(oids) -> bytes:
    return message(b"t", _I16.pack(len(oids)) + b"".join(_U32.pack(o) for o in oids))


def encode_data_row(values) -> bytes:
    parts = [_I16.pack(len(values))]
    for v in values:
        parts.append(_I32.pack(-1) if v is None else _I32.pack(len(v)) + v)
    return message(b"D", b"".join(parts))


def encode_command_complete(tag: str) -> bytes:
    return message(b"C", cstr(tag))


def encode_notice_fields(kind: bytes, fields: dict[str, str]) -> bytes:
    body = b"".join(code.encode("ascii") + cstr(value) for code, value in fields.items() if value is not None)
    return message(kind, body + b"\0")


def error_fields(sqlstate: str, msg: str, *, severity: str = "ERROR", hint: str | None = None,
                 position: int | None = None, detail: str | None = None) -> dict[str, str]:
    """An ErrorResponse's fields by their one-letter codes (severity, SQLSTATE, message, and
    detail, hint and position where given)."""
    fields = {"S": severity, "V": severity, "C": sqlstate, "M": msg}
    if detail:
        fields["D"] = detail
    if hint:
        fields["H"] = hint
    if position:
        fields["P"] = str(position)
    return fields


def encode_error(sqlstate: str, msg: str, *, severity: str = "ERROR", hint: str | None = None,
                 position: int | None = None, detail: str | None = None) -> bytes:
    return encode_notice_fields(b"E", error_fields(sqlstate, msg, severity=severity, hint=hint,
                                                   position=position, detail=detail))


# -- backend decoders (used by the shadow client and by tests) -----------------------------

def decode_fields(body: bytes) -> dict[str, str]:
    """ErrorResponse / NoticeResponse body → ``{code: value}``."""
    r = BodyReader(body)
    out = {}
    while True:
        code = r.byte()
        if code == b"\0":
            break
        out[code.decode("ascii", "replace")] = r.cstring()
    return out


def decode_row_description(body: bytes) -> list[Field]:
    r = BodyReader(body)
    fields = []
    for _ in range(max(r.int16(), 0)):
        name = r.cstring()
        table_oid, column, type_oid, size, modifier, fmt = struct.unpack("!IhIhih", r.raw(18))
        fields.append(Field(name, type_oid, size, modifier, fmt, table_oid, column))
    r.done()
    return fields


def decode_data_row(body: bytes) -> list[bytes | None]:
    r = BodyReader(body)
    out: list[bytes | None] = []
    for _ in range(max(r.int16(), 0)):
        size = r.int32()
        out.append(None if size == -1 else r.raw(size))
    r.done()
    return out


def decode_parameter_description(body: bytes) -> tuple[int, ...]:
    r = BodyReader(body)
    oids = tuple(r.uint32() for _ in range(max(r.int16(), 0)))
    r.done()
    return oids


def decode_auth(body: bytes) -> tuple[int, bytes]:
    r = BodyReader(body)
    return r.int32(), r.rest()
