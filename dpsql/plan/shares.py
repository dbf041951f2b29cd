"""The binning offsets' share of a release's budget, as the planner sees it (docs/engine.md,
"Binning offsets").

A SUM (or AVG) over a binned column is answered as its bin query (rows weighted by the
bins' values), measured by the counts' strategy at a share 1 − t of ρ, plus its measured
binning offsets, their own blocks at the share t: each of its rows has variance
c_j/(1 − t) + o_j/t, with c_j the strategy's and o_j the offsets' variance at the whole ρ
(o_j = 0 for a count).  Query j keeps its per-query baseline b_j exactly at the t of an
interval (the variance is convex in t); a strategy can keep every query within its baseline
only when those intervals meet.  ``dpsql.engine.offsets`` picks the share of a chosen
strategy from the same intervals; the planner (``planner._above_baseline``) judges its
candidates by them, and where none keeps every query it plans again against the baselines
``tightened`` leaves the strategy at one fixed share.  All of it public arithmetic.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["LO", "HI", "intervals", "common", "above", "tightened", "split_error", "least_scale"]

#: The share's bounds (``offsets.offset_share``): both sides are always measured.
LO, HI = 1e-3, 1 - 1e-3


def intervals(c: np.ndarray, o: np.ndarray, b: np.ndarray) -> list[tuple[float, float] | None]:
    """Each query's shares t within its baseline, as (lo, hi), or None when there are none:
    where o_j = 0, t ≤ 1 − c_j/b_j; else b·t² − (b − c + o)·t + o ≤ 0, between the roots."""
    out: list[tuple[float, float] | None] = []
    for cj, oj, bj in zip(np.asarray(c, dtype=float).tolist(), np.asarray(o, dtype=float).tolist(),
                          np.asarray(b, dtype=float).tolist()):
        if oj <= 0:
            out.append((-math.inf, 1 - cj / bj) if cj < bj else None)
            continue
        p = bj - cj + oj
        disc = p * p - 4 * bj * oj
        if disc < 0 or p <= 0:
            out.append(None)
            continue
        root = math.sqrt(disc)
        # the smaller root as 2o/(p + √disc): no cancellation when o ≪ b
        out.append((2 * oj / (p + root), (p + root) / (2 * bj)))
    return out


def common(ends: list[tuple[float, float] | None]) -> tuple[float, float] | None:
    """The shares in [LO, HI] inside every interval of ``ends``, or None when there are none."""
    if any(e is None for e in ends):
        return None
    lo = max([LO] + [e[0] for e in ends if e is not None])
    hi = min([HI] + [e[1] for e in ends if e is not None])
    return (lo, hi) if lo < hi else None


def above(c: np.ndarray, o: np.ndarray, b: np.ndarray) -> list[int]:
    """The queries above their baselines at the share that leaves the fewest above (none when
    the intervals meet).  Searched over a grid of shares and each interval's ends."""
    c, o, b = (np.asarray(x, dtype=float) for x in (c, o, b))
    ends = intervals(c, o, b)
    if common(ends) is not None:
        return []
    cands = [np.geomspace(LO, HI, 2001)]
    for e in ends:
        if e is not None and max(e[0], LO) < min(e[1], HI):
            lo, hi = max(e[0], LO), min(e[1], HI)
            cands.append(np.array([lo + 1e-6 * (hi - lo), hi - 1e-6 * (hi - lo)]))
    t = np.concatenate(cands)
    over = (c[None, :] / (1 - t[:, None]) + o[None, :] / t[:, None]) > b[None, :]
    return np.flatnonzero(over[int(np.argmin(over.sum(axis=1)))]).tolist()


def tightened(o: np.ndarray, b: np.ndarray, scale: float = 1.0) -> tuple[float, np.ndarray]:
    """A share t and baselines b'_j = (1 − t)·(b_j − o_j/t) for the strategy: a strategy with
    every c_j ≤ b'_j keeps every query within b_j at t.  t = √(max_j o_j/b_j) (in [LO, HI])
    maximises the least b'_j/b_j = (1 − t)·(1 − max_j o_j/(b_j·t)): the SUM's bin query keeps
    (1 − √(o/b))² of its baseline, the counts 1 − √(o/b).  ``scale`` multiplies that t: a
    smaller one leaves the counts more room and the SUM's bin query less (the planner tries
    both, ``planner._optimize``).  A b'_j ≤ 0 (o_j ≥ b_j·t: the offsets alone exceed the
    baseline) stays, and no strategy meets it."""
    o, b = np.asarray(o, dtype=float), np.asarray(b, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        need = np.where(b > 0, o / b, 0.0)
    t = min(max(scale * math.sqrt(float(np.max(need, initial=0.0))), LO), HI)
    return t, (1 - t) * (b - o / t)


def split_error(counts: float, offsets: float, c: np.ndarray, o: np.ndarray, b: np.ndarray) -> float:
    """The objective of a strategy with the offsets at their share: C/(1 − t) + O/t, C the
    strategy's objective and O the offsets' (both at the whole budget), at the share that
    minimises it, √O/(√C + √O), moved into the shares keeping every query within its baseline
    (per-row ``c``, ``o``, ``b``) where there are any; as ``dpsql.engine.offsets`` will choose it."""
    if not offsets > 0:
        return counts
    t = math.sqrt(offsets) / (math.sqrt(max(counts, 0.0)) + math.sqrt(offsets))
    meet = common(intervals(c, o, b))
    t = min(max(t, LO), HI) if meet is None else min(max(t, meet[0]), meet[1])
    return counts / (1 - t) + offsets / t


def least_scale(c: np.ndarray, o: np.ndarray, b: np.ndarray) -> float:
    """The least factor F by which a part's budget must exceed the one c, o, b are figured
    at so that some offsets' share t keeps every query within its baseline: at F the rows'
    variances are (c/(1 − t) + o/t)/F, so F = min over t of max_j (c_j/(1 − t) + o_j/t)/b_j,
    a maximum of functions convex in t, found by ternary search.  0 without offsets."""
    if not len(b) or not (o > 0).any():
        return 0.0

    def worst(t: float) -> float:
        return float(np.max((c / (1 - t) + o / t) / b))

    lo, hi = 1e-12, 1 - 1e-12
    for _ in range(200):
        m1, m2 = lo + (hi - lo) / 3, hi - (hi - lo) / 3
        lo, hi = (lo, m2) if worst(m1) <= worst(m2) else (m1, hi)
    return worst((lo + hi) / 2)
