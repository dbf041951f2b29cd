"""Time-of-day attributes: a ``TIME`` column (a departure time, an opening hour) cut into
seconds, minutes or hours between public bounds (``docs/domains.md``, "Time").

A time of day is an *ordered* attribute like a date: its cells are consecutive periods
between ``lo`` (default 00:00) and ``hi`` (default 23:59:59.999999, inclusive), so a range of
times is a contiguous run of cells and the planner's range and prefix strategies apply.  It
has no calendar and no zone (SQL's ``TIME WITHOUT TIME ZONE``): the cell of a value depends on
the value alone.  Values are ``datetime.time``; the axis arithmetic is on microseconds since
midnight, so the day's end (24:00, not a ``time``) is never a value.

The reader is total, as for every kind: NULL goes to the NULL cell (or the invalid place),
and so does anything that is not a time of day inside the axis (a value before ``lo`` or after
``hi``, text that is not ``HH:MM[:SS[.ffffff]]``).  Public metadata only.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any

from dpsql.domain import MAX_CELLS
from dpsql.errors import ConfigError, DomainViolationError
from dpsql.temporal import Temporal
from dpsql.timeaxis import TIME_UNITS, day_micros, parse_time, time_of

__all__ = ["TimeOfDayRange", "UNIT_MICROS", "TIME_KEYS", "build_time_of_day"]

TIME_KEYS = {"type", "lo", "hi", "bin", "nullable"}

UNIT_MICROS = {"second": 1_000_000, "minute": 60_000_000, "hour": 3_600_000_000}


@dataclass(frozen=True)
class TimeOfDayRange(Temporal):
    """Times of day ``lo..hi`` (both inclusive) in ``bin`` periods (``second``, ``minute``,
    ``hour``); the first and last bins are cut at ``lo`` and ``hi``.  A bin ``[a, b]`` holds
    ``a`` up to ``b``, ``b`` being the last microsecond before the next bin."""

    kind = "time"
    units = TIME_UNITS
    bin_example = "minute"
    python_type = dt.time
    sql_type = "TIME"
    _step = dt.timedelta(microseconds=1)

    def __init__(self, name: str, lo: Any = "00:00", hi: Any = "23:59:59.999999", bin: str = "hour",
                 nullable: bool = False) -> None:
        self._init(name, lo, hi, bin, nullable)

    def _bin_starts(self, lo: Any, end: Any) -> list:
        """By arithmetic on microseconds since midnight (no calendar): the first bin is cut at
        ``lo``, the others start on multiples of the bin's width."""
        width, first = UNIT_MICROS[self.bin], day_micros(lo)
        starts = [first] + list(range((first // width + 1) * width, self.end_micros, width))
        if len(starts) > MAX_CELLS:
            self._fail(f"more than {MAX_CELLS} bins", "use a coarser bin or a shorter period")
        return [time_of(m) for m in starts]

    def _bound(self, key: str, v: Any) -> dt.time:
        if isinstance(v, str):
            v = parse_time(v.strip())
        if not isinstance(v, dt.time) or v.tzinfo is not None:
            self._fail(f"{key} must be a time of day, got {v!r}", f"e.g. {key} = 05:00:00 (a TOML local time)")
        return v

    def _bounds_of(self, lo: Any, hi: Any) -> tuple[Any, Any, Any]:
        # no end value: 24:00 is not a time (end_micros is the axis' end)
        return self._bound("lo", lo), self._bound("hi", hi), None

    def identity_extra(self) -> tuple[Any, ...]:
        return ()

    @property
    def end(self) -> Any:
        raise AttributeError("a time-of-day axis has no end value (24:00 is not a time): use hi")

    @property
    def end_micros(self) -> int:
        """The first microsecond after the axis, since midnight (at most 24:00)."""
        return day_micros(self.hi) + 1

    def _last_values(self) -> list:
        nexts = [day_micros(s) for s in self._starts[1:]] + [self.end_micros]
        return [time_of(n - 1) for n in nexts]

    def _label(self, first: Any, last: Any) -> str:
        """``10:00`` (hour, minute bins), ``10:00:05`` (second bins)."""
        return first.strftime("%H:%M:%S" if self.bin == "second" else "%H:%M")

    # --- values ---------------------------------------------------------------------------
    def wall_value(self, value: Any) -> Any:
        if isinstance(value, str):
            return parse_time(value)
        if isinstance(value, dt.time):
            return value if value.tzinfo is None else None
        return None     # a timestamp is not a time of day (SQL has no implicit cast)

    def _within(self, v: Any) -> bool:
        return bool(self.lo <= v <= self.hi)     # hi inclusive: the day's end is no time

    def literal(self, value: Any) -> Any:
        """A SQL literal (``'10:30'``, ``TIME '10:30:00'``) as a time of day to compare cells
        with; DomainViolationError for anything else (a date, a number)."""
        v = self.wall_value(value.strip() if isinstance(value, str) else value)
        if v is None:
            raise DomainViolationError(
                f"column '{self.name}' is a time of day; cannot compare it with {value!r}",
                hint="write times of day as '10:30' or TIME '10:30:00'")
        return v



def build_time_of_day(name: str, spec: dict[str, Any]) -> TimeOfDayRange:
    """A TIME column from its TOML table (keys checked by the caller); ``lo`` and ``hi``
    default to the whole day."""
    if "bin" not in spec:
        raise ConfigError("missing key 'bin' for a time column", hint='e.g. bin = "minute"')
    return TimeOfDayRange(name, spec.get("lo", "00:00"), spec.get("hi", "23:59:59.999999"), spec["bin"],
                          nullable=spec.get("nullable", False))
