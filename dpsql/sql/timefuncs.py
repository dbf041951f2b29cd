"""Dates and timestamps in SQL expressions: literals, casts, intervals, ``date_trunc`` and
``EXTRACT``, evaluated on the cells of a time attribute (issue 30; ``docs/sql.md``, "Time").

The cell evaluator (``cells.py``) holds, per cell, the first and last value of the cell's
calendar period.  ``date_trunc`` and casts are monotone, so a result equal at both ends is
constant on the cell (the rule numeric bins follow).  ``EXTRACT`` is not monotone
(the month of a year bin runs 1..12 and back), so its value is taken only where the cell
lies inside one period of the field's unit: there the field is constant (it is a function
of that period); elsewhere the ends are made to differ so that the query is refused with
the bin named.  Semantics follow PostgreSQL: ``date_trunc`` returns a timestamp (midnight
for dates), ``date ± interval`` is a timestamp, ``date ± integer`` a date, weeks start on
Monday, ``dow`` is 0 on Sunday.  Only the SQL text and the declared domain are read.
"""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from sqlglot import exp

from dpsql.errors import DomainViolationError, UnsupportedQueryError
from dpsql.timeaxis import (DATE_UNITS, EXTRACT_FIELDS, TIME_UNITS, TIMESTAMP_UNITS, Interval, extract, iso_text,
                            normal_unit, parse_date, parse_interval, parse_time, parse_timestamp, truncate,
                            truncate_time)

__all__ = ["time_literal", "cast_time", "TRUNC_NODES", "EXTRACT_NODES", "trunc_unit", "extract_field",
           "extract_cells", "extract_on_cell", "split_message", "comparable", "add", "sub", "is_time",
           "extract_name", "cast_time_of_day"]

T = exp.DataType.Type
DATE_TYPES = {T.DATE, T.DATE32}
TIMESTAMP_TYPES = {T.TIMESTAMP, T.TIMESTAMPNTZ, T.DATETIME, T.TIMESTAMP_S, T.TIMESTAMP_MS, T.TIMESTAMP_NS}
TIMESTAMPTZ_TYPES = {T.TIMESTAMPTZ, T.TIMESTAMPLTZ}
TIME_TYPES = DATE_TYPES | TIMESTAMP_TYPES | TIMESTAMPTZ_TYPES

TRUNC_NODES = (exp.TimestampTrunc, exp.DateTrunc)
#: one-argument field functions (DuckDB's ``year(d)``, ``dayofweek(d)``, …) as EXTRACT fields
EXTRACT_NODES = {exp.Year: "year", exp.Quarter: "quarter", exp.Month: "month", exp.Day: "day",
                 exp.DayOfMonth: "day", exp.DayOfWeek: "dow", exp.DayOfYear: "doy", exp.WeekOfYear: "week",
                 exp.Week: "week", exp.Hour: "hour", exp.Minute: "minute"}
_SUPPORTED_UNITS = set(TIMESTAMP_UNITS)


def is_time(v: Any) -> bool:
    """A date, a timestamp or a time of day."""
    return isinstance(v, (dt.date, dt.time))


def cast_time_of_day(v: Any) -> dt.time | None:
    """``CAST(v AS TIME)``: text ``HH:MM[:SS[.ffffff]]``, a time, or a timestamp's time of day."""
    if v is None or isinstance(v, dt.time):
        return v
    if isinstance(v, dt.datetime):
        return (v.astimezone(dt.UTC) if v.tzinfo is not None else v).time()
    parsed = parse_time(v.strip()) if isinstance(v, str) else None
    if parsed is None:
        raise DomainViolationError(f"invalid input syntax for type time: {str(v)[:40]!r}",
                                   hint="write times of day as '10:30' or TIME '10:30:00'")
    return parsed


def _bad(text: str, what: str) -> DomainViolationError:
    return DomainViolationError(f"invalid input syntax for type {what}: {text[:40]!r}",
                                hint="write dates as '2013-06-01' and timestamps as '2013-06-01 10:00:00'")


def _parse_instant(text: str) -> dt.datetime | None:
    """ISO text with an optional zone offset (``+02``, ``+05:30``, ``Z``): aware if it has one."""
    plain = parse_timestamp(text)
    if plain is not None:
        return plain
    try:
        value = dt.datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    except ValueError:
        return None
    return value


def cast_time(v: Any, dtype) -> Any:
    """``CAST(v AS DATE | TIMESTAMP | TIMESTAMPTZ)`` of a constant or a cell's value.  An
    instant read as a date or a naive timestamp is taken in UTC (dpsql's session zone)."""
    if v is None:
        return None
    if isinstance(v, str):
        text = v.strip()
        parsed: Any = parse_date(text) if dtype in DATE_TYPES else None
        if parsed is None:
            parsed = _parse_instant(text)
        if parsed is None:
            raise _bad(v, "date" if dtype in DATE_TYPES else "timestamp")
        v = parsed
    if not isinstance(v, dt.date):
        raise DomainViolationError(f"cannot cast {type(v).__name__} {str(v)[:40]!r} to a date or timestamp",
                                   hint="cast text in ISO form, e.g. CAST('2013-06-01' AS DATE)")
    if isinstance(v, dt.datetime) and v.tzinfo is not None and dtype not in TIMESTAMPTZ_TYPES:
        v = v.astimezone(dt.UTC).replace(tzinfo=None)
    if dtype in DATE_TYPES:
        return v.date() if isinstance(v, dt.datetime) else v
    if not isinstance(v, dt.datetime):
        v = dt.datetime.combine(v, dt.time())
    if dtype in TIMESTAMPTZ_TYPES and v.tzinfo is None:
        v = v.replace(tzinfo=dt.UTC)
    return v


def time_literal(node: exp.Expr) -> tuple[bool, Any]:
    """(True, value) for a constant time node: ``INTERVAL '7 days'``, ``TO_TIMESTAMP(text,
    format)``, ``TO_DATE(text, format)``, ``DATE(text)``; (False, None) otherwise."""
    if isinstance(node, exp.Interval):
        text = node.this
        if not isinstance(text, exp.Literal):
            return False, None
        unit = node.args.get("unit")
        interval = parse_interval(str(text.this), unit.name if unit is not None else None)
        if interval is None:
            raise DomainViolationError(f"invalid input syntax for type interval: {str(text.this)[:40]!r}",
                                       hint="e.g. INTERVAL '7 days' or INTERVAL '1 month'")
        return True, interval
    if isinstance(node, (exp.StrToTime, exp.StrToDate)):
        text, fmt = node.this, node.args.get("format")
        if not (isinstance(text, exp.Literal) and text.is_string):
            return False, None
        value: Any = None
        if isinstance(fmt, exp.Literal):
            try:
                value = dt.datetime.strptime(text.this, str(fmt.this))
            except ValueError:
                value = None
        if value is None:
            value = _parse_instant(text.this)
        if value is None:
            raise _bad(text.this, "timestamp")
        return True, (value.date() if isinstance(node, exp.StrToDate) and isinstance(value, dt.datetime) else value)
    if isinstance(node, (exp.UnixToTime, exp.Date, exp.TsOrDsToDate, exp.TimeStrToTime)):
        # TO_TIMESTAMP('…') with one text argument (sqlglot reads it as an epoch), DATE('…')
        text = node.this
        if isinstance(text, exp.Literal) and text.is_string:
            target = T.DATE if isinstance(node, (exp.Date, exp.TsOrDsToDate)) else T.TIMESTAMP
            return True, cast_time(text.this, target)
    return False, None


def extract_name(sql: str, pos: int | None) -> str:
    """The output name PostgreSQL gives an EXTRACT node: ``date_part`` when it was written as
    ``date_part('year', …)``, else ``extract`` (sqlglot parses both to one node; the call's
    name is the word before the nearest parenthesis left of its argument)."""
    if pos is None:
        return "extract"
    head = sql[:max(pos - 1, 0)]
    words = re.findall(r"(\w+)\s*$", head[:head.rfind("(")]) if "(" in head else []
    return "date_part" if words and words[-1].lower() == "date_part" else "extract"


def trunc_unit(node: exp.Expr) -> str:
    unit = node.args.get("unit")
    name = normal_unit(unit.name if unit is not None else "")
    if name not in _SUPPORTED_UNITS:
        raise UnsupportedQueryError(f"date_trunc to {name!r} is not supported",
                                    hint="use second, minute, hour, day, week, month, quarter or year")
    return name


def truncated(value: Any, unit: str) -> Any:
    """``date_trunc(unit, value)``: a timestamp (PostgreSQL casts a date to one first); of a
    time of day, the time at the start of its hour, minute or second (PostgreSQL casts a
    time to an interval, DuckDB has no such function: dpsql keeps the column's type)."""
    if isinstance(value, dt.time):
        if unit not in TIME_UNITS:
            raise TypeError(f"date_trunc('{unit}') of a time of day")
        return truncate_time(value, unit)
    if not isinstance(value, dt.date):
        raise TypeError("date_trunc needs a date or timestamp")
    if not isinstance(value, dt.datetime):
        value = dt.datetime.combine(value, dt.time())
    return truncate(value, unit)


def extract_field(node: exp.Expr) -> str:
    if isinstance(node, exp.Extract):
        name = node.this.name.lower() if node.this is not None else ""
    else:
        name = next(f for cls, f in EXTRACT_NODES.items() if type(node) is cls)
    if name not in EXTRACT_FIELDS:
        raise UnsupportedQueryError(f"EXTRACT({name.upper()} …) is not supported",
                                    hint="extract year, quarter, month, week, day, dow, isodow, doy, hour or minute")
    return name


def extract_cells(field: str, lo: list, hi: list, null) -> tuple[list, list]:
    """Per cell, the field at the two ends (:func:`extract_on_cell`); None where NULL.
    TypeError when a value is not a date or timestamp."""
    out_lo: list = []
    out_hi: list = []
    for a, z, is_null in zip(lo, hi, null):
        if is_null or a is None:
            out_lo.append(None)
            out_hi.append(None)
            continue
        if not is_time(a):
            raise TypeError("EXTRACT needs a date or timestamp")
        if isinstance(a, dt.time) and field not in ("hour", "minute"):
            raise TypeError(f"EXTRACT({field}) of a time of day")     # no calendar fields
        x, y = extract_on_cell(field, a, z)
        out_lo.append(x)
        out_hi.append(y)
    return out_lo, out_hi


def split_message(attr, cells, text: str) -> tuple[str, str]:
    """The refusal of a filter or grain that splits calendar bins: the bins named (label,
    first and last value) and the declared bin."""
    labels, bounds = attr.labels(), attr.bin_bounds()
    named = ", ".join(f"{labels[i]} ({iso_text(bounds[i][0])} .. {iso_text(bounds[i][1])})"
                      for i in sorted(cells)[:3])
    return (f"'{text}' splits bin(s) {named} of column '{attr.name}' (declared by {attr.bin}): the declared "
            "domain cannot tell the values inside a bin apart, so the answer would be wrong",
            f"compare with the first instant of a {attr.bin}, or group by date_trunc('{attr.bin}', {attr.name}) "
            "or a coarser unit")


def extract_on_cell(field: str, lo: Any, hi: Any) -> tuple[Any, Any]:
    """The field at a cell's two ends; when the cell spans more than one period of the
    field's unit the field is not constant on it (it is not monotone), so the ends returned
    differ even if the field's values there happen to agree."""
    unit = EXTRACT_FIELDS[field]
    a = extract(field, lo)
    if isinstance(lo, dt.time):
        same = truncate_time(lo, unit) == truncate_time(hi, unit)
    elif unit in DATE_UNITS or isinstance(lo, dt.datetime):
        same = truncate(lo, unit) == truncate(hi, unit)
    else:
        same = True       # hour or minute of a date: always 0
    return a, (a if same else _Spans(a))


class _Spans:
    """A cell end that differs from every value: the field varies inside the cell."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"{self.value!r}…"


def comparable(x: Any, v: Any) -> tuple[Any, Any]:
    """A time value and a constant made comparable as SQL compares them: text is read as a
    timestamp, a date against a timestamp is its midnight, an instant is taken in UTC."""
    if isinstance(x, dt.time) or isinstance(v, dt.time):
        # a time of day compares with a time (or text read as one) only: no implicit cast
        # between it and a date (a TypeError: the caller refuses the comparison)
        return (x, cast_time_of_day(v)) if isinstance(x, dt.time) and isinstance(v, str) else (x, v)
    if is_time(x) and isinstance(v, str):
        parsed = _parse_instant(v.strip())
        if parsed is None:
            raise _bad(v, "timestamp")
        v = parsed
    if is_time(x) and is_time(v):
        x, v = _naive(x), _naive(v)
        if isinstance(x, dt.datetime) != isinstance(v, dt.datetime):
            x, v = _midnight(x), _midnight(v)
    return x, v


def _naive(v: dt.date) -> dt.date:
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return v.astimezone(dt.UTC).replace(tzinfo=None)
    return v


def _midnight(v: dt.date) -> dt.datetime:
    return v if isinstance(v, dt.datetime) else dt.datetime.combine(v, dt.time())


def add(a: Any, b: Any) -> Any:
    """``a + b`` with PostgreSQL's date rules (date + integer is a date)."""
    if isinstance(a, dt.time) or isinstance(b, dt.time):
        raise TypeError("arithmetic on a time of day")     # (it wraps at midnight: not monotone)
    if isinstance(a, int) and is_time(b):
        a, b = b, a
    if is_time(a) and isinstance(b, int) and not isinstance(b, bool):
        if isinstance(a, dt.datetime):
            raise TypeError("timestamp + integer")
        return a + dt.timedelta(days=b)
    if isinstance(a, Interval) and is_time(b):
        return b + a
    return a + b


def sub(a: Any, b: Any) -> Any:
    """``a - b``: date - integer is a date, date - date the number of days between them."""
    if isinstance(a, dt.time) or isinstance(b, dt.time):
        raise TypeError("arithmetic on a time of day")
    if is_time(a) and isinstance(b, int) and not isinstance(b, bool):
        if isinstance(a, dt.datetime):
            raise TypeError("timestamp - integer")
        return a - dt.timedelta(days=b)
    if is_time(a) and is_time(b) and not isinstance(a, dt.datetime) and not isinstance(b, dt.datetime):
        return (a - b).days
    return a - b
