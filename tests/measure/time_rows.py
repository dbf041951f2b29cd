"""A hostile table of time values, shared by the reader and cross-engine tests: every type
family (DATE, TIMESTAMP, TIMESTAMPTZ, ISO text) with values on bin edges, outside the
period, across a daylight-saving change, NULLs and text that is not ISO 8601."""

from __future__ import annotations

import datetime as dt

from dpsql.domain import TableSchema
from dpsql.timeaxis import parse_date, parse_timestamp
from dpsql.temporal import DateRange, TimestampRange

UTC = dt.UTC

SCHEMA = TableSchema("times", (
    DateRange("d", "2013-01-01", "2013-12-31", "month", nullable=True),         # DATE
    DateRange("dw", "2013-01-01", "2013-12-31", "week"),                         # DATE, not nullable
    DateRange("dts", "2013-01-01", "2013-03-31", "day", nullable=True),         # TIMESTAMP read as days
    TimestampRange("ts", "2013-03-09", "2013-03-11", "hour", nullable=True),    # TIMESTAMP (wall time)
    TimestampRange("tz", "2013-03-09", "2013-03-11", "hour", nullable=True,     # TIMESTAMPTZ, DST change
                   timezone="America/New_York"),
    TimestampRange("tq", "2013-01-01", "2013-12-31", "quarter"),                # DATE on a timestamp axis
    DateRange("dt_text", "2013-01-01", "2013-12-31", "month", nullable=True),   # VARCHAR, ISO dates
    TimestampRange("ts_text", "2013-01-01", "2013-01-01", "minute", nullable=True),   # VARCHAR, ISO timestamps
))
COLUMNS = {"d": "DATE", "dw": "DATE", "dts": "TIMESTAMP", "ts": "TIMESTAMP", "tz": "TIMESTAMPTZ",
           "tq": "DATE", "dt_text": "VARCHAR", "ts_text": "VARCHAR"}
PG_TYPES = {"DATE": "date", "TIMESTAMP": "timestamp", "TIMESTAMPTZ": "timestamptz", "VARCHAR": "text"}

_D = [None, dt.date(2013, 1, 1), dt.date(2013, 1, 31), dt.date(2013, 2, 1), dt.date(2013, 12, 31),
      dt.date(2012, 12, 31), dt.date(2014, 1, 1), dt.date(1, 1, 1), dt.date(9999, 12, 31), dt.date(2013, 6, 15),
      dt.date(2013, 12, 30), dt.date(2013, 2, 28)]
_TS = [None, dt.datetime(2013, 3, 9), dt.datetime(2013, 3, 9, 0, 59, 59, 999999), dt.datetime(2013, 3, 10, 2, 30),
       dt.datetime(2013, 3, 11, 23, 59, 59, 999999), dt.datetime(2013, 3, 12), dt.datetime(2013, 3, 8, 23, 59),
       dt.datetime(2013, 3, 10, 12, 0, 0, 1), dt.datetime(1970, 1, 1)]
_TZ = [None, dt.datetime(2013, 3, 9, 5, tzinfo=UTC), dt.datetime(2013, 3, 9, 4, 59, 59, tzinfo=UTC),
       dt.datetime(2013, 3, 10, 6, 59, tzinfo=UTC), dt.datetime(2013, 3, 10, 7, 0, tzinfo=UTC),
       dt.datetime(2013, 3, 10, 7, 1, tzinfo=UTC), dt.datetime(2013, 3, 12, 3, 59, 59, tzinfo=UTC),
       dt.datetime(2013, 3, 12, 4, 0, tzinfo=UTC), dt.datetime(2013, 3, 10, 12, 0, tzinfo=UTC)]
TEXT_DATES = [None, "2013-01-01", "2013-06-30", "2013-02-29", "2012-02-29", "2013-13-01", "2013-1-5", "2013-01-05 ",
              " 2013-01-05", "2013-01-05\n", "2013/01/05", "", "20130105", "2013-12-31", "2014-01-01", "٢٠١٣-01-01",
              "2013-04-31", "2013-01-05T00:00", "0000-01-01", "NaN", "2013-01-0５"]
TEXT_TIMESTAMPS = [None, "2013-01-01 00:00", "2013-01-01T10:05", "2013-01-01 10:05:59.999999", "2013-01-01 23:59:59",
                   "2013-01-02 00:00", "2013-01-01", "2013-01-01 24:00", "2013-01-01 10:60", "2013-01-01 10:05+02",
                   "2013-01-01 10:05:07.1234567", "2013-01-01  10:05", "2013-01-01 1:05", "", "x",
                   "2012-12-31 23:59:59.999999", "2013-01-01 10:05:60"]
VALUES = {"d": _D, "dw": list(reversed(_D)), "dts": _TS[::-1] + [dt.datetime(2013, 1, 1, 12)],
          "ts": _TS, "tz": _TZ, "tq": _D[3:] + _D[:3], "dt_text": TEXT_DATES, "ts_text": TEXT_TIMESTAMPS}
DDL = "CREATE TABLE times (" + ", ".join(f"{k} {v}" for k, v in COLUMNS.items()) + ")"


def rows() -> list[list]:
    n = max(len(v) for v in VALUES.values()) * 3
    return [[VALUES[c][(i * (k + 1)) % len(VALUES[c])] for k, c in enumerate(COLUMNS)] for i in range(n)]


def cell(att, value) -> int:
    """Where a value lands (docs/domains.md, "Time"): text by the ISO grammar only."""
    if isinstance(value, str):
        parsed = parse_date(value) if att.kind == "date" else parse_timestamp(value)
        return att.invalid_index if parsed is None else att.index_of(parsed)
    return att.index_of(value)
