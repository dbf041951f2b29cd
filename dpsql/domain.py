"""Declared table domains: the public cells every private value is mapped into.

Select-measure-reconstruct (McKenna thesis ch. 3-4) works over a finite data vector: one
count per cell of the cross product of the attributes' domains.  This module defines

* :class:`Domain` - the purely numerical view (attribute names and cell counts) used by
  the planner, the graphical model and the tests;
* :class:`Attribute` and its kinds (:class:`Categorical`, :class:`IntegerRange`,
  :class:`Numeric`) - how a raw value becomes a cell index, in Python (:meth:`index_of`)
  (the same rule in SQL is ``dpsql.measure.cellsql.index_sql``), and back to an output label;
* :class:`TableSchema` - a table's declared columns (read from TOML by
  :func:`dpsql.domain_file.load_domain`).

Privacy: a domain is declared from public knowledge and never read off the rows.  The
mapping is total: values outside the declared domain, values of the wrong type and NULLs
all land in a documented cell and never raise, because an error that depended on the
rows would itself reveal something about them.  The rules are in ``docs/domains.md``.
"""

from __future__ import annotations

import bisect
import difflib
import functools
import math
import numbers
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from decimal import Decimal
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar, NoReturn

import numpy as np

from dpsql.binned_cells import VECTOR_BINS, interval_cells
from dpsql.errors import ConfigError, DomainViolationError, UnknownColumnError, UnsupportedQueryError

__all__ = ["Domain", "Attribute", "Categorical", "IntegerRange", "Numeric", "TableSchema",
           "OTHER_LABEL", "PREDICATE_OPS", "MAX_CELLS",
           "check_keys", "domain_fingerprint"]

OTHER_LABEL = "(other)"
PREDICATE_OPS = ("=", "!=", "<>", "<", "<=", ">", ">=")

# An attribute with more cells than this cannot be measured usefully (the noise drowns every
# cell) and would make the planner's matrices huge; wider bins are the remedy.  An ordered
# column of up to 10⁶ cells (incomes to the dollar, days, minutes) is planned for its CDF,
# ranges and quantiles by a tree or the Toeplitz root of the prefix matrix, in closed form
# (issue 35; dpsql/engine/ordered.py); other queries over every one of its cells are refused
# by the planner's caps, as before.
MAX_CELLS = 1_000_000


def check_keys(spec: Mapping[str, Any], allowed: Iterable[str], where: str) -> None:
    """Strict configuration: an unknown key is a ConfigError naming it and the closest valid
    key (a typo such as ``nulable`` or ``privacy_unt`` must never be silently ignored)."""
    allowed = list(allowed)
    for key in spec:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.5)
            raise ConfigError(f"{where}: unknown key {key!r}"
                              + (f" (did you mean {close[0]!r}?)" if close else ""),
                              hint="valid keys here: " + ", ".join(sorted(allowed)))


# --- Domain ----------------------------------------------------------------------------

class Domain:
    """Ordered attribute names with their cell counts; frozen, equal and hashed by value."""

    __slots__ = ("_attributes", "_shape", "_index")
    _attributes: tuple[str, ...]
    _shape: tuple[int, ...]
    _index: dict[str, int]

    def __init__(self, attributes: Sequence[str], shape: Sequence[int]) -> None:
        attributes = tuple(attributes)
        shape = tuple(int(n) for n in shape)
        if len(attributes) != len(shape):
            raise ValueError(f"Domain: {len(attributes)} attributes but {len(shape)} sizes")
        if len(set(attributes)) != len(attributes):
            raise ValueError(f"Domain: duplicate attribute names in {attributes}")
        if any(not isinstance(a, str) or not a for a in attributes):
            raise ValueError(f"Domain: attribute names must be non-empty strings: {attributes}")
        if any(n < 1 for n in shape):
            raise ValueError(f"Domain: every size must be at least 1: {shape}")
        object.__setattr__(self, "_attributes", attributes)
        object.__setattr__(self, "_shape", shape)
        object.__setattr__(self, "_index", {a: i for i, a in enumerate(attributes)})

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Domain is immutable")

    # pickling/copying must not go through the blocked __setattr__
    def __reduce__(self) -> tuple[type[Domain], tuple[tuple[str, ...], tuple[int, ...]]]:
        return (Domain, (self._attributes, self._shape))

    @classmethod
    def from_sizes(cls, sizes: Mapping[str, int]) -> Domain:
        return cls(list(sizes.keys()), list(sizes.values()))

    @property
    def attributes(self) -> tuple[str, ...]:
        return self._attributes

    @property
    def shape(self) -> tuple[int, ...]:
        return self._shape

    def _position(self, name: str) -> int:
        try:
            return self._index[name]
        except KeyError:
            raise UnknownColumnError(f"attribute {name!r} is not in the domain",
                                     hint=f"known attributes: {', '.join(self._attributes)}") from None

    def __len__(self) -> int:
        return len(self._attributes)

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __iter__(self) -> Iterator[str]:
        return iter(self._attributes)

    def __getitem__(self, name: str) -> int:
        return self._shape[self._position(name)]

    def size(self, attrs: Iterable[str] | None = None) -> int:
        """Number of cells of the marginal over ``attrs`` (the whole domain by default)."""
        sizes = self._shape if attrs is None else [self[a] for a in attrs]
        return math.prod(sizes)  # Python int: never overflows for huge cross products

    def project(self, attrs: Iterable[str]) -> Domain:
        attrs = tuple(attrs)
        return Domain(attrs, [self[a] for a in attrs])

    def merge(self, other: Domain) -> Domain:
        """This domain's attributes, then ``other``'s new ones; shared ones must agree in size."""
        for a in other.attributes:
            if a in self and self[a] != other[a]:
                raise ValueError(f"Domain.merge: attribute {a!r} has size {self[a]} and {other[a]}")
        extra = [a for a in other.attributes if a not in self]
        return Domain(self._attributes + tuple(extra),
                      self._shape + tuple(other[a] for a in extra))

    def axes(self, attrs: Iterable[str]) -> tuple[int, ...]:
        return tuple(self._position(a) for a in attrs)

    def canonical(self, attrs: Iterable[str]) -> tuple[str, ...]:
        return tuple(sorted(set(attrs), key=self._position))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Domain):
            return NotImplemented
        return self._attributes == other._attributes and self._shape == other._shape

    def __hash__(self) -> int:
        return hash((self._attributes, self._shape))

    def __repr__(self) -> str:
        inner = ", ".join(f"{a}: {n}" for a, n in zip(self._attributes, self._shape))
        return f"Domain({{{inner}}})"


# --- helpers shared by the attribute kinds ------------------------------------------------

def _is_real(value: Any) -> bool:
    # bool is an int subclass, but True in an age column is a type error, not the number 1.
    # Decimal is not a numbers.Real, yet DuckDB returns DECIMAL columns as Decimal.
    return isinstance(value, (numbers.Real, Decimal)) and not isinstance(value, (bool, np.bool_))


def _is_nan(value: Any) -> bool:
    return value.is_nan() if isinstance(value, Decimal) else math.isnan(value)


def _fmt_number(x: float | int) -> str:
    """Shortest unambiguous text for a bin bound: 10 not 10.0, 0.1 not 0.1000000000000000055."""
    if isinstance(x, float) and x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x) if isinstance(x, float) else str(x)


def _normalise_op(op: str) -> str:
    op = op.strip()
    if op not in PREDICATE_OPS:
        raise UnsupportedQueryError(f"comparison operator {op!r} is not supported on binned attributes",
                                    hint=f"use one of {', '.join(PREDICATE_OPS)}")
    return "!=" if op == "<>" else op


# --- attributes ----------------------------------------------------------------------------

@dataclass(frozen=True)
class Attribute(ABC):
    """One declared column: cells ``0..size-1``, value cells first, then other, then NULL."""

    name: str
    nullable_: bool = False

    kind = "abstract"

    @property
    def nullable(self) -> bool:
        return self.nullable_

    @property
    @abstractmethod
    def size(self) -> int:
        """Number of cells, including the other and NULL cells."""

    @property
    def null_index(self) -> int | None:
        """Cell of SQL NULL when declared nullable (always the last cell)."""
        return self.size - 1 if self.nullable else None

    @property
    def other_index(self) -> int | None:
        return None

    @property
    def invalid_index(self) -> int:
        """Cell of a value the column cannot hold: unreadable text, NaN, a value of the
        wrong type, a label a closed categorical does not list, NULL in a non-nullable
        column, or a record the reader could not split (docs/domains.md, "Where every
        record lands").  The other cell of an open categorical, else the NULL cell, else
        cell 0 (the first label or bin: declare ``nullable = true`` to keep such values
        apart; ``dpsql check`` reports every one)."""
        if self.other_index is not None:
            return self.other_index
        return self.null_index if self.null_index is not None else 0

    @property
    def null_place(self) -> int:
        """Cell of SQL NULL: the NULL cell when nullable, else :attr:`invalid_index`."""
        return self.null_index if self.null_index is not None else self.invalid_index

    @abstractmethod
    def labels(self) -> list[Any]:
        """One output label per cell: None for NULL, OTHER_LABEL for the other cell."""

    @abstractmethod
    def index_of(self, value: Any) -> int:
        """Cell of a raw value; total (never raises, whatever the value)."""

    @abstractmethod
    def contains_value(self, value: Any) -> bool:
        """Is ``value`` inside the declared domain (NULL counts only when nullable)?"""

    @abstractmethod
    def cells_for_predicate(self, op: str, value: Any) -> tuple[frozenset[int], bool]:
        """Cells whose every value satisfies ``col <op> value``, and whether no cell is split."""

    def cell_of_label(self, label: Any) -> int:
        """Inverse of :meth:`labels`: the cell an output label names."""
        for i, candidate in enumerate(self.labels()):
            if candidate == label and type(candidate) is type(label):
                return i
        raise DomainViolationError(f"{label!r} is not a label of column '{self.name}'",
                                   hint="labels are listed by the declared domain (docs/domains.md)")

    def cell_values(self) -> np.ndarray | None:
        return None

    def bin_bounds(self) -> list[Any] | None:
        return None

    def identity_extra(self) -> tuple[Any, ...]:
        """What else decides a value's cell beyond kind, labels and bins (a timestamp axis's
        time zone): part of :func:`domain_fingerprint`."""
        return ()

    def _check_common(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"attribute name must be a non-empty string, got {self.name!r}",
                              hint="name every column in the domain declaration")
        if not isinstance(self.nullable_, bool):
            self._fail("nullable must be true or false", "use a TOML boolean")

    def _fail(self, problem: str, hint: str) -> NoReturn:
        raise ConfigError(f"column '{self.name}': {problem}", hint=hint)


@dataclass(frozen=True)
class Categorical(Attribute):
    """Ordered labels, matched exactly (case and whitespace matter).

    Unless ``closed``, one extra "other" cell catches every non-NULL value that is not a
    label.  A closed categorical promises the labels are complete; a value that breaks the
    promise still may not raise, so it goes to :attr:`invalid_index` (the NULL cell when
    nullable, else cell 0; ``dpsql check`` reports it, ``docs/domains.md``).
    """

    labels_: tuple[Any, ...] = ()
    closed: bool = False
    _lookup: dict[Any, int] = field(default_factory=dict, init=False, repr=False, compare=False, hash=False)

    kind = "categorical"

    def __init__(self, name: str, labels: Sequence[Any], nullable: bool = False, closed: bool = False) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "labels_", tuple(labels) if not isinstance(labels, (str, bytes)) else labels)
        object.__setattr__(self, "nullable_", nullable)
        object.__setattr__(self, "closed", closed)
        self._validate()
        object.__setattr__(self, "_lookup", {v: i for i, v in enumerate(self.labels_)})

    def _validate(self) -> None:
        self._check_common()
        if not isinstance(self.labels_, tuple) or not self.labels_:
            self._fail("labels must be a non-empty list", 'e.g. labels = ["Female", "Male"]')
        all_str = all(isinstance(v, str) for v in self.labels_)
        all_int = all(isinstance(v, int) and not isinstance(v, bool) for v in self.labels_)
        if not (all_str or all_int):
            self._fail("labels must be all strings or all integers",
                       "quote every label, or use an integer attribute for numbers")
        if len(set(self.labels_)) != len(self.labels_):
            dupes = sorted({str(v) for v in self.labels_ if self.labels_.count(v) > 1})
            self._fail(f"duplicate labels {dupes}", "list every label once")
        if OTHER_LABEL in self.labels_:
            self._fail(f"label {OTHER_LABEL!r} is reserved for the other cell", "rename that label")
        if not isinstance(self.closed, bool):
            self._fail("closed must be true or false", "use a TOML boolean")

    @property
    def size(self) -> int:
        return len(self.labels_) + (0 if self.closed else 1) + (1 if self.nullable_ else 0)

    @property
    def other_index(self) -> int | None:
        return None if self.closed else len(self.labels_)

    @property
    def python_type(self) -> type:
        return str if isinstance(self.labels_[0], str) else int

    @property
    def sql_type(self) -> str:
        return "VARCHAR" if self.python_type is str else "INTEGER"

    @property
    def _fallback(self) -> int:
        """Cell for values that match no label: the other cell, else the invalid place."""
        return self.invalid_index

    def labels(self) -> list[Any]:
        out = list(self.labels_)
        if not self.closed:
            out.append(OTHER_LABEL)
        if self.nullable_:
            out.append(None)
        return out

    def _matches_type(self, value: Any) -> bool:
        return isinstance(value, str) if self.python_type is str else _is_real(value)

    def index_of(self, value: Any) -> int:
        if value is None:
            return self.null_place
        if not self._matches_type(value) or (self.python_type is int and _is_nan(value)):
            return self._fallback
        try:
            return self._lookup.get(value, self._fallback)
        except TypeError:  # unhashable oddities are simply not labels
            return self._fallback

    def contains_value(self, value: Any) -> bool:
        if value is None:
            return self.nullable_
        return self._matches_type(value) and value in self._lookup

    def cells_for_predicate(self, op: str, value: Any) -> tuple[frozenset[int], bool]:
        """Cells whose every value satisfies ``col <op> value``, and whether that is exact.

        Only ``=`` and ``!=`` are defined: SQL orders strings by collation, not by the
        declared label order.  ``exact`` is False when the other cell holds values on both
        sides (a literal that is not a label).  NULL never satisfies a comparison.
        """
        op = _normalise_op(op)
        if op not in ("=", "!="):
            raise UnsupportedQueryError(f"ordering comparison {op!r} on categorical column '{self.name}'",
                                        hint="compare categorical columns with =, <> or IN")
        if value is None:
            return frozenset(), True
        hit = self._lookup[value] if self.contains_value(value) else None
        exact = hit is not None or self.closed  # a non-label may hide in (and split) the other cell
        if op == "=":
            return frozenset(() if hit is None else (hit,)), exact
        cells = set(range(len(self.labels_))) - {hit}
        if hit is not None and not self.closed:
            cells.add(len(self.labels_))
        return frozenset(cells), exact


def _interval_predicate(lo: float, hi: float, op: str, v: float, *, integer: bool, closed_right: bool
                        ) -> tuple[bool, bool]:
    """(all, any): do all / any values of the cell satisfy ``x <op> v``?

    Integer cells hold the integers ``lo..hi``; real cells hold ``[lo, hi)`` or, for the
    last bin, ``[lo, hi]``.  Derived case by case from the interval ends.
    """
    top_in = integer or closed_right  # is ``hi`` itself a value of the cell?
    if op == "<":
        return (hi < v if top_in else hi <= v), lo < v
    if op == "<=":
        return hi <= v, lo <= v
    if op == ">":
        return lo > v, hi > v
    if op == ">=":
        return lo >= v, (hi >= v if top_in else hi > v)
    if integer:
        eq_any = lo <= v <= hi and float(v).is_integer()
        eq_all = eq_any and lo == hi
    else:
        eq_any = lo <= v <= hi if top_in else lo <= v < hi
        eq_all = False
    if op == "=":
        return eq_all, eq_any
    return not eq_any, not eq_all


@dataclass(frozen=True)
class _Binned(Attribute):
    """Shared machinery of ordered numeric attributes: cells chosen by ``x < t`` thresholds."""

    _integral: ClassVar[bool]      # cells hold integers only (IntegerRange)

    @abstractmethod
    def thresholds(self) -> tuple[float, ...]:
        """Bin starts after the first: the bin of ``x`` is ``bisect_right(thresholds, x)``
        (in SQL the chain of ``x < t`` tests of ``dpsql.measure.cellsql.bins_sql``)."""

    @abstractmethod
    def _bounds(self) -> list[tuple[Any, Any]]:
        """Implemented by each kind."""

    @abstractmethod
    def _nbins(self) -> int:
        """Implemented by each kind."""

    @abstractmethod
    def _value_labels(self) -> list[str]:
        """Labels of the value cells (without the NULL cell)."""

    @property
    def size(self) -> int:
        return self._nbins() + (1 if self.nullable else 0)

    def bin_bounds(self) -> list[Any]:
        """Per cell: inclusive ``(lo, hi)`` integers / half-open ``[lo, hi)`` reals; None for NULL."""
        return self._bounds() + ([None] if self.nullable else [])

    def labels(self) -> list[Any]:
        return self._value_labels() + ([None] if self.nullable else [])

    def cell_values(self) -> np.ndarray:
        """The value of a one-value bin, else the bin's midpoint; NaN for the NULL cell."""
        vals = [float(a) if a == b else (a + b) / 2 for a, b in self._bounds()]
        return np.array(vals + ([math.nan] if self.nullable else []), dtype=float)

    def contains_value(self, value: Any) -> bool:
        if value is None:
            return self.nullable
        if not _is_real(value) or not math.isfinite(value):
            return False
        if self._integral and not float(value).is_integer():
            return False
        bounds = self._bounds()
        return bool(bounds[0][0] <= value <= bounds[-1][1])

    def index_of(self, value: Any) -> int:
        if value is None:
            return self.null_place
        if not _is_real(value) or _is_nan(value):
            return self.invalid_index
        return bisect.bisect_right(self.thresholds(), self._py_value(value))

    def _py_value(self, value: Any) -> Any:
        """The value as the SQL compares it (``dpsql.measure.cellsql``)."""
        return value

    def _check_predicate_value(self, value: Any) -> None:
        if not _is_real(value) or _is_nan(value):
            raise DomainViolationError(
                f"column '{self.name}' is numeric; cannot compare it with {type(value).__name__} {value!r}",
                hint="compare with a number literal")

    def cells_for_predicate(self, op: str, value: Any) -> tuple[frozenset[int], bool]:
        """Cells all of whose values satisfy ``col <op> value``, and whether no bin is split.

        The values of a cell are those of the declared domain (clamped values count as the
        end bins' values).  When ``exact`` is False, the boundary falls strictly inside at
        least one bin; those split bins are *not* in the returned set.  NULL never satisfies
        a comparison, so the NULL cell is never returned.
        """
        op = _normalise_op(op)
        if value is None:
            return frozenset(), True
        self._check_predicate_value(value)
        # a 10⁶-bin column (issue 35): the same cases over arrays, not a Python loop per bin
        # (Python ints and floats only: a Decimal with more digits than a double keeps the loop)
        fast = self._nbins() > VECTOR_BINS and type(value) in (int, float) and abs(value) < 2 ** 52
        arrays = self._bound_arrays if fast else None
        if arrays is not None:
            return interval_cells(arrays[0], arrays[1], op, float(value), integer=self._integral)
        cells, exact = set(), True
        bounds = self._bounds()
        for i, (lo, hi) in enumerate(bounds):
            all_, any_ = _interval_predicate(lo, hi, op, value, integer=self._integral,
                                             closed_right=i == len(bounds) - 1)
            if all_:
                cells.add(i)
            elif any_:
                exact = False
        return frozenset(cells), exact


    @functools.cached_property
    def _bound_arrays(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The bins' ends as float arrays when every end is exact in a double (else None)."""
        b = np.array(self._bounds(), dtype=object).reshape(-1, 2)
        if b.size and max(abs(float(b.min())), abs(float(b.max()))) >= 2.0 ** 52:
            return None
        return b[:, 0].astype(np.float64), b[:, 1].astype(np.float64)


@dataclass(frozen=True)
class IntegerRange(_Binned):
    """Integers ``lo..hi`` in bins of ``bin_width`` or starting at explicit ``edges``.

    ``edges`` are the bins' first values: bin i is ``edges[i]..edges[i+1]-1`` and the last
    is ``edges[-1]..hi``.  Values below ``lo`` clamp to the first bin, above ``hi`` to the
    last; a non-integer value goes to the bin whose range it falls in (``29.5`` with unit
    bins goes to ``29``), which is what the ``x < next_start`` SQL tests compute.

    ``clamp = False`` (a join key, set by the configuration from its declared keys:
    ``dpsql.engine.public.unclamp_keys``) sends values outside ``lo..hi`` to
    :attr:`invalid_index` instead: clamped, they would join the end key's dimension row.
    """

    lo: int = 0
    hi: int = 0
    bin_width: int = 1
    edges: tuple[int, ...] | None = None
    clamp: bool = True
    _starts: tuple[int, ...] = field(default=(), init=False, repr=False, compare=False, hash=False)

    kind = "integer"
    _integral = True
    python_type = int
    sql_type = "INTEGER"

    def __init__(self, name: str, lo: int, hi: int, bin_width: int = 1, edges: Sequence[int] | None = None,
                 nullable: bool = False, clamp: bool = True) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "lo", lo)
        object.__setattr__(self, "hi", hi)
        object.__setattr__(self, "bin_width", bin_width)
        object.__setattr__(self, "edges", None if edges is None else tuple(edges))
        object.__setattr__(self, "nullable_", nullable)
        object.__setattr__(self, "clamp", clamp)
        object.__setattr__(self, "_starts", self._validate())

    def unclamped(self) -> IntegerRange:
        """The same cells, with values outside ``lo..hi`` sent to :attr:`invalid_index`."""
        return IntegerRange(self.name, self.lo, self.hi, self.bin_width, self.edges, self.nullable, clamp=False)

    def index_of(self, value: Any) -> int:
        if not self.clamp and _is_real(value) and not _is_nan(value) and not self.lo <= value <= self.hi:
            return self.invalid_index
        return super().index_of(value)

    def identity_extra(self) -> tuple[Any, ...]:
        # the out-of-range rule decides where a value lands (a release measured with clamped
        # keys must not answer a join); clamped attributes keep their earlier fingerprint
        return () if self.clamp else ("out of range: invalid",)

    def _validate(self) -> tuple[int, ...]:
        self._check_common()
        for key in ("lo", "hi"):
            v = getattr(self, key)
            if not isinstance(v, int) or isinstance(v, bool):
                self._fail(f"{key} must be an integer, got {v!r}", "integer ranges take integer bounds")
        if self.lo > self.hi:
            self._fail(f"lo ({self.lo}) is greater than hi ({self.hi})", "swap lo and hi")
        if self.edges is not None:
            if self.bin_width != 1:
                self._fail("give either bin_width or edges, not both", "remove one of them")
            e = self.edges
            if not e or any(not isinstance(v, int) or isinstance(v, bool) for v in e):
                self._fail("edges must be a non-empty list of integers", "e.g. edges = [0, 1, 1000]")
            if e[0] != self.lo:
                self._fail(f"the first edge ({e[0]}) must equal lo ({self.lo})",
                           "edges are the first values of the bins, starting at lo")
            if any(b <= a for a, b in zip(e, e[1:])):
                self._fail("edges must be strictly increasing", "sort the edges and remove repeats")
            if e[-1] > self.hi:
                self._fail(f"edge {e[-1]} is above hi ({self.hi})",
                           "edges are bin starts; the last bin runs to hi, so drop any closing edge")
            return e
        w = self.bin_width
        if not isinstance(w, int) or isinstance(w, bool) or w < 1:
            self._fail(f"bin_width must be a positive integer, got {w!r}", "e.g. bin_width = 10")
        if (self.hi - self.lo) // w + 1 > MAX_CELLS:
            self._fail(f"{(self.hi - self.lo) // w + 1} bins exceed the limit of {MAX_CELLS}",
                       "use a wider bin_width or explicit edges")
        return tuple(range(self.lo, self.hi + 1, w))

    def thresholds(self) -> tuple[float, ...]:
        return self._starts[1:]

    def _nbins(self) -> int:
        return len(self._starts)

    def _bounds(self) -> list[tuple[int, int]]:
        ends = [s - 1 for s in self._starts[1:]] + [self.hi]
        return list(zip(self._starts, ends))

    def _value_labels(self) -> list[str]:
        """``"17"`` for a one-value bin, ``"[20, 29]"`` (both ends inclusive) for wider ones."""
        return [str(a) if a == b else f"[{a}, {b}]" for a, b in self._bounds()]


@dataclass(frozen=True)
class Numeric(_Binned):
    """Reals in bins ``[e0, e1), …, [e_{k-1}, e_k]``; values outside clamp to the end bins.

    The SQL compares ``CAST(x AS DOUBLE)`` with ``CAST(edge AS DOUBLE)`` so that float32 or
    DECIMAL columns and decimal literals such as 0.1 compare exactly as Python floats do.
    """

    edges: tuple[float, ...] = ()

    kind = "numeric"
    _integral = False
    python_type = float
    sql_type = "DOUBLE"

    def __init__(self, name: str, edges: Sequence[float], nullable: bool = False) -> None:
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "edges", tuple(edges) if not isinstance(edges, (str, bytes)) else edges)
        object.__setattr__(self, "nullable_", nullable)
        self._validate()
        object.__setattr__(self, "edges", tuple(float(e) for e in self.edges))

    def _validate(self) -> None:
        self._check_common()
        e = self.edges
        if not isinstance(e, tuple) or len(e) < 2 or not all(_is_real(v) for v in e):
            self._fail("edges must be a list of at least two numbers", "e.g. edges = [0.0, 0.5, 1.0]")
        if not all(math.isfinite(v) for v in e):
            self._fail("edges must be finite", "values beyond the ends clamp to the end bins anyway")
        if any(b <= a for a, b in zip(e, e[1:])):
            self._fail("edges must be strictly increasing", "sort the edges and remove repeats")
        if len(e) - 1 > MAX_CELLS:
            self._fail(f"{len(e) - 1} bins exceed the limit of {MAX_CELLS}", "use fewer edges")

    def thresholds(self) -> tuple[float, ...]:
        return self.edges[1:-1]

    def _nbins(self) -> int:
        return len(self.edges) - 1

    def _bounds(self) -> list[tuple[float, float]]:
        return list(zip(self.edges, self.edges[1:]))

    def _py_value(self, value: Any) -> float:
        return float(value)  # mirrors CAST(x AS DOUBLE): Decimal('0.1') becomes the double 0.1

    def _value_labels(self) -> list[str]:
        """``"[a, b)"`` per bin and ``"[a, b]"`` for the last (it holds its top edge)."""
        bounds = self._bounds()
        return [f"[{_fmt_number(a)}, {_fmt_number(b)}" + ("]" if i == len(bounds) - 1 else ")")
                for i, (a, b) in enumerate(bounds)]


# --- tables and the TOML loader ---------------------------------------------------------------

@dataclass(frozen=True)
class TableSchema:
    """A private table: its public name, declared attributes (in order) and where rows live."""

    name: str
    attributes: tuple[Attribute, ...]
    source: dict[str, Any] | None = field(default=None, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "attributes", tuple(self.attributes))
        names = [a.name for a in self.attributes]
        if len(set(names)) != len(names):
            raise ConfigError(f"table '{self.name}': duplicate column names", hint="declare each column once")

    @property
    def domain(self) -> Domain:
        return Domain([a.name for a in self.attributes], [a.size for a in self.attributes])

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(a.name for a in self.attributes)

    def attribute(self, name: str) -> Attribute:
        for a in self.attributes:
            if a.name == name:
                return a
        raise UnknownColumnError(f"column {name!r} does not exist in table '{self.name}'",
                                 hint=f"declared columns: {', '.join(self.column_names)}")


def domain_fingerprint(schema: TableSchema) -> str:
    """SHA-256 of everything that decides which cell a value lands in (names, kinds, labels,
    bins, nullable, closed, in order): part of a release's identity."""
    import hashlib
    parts = [(a.kind, a.name, a.size, a.nullable, a.invalid_index, tuple(a.labels()),
              repr(a.bin_bounds())) + a.identity_extra() for a in schema.attributes]
    return hashlib.sha256(repr(parts).encode()).hexdigest()

