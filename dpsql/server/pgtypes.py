"""PostgreSQL type OIDs and the text/binary encodings of the values dpsql returns.

dpsql answers carry few types: group keys are ``text``, ``integer``, ``date``,
``timestamp`` or ``time``, noisy aggregates are ``integer`` (counts) or ``double``.  They go out as
``text`` (25), ``int8`` (20), ``date`` (1082), ``timestamp`` (1114), ``time`` (1083) and ``float8`` (701);
``numeric`` (1700), ``timestamptz`` (1184) and ``bool`` (16) are here for parameters and
completeness.  Text forms follow PostgreSQL's output functions (``Infinity``, ``NaN``,
``t``/``f``); binary forms follow the type send/recv functions (numeric: base-10000 digits,
``numeric_send`` in src/backend/utils/adt/numeric.c).
"""

from __future__ import annotations

import datetime
import math
import struct
from decimal import Decimal, InvalidOperation
from dpsql.timeaxis import day_micros, iso_text, time_of

BOOL, BYTEA, INT8, INT2, INT4, TEXT, OID, FLOAT4, FLOAT8, UNKNOWN, VARCHAR, BPCHAR, NUMERIC = (
    16, 17, 20, 21, 23, 25, 26, 700, 701, 705, 1043, 1042, 1700)
NAME = 19
DATE, TIMESTAMP, TIMESTAMPTZ, TIME = 1082, 1114, 1184, 1083
_EPOCH = datetime.date(2000, 1, 1)          # PostgreSQL's binary date/time origin

TYPE_SIZES = {BOOL: 1, INT8: 8, INT2: 2, INT4: 4, OID: 4, FLOAT4: 4, FLOAT8: 8, NAME: 64, DATE: 4, TIMESTAMP: 8,
              TIMESTAMPTZ: 8, TIME: 8}

_BY_NAME = {
    "text": TEXT, "varchar": TEXT, "character varying": TEXT, "string": TEXT,
    "integer": INT8, "int": INT8, "int8": INT8, "bigint": INT8, "int4": INT8, "smallint": INT8,
    "double": FLOAT8, "double precision": FLOAT8, "float8": FLOAT8, "float": FLOAT8, "real": FLOAT8,
    "numeric": NUMERIC, "decimal": NUMERIC, "boolean": BOOL, "bool": BOOL,
    "date": DATE, "timestamp": TIMESTAMP, "timestamp without time zone": TIMESTAMP,
    "time": TIME, "time without time zone": TIME,
}


class ParameterError(ValueError):
    """A bound parameter could not be decoded (SQLSTATE 22P02)."""


def oid_for(type_name: str) -> int:
    """The OID for a dpsql/engine type name; unknown names go out as text."""
    return _BY_NAME.get(type_name.strip().lower(), TEXT)


def type_size(oid: int) -> int:
    return TYPE_SIZES.get(oid, -1)


# -- output -----------------------------------------------------------------------------------

def _float_text(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    # repr is the shortest round-trip form, which is what PostgreSQL 12+ prints by default
    text = repr(v)
    return text[:-2] if text.endswith(".0") else text


def _as_int(value) -> int:
    if isinstance(value, float) or type(value).__name__.startswith("float"):
        return int(round(float(value)))
    return int(value)


def encode_text(value, oid: int) -> bytes | None:
    if value is None:
        return None
    if oid == BOOL:
        return b"t" if value else b"f"
    if oid in (INT8, INT4, INT2, OID):
        if isinstance(value, float) and not math.isfinite(value):
            return None  # an undefined integer answer is reported as NULL
        return str(_as_int(value)).encode()
    if oid in (FLOAT8, FLOAT4):
        return _float_text(float(value)).encode()
    if oid == NUMERIC:
        if isinstance(value, float):
            return _float_text(value).encode()
        return str(value).encode()
    if oid in (DATE, TIMESTAMP) and isinstance(value, datetime.date):
        return _time_text(value).encode()
    if oid == TIME and isinstance(value, datetime.time):
        return iso_text(value).encode()           # 10:05:00, 10:05:00.5 (PostgreSQL's time_out)
    return str(value).encode("utf-8")


def _time_text(value: datetime.date) -> str:
    """PostgreSQL's ISO output: ``2013-06-01``, ``2013-06-01 10:00:00``, ``… 10:00:00.5``."""
    if isinstance(value, datetime.datetime):
        text = value.strftime("%Y-%m-%d %H:%M:%S")
        return text + (f".{value.microsecond:06d}".rstrip("0") if value.microsecond else "")
    return value.isoformat()


def _micros(value: datetime.date) -> int:
    """Microseconds since 2000-01-01 00:00 (a date: its midnight), exactly (no float)."""
    if not isinstance(value, datetime.datetime):
        value = datetime.datetime.combine(value, datetime.time())
    delta = value.replace(tzinfo=None) - datetime.datetime(2000, 1, 1)
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def _numeric_binary(value) -> bytes:
    try:
        dec = value if isinstance(value, Decimal) else Decimal(
            repr(float(value)) if isinstance(value, float) else str(value))
    except InvalidOperation:
        raise ParameterError(f"not a number: {value!r}") from None
    if dec.is_nan():
        return struct.pack("!hhHh", 0, 0, 0xC000, 0)
    if dec.is_infinite():
        return struct.pack("!hhHh", 0, 0, 0xD000 if dec > 0 else 0xF000, 0)
    sign, digits, exponent = dec.as_tuple()
    # only NaN and the infinities (returned above) have a letter for an exponent
    assert isinstance(exponent, int)
    dscale = max(0, -exponent)
    # pad the digit string so the decimal point falls on a base-10000 boundary
    int_digits = "".join(map(str, digits))
    if exponent > 0:
        int_digits += "0" * exponent
        exponent = 0
    frac_len = -exponent
    int_digits = int_digits.rjust(frac_len, "0")
    whole = int_digits[:len(int_digits) - frac_len] if frac_len else int_digits
    frac = int_digits[len(int_digits) - frac_len:] if frac_len else ""
    whole = whole.lstrip("0")
    whole = "0" * ((-len(whole)) % 4) + whole
    frac = frac + "0" * ((-len(frac)) % 4)
    groups = [int(whole[i:i + 4]) for i in range(0, len(whole), 4)]
    weight = len(groups) - 1
    groups += [int(frac[i:i + 4]) for i in range(0, len(frac), 4)]
    while groups and groups[0] == 0:
        groups.pop(0)
        weight -= 1
    while groups and groups[-1] == 0:
        groups.pop()
    if not groups:
        weight = 0
    return struct.pack(f"!hhHh{len(groups)}H", len(groups), weight, 0x4000 if sign else 0, dscale, *groups)


def encode_binary(value, oid: int) -> bytes | None:
    if value is None:
        return None
    if oid == BOOL:
        return b"\x01" if value else b"\x00"
    if oid == INT8:
        if isinstance(value, float) and not math.isfinite(value):
            return None
        return struct.pack("!q", _as_int(value))
    if oid == INT4:
        return struct.pack("!i", _as_int(value))
    if oid == INT2:
        return struct.pack("!h", _as_int(value))
    if oid == FLOAT8:
        return struct.pack("!d", float(value))
    if oid == FLOAT4:
        return struct.pack("!f", float(value))
    if oid == NUMERIC:
        return _numeric_binary(value)
    if oid == DATE and isinstance(value, datetime.date):
        day = value.date() if isinstance(value, datetime.datetime) else value
        return struct.pack("!i", (day - _EPOCH).days)
    if oid == TIMESTAMP and isinstance(value, datetime.date):
        return struct.pack("!q", _micros(value))
    if oid == TIME and isinstance(value, datetime.time):
        return struct.pack("!q", day_micros(value))       # time_send: microseconds since midnight
    return str(value).encode("utf-8")


def encode_value(value, oid: int, fmt: int) -> bytes | None:
    return encode_binary(value, oid) if fmt == 1 else encode_text(value, oid)


# -- parameters -------------------------------------------------------------------------------

def _decode_numeric_binary(data: bytes) -> Decimal:
    ndigits, weight, sign, dscale = struct.unpack_from("!hhHh", data)
    if sign == 0xC000:
        return Decimal("NaN")
    if sign in (0xD000, 0xF000):
        return Decimal("Infinity") if sign == 0xD000 else Decimal("-Infinity")
    digits = struct.unpack_from(f"!{ndigits}H", data, 8)
    value = Decimal(0)
    for i, d in enumerate(digits):
        value += Decimal(d) * (Decimal(10000) ** (weight - i))
    value = value.quantize(Decimal(1).scaleb(-dscale)) if dscale else value.quantize(Decimal(1))
    return -value if sign == 0x4000 else value


def decode_param(data: bytes | None, oid: int, fmt: int):
    """A Bind parameter → the Python value the SQL compiler binds as a literal."""
    if data is None:
        return None
    try:
        if fmt == 1:
            if oid == INT2:
                return struct.unpack("!h", data)[0]
            if oid in (INT4, OID):
                return struct.unpack("!i", data)[0]
            if oid == INT8:
                return struct.unpack("!q", data)[0]
            if oid == FLOAT4:
                return struct.unpack("!f", data)[0]
            if oid == FLOAT8:
                return struct.unpack("!d", data)[0]
            if oid == BOOL:
                return data != b"\x00"
            if oid == NUMERIC:
                return _decode_numeric_binary(data)
            if oid in (TEXT, VARCHAR, BPCHAR, UNKNOWN, NAME, 0):
                return data.decode("utf-8")
            if oid == DATE:
                return _EPOCH + datetime.timedelta(days=struct.unpack("!i", data)[0])
            if oid in (TIMESTAMP, TIMESTAMPTZ):
                value = datetime.datetime(2000, 1, 1) + datetime.timedelta(microseconds=struct.unpack("!q", data)[0])
                return value if oid == TIMESTAMP else value.replace(tzinfo=datetime.UTC)
            if oid == TIME:
                return time_of(struct.unpack("!q", data)[0])
            raise ParameterError(f"binary parameters of type OID {oid} are not supported")
        text = data.decode("utf-8")
        if oid in (INT2, INT4, INT8, OID):
            return int(text)
        if oid in (FLOAT4, FLOAT8):
            return float(text)
        if oid == NUMERIC:
            return Decimal(text)
        if oid == BOOL:
            low = text.strip().lower()
            if low in ("t", "true", "yes", "on", "1"):
                return True
            if low in ("f", "false", "no", "off", "0"):
                return False
            raise ParameterError(f"invalid input syntax for type boolean: {text!r}")
        return text
    except (struct.error, ValueError, UnicodeDecodeError, InvalidOperation) as exc:
        if isinstance(exc, ParameterError):
            raise
        raise ParameterError(f"invalid parameter value for type OID {oid}") from None
