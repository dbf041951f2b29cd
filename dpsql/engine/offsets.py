"""Binning offsets in the engine: which to measure, how much budget they get, and the
least-squares answers of the offset queries (docs/engine.md, "Binning offsets").

A SUM (or AVG) over a binned column x compiles, beside its row query q (weights: the bins'
values), an *offset query* q' with the same rows and 0/1 weights (``dpsql.sql``, kind
"offset"), applied to the per-cell sums of x's offsets from its bins' values
(``dpsql.measure.offsets``) instead of the counts.  The workload measurement measures each
row block of every offset query of the declared workload directly (the block is the
query's group-by cells under its predicate): one record lands in one row of a block, and
moves it by at most S lattice units, so each block has sensitivity S·Δ(M) with Δ(M) = 1
for these 0/1 rows (``release.LatticeBlock.bound``).  The blocks are calibrated together
(zCDP composes by adding, ``release.calibrate``) at a share ρ_o of the release's ρ, and the
counts' strategy gets ρ_c = ρ − ρ_o: one charge, one release.

The split minimises the planner's own objective (``dpsql.plan.objective``): with the
strategy's unit-noise errors the counts contribute C/ρ_c, where C = Σ_q s_q·TSE_q over the
workload's queries (s_q the objective's scale of query q), and the offsets O/ρ_o, where
O = Σ_b s_q·rows_b·V_b, V_b = (S_b·g_b)²·Σ_b' Δ_b'² the unit-noise variance of block b's rows
in its column's units (blocks weighted 1/(S_b·g_b), so each column's noise is proportional to
its widest half bin; Δ_b' the 0/1 rows' sensitivity, 1 here) and s_q the objective's scale of
the SUM the block completes (its error adds to that SUM's).
C/ρ_c + O/ρ_o under ρ_c + ρ_o = ρ is smallest at ρ_o/ρ = √O / (√C + √O).

That split minimises the sum, not each query's error: with many counts C is large, ρ_o small,
and a SUM over two wide bins got its offsets' noise at that small ρ_o (TPC-H Q1's
``SUM(l_quantity)``, bins 1..23 and 24..50: 1.17× its per-query baseline, the offsets 158,580
of its 201,160).  So the share is then moved to the nearest one at which every query keeps
its baseline (``within_baselines``): query j's variance is c_j/(1 − t) + o_j/t at t = ρ_o/ρ,
convex in t, so the shares that keep it within b_j are an interval; where those do not meet,
the fewest queries above, then the least largest ratio.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from fractions import Fraction

import numpy as np

from dpsql.domain import TableSchema
from dpsql.engine.variance import SupportBlock, VarianceModel, decompose
from dpsql.measure import release as rel
from dpsql.measure.offsets import offset_grid
from dpsql.plan.shares import HI as _HI, LO as _LO, common as _common, intervals as _intervals
from dpsql.plan.views import GroupBound

__all__ = ["offset_blocks", "offset_share", "offset_variances", "offset_models", "within_baselines"]


def offset_blocks(schema: TableSchema, queries: Sequence) -> list[tuple[rel.LatticeBlock, tuple[int, ...]]]:
    """The lattice blocks measuring ``queries`` (compiled offset queries, each with the
    index of the workload query its SUM belongs to): one per row block, deduplicated,
    with the indices of the queries it serves (a SUM and an AVG of the same column and
    groups share one).  Scale = the grid spacing, so measured values are in the column's
    units."""
    attrs = schema.domain.attributes
    out: list[tuple[rel.LatticeBlock, tuple[int, ...]]] = []
    seen: dict = {}
    for lq, part in queries:
        grid = offset_grid(schema.attribute(lq.offset_column))
        if grid is None:
            continue
        for rb in decompose(lq.matrix, attrs):
            if len(rb.terms) != 1:
                continue
            coef, factors = rb.terms[0]
            if coef == 0:
                continue
            clique = tuple(a for a in attrs if a in factors)
            mats = tuple(np.asarray(factors[a] * coef).astype(np.int64) for a in clique) \
                or (np.ones((1, 1), dtype=np.int64),)
            key = (lq.offset_column, clique, tuple((m.shape, m.tobytes()) for m in mats))
            if key in seen:
                block, parts = out[seen[key]]
                out[seen[key]] = (block, parts + (part,) if part not in parts else parts)
                continue
            seen[key] = len(out)
            # weight 1/(S·g): calibrated together (one σ), block b's noise is σ/w_b = σ·S·g in its
            # column's units, proportional to that column's widest half bin (≤ h_max), never a
            # dollar column's on carats
            out.append((rel.LatticeBlock(clique, mats, grid.spacing, 1.0 / (grid.bound * grid.spacing),
                                         lq.offset_column, grid.bound), (part,)))
    return out


def offset_share(rho: Fraction, count_objective: float, blocks: Sequence[tuple[rel.LatticeBlock, tuple[int, ...]]],
                 scales: Sequence[float], unit_rows: int = 1, groups: GroupBound | None = None) -> Fraction:
    """ρ_o, the offsets' share of ``rho`` (module doc): √O/(√C + √O)·ρ, as an exact
    Fraction below ``rho``.  ``count_objective`` is C (with the counts' row factor relative
    to k², ``Planner.rows_sq``, under a group bound); ``scales[i]`` the objective's scale
    of workload query i; ``groups`` a view's group bound, whose separating offset blocks
    are calibrated with S² instead of k² (``release.rows_sq``), relative to k² here too."""
    if not blocks:
        return Fraction(0)
    # one σ for all (release.calibrate): block b's noise is σ/(w_b·g_b) lattice units, σ/w_b in
    # its column's units, with σ² = D/(2ρ_o), D = Σ_b f_b·Δ_b²(lattice)·(w_b·g_b)², f_b the
    # block's squared row factor over k² (1 without a group bound)
    k2 = unit_rows * unit_rows
    d = sum(rel.rows_sq(b.clique, b.factors, unit_rows, groups) / k2 * b.l2_sensitivity_sq()
            * (b.weight * b.scale) ** 2 for b, _ in blocks)
    o = sum(sum(scales[p] for p in parts) * b.rows() * d / b.weight ** 2 for b, parts in blocks)
    c = max(float(count_objective), 0.0)
    if not o > 0:
        return Fraction(0)
    share = math.sqrt(o) / (math.sqrt(c) + math.sqrt(o))
    # keep both sides measurable: never all of it, never nothing
    share = min(max(share, 1e-3), 1 - 1e-3)
    return Fraction(share).limit_denominator(1 << 20) * Fraction(rho)


def within_baselines(share: Fraction, rho: Fraction, counts: Sequence[float], offsets: Sequence[float],
                     baselines: Sequence[float]) -> Fraction:
    """The offsets' share of ``rho`` nearest ``share`` at which every query j keeps its
    baseline variance ``baselines[j]``: its variance is counts[j]/(1 − t) + offsets[j]/t at
    t = ρ_o/ρ (``counts[j]`` the counts' strategy's and ``offsets[j]`` its offsets' variance,
    both at the whole ``rho``).  Each query's feasible t form an interval (the variance is
    convex in t): where o_j = 0, t ≤ 1 − c_j/b_j; else b·t² − (b − c + o)·t + o ≤ 0, between
    the roots.  ``share`` itself when it is in every interval.  When they do not meet (no
    share keeps every query, ``_fewest_above``): the fewest queries above, then the least
    largest ratio, among the shares whose largest ratio is no worse than at ``share``.  An
    exact Fraction of ``rho``, from public figures only."""
    c, o, b = (np.asarray(x, dtype=float) for x in (counts, offsets, baselines))
    ok = (b > 0) & np.isfinite(b) & np.isfinite(c) & np.isfinite(o)
    c, o, b = c[ok], o[ok], b[ok]
    if not len(b):
        return Fraction(share)
    # a millionth below each baseline where that is feasible: the release's calibration rounds
    # σ up (the answers' se came out 1e-9 above the plan's, a SUM planned at 1 − 9e-9 of its
    # baseline answered at 1 − 8e-9), and a row whose se is a hair above its baseline keeps the
    # model's widening whole (variance.cap_stderr)
    ends = _intervals(c, o, b * (1 - _MARGIN))
    if _common(ends) is None:
        ends = _intervals(c, o, b)
    meet = _common(ends)
    t0 = float(Fraction(share) / Fraction(rho))
    if meet is not None:
        lo, hi = meet
        if lo <= t0 <= hi:
            return Fraction(share)
        # inside the interval by a millionth of its width: the report's check is relative 1e-9
        pad = 1e-6 * (hi - lo)
        t = min(max(t0, lo + pad), hi - pad)
    else:
        t = _fewest_above(c, o, b, t0, ends)
    return Fraction(t).limit_denominator(1 << 40) * Fraction(rho)


_MARGIN = 1e-6


def _fewest_above(c: np.ndarray, o: np.ndarray, b: np.ndarray, t0: float,
                  ends: list[tuple[float, float] | None]) -> float:
    """No share keeps every query: the share with the fewest queries above their baselines,
    then the least largest ratio, among those whose largest ratio is at most max(1, its value
    at ``t0``).  The bound is why: keeping a count that is tight at the whole ρ within its
    baseline may leave a SUM's offsets almost no budget (adult, 8 dashboard counts beside a
    two-bin SUM: 3× its baseline against 1.19 at the objective's share).  The least largest
    ratio alone (the minimax share) spread a 1.11 of one SUM over eleven queries at 1.004-1.026
    on adult's mixed corpus, so the count of queries above comes first.  Searched over a grid
    of shares, each query's interval ends (a millionth inside) and the minimax share (a
    golden-section search: the largest ratio is convex in t)."""
    def ratios(t: np.ndarray) -> np.ndarray:
        return (c[None, :] / (1 - t[:, None]) + o[None, :] / t[:, None]) / b[None, :]

    a, z = _LO, _HI
    g = (math.sqrt(5) - 1) / 2
    for _ in range(80):
        x = np.array([z - g * (z - a), a + g * (z - a)])
        w = ratios(x).max(axis=1)
        a, z = (a, float(x[1])) if w[0] <= w[1] else (float(x[0]), z)
    cands: list[np.ndarray] = [np.geomspace(_LO, _HI, 2001), np.array([t0, (a + z) / 2])]
    for e in ends:
        if e is not None:
            lo, h = max(e[0], _LO), min(e[1], _HI)
            if lo < h:
                cands.append(np.array([lo + 1e-6 * (h - lo), h - 1e-6 * (h - lo)]))
    t = np.clip(np.concatenate(cands), _LO, _HI)
    r = ratios(t)
    worst, above = r.max(axis=1), (r > 1 + 1e-9).sum(axis=1)
    bound = max(1.0, float(ratios(np.array([min(max(t0, _LO), _HI)])).max()))
    best = min((int(above[i]), float(worst[i]), i) for i in np.flatnonzero(worst <= bound * (1 + 1e-12)))
    return float(t[best[2]])


def offset_variances(blocks: Sequence[tuple[rel.LatticeBlock, tuple[int, ...]]], share: Fraction,
                     family: str = "gaussian", unit_rows: int = 1,
                     groups: GroupBound | None = None) -> dict[int, float]:
    """Per workload query, the variance the offsets add to each of its rows at ``share``
    (the noise the release will draw: ``release.calibrate``, with a view's group bound;
    a row sums one row of each block of its query, one per predicate term): what
    ``dpsql plan`` adds to a SUM's."""
    if not blocks or not share > 0:
        return {}
    plan = rel.calibrate([b for b, _ in blocks], share, family=family, unit_rows=unit_rows, groups=groups)
    out: dict[int, float] = {}
    for (b, parts), p in zip(blocks, plan.params):
        var = rel.stddev(b, p, family) ** 2
        for part in parts:
            out[part] = out.get(part, 0.0) + var
    return out


def offset_models(schema: TableSchema, released) -> dict[str, VarianceModel]:
    """Per column, the support and least-squares answers of its released offset blocks
    (a separate data vector per column: blocks of different columns never combine)."""
    dom = schema.domain
    sizes = dict(zip(dom.attributes, dom.shape))
    by_column: dict[str, list[SupportBlock]] = {}
    for b, values, sd in released:
        # the released values are g·(M o + Z) with o in lattice units, i.e. M·(g·o) + g·Z:
        # rows of M (scale 1) over the offsets in the column's units, noise sd = g·σ
        by_column.setdefault(b.offsets, []).append(SupportBlock(b.clique, b.factors, sd, 1.0, values))
    return {col: VarianceModel(dom.attributes, sizes, blocks) for col, blocks in by_column.items()}
