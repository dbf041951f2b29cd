"""Calendar arithmetic for date and timestamp columns: periods, truncation, ISO text, intervals.

A time attribute's cells are calendar intervals (``dpsql.temporal``); the SQL compiler
evaluates ``date_trunc``, ``EXTRACT`` and interval arithmetic on their ends
(``dpsql.sql.cells``).  Both need the same calendar, written once here in plain Python
(proleptic Gregorian, as PostgreSQL, DuckDB and Spark use), with no knowledge of SQL or of
the declared domain.

Conventions follow PostgreSQL: weeks start on Monday (ISO, ``date_trunc('week', …)``),
``EXTRACT(dow …)`` is 0 for Sunday, ``EXTRACT(week …)`` is the ISO week number, quarters
start in January, April, July and October.

The ISO text grammar (:data:`DATE_PATTERN`, :data:`TIMESTAMP_PATTERN`) is the one text form
a CSV may hold for a time column: ``YYYY-MM-DD`` and ``YYYY-MM-DD HH:MM[:SS[.ffffff]]``
(``T`` or a blank between date and time), years 0001-9999, no time zone offset.  Anything
else is unreadable, never guessed at (``docs/domains.md``).
"""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass

__all__ = ["DATE_UNITS", "TIMESTAMP_UNITS", "TIME_UNITS", "TIME_PATTERN", "DAY_MICROS", "parse_time", "day_micros",
           "time_of", "truncate_time", "EXTRACT_FIELDS", "truncate", "advance", "extract",
           "parse_date", "parse_timestamp", "Interval", "parse_interval", "DATE_PATTERN",
           "TIMESTAMP_PATTERN", "days_in_month", "iso_text"]

DATE_UNITS = ("day", "week", "month", "quarter", "year")
TIMESTAMP_UNITS = ("second", "minute", "hour") + DATE_UNITS
#: the periods of a time of day (a TIME column: no calendar)
TIME_UNITS = ("second", "minute", "hour")
#: EXTRACT / date_part fields and the unit whose periods each is constant on.
EXTRACT_FIELDS = {"year": "year", "quarter": "quarter", "month": "month", "week": "week",
                  "day": "day", "dow": "day", "isodow": "day", "doy": "day", "hour": "hour",
                  "minute": "minute"}
_UNIT_ALIASES = {"days": "day", "weeks": "week", "months": "month", "quarters": "quarter", "years": "year",
                 "hours": "hour", "minutes": "minute", "mon": "month", "mons": "month", "yr": "year",
                 "yrs": "year", "d": "day", "h": "hour", "min": "minute", "mins": "minute",
                 "second": "second", "seconds": "second", "sec": "second", "secs": "second", "s": "second"}

# Portable regular expressions (RE2, POSIX AREs, java.util.regex alike: no escapes, no classes
# but explicit brackets).  The calendar check (day within its month) is separate.
DATE_PATTERN = "^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])$"
TIMESTAMP_PATTERN = ("^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])[ T]([01][0-9]|2[0-3]):[0-5][0-9]"
                     "(:[0-5][0-9]([.][0-9]{1,6})?)?$")

#: a time of day: ``HH:MM[:SS[.ffffff]]``, 00:00 to 23:59:59.999999 (no zone, no 24:00)
TIME_PATTERN = "^([01][0-9]|2[0-3]):[0-5][0-9](:[0-5][0-9]([.][0-9]{1,6})?)?$"
DAY_MICROS = 86_400_000_000


def normal_unit(unit: str) -> str:
    u = unit.strip().lower()
    return _UNIT_ALIASES.get(u, u)


def days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if year % 4 == 0 and (year % 100 != 0 or year % 400 == 0) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def truncate(value: dt.date, unit: str) -> dt.date:
    """The first instant of the ``unit`` period holding ``value`` (same type as ``value``)."""
    unit = normal_unit(unit)
    is_ts = isinstance(value, dt.datetime)
    if unit in ("minute", "hour", "second"):
        if not is_ts:
            return value
        assert isinstance(value, dt.datetime)
        if unit == "second":
            return value.replace(microsecond=0)
        if unit == "minute":
            return value.replace(second=0, microsecond=0)
        return value.replace(minute=0, second=0, microsecond=0)
    day = value.date() if is_ts else value     # type: ignore[attr-defined]
    if unit == "day":
        out = day
    elif unit == "week":
        out = day - dt.timedelta(days=day.weekday())
    elif unit == "month":
        out = day.replace(day=1)
    elif unit == "quarter":
        out = day.replace(month=(day.month - 1) // 3 * 3 + 1, day=1)
    elif unit == "year":
        out = day.replace(month=1, day=1)
    else:
        raise ValueError(f"unknown calendar unit {unit!r}")
    return dt.datetime.combine(out, dt.time()) if is_ts else out


def truncate_time(value: dt.time, unit: str) -> dt.time:
    """The start of the second, minute or hour holding a time of day."""
    width = {"second": 1_000_000, "minute": 60_000_000, "hour": 3_600_000_000}[normal_unit(unit)]
    return time_of(day_micros(value) // width * width)


def advance(start: dt.date, unit: str, n: int = 1) -> dt.date:
    """``start`` moved by ``n`` whole ``unit`` periods (months keep the day, clipped to the
    month's end as PostgreSQL does)."""
    unit = normal_unit(unit)
    if unit == "second":
        return start + dt.timedelta(seconds=n)
    if unit == "minute":
        return start + dt.timedelta(minutes=n)
    if unit == "hour":
        return start + dt.timedelta(hours=n)
    if unit == "day":
        return start + dt.timedelta(days=n)
    if unit == "week":
        return start + dt.timedelta(days=7 * n)
    months = {"month": 1, "quarter": 3, "year": 12}[unit] * n
    return _add_months(start, months)


def _add_months(value: dt.date, months: int) -> dt.date:
    index = value.year * 12 + value.month - 1 + months
    year, month = divmod(index, 12)
    if not 1 <= year <= 9999:
        raise OverflowError("date out of range")
    return value.replace(year=year, month=month + 1, day=min(value.day, days_in_month(year, month + 1)))


def extract(field: str, value: dt.date) -> int:
    """``EXTRACT(field FROM value)`` as PostgreSQL computes it (integers only)."""
    f = field.strip().lower()
    if isinstance(value, dt.time):       # a time of day has no calendar fields (PostgreSQL refuses them)
        if f not in ("hour", "minute"):
            raise ValueError(f"field {field!r} of a time")
        return value.hour if f == "hour" else value.minute
    day = value.date() if isinstance(value, dt.datetime) else value
    if f == "year":
        return day.year
    if f == "quarter":
        return (day.month - 1) // 3 + 1
    if f == "month":
        return day.month
    if f == "week":
        return day.isocalendar()[1]
    if f == "day":
        return day.day
    if f == "dow":
        return day.isoweekday() % 7
    if f == "isodow":
        return day.isoweekday()
    if f == "doy":
        return day.timetuple().tm_yday
    if f in ("hour", "minute"):
        if not isinstance(value, dt.datetime):
            return 0
        return value.hour if f == "hour" else value.minute
    raise ValueError(f"unknown field {field!r}")


def parse_date(text: str) -> dt.date | None:
    """A ``YYYY-MM-DD`` text as a date, or None (the Python twin of the reader's SQL)."""
    if not isinstance(text, str) or not re.fullmatch(DATE_PATTERN, text):
        return None
    y, m, d = int(text[:4]), int(text[5:7]), int(text[8:10])
    if y < 1 or d > days_in_month(y, m):
        return None
    return dt.date(y, m, d)


def parse_timestamp(text: str) -> dt.datetime | None:
    """A ``YYYY-MM-DD[ T]HH:MM[:SS[.ffffff]]`` text as a naive datetime, or None; a date
    alone is midnight (both spellings are a TIMESTAMP literal in SQL)."""
    if not isinstance(text, str):
        return None
    day = parse_date(text[:10]) if len(text) >= 10 else None
    if day is None:
        return None
    if len(text) == 10:
        return dt.datetime.combine(day, dt.time())
    if not re.fullmatch(TIMESTAMP_PATTERN, text):
        return None
    hh, mm = int(text[11:13]), int(text[14:16])
    ss = int(text[17:19]) if len(text) > 16 else 0
    frac = text[20:] if len(text) > 19 else ""
    micro = int((frac + "000000")[:6]) if frac else 0
    return dt.datetime.combine(day, dt.time(hh, mm, ss, micro))


def parse_time(text: str) -> dt.time | None:
    """A ``HH:MM[:SS[.ffffff]]`` text as a time of day, or None (the Python twin of the
    reader's SQL: ``dpsql.measure.reader.time_text_sql``)."""
    if not isinstance(text, str) or not re.fullmatch(TIME_PATTERN, text):
        return None
    ss = int(text[6:8]) if len(text) > 5 else 0
    micro = int((text[9:] + "000000")[:6]) if len(text) > 8 else 0
    return dt.time(int(text[:2]), int(text[3:5]), ss, micro)


def day_micros(value: dt.time) -> int:
    """Microseconds since midnight of a time of day."""
    return ((value.hour * 60 + value.minute) * 60 + value.second) * 1_000_000 + value.microsecond


def time_of(micros: int) -> dt.time:
    """The inverse of :func:`day_micros` (``0 <= micros < DAY_MICROS``)."""
    s, us = divmod(micros, 1_000_000)
    m, s = divmod(s, 60)
    h, m = divmod(m, 60)
    return dt.time(h, m, s, us)


def iso_text(value: dt.date | dt.time) -> str:
    """PostgreSQL's output form: ``2013-06-01``, ``2013-06-01 10:00:00[.5]``, ``10:00:00[.5]``."""
    if isinstance(value, dt.time):
        text = value.replace(microsecond=0, tzinfo=None).isoformat()
        return text + (f".{value.microsecond:06d}".rstrip("0") if value.microsecond else "")
    if isinstance(value, dt.datetime):
        # the year padded by hand: strftime's %Y writes year 1 as "1", which PostgreSQL
        # reads as 2001 (a literal of an axis in years 1..999 named another instant)
        text = f"{value.year:04d}" + value.strftime("-%m-%d %H:%M:%S")
        if value.microsecond:
            text += f".{value.microsecond:06d}".rstrip("0")
        return text
    return value.isoformat()


@dataclass(frozen=True)
class Interval:
    """A SQL interval: whole months, days and microseconds, added field by field as
    PostgreSQL does (months first, clipped to the month's end; then days; then time)."""

    months: int = 0
    days: int = 0
    micros: int = 0

    def __neg__(self) -> Interval:
        return Interval(-self.months, -self.days, -self.micros)

    def __add__(self, other):
        if isinstance(other, Interval):
            return Interval(self.months + other.months, self.days + other.days, self.micros + other.micros)
        return self.__radd__(other)

    def __radd__(self, other):
        if not isinstance(other, dt.date):
            return NotImplemented
        # date ± interval is a timestamp in PostgreSQL (midnight of the date, then moved)
        base = other if isinstance(other, dt.datetime) else dt.datetime.combine(other, dt.time())
        moved = _add_months(base, self.months) if self.months else base
        return moved + dt.timedelta(days=self.days, microseconds=self.micros)

    def __rsub__(self, other):
        if not isinstance(other, dt.date):
            return NotImplemented
        return (-self).__radd__(other)


_INTERVAL_PART = re.compile(r"\s*([+-]?\d+)\s*([a-zA-Z]+)\s*")


def parse_interval(text: str, unit: str | None = None) -> Interval | None:
    """``'7 days'``, ``'1 month 2 days'``, or a number with a separate unit
    (``INTERVAL '7' DAY``); None when the text is not of that form."""
    if unit is not None:
        text = f"{text} {unit}"
    pos, months, days, micros, parts = 0, 0, 0, 0, 0
    while pos < len(text):
        m = _INTERVAL_PART.match(text, pos)
        if m is None:
            return None
        n, u = int(m.group(1)), normal_unit(m.group(2))
        if u in ("month", "quarter", "year"):
            months += n * {"month": 1, "quarter": 3, "year": 12}[u]
        elif u in ("day", "week"):
            days += n * (7 if u == "week" else 1)
        elif u in ("hour", "minute", "second"):
            micros += n * {"hour": 3_600_000_000, "minute": 60_000_000, "second": 1_000_000}[u]
        else:
            return None
        pos, parts = m.end(), parts + 1
    return Interval(months, days, micros) if parts else None
