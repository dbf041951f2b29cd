"""The cells of a binned column that satisfy ``x <op> v``, over arrays of the bins' ends.

``domain._Binned.cells_for_predicate`` decides each bin by ``domain._interval_predicate``, one
Python call per bin: seconds per comparison on a 10⁶-bin column (issue 35: incomes to the
dollar, where a warm ``COUNT(*) … BETWEEN`` spent most of its time here).  This is the same
case analysis on numpy arrays, for columns above :data:`VECTOR_BINS` bins whose ends (and
the literal) are exact in a double; ``tests/test_binned_cells.py`` checks both agree.
Below ``domain`` (which imports it): numpy only.
"""

from __future__ import annotations

import numpy as np

__all__ = ["VECTOR_BINS", "interval_cells"]

#: Columns with more bins than this take the array path (smaller ones keep the loop).
VECTOR_BINS = 4096


def interval_cells(lo: np.ndarray, hi: np.ndarray, op: str, v: float, *,
                   integer: bool) -> tuple[frozenset[int], bool]:
    """(cells all of whose values satisfy ``x <op> v``, no bin split): integer bins hold
    ``lo..hi``, real bins ``[lo, hi)`` and the last ``[lo, hi]`` (``_interval_predicate``)."""
    last = np.zeros(lo.size, dtype=bool)
    if lo.size:
        last[-1] = True
    top_in = np.ones(lo.size, dtype=bool) if integer else last   # is ``hi`` a value of the bin?
    if op == "<":
        all_, any_ = np.where(top_in, hi < v, hi <= v), lo < v
    elif op == "<=":
        all_, any_ = hi <= v, lo <= v
    elif op == ">":
        all_, any_ = lo > v, hi > v
    elif op == ">=":
        all_, any_ = lo >= v, np.where(top_in, hi >= v, hi > v)
    elif op in ("=", "!="):
        if integer:
            eq_any = (lo <= v) & (v <= hi) & bool(float(v).is_integer())
            eq_all = eq_any & (lo == hi)
        else:
            eq_any = np.where(top_in, (lo <= v) & (v <= hi), (lo <= v) & (v < hi))
            eq_all = np.zeros(lo.size, dtype=bool)
        all_, any_ = (eq_all, eq_any) if op == "=" else (~eq_any, ~eq_all)
    else:
        raise ValueError(f"unknown comparison {op!r}")
    return frozenset(np.flatnonzero(all_).tolist()), not bool(np.any(any_ & ~all_))
