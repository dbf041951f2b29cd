"""The scalar functions of dpsql's expressions: one table, read by every evaluator.

A function is applied to values in two places: to the cells of a declared domain (public
values: ``cells.CellEvaluator``, e.g. ``GROUP BY round(age / 10.0)``) and to released,
post-processed values (``relation.Evaluator``, e.g. ``ROUND(AVG(age), 1)``, with partial
derivatives for the delta method; ``ir.interval`` for ranges).  Each :class:`Scalar` says
once how many arguments it takes, the value on one non-NULL argument, how an error passes
through it (``chain``), whether it is monotone (evaluable on a wide bin from its ends, and
its range from the range's ends) and its result type; the checks of constant arguments
(ROUND's decimal places) are here too, so both places refuse alike, with one message.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from sqlglot import exp

from dpsql.errors import DataError, DomainViolationError, UnsupportedQueryError
from dpsql.sql import timefuncs
from dpsql.timeaxis import iso_text

__all__ = ["Scalar", "SCALARS", "INT4_MAX", "check_arity", "round_places", "round_half_away", "cast_value",
           "cast_type", "char_format", "operands", "check_divisor", "compare",
           "common_type", "type_name", "as_case", "first_present", "first_true",
           "check_ordered"]

INT4_MAX = 2 ** 31 - 1


def round_half_away(a, d: int = 0):
    """round(a, d) half away from zero; ``d`` may be huge (no 10**d is ever built).  An
    integer with d ≥ 0 stays that integer; infinities and digits beyond a double's stay."""
    if isinstance(a, int) and d >= 0:
        return a
    if d > 308:
        return a                      # no double has digits that far right
    if d < -308:
        return 0 if isinstance(a, int) else 0.0
    scale = 10.0 ** d
    scaled = abs(a) * scale
    if not math.isfinite(scaled):
        return a
    r = math.floor(scaled + 0.5) / scale
    return r if a >= 0 else -r


def _round_column(x: np.ndarray, d: int = 0) -> np.ndarray:
    """``round_half_away`` on each value of a float column (NaN stays NaN), the same IEEE
    operations in the same order, so the same bits: 10.0 ** d in Python, then |a|·scale,
    + 0.5, floor, / scale (math.floor's int is that float exactly)."""
    if d > 308:
        return x.copy()
    if d < -308:
        return np.where(np.isnan(x), np.nan, 0.0)
    scale = 10.0 ** d
    scaled = np.abs(x) * scale
    r = np.floor(scaled + 0.5) / scale
    return np.where(np.isfinite(scaled), np.where(x >= 0, r, -r), x)


def _sqrt_column(x: np.ndarray) -> np.ndarray:
    # np.sqrt is math.sqrt to the bit (both correctly rounded, IEEE 754); NULL below 0
    return np.where(x < 0, np.nan, np.sqrt(np.where(x < 0, 0.0, x)))


def _whole(f: Callable[[float], int]) -> Callable[[Any], Any]:
    """floor/ceil: an integer, except that ±inf stays itself (math.floor(inf) raises)."""
    return lambda a: a if isinstance(a, float) and not math.isfinite(a) else f(a)


def _same(d, x, r):
    # Rounding does not make an estimate more certain: its error passes through unchanged.
    return d


def _to_char(v, fmt: str) -> str:
    """``to_char(x, 'YYYY-MM')`` / DuckDB's ``strftime(x, '%Y-%m')`` (sqlglot has turned
    either format into strftime's) of a date or timestamp."""
    if not isinstance(v, dt.date):
        raise UnsupportedQueryError("to_char needs a date or timestamp", hint="format date and timestamp columns")
    return v.strftime(fmt)


def _abs_image(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return np.where(lo >= 0, lo, np.where(hi <= 0, -hi, 0.0)), np.maximum(np.abs(lo), np.abs(hi))


@dataclass(frozen=True)
class Scalar:
    """One scalar function of a value ``x`` (and constants after it, e.g. ROUND's places)."""

    name: str
    arity: tuple[int, int]                   # fewest and most arguments
    value: Callable[..., Any]                # f(x, *constants) of a non-NULL x; None is NULL
    chain: Callable[[Any, np.ndarray, np.ndarray], Any] | None   # ∂f/∂a from ∂x/∂a (d), x and f(x)
    monotone: bool                           # non-decreasing in x
    partial: bool = False                    # NULL outside its domain (sqrt(-1)), where engines raise
    image: Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None
    result: str = "double precision"
    # checks a constant argument after x: (is it a constant, its value, the call as written)
    # → the value to apply, or the one error of both evaluators (the caller adds its position)
    constant: Callable[[bool, Any, str], Any] | None = None
    # ``value`` on a whole float column at once, to the bit (NaN in, NaN out), or None: a
    # ROUND over 100,000 released rows took 35 ms value by value, 1.4 ms so (issue 35).
    # Only exact operations (IEEE + - × ÷ √, floor, ceil, abs): numpy's log or exp may
    # differ from math's in the last bit, by CPU, so ln stays value by value.
    column: Callable[..., np.ndarray] | None = None

    @property
    def numeric(self) -> bool:
        """Of a number, to a number (else of any value, to text: no error passes through)."""
        return self.chain is not None

    def apply(self, x: np.ndarray, *constants) -> np.ndarray:
        """``value`` on each row of a column: a float one (NaN is NULL and stays NaN) for a
        numeric function, else an object one (None is NULL)."""
        if not self.numeric:
            return np.array([None if a is None else self.value(a, *constants) for a in x], dtype=object)
        if self.column is not None and isinstance(x, np.ndarray) and x.dtype == np.float64:
            with np.errstate(invalid="ignore", over="ignore"):
                return self.column(x, *constants)
        out = np.full(len(x), np.nan)
        for i, a in enumerate(x.tolist()):
            if not math.isnan(a):
                r = self.value(a, *constants)
                out[i] = np.nan if r is None else r
        return out

    def checked(self, is_constant: bool, v: Any, shown: str) -> Any:
        """A constant argument after x (ROUND's places, to_char's format), checked."""
        return self.constant(is_constant, v, shown) if self.constant is not None else v

    def range(self, lo: np.ndarray, hi: np.ndarray, *constants) -> tuple[np.ndarray, np.ndarray]:
        """The values' range for x in [lo, hi] (monotone: the ends' images)."""
        if self.image is not None:
            return self.image(lo, hi)
        return self.apply(lo, *constants), self.apply(hi, *constants)


SCALARS: dict[str, Scalar] = {s.name: s for s in (
    Scalar("round", (1, 2), round_half_away, _same, monotone=True,
           constant=lambda ok, d, shown: round_places(ok, d, shown), column=_round_column),
    # + 0.0: math.ceil(-0.3) is the int 0, a value +0.0, where np.ceil gives -0.0
    Scalar("floor", (1, 1), _whole(math.floor), _same, monotone=True, column=lambda x: np.floor(x) + 0.0),
    Scalar("ceil", (1, 1), _whole(math.ceil), _same, monotone=True, column=lambda x: np.ceil(x) + 0.0),
    Scalar("abs", (1, 1), abs, lambda d, x, r: d * np.sign(x), monotone=False, image=_abs_image,
           column=np.abs),
    Scalar("sqrt", (1, 1), lambda a: None if a < 0 else math.sqrt(a), lambda d, x, r: d / (2 * r),
           monotone=True, partial=True, column=_sqrt_column),
    Scalar("ln", (1, 1), lambda a: None if a <= 0 else math.log(a), lambda d, x, r: d / x,
           monotone=True, partial=True),
    Scalar("to_char", (2, 2), _to_char, None, monotone=False, result="text",
           constant=lambda ok, fmt, shown: char_format(ok, fmt)),
)}


def operands(node: exp.Expression) -> list[exp.Expression]:
    """A function call's arguments in order (``round(x, 2)``: x, 2; a cast's type is not one)."""
    keys = () if isinstance(node, exp.Cast) else ("decimals", "truncate", "to", "expression")
    return [node.this] + [a for k in keys if (a := node.args.get(k)) is not None] + list(node.expressions)


def check_arity(name: str, n: int) -> None:
    lo, hi = SCALARS[name].arity
    if not lo <= n <= hi:
        takes = str(lo) if lo == hi else f"{lo} to {hi}"
        raise UnsupportedQueryError(f"function {name} takes {takes} argument{'s' if hi > 1 else ''}, not {n}",
                                    hint=f"call {name} with {takes}")


def char_format(constant: bool, fmt: Any) -> str:
    """to_char's format, checked: a constant string."""
    if not constant or not isinstance(fmt, str):
        raise UnsupportedQueryError("to_char needs a constant format", hint="e.g. to_char(col, 'YYYY-MM')")
    return fmt


def round_places(constant: bool, d: Any, shown: str) -> int | None:
    """ROUND's number of decimal places, checked (the caller adds the error's position):
    ``constant`` says whether the argument is a constant, ``d`` its value; None for NULL
    (the result is NULL, as in PostgreSQL)."""
    if not constant:
        raise UnsupportedQueryError(f"{shown} needs a constant integer number of decimal places",
                                    hint="e.g. round(AVG(age), 1)")
    if d is None:
        return None
    if not isinstance(d, int) or isinstance(d, bool) or abs(d) > INT4_MAX:
        raise DataError(f"round: {str(d)[:20]} is not a valid number of decimal places",
                        hint=f"use an integer between -{INT4_MAX} and {INT4_MAX}")
    return d


# --- operators ------------------------------------------------------------------------------

def check_divisor(constant: bool, v: Any) -> None:
    """``x / 0``, ``x // 0``, ``x % 0`` with a literal zero divisor: refused over cells and
    values alike (the caller adds the position).  A divisor that is zero only on some cells or
    rows stays a NULL there."""
    if constant and v == 0:
        raise UnsupportedQueryError("division by zero", hint="divide by a non-zero constant")


_ORDER: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda p, q: p == q, "!=": lambda p, q: p != q, "<": lambda p, q: p < q,
    "<=": lambda p, q: p <= q, ">": lambda p, q: p > q, ">=": lambda p, q: p >= q}


def type_name(v: Any) -> str:
    """The PostgreSQL type name of one non-NULL value (for messages: never the value itself,
    which over released answers is a noisy one)."""
    if isinstance(v, (bool, np.bool_)):
        return "boolean"
    if isinstance(v, (int, np.integer)):
        return "integer"
    if isinstance(v, (float, np.floating)):
        return "double precision"
    if isinstance(v, dt.datetime):
        return "timestamp"
    if isinstance(v, dt.date):
        return "date"
    if isinstance(v, dt.time):
        return "time"
    return "text" if isinstance(v, str) else type(v).__name__


_TYPES = frozenset({"boolean", "integer", "double precision", "text", "date", "timestamp", "time"})
_NUMBERS = frozenset({"boolean", "integer", "double precision"})


def common_type(types) -> str:
    """The type of a value that is one of several (a CASE's branches, COALESCE's arguments,
    a grouped expression's values on the cells), from their type names (None: a NULL, no
    type): their one type; integers with doubles (or booleans) are double precision; any
    other mix, or none, is text.  ``grouping.key_value_type`` (cells) and ``ir.type_of``
    (values) both read it."""
    present = {t for t in types if t is not None}
    if len(present) == 1 and present <= _TYPES:
        return present.pop()
    return "double precision" if len(present) > 1 and present <= _NUMBERS else "text"


_ORDERED = (frozenset({"boolean", "integer", "double precision"}), frozenset({"text"}),
            frozenset({"date", "timestamp"}), frozenset({"time"}))


def check_ordered(left: str, right: str) -> None:
    """``<``, ``<=``, ``>``, ``>=`` between values of types ``left`` and ``right``: refused
    where there is no order between them (a number and text or a time; text against a time is
    read as a time), with :func:`compare`'s message.  Over values it is checked from the IR's
    types before anything is measured (``postprocess.to_ir``)."""
    groups = {g for g in _ORDERED for t in (left, right) if t in g}
    if len(groups) == 2 and (_ORDERED[0] in groups or _ORDERED[3] in groups and _ORDERED[2] in groups):
        raise _incomparable(left, right)


def _incomparable(left: str, right: str) -> DomainViolationError:
    return DomainViolationError(f"cannot compare {left} with {right}", hint="compare values of one type")


def compare(op: str, x: Any, y: Any) -> bool | None:
    """``x op y`` (``= != < <= > >=``) of two values, as SQL compares them, for a cell's value
    and a released one alike: NULL if either is NULL; a date or timestamp against text reads
    the text as a time (``timefuncs.comparable``); values of types with no order between them
    are refused with one message (the caller adds the position)."""
    if x is None or y is None:
        return None
    try:
        if timefuncs.is_time(y) and not timefuncs.is_time(x):
            yc, xc = timefuncs.comparable(y, x)        # 'text' < a date reads the text as a time
        else:
            xc, yc = timefuncs.comparable(x, y)
        return bool(_ORDER[op](xc, yc))
    except TypeError:
        raise _incomparable(type_name(x), type_name(y)) from None


# --- CASE, COALESCE, NULLIF ---------------------------------------------------------------

def as_case(node: exp.Expr) -> exp.Case | None:
    """``NULLIF(a, b)`` and ``IF(c, a, b)`` as the CASE they are (SQL defines NULLIF as
    ``CASE WHEN a = b THEN NULL ELSE a END``), for cells and values alike; None for any
    other node."""
    if isinstance(node, exp.Nullif):
        return exp.Case(ifs=[exp.If(this=exp.EQ(this=node.this.copy(), expression=node.expression.copy()),
                                    true=exp.Null())], default=node.this.copy())
    if isinstance(node, exp.If):
        return exp.Case(ifs=[exp.If(this=node.this, true=node.args.get("true"))], default=node.args.get("false"))
    return None


def first_present(row: Any) -> int | None:
    """COALESCE on one row (or cell): which argument it takes, the first that is not NULL
    (None when all are)."""
    return next((j for j, v in enumerate(row) if v is not None), None)


def first_true(row: Any) -> int:
    """CASE on one row (or cell): which branch it takes, the first whose condition is TRUE
    (not FALSE, not NULL); ``len(row)`` for the ELSE."""
    return next((j for j, c in enumerate(row) if isinstance(c, (bool, np.bool_)) and c), len(row))


# --- CAST ------------------------------------------------------------------------------------

_T = exp.DataType.Type
_INTEGER = (_T.INT, _T.BIGINT, _T.SMALLINT, _T.TINYINT)
_DOUBLE = (_T.DOUBLE, _T.FLOAT, _T.DECIMAL)
_TEXT = (_T.VARCHAR, _T.TEXT, _T.CHAR)


def cast_type(dtype: Any) -> str:
    """The PostgreSQL type name of ``CAST(… AS dtype)``; refused for types dpsql does not cast to."""
    if dtype in _INTEGER:
        return "integer"
    if dtype in _DOUBLE:
        return "double precision"
    if dtype in _TEXT:
        return "text"
    if dtype in timefuncs.DATE_TYPES:
        return "date"
    if dtype in timefuncs.TIME_TYPES:
        return "timestamp"
    if dtype == _T.TIME:
        return "time"
    raise UnsupportedQueryError(f"cast to {dtype.value.lower()} is not supported",
                                hint="cast to integer, double or text")


def cast_value(v: Any, dtype: Any) -> Any:
    """``CAST(v AS dtype)`` of one value (a constant, a cell's, or a released one): integers
    round half to even (PostgreSQL's float-to-int), dates and timestamps by
    ``timefuncs.cast_time``."""
    if v is None:
        return None
    if dtype in timefuncs.TIME_TYPES:
        return timefuncs.cast_time(v, dtype)
    if dtype == _T.TIME:
        return timefuncs.cast_time_of_day(v)
    try:
        if dtype in _INTEGER:
            return int(round(float(v))) if not isinstance(v, int) else v
        if dtype in _DOUBLE:
            return float(v)
        if dtype in _TEXT:
            return iso_text(v) if isinstance(v, (dt.date, dt.time)) else str(v)
    except (TypeError, ValueError, OverflowError):
        raise DomainViolationError(f"cannot cast {str(v)[:40]!r} to {dtype.value.lower()}",
                                   hint="cast a value that has the target type's form") from None
    cast_type(dtype)            # refuses the type
    raise AssertionError(dtype)
