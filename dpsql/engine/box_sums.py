"""The sum of a statement's disjoint boxes (an OR, a NOT over several columns) as one dense
matrix over the joint cells of its columns: what ``engine/direct_sums.py`` measures as one
block per statement and ``engine/direct.py`` matches a statement against to answer it."""

from __future__ import annotations

import math

import numpy as np

from dpsql.sql.predicates import MAX_JOINT_CELLS

__all__ = ["MAX_SUM_ENTRIES", "dense", "is_total", "sum_matrix"]

#: The most cells (rows × joint cells) one statement's summed block may have.
MAX_SUM_ENTRIES = 1 << 22


def dense(f) -> np.ndarray:
    """A workload factor's rows, dense (2-D)."""
    from dpsql.plan.workload import factor_dense
    return np.atleast_2d(np.asarray(factor_dense(f), dtype=np.float64))


def is_total(F: np.ndarray) -> bool:
    """One row of ones: a factor that sums the attribute out."""
    return F.shape[0] == 1 and bool(np.all(F == 1))


def sum_matrix(names, shape, terms: list[tuple[float, list]]):
    """(clique, S): the boxes' sum Σ_t w_t ⊗_{a ∈ clique} T_t,a over the attributes some
    term does not just sum over, dense; None when too large or not of integer entries."""
    mats = [[dense(f) for f in factors] for _, factors in terms]
    on = [i for i in range(len(names)) if any(not is_total(d[i]) for d in mats)]
    if not on:
        return None
    rows = {d[i].shape[0] for d in mats for i in on if not is_total(d[i])}
    cells = math.prod(int(shape[i]) for i in on)
    if cells > MAX_JOINT_CELLS or cells * max(rows) > MAX_SUM_ENTRIES:
        return None
    S = None
    for (w, _), d in zip(terms, mats):
        M = np.ones((1, 1))
        for i in on:
            M = np.kron(M, d[i])
        if S is not None and M.shape != S.shape:
            return None     # the boxes' rows differ (not one group per row): not a sum
        S = w * M if S is None else S + w * M
    assert S is not None
    if not bool(np.all(S == np.round(S))):
        return None
    return tuple(names[i] for i in on), S
