"""Counts over an OR, or a NOT over several columns, measured as one count per group.

The SQL compiler lowers ``WHERE a > 0 OR b > 0`` (and ``NOT (a <= 4 AND b = 1)``) into K
disjoint boxes, K Kronecker terms of one query part (``sql/predicates.py``).  The planner
keeps each *term* within the per-query baseline, but the statement shows their *sum*, whose
error (covariance included: ``engine.results._block_sum``) can be up to √K times it: on
bench/reported_errors.py's salary and titanic corpora 12 of 2,010 rows came back above their
baselines, the worst 1.648× (issue 35 item 6).  The statement's per-query baseline is one
noisy count per group (the boxes are disjoint, so a record is in at most one of them: the
sum's sensitivity is that of one count), and that is what is measured where the chosen
strategy leaves the sum above it:

* ``sums_above``: the statements whose sum's planned error, computed from the strategy
  (``sum_tse``: the cross terms of the boxes exactly for one Kronecker block per source
  and on small domains, the Cauchy–Schwarz bound (Σ√e_t)² otherwise, which only ever sends
  more statements here), exceeds its baseline at the part's share;
* ``plan_with_sums``: those statements form a direct part (``engine/direct.py``, starts
  empty: no column is merged) whose inner strategy ``SumStrategy`` measures each as ONE
  block, the 0/1 matrix of its boxes' sum over the joint cells of its columns (a joint
  factor: ``release.LatticeBlock.joint``), at the per-query mechanism's weight; the part's
  share is the least keeping them at their baselines (``mixed.least_fraction``), the rest
  planned again at the rest of the budget, as the two-fine direct part does;
* the answer side (``direct._answer_matrix``): a linear query of several blocks is matched
  against a released joint block of the same sum (``box_sums.sum_matrix``).

Public: the workload's SQL, the declared domains and the plan; the released block's
sensitivity is calibrated exactly from its integer joint factor (``release.calibrate``,
docs/privacy.md "Direct parts").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.engine.box_sums import dense as _dense, sum_matrix as _sum_matrix

__all__ = ["SumStrategy", "sum_tse", "sums_above", "plan_with_sums", "is_sum_strategy"]

#: Attributes up to this many cells get their exact cross terms through a per-attribute
#: pseudo-inverse; the whole domain up to this many cells densely.
_EXACT_CELLS = 4096


def is_sum_strategy(strategy) -> bool:
    return type(strategy).__name__ == "SumStrategy"


@dataclass(frozen=True, eq=False)
class SumStrategy:
    """The per-query mechanism over statements of several boxes each: one joint block per
    statement (``measured``), ``workload`` one term and ``rows`` = groups per statement (its
    ``term_tse`` the sum's error, in the scaled units of the objective)."""

    attributes: tuple[str, ...]
    shape: tuple[int, ...]
    measured: tuple
    noise: str
    expected_error: float
    workload: Any = field(repr=False)
    term_tse: tuple[float, ...]
    operator: str = "per-query"
    explanation: str = ""
    assignment: None = None
    kron_blocks: tuple = ()

    @property
    def blocks(self) -> list:
        return list(self.measured)

    @property
    def cliques(self) -> list[tuple[str, ...]]:
        return [b.clique for b in self.measured]


def _algebra_exact(terms, idx: list[int], blocks) -> float | None:
    """tr(S G Sᵀ) for marginal and residual blocks (``plan.algebra``): G is diagonal in one
    product eigenbasis, on eigenspace a Σ_k ⊗_{i∈a} u_ik u_ikᵀ ⊗_{i∉a} J/n_i / κ(a, k) (κ(a)
    alone, with P_a's I − J/n, without a residual block on a), so each pair of boxes' cross term
    is a sum over a of per-attribute traces; None for other blocks or too many subsets."""
    from dpsql.plan.algebra import EXACT_GRID, algebra_form
    from dpsql.plan.joint import _is_residual
    from dpsql.plan.marginals import MarginalSpace, strategy_kappa
    from dpsql.plan.strategy import factor_kind

    shape = tuple(int(n) for n in terms.shape)
    form = algebra_form(blocks, shape)
    ts = [terms.terms[t] for t in idx]
    if form is None or any(not t.factors for t in ts):
        return None
    on = sorted(set().union(*(t.support for t in ts)))
    if len(on) > 12 or any(shape[i] > _EXACT_CELLS for i in on):
        return None
    space = MarginalSpace.of(shape, [frozenset(on)])
    km = strategy_kappa(space, form.theta2, form.cliques) if form.cliques else np.zeros(space.size)
    # the residual factors' eigenvectors on 1^⊥ (u = Rᵀv/√g for R Rᵀ v = g v)
    vecs: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for b in blocks:
        for i, F in enumerate(b.factors):
            if i not in vecs and factor_kind(F)[0] == "other" and _is_residual(F):
                g, V = np.linalg.eigh(F @ F.T)
                vecs[i] = (g, (F.T @ V) / np.sqrt(g))
    dense = [[_dense(f) for f in t.factors] for t in ts]
    sums = [[d.sum(axis=1) for d in per] for per in dense]
    total = 0.0
    for x in range(len(ts)):
        for y in range(len(ts)):
            ones = [float(sums[x][i] @ sums[y][i]) / shape[i] for i in range(len(shape))]
            inner = {i: float(np.sum(dense[x][i] * dense[y][i])) for i in on}
            pair = 0.0
            for s, a in enumerate(space.subsets):
                rest = math.prod(ones[i] for i in range(len(shape)) if i not in a)
                if rest == 0.0:
                    continue
                rho = form.residual.get(a, 0.0)
                if rho <= 0.0:
                    part = math.prod(inner[i] - ones[i] for i in a)
                    if part == 0.0:
                        continue
                    if km[s] <= 0.0:
                        return math.inf
                    pair += rest * part / float(km[s])
                    continue
                attrs = sorted(a)
                if any(i not in vecs for i in attrs) or math.prod(shape[i] - 1 for i in attrs) > EXACT_GRID:
                    return None
                cs = np.ones(())
                gs = np.ones(())
                for i in attrs:
                    g, U = vecs[i]
                    c = np.sum((dense[x][i] @ U) * (dense[y][i] @ U), axis=0)
                    cs = np.multiply.outer(cs, c)
                    gs = np.multiply.outer(gs, g)
                pair += rest * float(np.sum(cs / (float(km[s]) + rho * gs)))
            total += ts[x].weight * ts[y].weight * pair
    return total


def _source_exact(terms, idx: list[int], blocks) -> float | None:
    """tr(S G Sᵀ) of the sum S of the terms ``idx`` under the blocks' (AᵀA)⁺ = G (unit
    noise, sensitivity left out): per attribute for one Kronecker block (cross terms
    w_t w_s Π_i tr(T_t,i G_i T_s,iᵀ)), densely on small domains, else None."""
    from dpsql.linalg.rowscaled import GramPinv
    from dpsql.plan.error import _dense_union

    ts = [terms.terms[t] for t in idx]
    if any(not t.factors for t in ts):
        return None
    shape = terms.shape
    got = _algebra_exact(terms, idx, blocks)
    if got is not None:
        return got
    if len(blocks) == 1 and all(int(n) <= _EXACT_CELLS for n in shape):
        b = blocks[0]
        if b.bases and any(s is not None for s in b.bases):
            return None
        roots = []
        for F in b.factors:
            g = GramPinv(np.asarray(F, dtype=np.float64))
            roots.append((g.factor, g.basis))
        # T_t,i L_i per term and attribute (G_i = L_i L_iᵀ); supported iff T Q Qᵀ = T
        proj = []
        for t in ts:
            per = []
            for f, (L, Q) in zip(t.factors, roots):
                T = _dense(f)
                if not np.allclose(T @ Q @ Q.T, T, rtol=1e-9, atol=1e-9 * max(1.0, float(np.abs(T).max()))):
                    return math.inf
                per.append(T @ L)
            proj.append(per)
        total = 0.0
        for a in range(len(ts)):
            for c in range(len(ts)):
                total += ts[a].weight * ts[c].weight * math.prod(
                    float(np.sum(x * y)) for x, y in zip(proj[a], proj[c]))
        return total / (b.weight ** 2)
    if int(np.prod(shape, dtype=object)) <= _EXACT_CELLS:
        g = GramPinv(_dense_union(blocks))
        S = None
        for t in ts:
            M = np.ones((1, 1))
            for f in t.factors:
                M = np.kron(M, _dense(f))
            S = t.weight * M if S is None else S + t.weight * M
        assert S is not None
        whole = float(np.sum(S * S))
        if whole - float(np.sum((S @ g.basis) ** 2)) > 1e-9 * max(whole, 1e-300):
            return math.inf
        return float(np.sum((S @ g.factor) ** 2))
    return None


def sum_tse(strategy, q: int) -> float:
    """The unit-noise TSE (scaled, as the strategy's ``term_tse``) of the *sum* of query part
    ``q``'s terms under ``strategy`` (a ``plan.Strategy``): the terms answered by different
    blocks (``assignment``) have independent noise, those answered by the same blocks their
    covariance in it exactly where ``_source_exact`` computes it, the bound (Σ√e_t)² else."""
    from dpsql.plan.error import _unit_variance, noise_norm, term_errors
    from dpsql.plan.strategy import union_sensitivity

    terms = strategy.workload
    errs = (np.asarray(strategy.term_tse) if strategy.term_tse is not None else
            term_errors(terms, strategy.kron_blocks, strategy.noise, strategy.assignment))
    part = terms.parts[q]
    idx = list(part.terms)
    if len(idx) < 2:
        return float(np.sum(errs[idx]))
    assignment = strategy.assignment
    blocks = strategy.kron_blocks
    sources: dict[int | None, list[int]] = {}
    for t in idx:
        sources.setdefault(None if assignment is None else int(assignment[t]), []).append(t)
    own = {a for a in (assignment or ()) if a >= 0}
    scale = _unit_variance(strategy.noise) * union_sensitivity(blocks, terms.shape, noise_norm(strategy.noise)) ** 2
    total = 0.0
    for a, ts in sources.items():
        if len(ts) == 1 or not np.all(np.isfinite(errs[ts])):
            total += float(np.sum(errs[ts]))
            continue
        mine = blocks if a is None else [blocks[a]] if a >= 0 else [b for i, b in enumerate(blocks) if i not in own]
        got = _source_exact(terms, ts, mine)
        total += scale * got if got is not None else float(np.sum(np.sqrt(errs[ts]))) ** 2
    return total


def _groups(terms, part) -> int:
    return int(math.prod(terms.terms[part.first_term].rows))


def sums_above(planner, table: str, workload, offsets, strategy, rho: Fraction,
               index: Sequence[int] | None = None) -> list[int]:
    """The workload's query parts of several terms (no binning offsets) whose sum's planned
    error under ``strategy`` (one ``plan.Strategy``, or a ``MixedStrategy`` whose model
    parts are) exceeds its per-query baseline at the share its blocks are measured with (the
    part's, less its binning offsets', in a mixed plan as in a plain one).  ``index``: the
    whole workload's index of each of ``workload``'s query parts (``Planner.strategy_for``)."""
    from dpsql.engine.mixed import is_mixed_strategy

    whole = list(range(len(workload.parts))) if index is None else list(index)

    with_offsets = {j for _, j in offsets}
    multi = [j for j, p in enumerate(workload.parts) if p.num_terms >= 2 and j not in with_offsets]
    if not multi:
        return []
    unit = float(planner.config.sources[table].unit_rows ** 2)
    if is_mixed_strategy(strategy):
        # a model part's counts get its share less its offsets', as measured (``Planner.plan``)
        pieces = [(p.strategy, list(p.parts),
                   (p.share(rho) - planner._offsets_rho(table, p.strategy, p.share(rho),
                                                        [whole[i] for i in p.parts])) / Fraction(rho))
                  for p in strategy.parts if not (p.ordered or p.direct)]
    else:
        counts = Fraction(rho) - planner._offsets_rho(table, strategy, rho, whole)
        pieces = [(strategy, list(range(len(workload.parts))), counts / Fraction(rho))]
    out = []
    for sub, parts, fraction in pieces:
        terms = getattr(sub, "workload", None)
        if terms is None or not getattr(terms, "parts", ()) or not hasattr(sub, "kron_blocks"):
            continue
        ratio = planner.rows_sq(table, sub) / unit
        for k, j in enumerate(parts):
            if j not in multi:
                continue
            whole = workload.parts[j]
            cap = whole.scale * _groups(workload.terms, whole) * whole.baseline * float(fraction)
            if sum_tse(sub, k) * ratio > cap * (1 + 1e-9):
                out.append(j)
    return sorted(out)


def _sum_strategy(workload, indices, noise: str, fraction: Fraction, names) -> SumStrategy | None:
    """The per-query mechanism over the statements ``indices``, each one joint block of its
    boxes' sum (weight 1/(√k·Δ₂), Δ₂ that of the sum: a record in at most one box)."""
    from dpsql import linalg
    from dpsql.plan.error import noise_norm
    from dpsql.plan.strategy import MeasurementBlock
    from dpsql.plan.workload import WorkloadTerms

    p = noise_norm(noise)
    k = len(indices)
    terms = workload.terms
    measured, tse, parts, reps = [], [], [], []
    sens2 = 0.0
    for n, j in enumerate(indices):
        part = workload.parts[j]
        rs = math.sqrt(part.scale)
        got = _sum_matrix(names, workload.domain.shape,
                          [(terms.terms[t].weight / rs, list(terms.terms[t].factors)) for t in part.terms])
        if got is None:
            return None
        clique, S = got
        delta = float(np.sqrt((S * S).sum(axis=0).max())) if p == 2 else float(np.abs(S).sum(axis=0).max())
        c = 1.0 / (math.sqrt(k) * delta) if p == 2 else 1.0 / (k * delta)
        measured.append(MeasurementBlock(clique, linalg.Explicit(S), c))
        sens2 += (c * delta) ** p
        groups = S.shape[0]
        reps.append(terms.terms[part.first_term])
        parts.append(replace(part, rows=groups, first_term=n, num_terms=1, baseline=part.baseline * float(fraction)))
        tse.append(part.scale * groups / (c * c))
    # the union's sensitivity (≤ 1 by the weights: the blocks' own added up), its noise on every block
    sens = sens2 ** (1.0 / p)
    unit = 1.0 if p == 2 else 2.0
    tse = [unit * sens ** 2 * e for e in tse]
    wt = WorkloadTerms(terms.attributes, terms.shape, tuple(reps), tuple(parts))
    return SumStrategy(terms.attributes, terms.shape, tuple(measured), noise, float(sum(tse)), wt,
                       tuple(tse), explanation=f"{k} statement{'s' if k != 1 else ''} of several boxes "
                       "(an OR, a NOT over several columns) measured as one count per group")


def plan_with_sums(planner, table: str, workload, labels, offsets, rho: Fraction, unit_rows: int, strategy,
                   index: Sequence[int] | None = None):
    """``strategy`` when it keeps every statement of several boxes within its baseline as a
    sum (``sums_above``), else a ``MixedStrategy`` with those statements in a direct part
    measured as one count per group (``SumStrategy``) at the least share keeping them at
    their baselines, the rest planned again at the rest (``Planner.strategy_for``, with the
    whole workload's index of each of its parts: ``index`` is this workload's)."""
    from dpsql.engine.direct import DirectStrategy
    from dpsql.engine.mixed import MixedStrategy, StrategyPart, least_fraction, rest_parts, sub_workload

    whole = list(range(len(workload.parts))) if index is None else list(index)
    above = sums_above(planner, table, workload, offsets, strategy, rho, whole)
    if not above:
        return strategy
    schema = planner._state(table).schema
    names = list(workload.domain.attributes)
    noise = planner.config.noise
    inner = _sum_strategy(workload, above, noise, Fraction(1), names)
    if inner is None:
        return strategy
    probe = DirectStrategy(inner, schema, {})
    least = least_fraction(probe, Fraction(1), planner.rows_sq(table, probe) / unit_rows ** 2)
    f = Fraction(least) if least > 0 else Fraction(len(above), len(workload.parts))
    keep = [j for j in range(len(workload.parts)) if j not in set(above)]
    if f >= 1 and keep:
        return strategy
    inner = _sum_strategy(workload, above, noise, f if keep else Fraction(1), names)
    assert inner is not None, "the same statements as above"
    direct = DirectStrategy(inner, schema, {}, inner.explanation)
    parts: list[StrategyPart] = []
    why = ""
    if keep:
        rest_f = 1 - f
        at = {j: k for k, j in enumerate(keep)}
        sub = sub_workload(workload, keep, rest_f)
        other = planner.strategy_for(table, sub, [labels[j] for j in keep],
                                     [(q, at[j]) for q, j in offsets if j in at], rho * rest_f, unit_rows,
                                     [whole[j] for j in keep])
        parts += rest_parts(other, keep, rest_f, sub)
        why = getattr(other, "explanation", "")
    else:
        f = Fraction(1)
    parts.append(StrategyPart("direct sums", direct, f, tuple(above), sub_workload(workload, above, f), direct=True))
    text = (f"{direct.explanation}, at {float(f):.4g} of the budget (each within its per-query baseline)"
            + (f"; the other statements at the rest: {why}" if why else ""))
    return MixedStrategy(tuple(parts), explanation=text)
