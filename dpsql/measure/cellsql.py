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
from dpsql.timeaxis import iso_text

__all__ = ["index_sql", "bins_sql", "outside_range", "is_nan", "column_expr", "time_literal", "time_index_sql"]

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
_TIME_TYPES = {name: exp.DataType.build(name) for name in ("DATE", "TIMESTAMPTZ", "TIMESTAMPNTZ")}


def _cast(text: str, name: str) -> exp.Cast:
    return exp.Cast(this=exp.Literal.string(text), to=_TIME_TYPES[name].copy())


def time_literal(att: Temporal, wall, family: str) -> exp.Expr:
    """A point of a time axis (wall time) as a SQL literal of the column's type family:
    ``date`` (``CAST('2013-06-01' AS DATE)``) for a date axis over a DATE column, the
    instant with an explicit ``+00:00`` offset for ``timestamptz`` (so that no engine's
    session time zone takes part in the comparison), else a naive TIMESTAMP (a DATE column
    on a timestamp axis is compared as its midnight, as SQL casts it)."""
    if family == "date" and att.kind == "date":
        return _cast(iso_text(wall), "DATE")
    if not isinstance(wall, dt.datetime):
        wall = dt.datetime.combine(wall, dt.time())
    if family == "timestamptz":
        instant = att.instant(wall) if isinstance(att, TimestampRange) else wall.replace(tzinfo=dt.UTC)
        return _cast(iso_text(instant.replace(tzinfo=None)) + "+00:00", "TIMESTAMPTZ")
    return _cast(iso_text(wall), "TIMESTAMPNTZ")


def time_index_sql(att: Temporal, column, family: str, nullable_input: bool = True) -> exp.Expr:
    """The cell of a time value of type ``family`` (``date``, ``timestamp``,
    ``timestamptz``): NULL → ``null_place``, before ``lo`` or from the axis' end on →
    ``invalid_index`` (``dpsql.temporal``: out-of-period rows are not clamped), else the
    chain of ``x < start`` tests over the bin starts, with literals of the column's type."""
    x = column_expr(column)

    def literal(wall):
        return time_literal(att, wall, family)
    case = exp.Case()
    if nullable_input:
        case = _when(case, exp.Is(this=x.copy(), expression=exp.Null()), att.null_place)
    case = _when(case, exp.LT(this=x.copy(), expression=literal(att.lo)), att.invalid_index)
    case = _when(case, exp.GTE(this=x.copy(), expression=literal(att.end)), att.invalid_index)
    # copy=False: the chain is fresh (a copy of a 100,800-minute chain took minutes)
    return case.else_(_threshold_case(x, att.thresholds(), literal, 0), copy=False)


def index_sql(att: Attribute, column) -> exp.Expr:
    """sqlglot expression computing ``att.index_of`` inside the database; never NULL.

    Categorical: NULL → :attr:`~Attribute.null_place`, each label by exact equality, else
    the fallback (the other cell, else :attr:`~Attribute.invalid_index`).  Binned: NULL →
    ``null_place``, NaN → ``invalid_index`` (tested as ``CAST(x AS DOUBLE) = CAST('NaN' AS
    DOUBLE)``: DuckDB, PostgreSQL and Spark all hold NaN equal to itself, and PostgreSQL has
    no ``isnan``), else the bin (:func:`bins_sql`)."""
    x = column_expr(column)
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
