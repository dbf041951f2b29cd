"""Synthetic rows from the fitted model, with the declared labels (thesis §4.4.3, ch. 5).

The model is a post-processing of released noisy measurements, and so is every record
drawn from it: synthetic data costs no privacy budget (thesis Prop. 1, post-processing).
The draw itself therefore needs no exact sampler; it uses a numpy ``Generator`` — seeded
when the caller wants reproducible files — and never touches the private rows.  That is
the one place dpsql uses a numpy generator on a path that leaves the process, and it is
safe for exactly that reason: its input is already private (``docs/privacy.md`` §7.2).

Cells become values through the declared domain only (``docs/domains.md``): a categorical
cell is its label (``"(other)"`` for the other cell), NULL cells are ``None``.  Binned
numbers are written either as their bin (``numbers="label"``: the integer itself for a
column of one-value bins, else every bin's label such as ``"[20, 29]"`` and ``"17"``) or as
a value drawn uniformly inside the bin (``numbers="value"``: an integer in [lo, hi], a real
in [lo, hi)).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

import numpy as np

from dpsql.domain import TableSchema
from dpsql.errors import ProgrammingError
from dpsql.timeaxis import day_micros, iso_text, time_of

__all__ = ["SyntheticTable", "decode_cells", "synthesize"]

NUMBER_MODES = ("label", "value")


@dataclass(frozen=True)
class SyntheticTable:
    """Synthetic records: ``columns`` [(name, type)] with type "text" | "integer" | "double",
    and ``rows`` as tuples (a pandas-free result)."""

    table: str
    columns: list[tuple[str, str]]
    rows: list[tuple]
    model_version: int = 0


def _column(attr, cells: np.ndarray, numbers: str, rng: np.random.Generator) -> tuple[list, str]:
    labels = attr.labels()
    bounds = attr.bin_bounds()
    if bounds is None:  # categorical: the declared labels
        table = np.array(labels, dtype=object)
        return table[cells].tolist(), "text"
    null = attr.null_index
    if attr.kind in ("date", "timestamp", "time"):
        return _time_column(attr, cells, numbers, rng)
    if numbers == "label":
        if attr.kind == "integer":
            vals = [None if b is None else (int(b[0]) if b[0] == b[1] else lab)
                    for lab, b in zip(labels, bounds)]
        else:
            vals = list(labels)
        if not all(v is None or isinstance(v, int) for v in vals):
            vals = list(labels)  # one type per column: all labels once any bin is wider
            return np.array(vals, dtype=object)[cells].tolist(), "text"
        return np.array(vals, dtype=object)[cells].tolist(), "integer"
    # numbers == "value": uniform inside the cell's bin
    lo = np.array([0 if b is None else b[0] for b in bounds], dtype=float)[cells]
    hi = np.array([0 if b is None else b[1] for b in bounds], dtype=float)[cells]
    if attr.kind == "integer":
        vals = np.floor(lo + rng.random(cells.size) * (hi - lo + 1)).astype(np.int64)
        vals = np.minimum(vals, hi.astype(np.int64))
        out = vals.tolist()
        kind = "integer"
    else:
        out = (lo + rng.random(cells.size) * (hi - lo)).tolist()
        kind = "double"
    if null is not None:
        for i in np.flatnonzero(cells == null):
            out[i] = None
    return out, kind


def _time_column(attr, cells: np.ndarray, numbers: str, rng: np.random.Generator) -> tuple[list, str]:
    """A time axis: ``label`` writes the period's first day (a date: ISO text of a day, a
    month's first day, …; a timestamp's period start), ``value`` a uniform day or microsecond
    inside the period; NULL stays NULL.  Written as ISO text, which the reader reads back."""
    bounds = attr.bin_bounds()
    out: list = []
    for c in cells.tolist():
        b = bounds[c]
        if b is None:
            out.append(None)
            continue
        first, last = b
        if numbers == "value" and first != last and isinstance(first, dt.time):
            # a time of day: a uniform microsecond of the bin (no time arithmetic in Python)
            first = time_of(day_micros(first) + int(rng.integers(0, day_micros(last) - day_micros(first) + 1)))
        elif numbers == "value" and first != last:
            step = attr._step
            first = first + step * int(rng.integers(0, (last - first) // step + 1))
        out.append(iso_text(first))
    return out, "text"


def decode_cells(schema: TableSchema, cells: np.ndarray, *, numbers: str = "label",
                 rng: np.random.Generator | None = None) -> tuple[list[tuple[str, str]], list[tuple]]:
    """Records of cell indices (columns in domain order) → declared values."""
    if numbers not in NUMBER_MODES:
        raise ProgrammingError(f"numbers must be one of {', '.join(NUMBER_MODES)}, got {numbers!r}",
                               hint="'label' writes bins as their labels, 'value' samples inside each bin")
    rng = rng if rng is not None else np.random.default_rng()
    cells = np.asarray(cells, dtype=np.int64).reshape(-1, len(schema.attributes))
    columns, data = [], []
    for j, attr in enumerate(schema.attributes):
        values, kind = _column(attr, cells[:, j], numbers, rng)
        columns.append((attr.name, kind))
        data.append(values)
    return columns, list(zip(*data)) if data else []


def synthesize(schema: TableSchema, model, rows: int | None = None, *, numbers: str = "label",
               method: str = "rounding", seed: int | None = None, model_version: int = 0) -> SyntheticTable:
    """``rows`` records drawn from ``model`` (default: its estimated total, rounded).

    ``method`` is "sample" (independent records) or "rounding" (thesis §4.4.3's randomized
    rounding: marginals of the records follow the model more closely)."""
    if model is None:
        raise ProgrammingError(f"nothing has been measured on table {schema.name!r} yet",
                               hint="run `dpsql measure` (or `dpsql measure --mode aim`) first")
    if rows is not None and int(rows) < 0:
        raise ProgrammingError("the number of synthetic rows must be non-negative")
    if method not in ("sample", "rounding"):
        raise ProgrammingError(f"method must be 'sample' or 'rounding', got {method!r}")
    rng = np.random.default_rng(seed)
    cells = model.synthetic(rows, method=method, rng=rng)  # NotSupportedError for relaxed models
    columns, records = decode_cells(schema, cells, numbers=numbers, rng=rng)
    return SyntheticTable(schema.name, columns, records, model_version)
