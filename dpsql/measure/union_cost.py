"""The exact L2 sensitivity of a union of lattice blocks calibrated together (docs/privacy.md,
"One σ for a union of blocks").

``release.calibrate`` gives every block of one release the noise σ_b² = σ²/e_b² and charged
Σ_b k²·Δ_b²/(2σ_b²): each block's own sensitivity at its worst record.  A record sits in one
cell c of the domain, so the union's cost is max_c Σ_b k²·n_b(c)/(2σ_b²), n_b(c) the squared
norm of block b's column c (the product of its factors' column norms, times S² for offsets):
a record in a filtered count's cell is not also in the disjoint filtered counts' cells.  The
planner's errors assume this union sensitivity (``plan.strategy.union_sensitivity``), and the
sum of maxima left every release 3–7% more variance than its plan promised (adult's dashboard
and mixed corpus: 1.069 and 1.032, issue 35 item 6).

The maximum is searched in floats over the cells of the attributes on which some block's
column norms vary (the others factor out), then taken exactly (Fractions, Python ints) over
every cell whose float value is within 1e-9 of the float maximum: a sum of at most 2²⁰ positive
terms in float64 is within 2⁻³² of its value, so the true maximum is among them.  Cells with
the same exact (integer) column norms are evaluated once.  None when those cells exceed ``LIMIT``: the
caller keeps the sum of maxima, an upper bound.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

__all__ = ["LIMIT", "MAX_BLOCKS", "union_max"]

#: Cells of the varying attributes searched (float64: 32 MiB of scratch).
LIMIT = 1 << 22
#: Blocks summed per cell: the float search's relative error stays below 2⁻³² (module doc).
MAX_BLOCKS = 1 << 20


def _colnorms(f: Any) -> list[int]:
    """Exact squared column norms of an integer factor (Python ints: no overflow)."""
    d = np.asarray(f)
    cols = d.reshape(d.shape[0], -1) if d.ndim > 1 else d.reshape(-1, 1)
    top = max(abs(int(cols.max(initial=0))), abs(int(cols.min(initial=0))))
    if top * top * max(cols.shape[0], 1) < 2 ** 63:
        c64 = cols.astype(np.int64)
        return [int(x) for x in (c64 * c64).sum(axis=0)]
    return [sum(int(v) * int(v) for v in col) for col in cols.T]


def union_max(blocks: Sequence[Any], coefs: Sequence[Fraction | float]) -> Fraction | float | None:
    """max over cells c of Σ_b coefs[b]·n_b(c) (module doc), n_b(c) = bound_b²·Π_f |col_c(f)|²
    over block b's factors (one per clique attribute, or one joint factor over the clique):
    exact (a Fraction) when every coefficient is a Fraction, else a float.  None when the
    blocks' attribute sizes disagree or the varying cells exceed ``LIMIT``."""
    if len(blocks) > MAX_BLOCKS:
        return None                 # the float search's error bound (module doc) needs ≤ 2²⁰ terms
    sizes: dict[str, int] = {}
    for b in blocks:                # the attributes' sizes, from the one-attribute factors
        if not b.joint:
            for a, f in zip(b.clique, b.factors):
                n = int(np.asarray(f).shape[-1]) if np.asarray(f).ndim > 1 else 1
                if sizes.setdefault(a, n) != n:
                    return None
    terms = []      # per block: its coefficient, S², and (attributes, norms) per factor
    for b, coef in zip(blocks, coefs):
        groups = [tuple(b.clique)] if b.joint else [(a,) for a in b.clique]
        parts = []
        for attrs, f in zip(groups or [()], b.factors):
            norms = _colnorms(f)
            if any(a not in sizes for a in attrs) or math.prod(sizes[a] for a in attrs) != len(norms):
                if len(set(norms)) > 1:
                    return None        # a joint factor over attributes of unknown sizes
                attrs = ()
            parts.append((attrs, norms))
        terms.append((coef, b.bound * b.bound, parts))
    vary = sorted({a for _, _, parts in terms for attrs, norms in parts if len(set(norms)) > 1 for a in attrs})
    shape = tuple(sizes[a] for a in vary)
    if math.prod(shape) > LIMIT:
        return None
    exact = all(isinstance(c, Fraction) for c, _, _ in terms)
    acc = np.zeros(shape)
    classes = []    # per varying factor: its axes in ``vary``, and each cell's class of equal norms
    for coef, bound2, parts in terms:
        const = float(coef) * bound2
        term = np.full((1,) * len(shape), 1.0)
        for attrs, norms in parts:
            if len(set(norms)) == 1:
                const *= norms[0]
                continue
            axes = [vary.index(a) for a in attrs]
            arr = np.asarray(norms, dtype=np.float64).reshape([sizes[a] for a in attrs])
            # classes of equal exact norms: two norms past 2⁵³ may be one double
            values, inverse = np.unique(np.asarray(norms).reshape(arr.shape), return_inverse=True)
            classes.append((axes, inverse.reshape(arr.shape)))
            term = term * _broadcast(arr, axes, len(shape))
        acc = acc + const * term
    top = float(acc.max()) if acc.size else 0.0
    if not exact:
        return top
    # every cell within 1e-9 of the float maximum, one per class of equal column norms
    cand = np.argwhere(acc >= top * (1 - 1e-9)) if shape else np.zeros((1, 0), dtype=int)
    if classes:
        keys = np.stack([inv[tuple(cand[:, x] for x in axes)] for axes, inv in classes], axis=1)
        cand = cand[np.sort(np.unique(keys, axis=0, return_index=True)[1])]
    else:
        cand = cand[:1]
    best = None
    for cell in cand:
        at = dict(zip(vary, (int(i) for i in cell)))
        value = Fraction(0)
        for coef, bound2, parts in terms:
            n = bound2
            for attrs, norms in parts:
                n *= norms[_flat(attrs, at, sizes)] if len(set(norms)) > 1 else norms[0]
            value += Fraction(coef) * n
        best = value if best is None or value > best else best
    return best


def _flat(attrs: tuple[str, ...], at: dict[str, int], sizes: dict[str, int]) -> int:
    i = 0
    for a in attrs:
        i = i * sizes[a] + at[a]
    return i


def _broadcast(arr: np.ndarray, axes: list[int], ndim: int) -> np.ndarray:
    """``arr`` (one axis per attribute, in its clique's order) placed on ``axes`` of ndim."""
    order = np.argsort(axes)
    arr = np.transpose(arr, order)
    shape = [1] * ndim
    for k, ax in enumerate(sorted(axes)):
        shape[ax] = arr.shape[k]
    return arr.reshape(shape)
