"""The cell of a value, in SQL: :func:`index_sql` is :meth:`Attribute.index_of` run inside
the database engine (``docs/domains.md``, "The SQL mapping").

Every expression is total: a CASE with an explicit NULL branch and an ELSE, so whatever a
row holds it lands in exactly one declared cell and the expression never returns NULL nor
raises (an error that depended on the rows would reveal something about them;
``docs/privacy.md`` §8.1).  The declared domain (``dpsql.domain``) says which cell a value
belongs to; this module only writes that rule as portable SQL (DuckDB, PostgreSQL, Spark),
built as sqlglot ASTs.  The reader (``dpsql.measure.reader``) applies it after converting
each source column; ``tests/test_domain_sql.py`` checks it against ``index_of`` row by row.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence


from dpsql.domain import Attribute, Categorical, IntegerRange, Numeric
from dpsql.sql.syntax import exp
from dpsql.temporal import Temporal, TimestampRange
from dpsql.timeaxis import day_micros, iso_text, truncate
from dpsql.timeofday import UNIT_MICROS, TimeOfDayRange

__all__ = ["index_sql", "bins_sql", "outside_range", "is_nan", "column_expr", "time_literal", "time_index_sql",
           "time_arithmetic_sql", "ARITHMETIC_DIALECTS", "time_of_day_literal", "time_of_day_index_sql"]

# Above this many thresholds a flat WHEN chain costs O(n) comparisons per row; a balanced
# nested CASE costs O(log n) and is just as portable (and NULL/NaN still take one path).
_FLAT_CASE_LIMIT = 16


def column_expr(column) -> exp.Expr:
    """A column name (quoted: declared names keep their case) or an expression as given."""
    if isinstance(column, exp.Expression):
        return column
    if isinstance(column, str):
        return exp.column(column, quoted=True)
    raise TypeError(f"index_sql expects a column name or a sqlglot expression, got {type(column).__name__}")


def is_nan(x: exp.Expr) -> exp.Expr:
    """``x`` is NaN, on every engine: DuckDB, PostgreSQL and Spark all hold NaN = NaN true
    (PostgreSQL has no isnan)."""
    return exp.EQ(this=exp.cast(x.copy(), "DOUBLE"), expression=exp.cast(exp.Literal.string("NaN"), "DOUBLE"))


def _when(case: exp.Case, condition: exp.Expr, cell: int) -> exp.Case:
    return case.when(condition, exp.Literal.number(cell), copy=False)  # no copy: O(n) not O(n^2)


def _threshold_case(x, thresholds: Sequence, literal, first: int) -> exp.Expr:
    """CASE giving ``first + bisect_right(thresholds, x)`` using only ``x < t`` tests.

    NaN fails every ``<`` test on every engine we target, so it takes the ELSE path down to
    the last bin, exactly like ``bisect_right`` does in Python.
    """
    if not thresholds:
        return exp.Literal.number(first)
    n = len(thresholds)
    if n <= _FLAT_CASE_LIMIT:
        case = exp.Case()
        for i, t in enumerate(thresholds):
            case = _when(case, exp.LT(this=x.copy(), expression=literal(t)), first + i)
        return case.else_(exp.Literal.number(first + n))
    mid = n // 2
    left = _threshold_case(x, thresholds[:mid], literal, first)
    right = _threshold_case(x, thresholds[mid + 1:], literal, first + mid + 1)
    # copy=False: the subtrees are fresh; copying them at every level made a 100,000-cell
    # column's CASE take minutes to build (deep copies of the whole subtree per level).
    return exp.Case().when(exp.LT(this=x.copy(), expression=literal(thresholds[mid])), left,
                           copy=False).else_(right, copy=False)


def _numeric_value(att: Attribute, x: exp.Expr) -> exp.Expr:
    """The value as the bins compare it: a numeric attribute compares ``CAST(x AS DOUBLE)``
    with ``CAST(edge AS DOUBLE)`` so that float32 or DECIMAL columns and decimal literals
    such as 0.1 compare exactly as Python floats do (``Numeric._py_value``)."""
    return exp.cast(x, "DOUBLE") if att.kind == "numeric" else x


def _threshold_literal(att: Attribute):
    if att.kind == "numeric":
        return lambda t: exp.cast(exp.Literal.number(repr(float(t))), "DOUBLE")
    return exp.Literal.number


def outside_range(att: Attribute, x: exp.Expr, cell: exp.Expr, literal=exp.Literal.number) -> exp.Expr:
    """``cell``, except that a value ``x`` outside ``lo..hi`` of an integer attribute declared
    ``clamp = False`` (a join key, ``IntegerRange.index_of``) lands in ``invalid_index``;
    ``literal`` writes a bound in ``x``'s type.  ``cell`` alone for every other attribute."""
    if not isinstance(att, IntegerRange) or att.clamp:
        return cell
    outside = exp.or_(exp.LT(this=x.copy(), expression=literal(att.lo)),
                      exp.GT(this=x.copy(), expression=literal(att.hi)))
    return exp.Case().when(outside, exp.Literal.number(att.invalid_index), copy=False).else_(cell, copy=False)


def bins_sql(att: Attribute, column) -> exp.Expr:
    """The bin of a value that is neither NULL nor NaN (the ``x < t`` chain of
    :func:`index_sql` without its NULL and NaN branches), for a binned attribute: for a
    reader that knows from the column's declared type that neither can occur
    (``dpsql.measure.reader``).  An unclamped integer's values outside its range go to
    ``invalid_index`` (:func:`outside_range`)."""
    if not isinstance(att, (IntegerRange, Numeric)):
        raise TypeError(f"bins_sql needs a binned attribute, got {att.kind} column '{att.name}'")
    x = _numeric_value(att, column_expr(column))
    return outside_range(att, x, _threshold_case(x, att.thresholds(), _threshold_literal(att), 0))


# The literals' types, built once: time_literal runs once per bin start (100,800 for minutes
# over ten weeks), and DataType.build parses its name each time (17x the cost of a copy; the
# Cast built from the copy is the same expression: tests/measure/test_time_reader.py).
_TIME_TYPES = {name: exp.DataType.build(name) for name in ("DATE", "TIMESTAMPTZ", "TIMESTAMPNTZ", "TIME")}


def _cast(text: str, name: str) -> exp.Cast:
    return exp.Cast(this=exp.Literal.string(text), to=_TIME_TYPES[name].copy())


def time_literal(att: Temporal, wall, family: str) -> exp.Expr:
    """A point of a time axis (wall time) as a SQL literal of the column's type family:
    ``date`` (``CAST('2013-06-01' AS DATE)``) for a date axis over a DATE column, the
    instant with an explicit ``+00:00`` offset for ``timestamptz`` (so that no engine's
    session time zone takes part in the comparison), a DATE for a DATE column on a timestamp
    axis (the first day from ``wall``: the date compares as its midnight, as SQL casts it,
    but is never cast, ``_first_day_from``), else a naive TIMESTAMP."""
    if family == "date" and att.kind == "date":
        return _cast(iso_text(wall), "DATE")
    if family == "date":
        return _cast(_first_day_from(wall), "DATE")
    if not isinstance(wall, dt.datetime):
        wall = dt.datetime.combine(wall, dt.time())
    if family == "timestamptz":
        instant = att.instant(wall) if isinstance(att, TimestampRange) else wall.replace(tzinfo=dt.UTC)
        return _cast(iso_text(instant.replace(tzinfo=None)) + "+00:00", "TIMESTAMPTZ")
    return _cast(iso_text(wall), "TIMESTAMPNTZ")


def _first_day_from(wall) -> str:
    """The first day whose midnight is at or after ``wall``, as DATE text: a DATE ``x`` on a
    timestamp axis is below ``wall`` exactly when ``x`` is below that day (its midnight, as
    SQL casts it, then is).  A DATE column is so compared with DATE literals only: Spark casts
    a date to a timestamp to compare the two and fails ("long overflow") on a date after year
    294,247, which a DATE holds, so the comparison would make the reader fail on a row."""
    if not isinstance(wall, dt.datetime) or wall.time() == dt.time():
        return iso_text(wall if not isinstance(wall, dt.datetime) else wall.date())
    if wall.date() == dt.date.max:
        return "10000-01-01"          # the day after 9999-12-31 (no Python date): every engine reads it
    return iso_text(wall.date() + dt.timedelta(days=1))


def time_index_sql(att: Temporal, column, family: str, nullable_input: bool = True,
                   dialect: str | None = None) -> exp.Expr:
    """The cell of a time value of type ``family`` (``date``, ``timestamp``,
    ``timestamptz``): NULL → ``null_place``, before ``lo`` or from the axis' end on →
    ``invalid_index`` (``dpsql.temporal``: out-of-period rows are not clamped), else the
    chain of ``x < start`` tests over the bin starts, with literals of the column's type.
    Given the ``dialect`` it is rendered for, the chain is replaced by arithmetic where
    :func:`time_arithmetic_sql` has it (the same cell for every value)."""
    x = column_expr(column)
    arithmetic = None if dialect is None else time_arithmetic_sql(att, x, family, dialect)

    def literal(wall):
        return time_literal(att, wall, family)
    case = exp.Case()
    if nullable_input:
        case = _when(case, exp.Is(this=x.copy(), expression=exp.Null()), att.null_place)
    case = _when(case, exp.LT(this=x.copy(), expression=literal(att.lo)), att.invalid_index)
    case = _when(case, exp.GTE(this=x.copy(), expression=literal(att.end)), att.invalid_index)
    if arithmetic is not None:
        return case.else_(arithmetic, copy=False)
    # copy=False: the chain is fresh (a copy of a 100,800-minute chain took minutes)
    return case.else_(_threshold_case(x, att.thresholds(), literal, 0), copy=False)


# --- the cell of a time value by arithmetic ------------------------------------------------
# The fixed-width units, in microseconds; month, quarter and year count calendar months.
_UNIT_MICROS = {"second": 1_000_000, "minute": 60_000_000, "hour": 3_600_000_000,
                "day": 86_400_000_000, "week": 7 * 86_400_000_000}
_UNIT_MONTHS = {"month": 1, "quarter": 3, "year": 12}
_DAY_MICROS = 86_400_000_000
_EPOCH_DAY = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1)
#: the engines whose functions :func:`_days` and :func:`_micros` know
ARITHMETIC_DIALECTS = ("duckdb", "postgres", "spark")


def _micros_of(wall: dt.datetime) -> int:
    d = wall - _EPOCH
    return (d.days * 86_400 + d.seconds) * 1_000_000 + d.microseconds


def _days(x: exp.Expr, dialect: str) -> exp.Expr:
    """Days since 1970-01-01 of a DATE, an integer (DuckDB and PostgreSQL subtract dates
    to an integer; Spark's date difference is an interval, its ``unix_date`` the days)."""
    if dialect == "spark":
        return exp.Anonymous(this="unix_date", expressions=[x.copy()])
    return exp.Paren(this=exp.Sub(this=x.copy(), expression=_cast(iso_text(_EPOCH_DAY), "DATE")))


def _micros(x: exp.Expr, dialect: str) -> exp.Expr:
    """Microseconds since 1970-01-01 00:00 of a timestamp, a BIGINT: UTC for an instant,
    the wall time's own for a naive one (DuckDB ``epoch_us``; PostgreSQL's ``EXTRACT(EPOCH
    …)`` is an exact numeric with six decimals, so times 10⁶ it is an integer; Spark's
    ``unix_micros`` reads a TIMESTAMP_NTZ in the session zone, UTC in every dpsql session
    (``measure/spark.py``))."""
    if dialect == "duckdb":
        return exp.Anonymous(this="epoch_us", expressions=[x.copy()])
    if dialect == "spark":
        return exp.Anonymous(this="unix_micros", expressions=[x.copy()])
    seconds = exp.Extract(this=exp.var("EPOCH"), expression=x.copy())
    return exp.cast(exp.Mul(this=seconds, expression=exp.Literal.number(1_000_000)), "BIGINT")


def _months(x: exp.Expr) -> exp.Expr:
    """``year·12 + month`` of a DATE or naive TIMESTAMP (fields of the value itself, in no
    zone; ``EXTRACT`` is numeric on PostgreSQL, hence the casts)."""
    def field(name: str) -> exp.Expr:
        return exp.cast(exp.Extract(this=exp.var(name), expression=x.copy()), "BIGINT")
    return exp.Add(this=exp.Mul(this=field("YEAR"), expression=exp.Literal.number(12)), expression=field("MONTH"))


def _offset_from(value: exp.Expr, anchor: int) -> exp.Expr:
    if anchor > 0:
        return exp.Paren(this=exp.Sub(this=value, expression=exp.Literal.number(anchor)))
    if anchor < 0:   # never "x - -5": PostgreSQL reads "--" as a comment
        return exp.Paren(this=exp.Add(this=value, expression=exp.Literal.number(-anchor)))
    return value


def _int_div(value: exp.Expr, width: int, dialect: str) -> exp.Expr:
    """``value DIV width`` of a non-negative BIGINT (truncating and flooring agree)."""
    if width == 1:
        return value
    if dialect == "postgres":     # bigint / bigint truncates (typed: a plain "/")
        return exp.Div(this=value, expression=exp.Literal.number(width), typed=True)
    return exp.IntDiv(this=value, expression=exp.Literal.number(width))   # DuckDB //, Spark DIV


#: The most runs of one zone offset an instant's arithmetic takes (two a year for a zone with
#: daylight-saving time: 64 is 32 years) unless its runs hold ``_BINS_PER_RUN`` bins each on
#: average; else the chain.  The runs are picked by a balanced tree (log₂ runs comparisons),
#: the chain bisects the bins: with few bins per run (quarters in New York, 1925-2025: 195
#: runs of 401 bins) the chain was faster (0.30 s against 1.05 s on 10⁶ rows), with many (days
#: in Paris over the same century: 138 runs of 36,526 bins) the arithmetic (0.43 s against 27 s,
#: plus 6 s to build the chain's SQL); months there (1,201 bins) 0.71 s against 1.15 s.
_MAX_RUNS = 64
_BINS_PER_RUN = 8


def _offset_runs(att: Temporal) -> list[tuple[int, int, dt.timedelta]]:
    """Maximal runs ``(first, last, offset)`` of consecutive bins whose starts have the same
    zone offset (wall time minus UTC): one run for UTC or any period without a change."""
    if not isinstance(att, TimestampRange):
        return [(0, len(att._starts) - 1, dt.timedelta(0))]
    runs: list[tuple[int, int, dt.timedelta]] = []
    for k, (wall, instant) in enumerate(zip(att._starts, att._instants)):
        offset = wall - instant.replace(tzinfo=None)
        if runs and runs[-1][2] == offset:
            runs[-1] = (runs[-1][0], k, offset)
        else:
            runs.append((k, k, offset))
    return runs


def time_arithmetic_sql(att: Temporal, column, family: str, dialect: str) -> exp.Expr | None:
    """The bin of a time value inside the axis (``lo <= x < end``; NULL and the rest are
    :func:`time_index_sql`'s branches before it) by arithmetic, or None where the chain of
    comparisons stays.  Equal to the chain on every value (docs/domains.md, "The SQL
    mapping"): the bins after the first start at ``a + k·w`` for the period ``a`` holding
    ``lo`` (``truncate(lo)``) and a fixed width ``w``, so the bin of ``x`` is ``(x − a) DIV
    w`` (the number of starts at or below ``x``); for months, quarters and years the same
    on the count of months ``year·12 + month``.  The value is first clamped to ``[lo, hi]``
    with literals of its own type, so the arithmetic never sees a value outside years
    1..9999 (PostgreSQL's infinity, a huge date) and cannot fail on any row.

    Fixed widths count days of a date on a date axis, else microseconds (a DATE on a
    timestamp axis is compared as its midnight, as the chain does).  An instant
    (``timestamptz``) is binned in UTC shifted by the zone's offset: over a run of bins whose
    starts have one offset the starts are evenly spaced instants ``a − o + k·w``; with a
    daylight-saving change in the period a CASE picks the run (one comparison with the first
    instant of each next run) and each run's bin is capped at its last (a bin that holds a
    repeated hour is longer than ``w``; a skipped one is empty).  Months, quarters and years
    of an instant take the same runs without the engine's zone rules: a run's starts are
    local midnights W_k at one offset o, so ``x ≥ W_k − o`` exactly when the day of
    ``x + o`` (UTC microseconds, an integer division) is at or after W_k's, and the bin is the
    months of that day (:func:`_instant_months_cell`).  Public metadata only."""
    if dialect not in ARITHMETIC_DIALECTS:
        return None
    x = column_expr(column)
    unit = att.bin
    runs = _offset_runs(att) if family == "timestamptz" else [(0, len(att._starts) - 1, dt.timedelta(0))]
    if len(runs) > _MAX_RUNS and len(att._starts) < _BINS_PER_RUN * len(runs):
        return None
    last = att.end - att._step
    if family == "date" and att.kind != "date":
        # a DATE on a timestamp axis is clamped by DATE literals (time_literal): to the last
        # day whose midnight is inside the axis, the day before the first day from its end
        after = _first_day_from(att.end)
        last = dt.date.max if after == "10000-01-01" else dt.date.fromisoformat(after) - dt.timedelta(days=1)
    clamped = exp.Anonymous(this="least", expressions=[
        exp.Anonymous(this="greatest", expressions=[x.copy(), time_literal(att, att.lo, family)]),
        time_literal(att, last, family)])
    anchor = truncate(att.lo, unit)
    if unit in _UNIT_MONTHS and family == "timestamptz":
        return _instant_months_cell(att, x, clamped, anchor, runs, dialect)
    if unit in _UNIT_MONTHS:
        months = anchor.year * 12 + anchor.month
        return _int_div(_offset_from(_months(clamped), months), _UNIT_MONTHS[unit], dialect)
    if family == "date" and att.kind == "date":
        days = (anchor - _EPOCH_DAY).days
        return _int_div(_offset_from(_days(clamped, dialect), days), _UNIT_MICROS[unit] // _DAY_MICROS, dialect)
    if not isinstance(anchor, dt.datetime):
        anchor = dt.datetime.combine(anchor, dt.time())
    # the end's offset may differ from the last start's (the last bin then is not w long)
    capped = len(runs) > 1 or (isinstance(att, TimestampRange) and family == "timestamptz"
                               and att.end - att._instants[-1].replace(tzinfo=None) != runs[-1][2])

    def run_cell(first: int, last_cell: int, offset: dt.timedelta) -> exp.Expr:
        # an instant's microseconds are UTC: the anchor's wall time moved by the run's offset
        start = _micros_of(anchor) - _micros_of(_EPOCH + offset)
        # a DATE on a timestamp axis is clamped by DATE literals: its midnight's microseconds
        # are its days' (Spark's unix_micros takes no DATE)
        micros = _micros(clamped, dialect) if family != "date" else \
            exp.Mul(this=_days(clamped, dialect), expression=exp.Literal.number(_DAY_MICROS))
        cell = _int_div(_offset_from(micros, start), _UNIT_MICROS[unit], dialect)
        return exp.Anonymous(this="least", expressions=[cell, exp.Literal.number(last_cell)]) if capped else cell
    return _by_run(att, x, runs, run_cell)


def _by_run(att: Temporal, x: exp.Expr, runs, run_cell) -> exp.Expr:
    """``run_cell(first, last, offset)`` of the run holding the instant ``x`` (a run holds the
    instants from its first start to the next run's): a balanced tree of comparisons with
    the runs' first instants, log₂ of the runs per row (a flat CASE over the 60 runs of 30
    years of months in Paris made the arithmetic as slow as the chain it replaces)."""
    if len(runs) == 1:
        return run_cell(*runs[0])
    mid = len(runs) // 2
    below = exp.LT(this=x.copy(), expression=time_literal(att, att._starts[runs[mid][0]], "timestamptz"))
    return exp.Case().when(below, _by_run(att, x, runs[:mid], run_cell), copy=False).else_(
        _by_run(att, x, runs[mid:], run_cell), copy=False)


def _instant_months_cell(att: Temporal, x: exp.Expr, clamped: exp.Expr, anchor, runs, dialect: str) -> exp.Expr:
    """The month (quarter, year) bin of a clamped instant: in the run of one zone offset o
    that holds it, its local day ``anchor + (µs(x) − (µs(anchor) − o)) DIV day`` as a DATE
    (non-negative: the run's instants are at or after its first start, the anchor's midnight
    or later, moved by o), whose ``year·12 + month`` counted from the anchor's is the bin,
    capped at the run's last bin (an instant just before the next run, whose offset is
    smaller, reads as the next month at this one's).  The run picks two literals, the shift
    µs(anchor) − o and the cap, by :func:`_by_run`; the arithmetic is written once (a whole
    cell per run made 30 years of Paris months as slow as the chain).  No zone rules of the
    engine: integers and a DATE."""
    day = anchor if not isinstance(anchor, dt.datetime) else anchor.date()
    midnight = _micros_of(dt.datetime.combine(day, dt.time()))
    shift = _by_run(att, x, runs, lambda first, last, offset: exp.Literal.number(
        midnight - _micros_of(_EPOCH + offset)))
    cap = _by_run(att, x, runs, lambda first, last, offset: exp.Literal.number(last))
    since = exp.Paren(this=exp.Sub(this=_micros(clamped, dialect), expression=shift))
    days = _int_div(since, _DAY_MICROS, dialect)
    local = _date_plus(day, exp.cast(days, "INT"), dialect)
    cell = _int_div(_offset_from(_months(local), day.year * 12 + day.month), _UNIT_MONTHS[att.bin], dialect)
    return exp.Anonymous(this="least", expressions=[cell, cap])


def _date_plus(day: dt.date, days: exp.Expr, dialect: str) -> exp.Expr:
    """The DATE ``days`` (an INT) after ``day`` (DuckDB and PostgreSQL add an integer to a
    date, Spark by ``date_add``)."""
    base = _cast(iso_text(day), "DATE")
    if dialect == "spark":
        return exp.Anonymous(this="date_add", expressions=[base, days])
    return exp.Paren(this=exp.Add(this=base, expression=days))


# --- the cell of a time of day ----------------------------------------------------------------
def time_of_day_literal(value: dt.time, family: str) -> exp.Expr:
    """A time of day as a literal of the compared value's family: ``time`` (a TIME column:
    ``CAST('10:00:00' AS TIME)``) or ``micros`` (microseconds since midnight, the integer
    the reader computes from text, on every engine alike)."""
    if family == "micros":
        return exp.Literal.number(day_micros(value))
    return _cast(iso_text(value), "TIME")


def time_of_day_index_sql(att: TimeOfDayRange, column, family: str, nullable_input: bool = True,
                          dialect: str | None = None) -> exp.Expr:
    """The cell of a time of day (``family`` ``time`` or ``micros``: see
    :func:`time_of_day_literal`): NULL → ``null_place``, before ``lo`` or after ``hi`` →
    ``invalid_index`` (not clamped, as for dates), else its bin.  The bin is ``(m − a) DIV
    w`` on the microseconds ``m`` since midnight, ``a`` the start of the period holding ``lo``
    (the bins after the first start at multiples of the width ``w``), for the engines whose
    microseconds :func:`_micros` knows (DuckDB's ``epoch_us`` and PostgreSQL's ``EXTRACT(EPOCH
    …)`` are exact on a TIME); else the chain of ``x < start`` tests.  Public metadata only."""
    x = column_expr(column)

    def literal(value):
        return time_of_day_literal(value, family)
    case = exp.Case()
    if nullable_input:
        case = _when(case, exp.Is(this=x.copy(), expression=exp.Null()), att.null_place)
    case = _when(case, exp.LT(this=x.copy(), expression=literal(att.lo)), att.invalid_index)
    case = _when(case, exp.GT(this=x.copy(), expression=literal(att.hi)), att.invalid_index)
    micros: exp.Expr | None = None
    if dialect in ARITHMETIC_DIALECTS:
        micros = x.copy() if family == "micros" else _micros(x, dialect) if dialect != "spark" else None
    if micros is None or dialect is None:
        return case.else_(_threshold_case(x, att.thresholds(), literal, 0), copy=False)
    width = UNIT_MICROS[att.bin]
    return case.else_(_int_div(_offset_from(micros, day_micros(att.lo) // width * width), width, dialect))


def index_sql(att: Attribute, column) -> exp.Expr:
    """sqlglot expression computing ``att.index_of`` inside the database; never NULL.

    Categorical: NULL → :attr:`~Attribute.null_place`, each label by exact equality, else
    the fallback (the other cell, else :attr:`~Attribute.invalid_index`).  Binned: NULL →
    ``null_place``, NaN → ``invalid_index`` (tested as ``CAST(x AS DOUBLE) = CAST('NaN' AS
    DOUBLE)``: DuckDB, PostgreSQL and Spark all hold NaN equal to itself, and PostgreSQL has
    no ``isnan``), else the bin (:func:`bins_sql`)."""
    x = column_expr(column)
    if isinstance(att, TimeOfDayRange):
        return time_of_day_index_sql(att, x, "time")
    if isinstance(att, Temporal):
        return time_index_sql(att, x, att.kind)
    if isinstance(att, Categorical):
        literal = exp.Literal.string if att.python_type is str else exp.Literal.number
        case = _when(exp.Case(), exp.Is(this=x.copy(), expression=exp.Null()), att.null_place)
        for i, label in enumerate(att.labels_):
            case = _when(case, exp.EQ(this=x.copy(), expression=literal(label)), i)
        return case.else_(exp.Literal.number(att.invalid_index))
    value = _numeric_value(att, x)
    return (exp.Case()
            .when(exp.Is(this=value.copy(), expression=exp.Null()), exp.Literal.number(att.null_place))
            .when(is_nan(value), exp.Literal.number(att.invalid_index))
            .else_(bins_sql(att, column)))
