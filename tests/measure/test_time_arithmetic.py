"""The arithmetic cell of a time value (issue 35: ``cellsql.time_arithmetic_sql``) against the
chain of comparisons it replaces, on DuckDB, PostgreSQL and Spark: every value lands in the same
cell by both, and where Python can hold the value, in ``index_of``'s cell.

The values are the hard ones: every bin start and the microsecond (or day) on either side of
it, before ``lo`` and from the axis' end on, leap days, years 1 and 9999, ±infinity where the
engine has it, NULL, instants in a zone with a constant offset and in one with a
daylight-saving change (where the chain is kept), dates on a timestamp axis and timestamps on
a date axis.  The values are written as ISO text and cast in the engine, the same way
everywhere."""

from __future__ import annotations

import datetime as dt
import random

import duckdb
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dpsql.domain import TableSchema
from dpsql.measure import reader
from dpsql.measure.cellsql import time_arithmetic_sql, time_index_sql
from dpsql.temporal import DateRange, Temporal, TimestampRange
from dpsql.timeaxis import iso_text

UTC = dt.UTC
_MICRO = dt.timedelta(microseconds=1)
_DAY = dt.timedelta(days=1)

#: (attribute, the type families it is read from); every unit, unaligned ``lo``, leap days
AXES = [
    (TimestampRange("m", "2012-02-28 23:58:30", "2012-03-01 00:02:00", "minute", nullable=True),
     ("timestamp", "timestamptz", "date")),
    (TimestampRange("s", "2012-02-29 23:59:58.25", "2012-03-01 00:00:02", "second", nullable=True),
     ("timestamp", "timestamptz")),
    (TimestampRange("h", "2013-03-09 10:17:23.5", "2013-03-11", "hour"), ("timestamp", "timestamptz")),
    (TimestampRange("d", "2016-02-20 06:00", "2016-03-03", "day", nullable=True), ("timestamp", "date")),
    (TimestampRange("w", "2013-01-03 12:00", "2013-03-01", "week"), ("timestamp", "timestamptz", "date")),
    (TimestampRange("mo", "2011-11-15 10:00", "2013-02-10", "month"), ("timestamp", "date", "timestamptz")),
    (TimestampRange("q", "2011-11-15 10:00", "2013-02-10", "quarter"), ("timestamp", "timestamptz")),
    (TimestampRange("y", "1999-06-01", "2004-02-29 12:00", "year"), ("timestamp", "date", "timestamptz")),
    (TimestampRange("early", "0001-01-01", "0001-01-03", "hour"), ("timestamp", "timestamptz")),
    (TimestampRange("late", "9999-12-30", "9999-12-30 23:59:59", "minute"), ("timestamp", "timestamptz")),
    # instants in a zone: a constant offset (+05:30), New York in winter (-05:00)
    (TimestampRange("kol", "2013-03-09 07:00", "2013-03-20", "day", timezone="Asia/Kolkata"), ("timestamptz",)),
    (TimestampRange("nyw", "2013-01-10", "2013-01-12", "hour", timezone="America/New_York"),
     ("timestamptz", "timestamp")),
    # a daylight-saving change inside the period: instants take the run of their offset (the
    # skipped hour is an empty bin, a repeated one holds two hours of instants)
    (TimestampRange("dst", "2013-03-09", "2013-03-11", "hour", timezone="America/New_York"),
     ("timestamptz", "timestamp")),
    (TimestampRange("fall", "2013-11-02 22:17", "2013-11-03 04:00", "minute", timezone="America/New_York"),
     ("timestamptz",)),
    (TimestampRange("dstd", "2013-03-05 05:00", "2013-11-07 12:00", "day", timezone="Europe/Paris"),
     ("timestamptz",)),
    (TimestampRange("dstw", "2012-12-30", "2014-01-15", "week", timezone="Australia/Lord_Howe"),
     ("timestamptz",)),
    # the end's offset differs from the last start's: the last bin is an hour longer
    (TimestampRange("endoff", "2013-11-02", "2013-11-03 03:00", "day", nullable=True, timezone="America/New_York"),
     ("timestamptz",)),
    # a change between lo and the second bin's start
    (TimestampRange("lochg", "2013-03-10 01:30", "2013-03-10 05:00", "hour", timezone="America/New_York"),
     ("timestamptz",)),
    # months, quarters and years of an instant in a zone: runs of one offset, the local day
    # by arithmetic (daylight saving in both hemispheres and at half an hour; Paris' local
    # mean time +0:09:21 before 1911 and its war years; Apia skipping 30 December 2011 from
    # -10:00 to +14:00; Pyongyang's +8:30 from 15 August 2015; a +14:00 zone at year 9999 and
    # Los Angeles' local mean time -7:52:58 in year 1)
    (TimestampRange("pmo", "2012-01-20 13:00", "2014-03-01", "month", nullable=True, timezone="Europe/Paris"),
     ("timestamptz",)),
    (TimestampRange("lhq", "2011-11-15", "2014-02-10", "quarter", timezone="Australia/Lord_Howe"), ("timestamptz",)),
    (TimestampRange("nyy", "1990-06-01", "2030-02-01", "year", timezone="America/New_York"), ("timestamptz",)),
    (TimestampRange("py", "1880-03-01", "1960-01-01 06:00", "year", timezone="Europe/Paris"), ("timestamptz",)),
    (TimestampRange("pq", "1938-02-01", "1947-12-01", "quarter", timezone="Europe/Paris"), ("timestamptz",)),
    (TimestampRange("apia", "2011-06-01", "2012-06-01", "month", timezone="Pacific/Apia"), ("timestamptz",)),
    (TimestampRange("pyong", "2015-01-01", "2016-03-01", "month", timezone="Asia/Pyongyang"), ("timestamptz",)),
    (TimestampRange("kir", "9999-06-01", "9999-12-30", "month", timezone="Pacific/Kiritimati"), ("timestamptz",)),
    (TimestampRange("la1", "0001-01-02", "0001-12-15", "month", timezone="America/Los_Angeles"), ("timestamptz",)),
    # more than 64 runs: the arithmetic while the runs hold 8 bins each on average (weeks in
    # Paris over 40 years: 80 runs, 2,088 bins), else the chain (quarters in New York over a
    # century: 195 runs of 401 bins)
    (TimestampRange("pw40", "1975-01-01", "2015-01-01", "week", timezone="Europe/Paris"), ("timestamptz",)),
    (TimestampRange("nyq", "1925-01-01", "2025-01-01", "quarter", timezone="America/New_York"), ("timestamptz",)),
    (DateRange("dd", "2012-02-27", "2012-03-02", "day", nullable=True), ("date", "timestamp")),
    (DateRange("dw", "2013-01-03", "2013-03-01", "week"), ("date", "timestamp")),
    (DateRange("dm", "2011-11-15", "2013-02-10", "month", nullable=True), ("date", "timestamp")),
    (DateRange("dq", "2011-11-15", "2013-02-10", "quarter"), ("date",)),
    (DateRange("dy", "1999-06-01", "2004-02-29", "year"), ("date", "timestamp")),
    (DateRange("d1", "0001-01-01", "0001-03-01", "week"), ("date",)),
    (DateRange("d9", "9999-12-01", "9999-12-30", "day"), ("date", "timestamp")),
    (DateRange("d9m", "9999-10-01", "9999-12-30", "month"), ("date", "timestamp")),
]
ARITHMETIC_EXPECTED = {("dst", "timestamptz"): True, ("nyq", "timestamptz"): False}


def _values(att: Temporal, family: str, seed: int) -> list:
    """Python values of the family around every bin edge of ``att``, and random ones."""
    starts = list(att._starts) + [att.end]
    wall = isinstance(att.lo, dt.datetime)
    step = _MICRO if family != "date" else _DAY
    out: list = [None]
    for s in starts:
        if family == "date":
            s = s.date() if isinstance(s, dt.datetime) else s
        elif not isinstance(s, dt.datetime):
            s = dt.datetime.combine(s, dt.time())
        for k in (-1, 0, 1):
            try:
                out.append(s + k * step)
            except OverflowError:       # year 1 or 9999: no value beyond it
                pass
    rng = random.Random(seed)
    lo = att.lo if wall else dt.datetime.combine(att.lo, dt.time())
    end = att.end if wall else dt.datetime.combine(att.end, dt.time())
    span = int((end - lo) / _MICRO) + 1
    for _ in range(60):
        try:
            v = lo + rng.randrange(-span // 10, span + span // 10) * _MICRO
        except OverflowError:
            continue
        out.append(v.date() if family == "date" else v)
    out += [dt.date(2012, 2, 29), dt.date(2016, 2, 29), dt.date(2000, 2, 29)] if family == "date" else \
        [dt.datetime(2012, 2, 29, 23, 59, 59, 999999), dt.datetime(2016, 2, 29, 12)]
    out += [dt.date(1, 1, 1), dt.date(9999, 12, 31)] if family == "date" else \
        [dt.datetime(1, 1, 1), dt.datetime(9999, 12, 31, 23, 59, 59, 999999)]
    out = [v for v in out if v is None or dt.date(1, 1, 1) <= (v.date() if isinstance(v, dt.datetime) else v)]
    if family == "timestamptz":
        # an instant: the wall values taken in the axis' zone, and the same UTC readings
        zoned = [None if v is None else (att.instant(v) if isinstance(att, TimestampRange) else v.replace(tzinfo=UTC))
                 for v in out if v is None or dt.datetime(1, 1, 2) <= v <= dt.datetime(9999, 12, 30)]
        out = zoned + [v.replace(tzinfo=UTC) for v in out if v is not None]
        if isinstance(att, TimestampRange):
            # instants hours from each bin start: an offset change moves a wall reading by them
            for i in att._instants:
                for h in (-14, -2, -1, 1, 2, 14):
                    for k in (-1, 0):
                        try:
                            out.append(i + dt.timedelta(hours=h) + k * _MICRO)
                        except OverflowError:
                            pass
    return out


def _text(v) -> str | None:
    if v is None:
        return None
    if isinstance(v, dt.datetime) and v.tzinfo is not None:
        return iso_text(v.astimezone(UTC).replace(tzinfo=None)) + "+00:00"
    return iso_text(v)


_SQL_TYPE = {"duckdb": {"date": "DATE", "timestamp": "TIMESTAMP", "timestamptz": "TIMESTAMPTZ"},
             "postgres": {"date": "date", "timestamp": "timestamp", "timestamptz": "timestamptz"},
             "spark": {"date": "DATE", "timestamp": "TIMESTAMP_NTZ", "timestamptz": "TIMESTAMP"}}
#: what each engine has beyond Python's range (text its cast reads)
_INFINITIES = {"duckdb": ["infinity", "-infinity"], "postgres": ["infinity", "-infinity"], "spark": []}


def _case_list():
    for att, families in AXES:
        for family in families:
            yield pytest.param(att, family, id=f"{att.name}-{family}")


CASES = list(_case_list())


def _check(run, engine: str, att: Temporal, family: str, seed: int = 35) -> None:
    values = _values(att, family, seed)
    texts = [_text(v) for v in values] + _INFINITIES[engine]
    chain = time_index_sql(att, "x", family)
    arithmetic = time_index_sql(att, "x", family, dialect=engine)
    uses_arithmetic = time_arithmetic_sql(att, "x", family, engine) is not None
    assert uses_arithmetic == ARITHMETIC_EXPECTED.get((att.name, family), True)
    if uses_arithmetic:
        assert chain.sql(engine) != arithmetic.sql(engine)
    got = run(_SQL_TYPE[engine][family], texts, chain.sql(engine), arithmetic.sql(engine))
    assert len(got) == len(texts)
    places = set()
    for i, (by_chain, by_arithmetic) in enumerate(got):
        want = att.index_of(values[i]) if i < len(values) else att.invalid_index
        assert by_chain == by_arithmetic == want, (texts[i], by_chain, by_arithmetic, want)
        places.add(want)
    # the values reach the invalid place, the NULL cell (nullable) and several bins, the first
    # and the last unless they are days on a finer axis (only midnights)
    assert {att.invalid_index, att.null_place} <= places and len(places) >= 3
    if family != "date" or att.kind == "date":
        assert {0, len(att._starts) - 1} <= places


def _duckdb_run(sql_type, texts, *exprs):
    con = duckdb.connect()
    con.execute("SET TimeZone = 'Asia/Kolkata'")          # the session zone must not matter
    con.execute("CREATE TABLE t (i INTEGER, s VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?)", list(enumerate(texts)))
    con.execute(f"CREATE TABLE v AS SELECT i, CAST(s AS {sql_type}) AS x FROM t")
    rows = con.execute(f"SELECT {', '.join(exprs)} FROM v ORDER BY i").fetchall()
    con.close()
    return rows


@pytest.mark.parametrize("att, family", CASES)
def test_duckdb_arithmetic_cell_equals_the_chain(att, family):
    _check(_duckdb_run, "duckdb", att, family)


@pytest.mark.parametrize("sql_type", ["TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS"])
def test_duckdb_coarse_and_fine_timestamp_types(sql_type):
    """DuckDB's other timestamp widths: by the chain and by arithmetic alike (a nanosecond
    value is compared by the chain as DuckDB casts it, and floored to microseconds alike)."""
    att = TimestampRange("m", "1969-12-31 23:58:30", "1970-01-01 00:02:00", "minute", nullable=True)
    texts = [_text(v) for v in _values(att, "timestamp", 7) if v is None or 1700 < v.year < 2200] + [
        "1969-12-31 23:59:59.9999995", "1970-01-01 00:00:59.9999999", "1969-12-31 23:58:59.9999999",
        "infinity", "-infinity"]
    rows = _duckdb_run(sql_type, texts, time_index_sql(att, "x", "timestamp").sql("duckdb"),
                       time_index_sql(att, "x", "timestamp", dialect="duckdb").sql("duckdb"))
    assert all(a == b for a, b in rows), [(t, r) for t, r in zip(texts, rows) if r[0] != r[1]]
    assert len({a for a, _ in rows}) > 3


def test_a_fine_column_reads_without_a_chain():
    """A 100,800-minute column (ten weeks): the typed and text readers' SQL has no CASE branch
    per bin (before: one comparison per bin start, minutes to build and run)."""
    att = TimestampRange("ts", "2013-01-01", "2013-03-11", "minute", nullable=True)
    assert att.size > 100_000
    for dialect in ("duckdb", "postgres", "spark"):
        typed = reader.typed_column(att, reader.exp.column("ts"), "TIMESTAMP", "0", dialect)
        text = reader.convert_text(att, reader.exp.column("ts"), reader.exp.true(), None, "0", dialect)
        for conv in (typed, text):
            assert len(conv.cell.sql(dialect)) < 2_000


def test_the_reader_counts_a_minute_column_by_arithmetic(tmp_path):
    """End to end through the DuckDB backend: a TIMESTAMP column and its ISO text in a CSV."""
    from dpsql.measure.backend import DuckDBBackend
    from dpsql.measure.source import Source
    att = TimestampRange("ts", "2012-02-28 23:00", "2012-03-01 01:00", "minute", nullable=True)
    values = _values(att, "timestamp", 3)
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    con.execute("CREATE TABLE t (ts TIMESTAMP)")
    con.executemany("INSERT INTO t VALUES (?)", [(v,) for v in values])
    con.close()
    (tmp_path / "t.csv").write_text("ts\n" + "\n".join(_text(v) or "" for v in values) + "\n")
    want = [0] * att.size
    for v in values:
        want[att.index_of(v)] += 1
    schema = TableSchema("t", (att,))
    for spec in ({"duckdb": str(tmp_path / "t.duckdb"), "table": "t"}, {"csv": str(tmp_path / "t.csv"), "null": [""]}):
        backend = DuckDBBackend({"t": Source.from_config(spec, tmp_path)}, threads=1)
        try:
            got = backend.count_marginals(schema, [("ts",)])[("ts",)]
        finally:
            backend.close()
        assert got.tolist() == want


# --- PostgreSQL and Spark (tests/measure/conftest.py starts or skips them) -------------------

@pytest.mark.slow
@pytest.mark.parametrize("att, family", CASES)
def test_postgres_arithmetic_cell_equals_the_chain(pg_server, att, family):
    import psycopg

    def run(sql_type, texts, *exprs):
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute("SET TimeZone = 'Asia/Kolkata'")
            conn.execute("DROP TABLE IF EXISTS tv")
            conn.execute("CREATE TABLE tv (i integer, s text)")
            with conn.cursor().copy("COPY tv FROM STDIN") as copy:
                for row in enumerate(texts):
                    copy.write_row(row)
            sql = f"SELECT {', '.join(exprs)} FROM (SELECT i, CAST(s AS {sql_type}) AS x FROM tv) v ORDER BY i"
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    _check(run, "postgres", att, family)


@pytest.mark.slow
@pytest.mark.parametrize("att, family", CASES)
def test_spark_arithmetic_cell_equals_the_chain(spark, att, family):
    from dpsql.measure.spark import ENFORCED
    for key, value in ENFORCED.items():        # as every dpsql session (measure/spark.py)
        spark.conf.set(key, value)

    def run(sql_type, texts, *exprs):
        rows = spark.createDataFrame(list(enumerate(texts)), "i INT, s STRING")
        rows.createOrReplaceTempView("tv")
        sql = f"SELECT {', '.join(exprs)} FROM (SELECT i, CAST(s AS {sql_type}) AS x FROM tv) v ORDER BY i"
        return [tuple(r) for r in spark.sql(sql).collect()]
    _check(run, "spark", att, family)


# --- a DATE column on a timestamp axis holding dates no timestamp holds -----------------------
#: dates after year 294,247 (the last timestamp every engine holds) and ordinary ones, as
#: (year, month, day) built by make_date on each engine
_FAR_DATES = [(300_000, 1, 1), (5_000_000, 6, 30), (294_248, 1, 1), (10_000, 1, 1)]
_DATE_AXES = [TimestampRange("h", "2012-02-28 10:17", "2012-03-01 12:00", "hour", nullable=True),
              TimestampRange("ny", "2013-03-09", "2013-03-11 06:00", "day", timezone="America/New_York"),
              TimestampRange("d9", "9999-12-28 12:00", "9999-12-31 12:00", "hour")]


def _far_check(run, engine: str) -> None:
    """The reader's cell (chain and arithmetic) and status of every date, and the arithmetic
    branch alone: ``time_arithmetic_sql`` promises a bin for any value whatever branch an
    engine evaluates first (its clamp), so it must not fail on a date it is not chosen for."""
    for att in _DATE_AXES:
        near = [v for v in _values(att, "date", 11) if v is not None]
        days = [(v.year, v.month, v.day) for v in near] + _FAR_DATES
        want = [att.index_of(v) for v in near] + [att.invalid_index] * len(_FAR_DATES)
        chain = time_index_sql(att, "x", "date").sql(engine)
        arithmetic = time_index_sql(att, "x", "date", dialect=engine).sql(engine)
        status = reader._time_status(att, reader.exp.column("x"), "date").sql(engine)
        alone = time_arithmetic_sql(att, "x", "date", engine)
        assert alone is not None
        got = run(days, chain, arithmetic, status, alone.sql(engine))
        assert [(a, b) for a, b, _, _ in got] == [(w, w) for w in want], (att.name, list(zip(days, got, want)))
        assert [s for _, _, s, _ in got[len(near):]] == ["above_range"] * len(_FAR_DATES)
        bins = len(att._starts)
        assert all(0 <= c < bins for *_, c in got), (att.name, [r[3] for r in got])


def test_duckdb_far_dates_on_a_timestamp_axis():
    """A DATE column on a timestamp axis is compared with DATE literals (the first day from
    each edge): a date no timestamp holds lands in the invalid place, by the chain, by the
    arithmetic and in the status, never an error."""
    def run(days, *exprs):
        con = duckdb.connect()
        con.execute("CREATE TABLE t (i INTEGER, y INTEGER, m INTEGER, d INTEGER)")
        con.executemany("INSERT INTO t VALUES (?, ?, ?, ?)", [(i, *ymd) for i, ymd in enumerate(days)])
        sql = f"SELECT {', '.join(exprs)} FROM (SELECT i, make_date(y, m, d) AS x FROM t) v ORDER BY i"
        rows = con.execute(sql).fetchall()
        con.close()
        return rows
    _far_check(run, "duckdb")


@pytest.mark.slow
def test_postgres_far_dates_on_a_timestamp_axis(pg_server):
    import psycopg

    def run(days, *exprs):
        with psycopg.connect(pg_server.url, autocommit=True) as conn:
            conn.execute("DROP TABLE IF EXISTS tf")
            conn.execute("CREATE TABLE tf (i integer, y integer, m integer, d integer)")
            with conn.cursor().copy("COPY tf FROM STDIN") as copy:
                for i, ymd in enumerate(days):
                    copy.write_row((i, *ymd))
            sql = f"SELECT {', '.join(exprs)} FROM (SELECT i, make_date(y, m, d) AS x FROM tf) v ORDER BY i"
            return [tuple(r) for r in conn.execute(sql).fetchall()]
    _far_check(run, "postgres")


@pytest.mark.slow
def test_spark_far_dates_on_a_timestamp_axis(spark):
    """Spark casts a date to compare it with a timestamp: "long overflow" on a date after
    year 294,247, which the arithmetic branch's clamp by timestamp literals raised (it is
    now by DATE literals)."""
    from dpsql.measure.spark import ENFORCED
    for key, value in ENFORCED.items():
        spark.conf.set(key, value)

    def run(days, *exprs):
        rows = spark.createDataFrame([(i, *ymd) for i, ymd in enumerate(days)], "i INT, y INT, m INT, d INT")
        rows.createOrReplaceTempView("tf")
        sql = f"SELECT {', '.join(exprs)} FROM (SELECT i, make_date(y, m, d) AS x FROM tf) v ORDER BY i"
        return [tuple(r) for r in spark.sql(sql).collect()]
    _far_check(run, "spark")


@pytest.mark.parametrize("kind", ["duckdb", "parquet"])
def test_a_nanosecond_column_on_an_axis_past_its_range(tmp_path, kind):
    """DuckDB compares a TIMESTAMP_NS with a TIMESTAMP literal by casting the literal to
    nanoseconds, which fails for one outside 1677-09-22..2262-04-11: an axis reaching past
    them made the reader fail, and only when a non-NULL row reached that comparison (an
    all-NULL or empty column counted), so whether a query failed depended on the rows.  The
    reader reads such a column at microseconds (every TIMESTAMP_NS is a TIMESTAMP)."""
    from dpsql.measure.backend import DuckDBBackend
    from dpsql.measure.source import Source
    att = TimestampRange("ts", "1600-01-01", "2400-12-31", "year", nullable=True)
    texts = ["2000-06-01 12:00:00.0000005", "1677-09-22", "2262-04-10 23:59:59.999999999",
             "1969-12-31 23:59:59.9999995", None]
    con = duckdb.connect(str(tmp_path / "t.duckdb"))
    con.execute("CREATE TABLE t (ts TIMESTAMP_NS)")
    con.executemany("INSERT INTO t VALUES (CAST(? AS TIMESTAMP_NS))", [(t,) for t in texts])
    con.execute(f"COPY t TO '{tmp_path / 't.parquet'}' (FORMAT parquet)")
    assert con.execute("SELECT typeof(ts) FROM t LIMIT 1").fetchone()[0] == "TIMESTAMP_NS"
    con.close()
    want = [0] * att.size
    for t in texts:     # read at microseconds, floored
        want[att.index_of(None if t is None else dt.datetime.fromisoformat(t[:26]))] += 1
    spec = {"duckdb": str(tmp_path / "t.duckdb"), "table": "t"} if kind == "duckdb" else \
        {"parquet": str(tmp_path / "t.parquet")}
    backend = DuckDBBackend({"t": Source.from_config(spec, tmp_path)}, threads=1)
    try:
        got = backend.count_marginals(TableSchema("t", (att,)), [("ts",)])[("ts",)]
    finally:
        backend.close()
    assert got.tolist() == want


# --- months of an instant: a property over zones, periods and instants near the bin starts ----
_ZONES = ["UTC", "Europe/Paris", "America/New_York", "Australia/Lord_Howe", "Pacific/Apia", "Asia/Pyongyang",
          "America/Sao_Paulo", "Asia/Kolkata", "Pacific/Chatham", "Europe/Dublin", "America/St_Johns"]
_NEAR = [0, 1, -1, 3_600_000_000, -3_600_000_000, 1_800_000_000, -1_800_000_000, 86_400_000_000, -86_400_000_000]


@settings(max_examples=60, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(zone=st.sampled_from(_ZONES), unit=st.sampled_from(["month", "quarter", "year"]),
       lo=st.datetimes(min_value=dt.datetime(1890, 1, 1), max_value=dt.datetime(2090, 1, 1)),
       days=st.integers(20, 4_000), data=st.data())
def test_duckdb_instant_months_equal_the_chain_property(zone, unit, lo, days, data):
    """Any zone, period and unit: instants at, and hours or a microsecond from, the bin starts
    (where an offset change moves a wall reading across a month) and anywhere in and around
    the period land in the chain's cell and ``index_of``'s by the arithmetic."""
    att = TimestampRange("p", iso_text(lo), iso_text(lo + dt.timedelta(days=days)), unit, nullable=True,
                         timezone=zone)
    assume(time_arithmetic_sql(att, "x", "timestamptz", "duckdb") is not None)
    starts = list(att._instants)
    picks = data.draw(st.lists(st.tuples(st.integers(0, len(starts) - 1), st.sampled_from(_NEAR)),
                               min_size=5, max_size=40))
    values = [None] + [starts[k] + dt.timedelta(microseconds=d) for k, d in picks]
    first, last = starts[0], att.instant(att.end)
    span = int((last - first) / _MICRO)
    values += [first + dt.timedelta(microseconds=data.draw(st.integers(-span // 10, span + span // 10)))
               for _ in range(10)]
    texts = [_text(v) for v in values] + _INFINITIES["duckdb"]
    got = _duckdb_run("TIMESTAMPTZ", texts, time_index_sql(att, "x", "timestamptz").sql("duckdb"),
                      time_index_sql(att, "x", "timestamptz", dialect="duckdb").sql("duckdb"))
    for i, (by_chain, by_arithmetic) in enumerate(got):
        want = att.index_of(values[i]) if i < len(values) else att.invalid_index
        assert by_chain == by_arithmetic == want, (zone, unit, texts[i], by_chain, by_arithmetic, want)
