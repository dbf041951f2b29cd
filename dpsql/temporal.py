"""Date and timestamp attributes: a time axis cut into calendar bins (``docs/domains.md``, "Time").

A time column is an *ordered* attribute like an integer range: its cells are consecutive
calendar intervals (days, ISO weeks, months, quarters, years; hours, minutes and seconds
for timestamps) between public bounds ``lo`` and ``hi``, so a date range is a contiguous run of
cells and the planner's range and prefix strategies apply to it unchanged.

* :class:`DateRange` (``type = "date"``) holds calendar days.  A bin ``[a, b]`` holds the
  days ``a..b`` (both inclusive, like an integer bin).
* :class:`TimestampRange` (``type = "timestamp"``) holds instants at microsecond
  resolution, read as *wall-clock time in the declared* ``timezone`` (default ``"UTC"``):
  a naive value (a ``TIMESTAMP`` column, ISO text) is taken to be in that zone; a value
  with a zone (``TIMESTAMPTZ``) is converted to it, so the bins are the zone's calendar
  days, hours, …  Bin ``[a, b]`` holds ``a`` up to ``b`` inclusive, ``b`` being the last
  microsecond before the next bin.

The reader is total, as for every kind: NULL goes to the NULL cell (or the invalid place),
and so does anything that is not a value of the axis, including a value before ``lo`` or
after ``hi`` (a time series must not pile out-of-period rows into its first or last day,
unlike an integer's clamped end bins) and text that is not ISO 8601.  Public metadata only.
"""

from __future__ import annotations

import bisect
from abc import abstractmethod
import datetime as dt
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np

from dpsql.domain import MAX_CELLS, Attribute, _normalise_op
from dpsql.errors import ConfigError, DomainViolationError
from dpsql.timeaxis import (DATE_UNITS, DAY_MICROS, TIMESTAMP_UNITS, advance, day_micros, iso_text, parse_date,
                            parse_timestamp, time_of, truncate)

__all__ = ["Temporal", "DateRange", "TimestampRange", "build_temporal", "TEMPORAL_KEYS", "time_number",
           "number_time"]

TEMPORAL_KEYS = {"date": {"type", "lo", "hi", "bin", "nullable"},
                 "timestamp": {"type", "lo", "hi", "bin", "nullable", "timezone"}}
_ONE_MICRO = dt.timedelta(microseconds=1)
_ZONED = re.compile(r"(.{16}(?::\d{2}(?:[.]\d{1,6})?)?) ?(?:Z|[+-]\d{2}(?::?\d{2})?)")   # ISO text with a zone


# A quantile of a time column is computed on numbers (postprocess reads it off the cells'
# cumulative counts like any other): a day as days since 1970-01-01, an instant (wall time) as
# seconds since 1970-01-01 00:00 with its microseconds, exact in a double for years 1-9999
# (at most 2.6e11 s, so 1e-6 s is within its 53 bits).
_EPOCH_DAY = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)


def time_number(value: dt.date | dt.datetime | dt.time) -> float:
    """A date as days since 1970-01-01, a (naive, wall-time) datetime as seconds since then,
    a time of day as seconds since midnight."""
    if isinstance(value, dt.time):
        return day_micros(value) / 1e6
    if isinstance(value, dt.datetime):
        d = value.replace(tzinfo=None) - _EPOCH
        return d.days * 86400.0 + d.seconds + d.microseconds / 1e6
    return float((value - _EPOCH_DAY).days)


def number_time(x: float, kind: str) -> dt.date | dt.datetime | dt.time:
    """The inverse of :func:`time_number`: a ``"date"`` from days (rounded to the day), a
    ``"timestamp"`` from seconds (to the microsecond) or, for a date column's interpolated
    quantile, from days; a ``"time"`` of day from seconds since midnight."""
    if kind == "date":
        return _EPOCH_DAY + dt.timedelta(days=round(x))
    if kind == "time":          # inside the day, to the microsecond
        return time_of(min(max(round(x * 1e6), 0), DAY_MICROS - 1))
    return _EPOCH + dt.timedelta(microseconds=round(x * 1e6))


@dataclass(frozen=True)
class Temporal(Attribute):
    """Shared machinery of the two time kinds: bins by their first instant (wall time)."""

    lo: Any = None
    hi: Any = None
    bin: str = "day"
    _starts: tuple = field(default=(), init=False, repr=False, compare=False, hash=False)
    _end: Any = field(default=None, init=False, repr=False, compare=False, hash=False)

    kind = "temporal"
    _step: ClassVar[dt.timedelta]       # the resolution: one day, or one microsecond
    units: ClassVar[tuple[str, ...]] = ()
    bin_example: ClassVar[str] = "month"      # the refusal's hint
    python_type: ClassVar[type] = dt.date
    sql_type = "DATE"

    def _init(self, name: str, lo: Any, hi: Any, bin: str, nullable: bool) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "nullable_", nullable)
        object.__setattr__(self, "bin", bin)
        self._check_common()
        if bin not in self.units:
            self._fail(f"bin must be one of {', '.join(self.units)}, got {bin!r}",
                       f'e.g. bin = "{self.bin_example}"')
        lo_v, hi_v, end = self._bounds_of(lo, hi)
        if lo_v > hi_v:
            self._fail(f"lo ({iso_text(lo_v)}) is after hi ({iso_text(hi_v)})", "swap lo and hi")
        object.__setattr__(self, "lo", lo_v)
        object.__setattr__(self, "hi", hi_v)
        object.__setattr__(self, "_end", end)
        object.__setattr__(self, "_starts", tuple(self._bin_starts(lo_v, end)))

    def _bin_starts(self, lo: Any, end: Any) -> list:
        """The bins' first instants from ``lo`` up to ``end`` (exclusive), by the calendar."""
        starts = [lo]
        nxt = _next_start(truncate(lo, self.bin), self.bin)
        while nxt is not None and nxt < end:
            starts.append(nxt)
            if len(starts) > MAX_CELLS:
                self._fail(f"more than {MAX_CELLS} bins", "use a coarser bin or a shorter period")
            nxt = _next_start(nxt, self.bin)
        return starts

    @abstractmethod
    def _bounds_of(self, lo: Any, hi: Any) -> tuple[Any, Any, Any]:
        """(lo, hi, the end instant) of the declared period as this kind's values."""

    # --- cells ----------------------------------------------------------------------------
    @property
    def size(self) -> int:
        return len(self._starts) + (1 if self.nullable else 0)

    def thresholds(self) -> tuple:
        """Bin starts after the first (wall time); the bin of ``x`` is ``bisect_right``."""
        return self._starts[1:]

    @property
    def end(self) -> Any:
        """The first instant after the axis (exclusive; wall time)."""
        return self._end

    def _last_values(self) -> list:
        nexts = list(self._starts[1:]) + [self._end]
        return [n - self._step for n in nexts]

    def bin_bounds(self) -> list[Any]:
        """Per cell ``(first, last)`` value, both inclusive; None for the NULL cell."""
        return list(zip(self._starts, self._last_values())) + ([None] if self.nullable else [])

    def labels(self) -> list[Any]:
        return [self._label(a, b) for a, b in zip(self._starts, self._last_values())] + \
            ([None] if self.nullable else [])

    def _label(self, first: Any, last: Any) -> str:
        """The period's name: ``2013-06-01`` (day, week: its first day), ``2013-06``,
        ``2013-Q2``, ``2013``, ``2013-06-01 10:00`` (hour, minute), ``2013-06-01 10:00:05``
        (second); years padded to four digits (strftime's ``%Y`` writes year 1 as ``1``)."""
        if self.bin in ("day", "week"):
            return iso_text(first if not isinstance(first, dt.datetime) else first.date())
        if self.bin == "month":
            return f"{first.year:04d}" + first.strftime("-%m")
        if self.bin == "quarter":
            return f"{first.year}-Q{(first.month - 1) // 3 + 1}"
        if self.bin == "year":
            return f"{first.year:04d}"
        if self.bin == "second":
            return f"{first.year:04d}" + first.strftime("-%m-%d %H:%M:%S")
        return f"{first.year:04d}" + first.strftime("-%m-%d %H:%M")

    def cell_values(self) -> np.ndarray | None:
        return None          # no SUM or AVG of a date

    def quantile_cells(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per cell, the numbers (:func:`time_number`) a quantile reads: the period's first
        value (what a quantile in it reports: exact when the rows are on period starts,
        e.g. minutes in minute bins) and its first and last value (its interval includes the
        period); NaN for the NULL cell."""
        bounds = self.bin_bounds()
        low = np.array([np.nan if b is None else time_number(b[0]) for b in bounds])
        high = np.array([np.nan if b is None else time_number(b[1]) for b in bounds])
        return low.copy(), low, high

    # --- values ---------------------------------------------------------------------------
    @abstractmethod
    def wall_value(self, value: Any) -> Any:
        """A Python value as a point of this axis (wall time), or None when it is not one."""

    def index_of(self, value: Any) -> int:
        if value is None:
            return self.null_place
        v = self.wall_value(value)
        if v is None or not self._within(v):
            return self.invalid_index
        return bisect.bisect_right(self._starts, v) - 1

    def contains_value(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        v = self.wall_value(value)
        return v is not None and self._within(v)

    def _within(self, v: Any) -> bool:
        """Whether the point ``v`` lies on the axis (its end is exclusive)."""
        return bool(self.lo <= v < self._end)

    def literal(self, value: Any) -> Any:
        """A SQL literal (ISO text, a date, a datetime) as a point to compare cells with,
        in this axis' type; DomainViolationError when it is not a date or timestamp."""
        if isinstance(value, str):
            text = value.strip()
            parsed = parse_timestamp(text)
            zoned = _ZONED.fullmatch(text) if parsed is None else None
            if zoned is not None:
                # untyped text takes the column's type, and PostgreSQL's timestamp_in ignores a
                # zone in it ("silently", its manual says): only typed instants are converted
                parsed = parse_timestamp(zoned.group(1))
            if parsed is None:
                raise DomainViolationError(
                    f"column '{self.name}' is a {self.kind}; cannot compare it with {value!r}",
                    hint="write dates as '2013-06-01' and timestamps as '2013-06-01 10:00:00'")
            if not isinstance(self.lo, dt.datetime):
                return parsed.date()    # untyped text takes the column's type: PostgreSQL's date_in drops the time
            value = parsed
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            value = self._to_wall(value)
        if isinstance(value, dt.datetime) and not isinstance(self.lo, dt.datetime):
            # a date column compared with a timestamp: the date is its midnight (SQL's cast)
            return value.date() if value.time() == dt.time() else value
        if isinstance(value, dt.date) and not isinstance(value, dt.datetime) and isinstance(self.lo, dt.datetime):
            return dt.datetime.combine(value, dt.time())
        if isinstance(value, dt.date):
            return value
        raise DomainViolationError(
            f"column '{self.name}' is a {self.kind}; cannot compare it with {type(value).__name__} {value!r}",
            hint="compare with a date or timestamp literal, e.g. DATE '2013-06-01'")

    def _to_wall(self, value: dt.datetime) -> dt.datetime:
        return value.astimezone(dt.UTC).replace(tzinfo=None)

    def cells_for_predicate(self, op: str, value: Any) -> tuple[frozenset[int], bool]:
        """Cells all of whose values satisfy ``col <op> value``, and whether no bin is split
        (``docs/domains.md``).  A timestamp compared with a date column is compared with
        each day's midnight, as SQL casts the date."""
        op = _normalise_op(op)
        if value is None:
            return frozenset(), True
        v = self.literal(value)
        cells, exact = set(), True
        for i, (a, b) in enumerate(zip(self._starts, self._last_values())):
            if isinstance(v, dt.datetime) and not isinstance(a, dt.datetime):
                # a day is its midnight here, and no midnight equals a time past it
                a, b = dt.datetime.combine(a, dt.time()), dt.datetime.combine(b, dt.time())
                all_, any_ = (False, False) if op == "=" else (True, True) if op == "!=" else _discrete(a, b, op, v)
            else:
                all_, any_ = _discrete(a, b, op, v)
            if all_:
                cells.add(i)
            elif any_:
                exact = False
        return frozenset(cells), exact


def _next_start(start: Any, unit: str) -> Any:
    """The next period's start, or None past year 9999 (the axis ends before it: a period
    holding 9999-12-30 has no successor to compute, and the OverflowError was a crash)."""
    try:
        return advance(start, unit)
    except OverflowError:
        return None


def _discrete(lo: Any, hi: Any, op: str, v: Any) -> tuple[bool, bool]:
    """(all, any) values ``lo..hi`` (a discrete, inclusive range) satisfy ``x <op> v``."""
    if op == "<":
        return hi < v, lo < v
    if op == "<=":
        return hi <= v, lo <= v
    if op == ">":
        return lo > v, hi > v
    if op == ">=":
        return lo >= v, hi >= v
    eq_any, eq_all = lo <= v <= hi, lo == hi == v
    return (eq_all, eq_any) if op == "=" else (not eq_any, not eq_all)


def _as_date(value: Any) -> dt.date | None:
    if isinstance(value, dt.datetime):
        return value.date() if value.time() == dt.time() and value.tzinfo is None else None
    if isinstance(value, dt.date):
        return value
    if isinstance(value, str):
        return parse_date(value)
    return None


@dataclass(frozen=True)
class DateRange(Temporal):
    """Calendar days ``lo..hi`` in ``bin`` periods (``day``, ``week``, ``month``, ``quarter``,
    ``year``); the first and last bins are cut at ``lo`` and ``hi``."""

    kind = "date"
    units = DATE_UNITS
    python_type = dt.date
    sql_type = "DATE"
    _step = dt.timedelta(days=1)

    def __init__(self, name: str, lo: Any, hi: Any, bin: str = "day", nullable: bool = False) -> None:
        self._init(name, lo, hi, bin, nullable)

    def _bounds_of(self, lo: Any, hi: Any) -> tuple[Any, Any, Any]:
        out = []
        for key, v in (("lo", lo), ("hi", hi)):
            d = _as_date(v)
            if d is None:
                self._fail(f"{key} must be a date, got {v!r}", f"e.g. {key} = 2013-01-01")
            out.append(d)
        if out[1] == dt.date.max:
            self._fail("hi must be before 9999-12-31", "the axis needs the day after hi")
        return out[0], out[1], out[1] + dt.timedelta(days=1)

    def wall_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return parse_date(value)
        if isinstance(value, dt.datetime):
            # a naive timestamp's calendar day (CAST(x AS DATE)); an instant has no day
            # without a zone, and a date column declares none
            return value.date() if value.tzinfo is None else None
        return value if isinstance(value, dt.date) else None


@dataclass(frozen=True)
class TimestampRange(Temporal):
    """Instants from ``lo`` to ``hi`` (wall time in ``timezone``) in ``bin`` periods
    (``second``, ``minute``, ``hour``, ``day``, ``week``, ``month``, ``quarter``, ``year``).  ``hi`` is
    inclusive: a date means the whole of that day, a timestamp that microsecond."""

    timezone: str = "UTC"
    _zone: Any = field(default=None, init=False, repr=False, compare=False, hash=False)
    _instants: tuple = field(default=(), init=False, repr=False, compare=False, hash=False)

    kind = "timestamp"
    units = TIMESTAMP_UNITS
    python_type = dt.datetime
    sql_type = "TIMESTAMP"
    _step = _ONE_MICRO

    def identity_extra(self) -> tuple[Any, ...]:
        return (self.timezone,)   # the same instants in another zone land in other cells

    def __init__(self, name: str, lo: Any, hi: Any, bin: str = "hour", nullable: bool = False,
                 timezone: str = "UTC") -> None:
        object.__setattr__(self, "name", name)
        if not isinstance(timezone, str) or not timezone:
            self._fail(f"timezone must be an IANA zone name, got {timezone!r}", 'e.g. timezone = "Europe/Paris"')
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            self._fail(f"unknown timezone {timezone!r}", 'use an IANA zone name, e.g. "UTC" or "America/New_York"')
        object.__setattr__(self, "timezone", timezone)
        object.__setattr__(self, "_zone", zone)
        self._init(name, lo, hi, bin, nullable)
        try:
            instants = tuple(self.instant(s) for s in self._starts + (self._end,))
        except OverflowError:       # e.g. 0001-01-01 00:00 in a zone east of UTC
            self._fail(f"the period's instants in {timezone} fall outside the years 1..9999",
                       "start the period later or end it earlier")
        object.__setattr__(self, "_instants", instants)

    def _bounds_of(self, lo: Any, hi: Any) -> tuple[Any, Any, Any]:
        out = []
        for key, v in (("lo", lo), ("hi", hi)):
            if isinstance(v, str):
                v = parse_date(v) or parse_timestamp(v)     # a date alone: the whole day
            if isinstance(v, dt.datetime) and v.tzinfo is not None:
                self._fail(f"{key} must be a local timestamp (no offset), got {v!r}",
                           "bounds are wall-clock times in the declared timezone")
            if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
                v = dt.datetime.combine(v, dt.time()) if key == "lo" else v
            if not isinstance(v, dt.date):
                self._fail(f"{key} must be a date or timestamp, got {v!r}", f"e.g. {key} = 2013-01-01T00:00:00")
            out.append(v)
        lo_v, hi_v = out
        if hi_v in (dt.date.max, dt.datetime.max):
            self._fail("hi must be before 9999-12-31 23:59:59.999999", "the axis needs the instant after hi")
        if isinstance(hi_v, dt.datetime):
            end = hi_v + _ONE_MICRO
        else:
            end = dt.datetime.combine(hi_v + dt.timedelta(days=1), dt.time())
            hi_v = end - _ONE_MICRO
        return lo_v, hi_v, end

    def instant(self, wall: dt.datetime) -> dt.datetime:
        """The instant (UTC) of a wall-clock time in the declared zone.  A time skipped by a
        daylight-saving change maps as PostgreSQL's ``AT TIME ZONE`` does (the offset before
        the change); a repeated one to its first occurrence."""
        return wall.replace(tzinfo=self._zone).astimezone(dt.UTC)

    def _to_wall(self, value: dt.datetime) -> dt.datetime:
        return value.astimezone(self._zone).replace(tzinfo=None)

    def wall_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return parse_timestamp(value)
        if isinstance(value, dt.datetime):
            return value if value.tzinfo is None else None   # instants: see index_of
        if isinstance(value, dt.date):
            return dt.datetime.combine(value, dt.time())
        return None

    def index_of(self, value: Any) -> int:
        if isinstance(value, dt.datetime) and value.tzinfo is not None:
            # an instant: compared with the bins' first instants, as the SQL does
            edges = self._instants
            if not edges[0] <= value < edges[-1]:
                return self.invalid_index
            return bisect.bisect_right(edges, value, hi=len(edges) - 1) - 1
        return super().index_of(value)


def build_temporal(name: str, spec: dict[str, Any]) -> Temporal:
    """A time attribute from its TOML table (keys checked by the caller)."""
    kind = spec["type"]
    nullable = spec.get("nullable", False)
    for key in ("lo", "hi", "bin"):
        if key not in spec:
            raise ConfigError(f"missing key {key!r} for a {kind} column",
                              hint='e.g. lo = 2013-01-01, hi = 2013-12-31, bin = "month"')
    if kind == "date":
        return DateRange(name, spec["lo"], spec["hi"], spec["bin"], nullable=nullable)
    return TimestampRange(name, spec["lo"], spec["hi"], spec["bin"], nullable=nullable,
                          timezone=spec.get("timezone", "UTC"))

