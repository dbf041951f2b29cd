"""Synthetic records from a calibrated junction tree (thesis §4.4.3).

Records are generated clique by clique in the tree's pre-order: the root clique's
attributes from P(C_root), then for each further clique the attributes it adds,
from P(C_c \\ S_c | S_c) given the separator values already generated.  Because the
tree is a junction tree, this is exact ancestral generation from p_θ.

``method="sample"`` draws each record independently.  ``method="rounding"`` replaces
sampling by randomized rounding (thesis §4.4.3): within each group of records that
share a separator value, the expected count n_g·P(c | g) of every cell is rounded to
an integer that keeps the group size exactly, with the fractional parts resolved by
systematic sampling (each cell rounds up with probability equal to its fractional
part), which has far smaller variance than independent sampling.  The randomness is
post-processing of the fitted model, not privacy noise, so a numpy Generator is used.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpsql.pgm.junction_tree import JunctionTree

__all__ = ["synthesize"]


def _round_counts(expected: np.ndarray, sizes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Integer counts per row of ``expected`` (groups × cells) preserving each row sum.

    Row i of ``expected`` sums to the integer ``sizes[i]``; the fractional parts then
    sum to an integer k, and systematic sampling with one uniform per row selects
    exactly k cells, cell c with probability frac_c.
    """
    base = np.floor(expected)
    frac = expected - base
    cum = np.cumsum(frac, axis=1)
    # Pin the last cumulative value to the exact integer k so that floating error
    # can never add or drop a record.
    cum[:, -1] = sizes - base.sum(axis=1)
    u = rng.random((expected.shape[0], 1))
    hits = np.floor(cum + u) - np.floor(np.concatenate([np.zeros_like(u), cum[:, :-1]], axis=1) + u)
    return (base + np.clip(np.rint(hits), 0, None)).astype(np.int64)


def _conditional_table(prob: np.ndarray) -> np.ndarray:
    """Rows: separator values; columns: new-cell values; each row sums to 1."""
    sums = prob.sum(axis=1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        cond = np.where(sums > 0, prob / sums, 1.0 / prob.shape[1])
    return cond


def _generate(cond: np.ndarray, group: np.ndarray, method: str,
              rng: np.random.Generator) -> np.ndarray:
    """One new-cell index per record, given each record's separator cell ``group``."""
    n = group.size
    if method == "sample":
        k = cond.shape[1]
        cdf = np.cumsum(cond, axis=1)
        cdf[:, -1] = 1.0
        # Offsetting each row's CDF by its group index makes one sorted array, so all
        # records are drawn with a single searchsorted.
        flat = (cdf + np.arange(cond.shape[0])[:, None]).ravel()
        pos = np.searchsorted(flat, group + rng.random(n), side="right")
        return np.minimum(pos - group * k, k - 1)
    sizes = np.bincount(group, minlength=cond.shape[0]).astype(float)
    counts = _round_counts(sizes[:, None] * cond, sizes, rng)
    cells = np.tile(np.arange(cond.shape[1]), cond.shape[0])
    values = np.repeat(cells, counts.ravel())
    order = np.lexsort((rng.random(n), group))
    out = np.empty(n, dtype=np.int64)
    out[order] = values
    return out


def synthesize(tree: JunctionTree, probs: Sequence[np.ndarray], attributes: Sequence[str],
               rows: int, method: str, rng: np.random.Generator) -> np.ndarray:
    """``rows`` records (cell indices, columns in ``attributes`` order)."""
    if method not in ("rounding", "sample"):
        raise ValueError(f"synthetic: method must be 'rounding' or 'sample', got {method!r}")
    if rows < 0:
        raise ValueError("synthetic: rows must be non-negative")
    column = {a: i for i, a in enumerate(attributes)}
    data = np.zeros((rows, len(attributes)), dtype=np.int64)
    for node in tree.preorder:
        clique = tree.cliques[node]
        sep = () if node == tree.root else tree.separators[(tree.parent[node], node)]
        new = [a for a in clique if a not in sep]
        if not new:
            continue
        order = [clique.index(a) for a in sep] + [clique.index(a) for a in new]
        sep_shape = [tree.sizes[a] for a in sep]
        new_shape = [tree.sizes[a] for a in new]
        table = np.transpose(probs[node], order).reshape(int(np.prod(sep_shape)), -1)
        cond = _conditional_table(table)
        if sep:
            group = np.ravel_multi_index(tuple(data[:, column[a]] for a in sep), sep_shape)
        else:
            group = np.zeros(rows, dtype=np.int64)
        cells = _generate(cond, group, method, rng)
        for a, col in zip(new, np.unravel_index(cells, new_shape)):
            data[:, column[a]] = col
    return data
