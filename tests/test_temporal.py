"""Date and timestamp attributes (issue 30): calendar bins, the total Python reader, time
zones, predicates against a brute-force oracle, and the TOML format."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from dpsql.domain import domain_fingerprint, TableSchema
from dpsql.domain_file import load_domain
from dpsql.errors import ConfigError, DomainViolationError
from dpsql.temporal import DateRange, TimestampRange
from dpsql.timeaxis import Interval, extract, parse_date, parse_interval, parse_timestamp, truncate

OPS = ("=", "!=", "<", "<=", ">", ">=")


def _days(a: dt.date, b: dt.date):
    while a <= b:
        yield a
        a += dt.timedelta(days=1)


@pytest.mark.parametrize("unit, sizes", [("day", 365), ("week", 53), ("month", 12), ("quarter", 4), ("year", 1)])
def test_date_bins_are_calendar_periods(unit, sizes):
    a = DateRange("d", "2013-01-01", "2013-12-31", unit)
    assert a.size == sizes
    bounds = a.bin_bounds()
    # consecutive, covering the year, each inside one period of the unit
    assert bounds[0][0] == dt.date(2013, 1, 1) and bounds[-1][1] == dt.date(2013, 12, 31)
    for (_, b0), (a1, _) in zip(bounds, bounds[1:]):
        assert a1 == b0 + dt.timedelta(days=1)
    for x, y in bounds:
        assert truncate(x, unit) == truncate(y, unit)
    # every day lands in the bin that holds it
    for day in _days(dt.date(2013, 1, 1), dt.date(2013, 12, 31)):
        i = a.index_of(day)
        assert bounds[i][0] <= day <= bounds[i][1]


def test_labels_name_the_periods_and_invert():
    assert DateRange("d", "2013-01-01", "2013-12-31", "month").labels()[:2] == ["2013-01", "2013-02"]
    assert DateRange("d", "2013-01-01", "2013-12-31", "quarter").labels() == [f"2013-Q{q}" for q in range(1, 5)]
    w = DateRange("d", "2013-01-01", "2013-12-31", "week", nullable=True)
    assert w.labels()[:2] == ["2013-01-01", "2013-01-07"] and w.labels()[-1] is None   # ISO weeks start on Monday
    assert w.cell_of_label("2013-01-07") == 1
    t = TimestampRange("t", "2013-01-01", "2013-01-01", "hour")
    assert t.size == 24 and t.labels()[10] == "2013-01-01 10:00"


def test_the_reader_is_total_and_never_clamps():
    a = DateRange("d", "2013-01-01", "2013-12-31", "month", nullable=True)
    assert a.index_of(None) == a.null_index == 12
    for bad in ("2012-12-31", "2014-01-01", dt.date(1999, 1, 1), "2013-02-30", "2013-2-3", "13-01-01",
                "2013-01-01 ", " 2013-01-01", "2013/01/01", "", "NaN", 5, 5.0, b"2013-01-01", object(),
                dt.datetime(2013, 1, 1, tzinfo=dt.UTC)):
        assert a.index_of(bad) == a.invalid_index == 12, bad
    strict = DateRange("d", "2013-01-01", "2013-12-31", "month")
    assert strict.index_of("2014-01-01") == strict.invalid_index == 0
    assert a.index_of("2013-02-28") == 1 and a.index_of(dt.datetime(2013, 3, 31, 23, 59)) == 2
    leap = DateRange("d", "2012-01-01", "2012-12-31", "day")
    assert leap.index_of("2012-02-29") == 59 and leap.size == 366


def test_iso_text_grammar():
    assert parse_date("2013-06-01") == dt.date(2013, 6, 1)
    assert parse_date("2013-06-31") is None and parse_date("1900-02-29") is None and parse_date("2000-02-29")
    assert parse_date("0000-01-01") is None and parse_date("2013-06-01\n") is None
    assert parse_timestamp("2013-06-01T10:05") == dt.datetime(2013, 6, 1, 10, 5)
    assert parse_timestamp("2013-06-01 10:05:07.25") == dt.datetime(2013, 6, 1, 10, 5, 7, 250000)
    assert parse_timestamp("2013-06-01") == dt.datetime(2013, 6, 1)
    for bad in ("2013-06-01 24:00", "2013-06-01 10:60", "2013-06-01 10:00:60", "2013-06-01 10:00+02",
                "2013-06-01 10:00:00.1234567", "2013-06-01  10:00"):
        assert parse_timestamp(bad) is None, bad


def test_timestamps_are_wall_time_in_the_declared_zone():
    """A naive value is wall time in ``timezone``; an instant is converted to it."""
    ny = TimestampRange("t", "2013-03-10", "2013-03-10", "hour", timezone="America/New_York", nullable=True)
    utc = TimestampRange("t", "2013-03-10", "2013-03-10", "hour", nullable=True)
    assert ny.size == utc.size == 25
    noon_utc = dt.datetime(2013, 3, 10, 12, 0, tzinfo=dt.UTC)     # 08:00 EDT (after the change)
    assert utc.index_of(noon_utc) == 12 and ny.index_of(noon_utc) == 8
    assert ny.index_of(dt.datetime(2013, 3, 10, 8, 0)) == 8                 # naive: already wall time
    assert ny.index_of(noon_utc.astimezone(ZoneInfo("Asia/Tokyo"))) == 8    # any offset, same instant
    # 02:00-03:00 does not exist on that day in New York: the bin is empty for instants
    assert ny.instant(dt.datetime(2013, 3, 10, 2)) == ny.instant(dt.datetime(2013, 3, 10, 3))
    assert ny.index_of(dt.datetime(2013, 3, 10, 7, 30, tzinfo=dt.UTC)) == 3   # 03:30 EDT
    # 23:59 the day before, New York time
    assert ny.index_of(dt.datetime(2013, 3, 10, 4, 59, tzinfo=dt.UTC)) == ny.invalid_index
    with pytest.raises(ConfigError, match="unknown timezone"):
        TimestampRange("t", "2013-01-01", "2013-01-02", "hour", timezone="Mars/Olympus")


@pytest.mark.parametrize("unit", ["day", "week", "month", "quarter"])
def test_predicates_match_brute_force(unit):
    a = DateRange("d", "2013-01-01", "2013-06-30", unit, nullable=True)
    days = list(_days(a.lo, a.hi))
    for v in ("2012-12-31", "2013-01-01", "2013-02-01", "2013-02-14", "2013-04-01", "2013-06-30", "2013-07-01",
              dt.datetime(2013, 3, 1, 12), dt.datetime(2013, 3, 1)):
        lit = a.literal(v)
        for op in OPS:
            cells, exact = a.cells_for_predicate(op, v)
            truth = {}
            for day in days:
                x = day if not isinstance(lit, dt.datetime) else dt.datetime.combine(day, dt.time())
                ok = {"=": x == lit, "!=": x != lit, "<": x < lit, "<=": x <= lit, ">": x > lit, ">=": x >= lit}[op]
                truth.setdefault(a.index_of(day), set()).add(ok)
            want = frozenset(i for i, s in truth.items() if s == {True})
            assert cells == want, (unit, v, op)
            assert exact == all(len(s) == 1 for s in truth.values()), (unit, v, op)
    with pytest.raises(DomainViolationError, match="is a date"):
        a.cells_for_predicate("<", "June")
    assert a.cells_for_predicate("<", None) == (frozenset(), True)


def test_toml_format(tmp_path):
    path = tmp_path / "t.toml"
    path.write_text("""
[tables.flights.columns.day]
type = "date"
lo = 2013-01-01
hi = "2013-12-31"
bin = "month"
nullable = true

[tables.flights.columns.at]
type = "timestamp"
lo = 2013-01-01T00:00:00
hi = 2013-01-31
bin = "hour"
timezone = "America/New_York"
""")
    schema = load_domain(path)["flights"]
    day, at = schema.attributes
    assert (day.kind, day.size, day.bin) == ("date", 13, "month")
    assert (at.kind, at.size, at.timezone) == ("timestamp", 31 * 24, "America/New_York")
    assert at.bin_bounds()[-1][1] == dt.datetime(2013, 1, 31, 23, 59, 59, 999999)
    other = TableSchema("flights", (day, TimestampRange("at", "2013-01-01", "2013-01-31", "hour")))
    assert domain_fingerprint(schema) != domain_fingerprint(other)      # the zone moves the cells
    for text, match in [('type = "date"\nlo = 2013-01-01\nhi = 2013-12-31\nbin = "hour"', "bin must be one of"),
                        ('type = "date"\nlo = 2013-01-01\nhi = 2012-12-31\nbin = "day"', "is after hi"),
                        ('type = "date"\nlo = 2013-01-01\nbin = "day"', "missing key 'hi'"),
                        ('type = "date"\nlo = "soon"\nhi = 2012-12-31\nbin = "day"', "lo must be a date"),
                        ('type = "date"\nlo = 2013-01-01\nhi = 2013-12-31\nbin = "day"\ntimezone = "UTC"',
                         "unknown key 'timezone'"),
                        ('type = "timestamp"\nlo = 2013-01-01T00:00:00Z\nhi = 2013-12-31\nbin = "day"', "no offset")]:
        path.write_text("[tables.t.columns.c]\n" + text + "\n")
        with pytest.raises(ConfigError, match=match) as err:
            load_domain(path)
        assert "column 'c'" in err.value.message


def test_calendar_helpers_follow_postgresql():
    d = dt.date(2013, 6, 2)                     # a Sunday
    assert truncate(d, "week") == dt.date(2013, 5, 27) and truncate(d, "quarter") == dt.date(2013, 4, 1)
    assert extract("dow", d) == 0 and extract("isodow", d) == 7 and extract("week", d) == 22
    assert extract("quarter", d) == 2 and extract("doy", dt.date(2013, 12, 31)) == 365
    assert dt.date(2013, 1, 31) + parse_interval("1 month") == dt.datetime(2013, 2, 28)
    assert dt.date(2013, 6, 1) - parse_interval("7 days") == dt.datetime(2013, 5, 25)
    assert parse_interval("7", "day") == Interval(days=7) and parse_interval("soon") is None


@pytest.mark.parametrize("numbers", ["label", "value"])
def test_synthetic_time_values_land_in_their_cells(numbers):
    """`dpsql synth` writes a time cell as ISO text (the period's start, or a value inside
    it) that the reader puts back in the same cell (value mode used float() of a date)."""
    import numpy as np
    from dpsql.engine.synthetic import decode_cells
    schema = TableSchema("t", (DateRange("d", "2013-01-01", "2013-12-31", "month", nullable=True),
                               TimestampRange("h", "2013-01-01", "2013-01-02", "hour")))
    cells = np.array([[i % 13, i % 48] for i in range(200)])
    columns, rows = decode_cells(schema, cells, numbers=numbers, rng=np.random.default_rng(0))
    assert [k for _, k in columns] == ["text", "text"]
    for (d, h), (cd, ch) in zip(rows, cells):
        assert schema.attributes[0].index_of(d) == cd and schema.attributes[1].index_of(h) == ch


def test_second_bins():
    """``bin = "second"`` (issue 35): one cell per second, labelled to the second, read from
    TOML like the other units; a microsecond value lands in its second."""
    s = TimestampRange("s", "2013-01-01 10:00:00", "2013-01-01 10:01:59.999999", "second", nullable=True)
    assert s.size == 121 and s.labels()[5] == "2013-01-01 10:00:05" and s.labels()[-1] is None
    assert s.index_of(dt.datetime(2013, 1, 1, 10, 0, 5, 999999)) == 5 == s.index_of("2013-01-01 10:00:05.5")
    assert s.index_of(dt.datetime(2013, 1, 1, 10, 2)) == s.invalid_index
    assert s.bin_bounds()[5] == (dt.datetime(2013, 1, 1, 10, 0, 5), dt.datetime(2013, 1, 1, 10, 0, 5, 999999))
    assert truncate(dt.datetime(2013, 1, 1, 10, 0, 5, 7), "second") == dt.datetime(2013, 1, 1, 10, 0, 5)
    with pytest.raises(ConfigError, match="bin must be one of day"):
        DateRange("d", "2013-01-01", "2013-12-31", "second")


def test_second_bins_from_toml(tmp_path):
    path = tmp_path / "d.toml"
    path.write_text('[tables.t.columns.ts]\ntype = "timestamp"\nlo = "2013-01-01 10:00:00"\n'
                    'hi = "2013-01-01 10:00:09"\nbin = "second"\n')
    (att,) = load_domain(path)["t"].attributes
    assert att.bin == "second" and att.size == 10


def test_years_before_1000_are_padded():
    """strftime's %Y writes year 1 as '1', which PostgreSQL reads as 2001: the SQL literals
    (iso_text) and the labels pad the year to four digits."""
    from dpsql.timeaxis import iso_text
    assert iso_text(dt.datetime(1, 1, 1, 10)) == "0001-01-01 10:00:00" and iso_text(dt.date(9, 1, 1)) == "0009-01-01"
    assert TimestampRange("t", "0001-01-01", "0001-01-01", "hour").labels()[1] == "0001-01-01 01:00"
    assert DateRange("d", "0099-01-01", "0099-12-31", "month").labels()[0] == "0099-01"


@pytest.mark.parametrize("unit", ["week", "month", "quarter", "year"])
def test_an_axis_up_to_year_9999_has_a_last_bin(unit):
    """The last period of an axis ending in December 9999 has no next start to compute:
    declaring it raised OverflowError (not even a ConfigError)."""
    d = DateRange("d", "9999-10-01", "9999-12-30", unit)
    assert d.bin_bounds()[-1][1] == dt.date(9999, 12, 30) and d.index_of(dt.date(9999, 12, 30)) == d.size - 1
    t = TimestampRange("t", "9999-10-01", "9999-12-30", unit)
    assert t.bin_bounds()[-1][1] == dt.datetime(9999, 12, 30, 23, 59, 59, 999999)


def test_a_period_past_the_calendar_is_a_config_error():
    """hi on the last day of 9999, or instants outside years 1..9999 in the declared zone:
    an OverflowError before, a ConfigError naming the column now."""
    for args, kw in [(("9999-12-01", "9999-12-31", "day"), {}),
                     (("9999-12-01", "9999-12-31 23:59:59.999999", "day"), {}),
                     (("0001-01-01", "0001-01-02", "hour"), {"timezone": "Asia/Kolkata"}),
                     (("9999-12-30", "9999-12-31 22:00", "hour"), {"timezone": "America/New_York"})]:
        with pytest.raises(ConfigError, match="'t'"):
            TimestampRange("t", *args, **kw)
