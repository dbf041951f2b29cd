"""Binning offsets: per cell, the sum of each record's offset from its bin's value.

A SUM over a binned column is answered as Σ_cells v_c·n_c with v_c the bin's midpoint; the
binning error is Σ_rows (x − v_cell(x)).  Measuring that sum of offsets beside the counts
(with its own noise) makes the SUM unbiased: SUM = Σ v_c·n_c + Σ offsets (docs/engine.md,
"Binning offsets"; the privacy argument in docs/privacy.md, "Binning offsets").

Exact discrete noise needs values on a lattice (``dpsql.privacy.noise``), so each record's
offset is clamped to its bin and put on a dyadic grid g = 2^e in the engine:

    o(x) = LEAST(GREATEST(FLOOR((CAST(x AS DOUBLE) − v_b) / g + 0.5), −S_b), S_b)

with b the record's cell, S_b = ⌊h_b / g⌋ (h_b the bin's half width) and o = 0 for NULL,
NaN and one-value bins (±∞ and values beyond the declared range clamp to ±S_b).
|o| ≤ S = max_b S_b, so one record moves one cell's integer sum by at most S: the L2 (and
L1) sensitivity of the per-cell sums is S lattice units (S·g ≤ h_max in the column's units).
The grid is the power of two with h_max / g in [2^20, 2^21): rounding moves a record's
offset by at most g/2 ≤ h_max·2⁻²¹ (offsets that are multiples of g land exactly: integers
and quarters whenever h_max < 2^18), FLOOR(· + 0.5) rounds alike on every engine, and the
sums of 10⁹ records stay far inside BIGINT.

Everything here is public metadata (the declared bins); only the SUM of ``o`` per cell is
read from the engine, and it is noised before it leaves the process (``dpsql.engine``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.domain import Attribute
from dpsql.measure.cellsql import is_nan
from dpsql.sql.syntax import exp

__all__ = ["GRID_BITS", "OffsetGrid", "offset_grid", "offset_sql", "brute_force_offsets"]

#: h_max / g lies in [2^GRID_BITS, 2^(GRID_BITS+1)).
GRID_BITS = 20


@dataclass(frozen=True)
class OffsetGrid:
    """The lattice of one column's offsets: spacing g = 2^exponent and the per-cell bounds
    S_b = ⌊h_b / g⌋ (0 for one-value bins and NULL)."""

    exponent: int
    bounds: tuple[int, ...]

    @property
    def spacing(self) -> float:
        return math.ldexp(1.0, self.exponent)

    @property
    def bound(self) -> int:
        """S: the most one record's lattice offset can be in size (its sensitivity)."""
        return max(self.bounds, default=0)


def _halves(att: Attribute) -> list[float]:
    return [0.0 if b is None else (float(b[1]) - float(b[0])) / 2 for b in att.bin_bounds() or []]


def offset_grid(att: Attribute) -> OffsetGrid | None:
    """The grid of a binned attribute's offsets; None when every bin holds one value (the
    cells' values are exact, there is nothing to measure) or for a categorical."""
    if att.kind == "categorical" or att.bin_bounds() is None or att.cell_values() is None:
        return None          # labels, or dates and times (no SUM or AVG of them)
    halves = _halves(att)
    top = max(halves, default=0.0)
    if not top > 0:
        return None
    exponent = math.floor(math.log2(top)) - GRID_BITS
    g = math.ldexp(1.0, exponent)
    return OffsetGrid(exponent, tuple(int(math.floor(h / g)) for h in halves))


def _num(v: float) -> exp.Expr:
    return exp.cast(exp.Literal.number(repr(float(v))), "DOUBLE")


def offset_sql(att: Attribute, cell: exp.Expr, value: exp.Expr) -> exp.Expr:
    """The lattice offset of a record (module doc) from its cell index ``cell`` (never NULL)
    and its value ``value`` (the column as read; NULL/NaN only in cells whose bound is 0).

    A CASE over the cells with a positive bound; every other cell (NULL, NaN, one-value
    bins, a categorical's) gives 0."""
    grid = offset_grid(att)
    if grid is None:
        return exp.Literal.number(0)
    g = grid.spacing
    values = att.cell_values()
    assert values is not None   # a binned attribute (offset_grid)
    x = exp.cast(value.copy(), "DOUBLE")
    case = exp.Case(this=cell.copy())
    for b, s in enumerate(grid.bounds):
        if s <= 0:
            continue
        lattice = exp.Floor(this=exp.Add(
            this=exp.Div(this=exp.Paren(this=exp.Sub(this=x.copy(), expression=_num(values[b]))),
                         expression=_num(g)),
            expression=_num(0.5)))
        clamped = exp.Anonymous(this="least", expressions=[
            exp.Anonymous(this="greatest", expressions=[lattice, exp.Literal.number(-s)]), exp.Literal.number(s)])
        case = case.when(exp.Literal.number(b), exp.cast(clamped, "BIGINT"))
    if not case.args.get("ifs"):
        return exp.Literal.number(0)
    zero = exp.cast(exp.Literal.number(0), "BIGINT")
    # NULL and NaN (in a cell a non-nullable column sends them to) add nothing: without this
    # GREATEST would skip the NULL (−S) and engines floor NaN differently (Spark: 0)
    missing = exp.or_(exp.Is(this=x.copy(), expression=exp.Null()), is_nan(x.copy()))
    return exp.Case().when(missing, zero.copy()).else_(case.else_(zero))


def lattice_offset(att: Attribute, value) -> int:
    """``offset_sql`` in Python for one raw value (the brute-force reference)."""
    grid = offset_grid(att)
    if grid is None or value is None or math.isnan(float(value)):
        return 0
    b = att.index_of(value)
    if b >= len(grid.bounds) or grid.bounds[b] <= 0:
        return 0
    s = grid.bounds[b]
    values = att.cell_values()
    assert values is not None   # a binned attribute (offset_grid)
    t = (float(value) - float(values[b])) / grid.spacing + 0.5
    if not math.isfinite(t):
        return s if t > 0 else -s
    return int(min(max(math.floor(t), -s), s))


def brute_force_offsets(rows: Sequence[dict], attributes: Sequence[Attribute], clique: Sequence[str],
                        column: str) -> np.ndarray:
    """Per cell of ``clique``'s marginal, the integer sum of ``column``'s lattice offsets
    (slow and obvious: the reference the engines' sums are tested against)."""
    by_name = {a.name: a for a in attributes}
    att = by_name[column]
    out = np.zeros(tuple(by_name[a].size for a in clique), dtype=np.int64)
    for r in rows:
        idx = tuple(by_name[a].index_of(r.get(a)) for a in clique)
        out[idx] += lattice_offset(att, r.get(column))
    return out
