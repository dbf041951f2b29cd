"""OPT_HDMM: run the applicable operators with restarts and keep the best (thesis §3.8).

Public operators, each returning a :class:`~dpsql.plan.strategy.Strategy`:
``opt_0`` (explicit 1-D workloads, §3.3), ``opt_kron`` (OPT_⊗, Def. 19-20), ``opt_union``
(OPT_+, Def. 21) and ``opt_marginals`` (OPT_M, Def. 24).  ``optimize`` runs those that apply
and keeps the lowest expected error among the candidates that the measure and reconstruct
steps can afford.

Feasibility is decided from public metadata before any optimisation runs, because every
operator's measured cliques are known in advance: OPT_⊗ must keep every attribute some
term does not sum out (one clique, their union), while OPT_+ and OPT_M measure the terms'
own supports.  A candidate whose largest counted marginal exceeds ``Caps.marginal_cells`` or
whose cliques induce a junction tree larger than ``Caps.model_size`` loses to any candidate
within it (if none fits, the best is kept and flagged for approximate inference), and
``Strategy.explanation`` says why.
"""

from __future__ import annotations

import contextvars
import math
from itertools import combinations
from dataclasses import dataclass, replace
from collections.abc import Callable
from typing import Any

import numpy as np

from dpsql.errors import ModelTooLargeError, UnsupportedQueryError
from dpsql.linalg.threads import one_blas_thread
from dpsql.plan.error import _unit_variance, kron_loss, noise_norm, term_errors
from dpsql.plan.kron import kron_strategy
from dpsql.plan.gram import LowRankGram
from dpsql.plan.marginals import (
    MarginalSpace, marginal_svd_bound, opt_marginals_theta, term_kappas, workload_kappa,
)
from dpsql.plan.residual import (
    balanced_mu, residual_blocks, residual_mu, split_marginal_residual,
)
from dpsql.plan.opt0 import Progress
from dpsql.plan.ordered import OrderedStrategy, opt_ordered, ordered_attribute
from dpsql.plan.strategy import (
    KronBlock, Strategy, eye_factor, factor_kind, ones_factor, round_blocks, union_sensitivity,
)
from dpsql.plan.balance import balanced_theta, baseline_shares, cap_score, query_caps
from dpsql.plan.union import group_by_support, union_strategy, union_weights
from dpsql.plan.workload import WorkloadTerms, factor_dense, workload_terms
from dpsql.triangulation import tree_cells

__all__ = ["Caps", "opt_0", "opt_kron", "opt_union", "opt_marginals", "opt_per_query",
           "opt_residual", "opt_residual_plus", "optimize",
           "round_strategy",
           "junction_tree_size", "DEFAULT_GRID"]

#: Grid that real-valued strategy factors are rounded to (entries scaled to max 1 first).
DEFAULT_GRID = 2.0 ** -10

#: Part of the strategy-cache key: bump it when the same options yield a different strategy
#: (2: OPT_M drops negligible weights; 4: ResidualPlanner meets per-query caps by its dual), so
#: that stale cached strategies are not reused.
PLANNER_VERSION = 4


@dataclass(frozen=True)
class Caps:
    """Limits on what a strategy may ask of the measure and reconstruct steps."""

    marginal_cells: int = 10 ** 7      # cells of the largest marginal counted in the database
    model_size: int = 10 ** 8          # cells of the junction tree the cliques induce
    opt0_cells: int = 4096             # largest attribute OPT_0 optimises densely
    marginal_parameters: int = 4096    # largest downward closure OPT_M optimises over


def _prod(xs) -> int:
    return int(math.prod(int(x) for x in xs))


def junction_tree_size(attributes, shape, cliques) -> int:
    """Cells of the junction tree for ``cliques`` (attribute-name tuples)."""
    return tree_cells({a: int(n) for a, n in zip(attributes, shape)}, cliques)


#: Set by ``optimize`` while it runs operators whose output it rounds (and re-evaluates)
#: anyway: the operators then skip evaluating the unrounded strategy.
_DEFER = contextvars.ContextVar("dpsql_plan_defer_evaluation", default=False)


def _make(terms: WorkloadTerms, blocks, noise: str, operator: str, *, assignment=None,
          explanation: str = "", tse: float | None = None) -> Strategy:
    errs = None
    if tse is None and _DEFER.get():
        tse = math.nan
    elif tse is None:
        errs = tuple(float(e) for e in term_errors(terms, blocks, noise, assignment))
        tse = float(sum(errs))
    return Strategy(terms.attributes, terms.shape, tuple(blocks), operator, noise, tse,
                    explanation, None if assignment is None else tuple(assignment), terms, errs)


def round_strategy(s: Strategy, grid: float) -> Strategy:
    """``s`` with real factors on the measurement grid (:func:`strategy.round_blocks`) and
    its expected error recomputed on the rounded matrix, the one actually measured."""
    blocks = round_blocks(s.kron_blocks, grid)
    err, errs = s.expected_error, None
    if s.workload is not None:
        errs = tuple(float(e) for e in term_errors(s.workload, blocks, s.noise, s.assignment,
                                                   s.shape))
        err = float(sum(errs))
    note = f" Factors rounded to a grid of {grid:g}."
    return replace(s, kron_blocks=blocks, expected_error=err, explanation=s.explanation + note,
                   term_tse=errs)


def _rng(seed) -> np.random.Generator:
    return seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)


# --- operators --------------------------------------------------------------------------

def opt_kron(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
             progress: Progress | None = None) -> Strategy:
    """OPT_⊗ (thesis Definition 20): one Kronecker product over all attributes."""
    noise_norm(noise)
    terms = workload_terms(W)
    block, loss = kron_strategy(terms, noise, restarts=restarts, rng=_rng(seed),
                                progress=progress)
    # Theorem 4: the product of per-factor losses already is ‖Q‖²·tr(WᵀW(QᵀQ)⁺).
    return _make(terms, [block], noise, "OPT_kron",
                 tse=(2.0 if noise_norm(noise) == 1 else 1.0) * loss)


def opt_0(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
          progress: Progress | None = None) -> Strategy:
    """OPT_0 (thesis §3.3) for a one-attribute (explicit) workload."""
    terms = workload_terms(W)
    if len(terms.shape) != 1:
        raise UnsupportedQueryError("OPT_0 takes a one-attribute workload",
                                    hint="use opt_kron / optimize for multi-attribute ones")
    s = opt_kron(terms, noise, restarts=restarts, seed=seed, progress=progress)
    return Strategy(s.attributes, s.shape, s.kron_blocks, "OPT_0", noise, s.expected_error,
                    s.explanation, None, terms)


def opt_union(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
              groups=None, progress: Progress | None = None) -> Strategy:
    """OPT_+ (thesis Definition 21): one OPT_⊗ block per group of terms."""
    noise_norm(noise)
    terms = workload_terms(W)
    blocks, assignment, _ = union_strategy(terms, noise, groups=groups, restarts=restarts,
                                           rng=_rng(seed), progress=progress)
    return _make(terms, blocks, noise, "OPT_+", assignment=assignment)


def opt_marginals(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
                  progress: Progress | None = None) -> Strategy:
    """OPT_M (thesis Definition 24) over the downward closure of the workload's supports."""
    noise_norm(noise)
    terms = workload_terms(W)
    space = MarginalSpace.of(terms.shape, [t.support for t in terms.terms])
    caps = query_caps(terms, noise)
    if caps is None:
        kw = workload_kappa(space, terms)
        theta, _ = opt_marginals_theta(space, kw, noise, restarts=restarts, rng=_rng(seed),
                                       progress=progress)
    else:
        owner, cap = caps
        theta = balanced_theta(space, _term_kappas(space, terms), owner, cap, noise,
                               cap_score(owner, cap), restarts=restarts, rng=_rng(seed),
                               progress=progress)
    return _marginal_strategy(terms, space, theta, noise)


def _term_kappas(space: MarginalSpace, terms: WorkloadTerms) -> np.ndarray:
    return term_kappas(space, terms)


def _marginal_strategy(terms: WorkloadTerms, space: MarginalSpace, theta: np.ndarray,
                       noise: str) -> Strategy:
    blocks = []
    for s, th in zip(space.subsets, theta):
        if th <= 1e-9 * theta.max():
            continue
        factors = tuple(eye_factor(n) if i in s else ones_factor(n)
                        for i, n in enumerate(terms.shape))
        blocks.append(KronBlock(float(th), factors))
    return _make(terms, blocks, noise, "OPT_M")


def _residual_part(space: MarginalSpace, mu: np.ndarray, shape) -> list[KronBlock]:
    t, rho = split_marginal_residual(space, mu)
    return residual_blocks(space, t, rho)


def opt_residual(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
                 progress: Progress | None = None) -> Strategy:
    """ResidualPlanner (plan/residual.py): the optimal Gaussian strategy for a marginal
    workload, as OPT_M's integer marginals where they suffice and residual blocks for the
    rest, with the certificate that its error meets the SVD bound (Theorem 10)."""
    if noise_norm(noise) != 2:
        raise UnsupportedQueryError("ResidualPlanner is the optimal Gaussian mechanism",
                                    hint="Laplace noise uses OPT_M")
    terms = workload_terms(W)
    if not all(all(t.marginal_like) for t in terms.terms):
        raise UnsupportedQueryError("ResidualPlanner plans marginal workloads only",
                                    hint="RP+ plans the marginal part of a mixed workload")
    space = MarginalSpace.of(terms.shape, [t.support for t in terms.terms])
    caps = query_caps(terms, noise)
    if caps is None:
        mu = residual_mu(space, workload_kappa(space, terms))
    else:
        owner, cap = caps
        mu = balanced_mu(space, _term_kappas(space, terms), owner, cap, cap_score(owner, cap))
    blocks = _residual_part(space, mu, terms.shape)
    sens = union_sensitivity(blocks, terms.shape, 2)
    blocks = [replace(b, weight=b.weight / sens) for b in blocks]
    bound = marginal_svd_bound(space, workload_kappa(space, terms))
    nres = sum(1 for b in blocks if any(factor_kind(F)[0] == "other" for F in b.factors))
    s = _make(terms, blocks, noise, "ResidualPlanner")
    note = f" ResidualPlanner: {len(blocks) - nres} marginal and {nres} residual block(s)."
    return replace(s, explanation=note + _certificate(s.expected_error, bound))


def _certificate(tse: float, bound: float) -> str:
    if not (math.isfinite(tse) and bound > 0):
        return ""
    return (f" Certificate: its expected error is {tse / bound:.4f}x the SVD bound "
            f"{bound:.6g}, which no strategy beats (thesis Prop. 10).")


def opt_marginals_plus(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
                       progress: Progress | None = None, residual: bool = False) -> Strategy:
    """OPT_M for the marginal terms ∪ one OPT_⊗ block per support group of the others.

    Dashboards mix marginals (GROUP BY) with filtered counts (``WHERE age BETWEEN …``).
    OPT_M answers a filtered count by summing many noisy marginal cells; OPT_+ gives up the
    sharing between marginals.  This union keeps OPT_M where it is optimal and gives each
    group of the other terms (same support, as OPT_+ groups) its own OPT_⊗ block.  With
    per-part losses L_k at unit sensitivity, the weights c_k ∝ L_k^{1/4} with ‖c‖₂ = 1
    (Gaussian; ∝ L_k^{1/3}, ‖c‖₁ = 1 for Laplace) minimise Σ_k L_k / c_k² (the argument of
    Definition 21, :func:`union.union_weights`); the expected error is then evaluated on the weighted union with its
    exact sensitivity: joint least squares over the OPT_M blocks for the marginal terms,
    local least squares (§3.9) for the others (assignment −1 = "the marginal blocks").
    """
    p = noise_norm(noise)
    terms = workload_terms(W)
    marg, other = terms.split_marginal()
    if not marg or not other:
        raise UnsupportedQueryError("OPT_M+ needs both marginal and non-marginal terms",
                                    hint="use OPT_M or OPT_+")
    rng = _rng(seed)
    # The other terms first: one OPT_⊗ block per support group, each at unit sensitivity.
    rest = terms.select(other)
    groups = group_by_support(rest)
    other_parts, term_loss = [], np.zeros(len(terms.terms))
    for members in groups:
        sub = rest.select(members)
        block, loss = kron_strategy(sub, noise, restarts=restarts, rng=rng, progress=progress)
        other_parts.append((loss, [block]))
        term_loss[[other[j] for j in members]] = kron_loss(block, sub)
    part_terms = [marg] + [[other[j] for j in g] for g in groups]
    msub = terms.select(marg)
    space = MarginalSpace.of(terms.shape, [t.support for t in msub.terms])
    caps = query_caps(terms, noise)
    if residual and noise_norm(noise) != 2:
        raise UnsupportedQueryError("ResidualPlanner is the optimal Gaussian mechanism")
    if caps is None:
        if residual:
            mu = residual_mu(space, workload_kappa(space, msub))
        else:
            theta, _ = opt_marginals_theta(space, workload_kappa(space, msub), noise,
                                           restarts=restarts, rng=rng, progress=progress)
    else:
        owner, cap = caps

        def union_value(marg_losses):
            full = term_loss.copy()
            full[marg] = marg_losses
            losses = [float(marg_losses.sum())] + [loss for loss, _ in other_parts]
            lower = baseline_shares(terms, noise, part_terms, full)
            c = union_weights(losses, noise, lower)
            # A part at weight c answers its terms with error loss/c² (either noise).
            return float(np.dot(losses, 1.0 / c ** 2)), bool(lower is None or lower.sum() < 1.0)

        free = union_weights([1.0] + [loss for loss, _ in other_parts], noise)
        if residual:
            mu = balanced_mu(space, _term_kappas(space, msub), owner[marg], cap, union_value,
                             target=float(free[0] ** 2), dual=False)
        else:
            theta = balanced_theta(space, _term_kappas(space, msub), owner[marg], cap, noise,
                                   union_value, target=float(free[0] ** 2),
                                   restarts=restarts, rng=rng, progress=progress)
    mblocks = (_residual_part(space, mu, terms.shape) if residual
               else _marginal_strategy(msub, space, theta, noise).kron_blocks)
    sens_m = union_sensitivity(mblocks, terms.shape, p)
    unit_m = [replace(b, weight=b.weight / sens_m) for b in mblocks]
    marg_loss = term_errors(msub, unit_m, noise) / _unit_variance(noise)
    term_loss[marg] = marg_loss
    parts = [(float(marg_loss.sum()), unit_m)] + other_parts
    lower = baseline_shares(terms, noise, part_terms, term_loss)
    c = union_weights([loss for loss, _ in parts], noise, lower)
    blocks = [replace(b, weight=b.weight * float(ck)) for ck, (_, bs) in zip(c, parts) for b in bs]
    assignment = [-1] * len(terms.terms)
    first = len(parts[0][1])
    for k, members in enumerate(groups):
        for j in members:
            assignment[other[j]] = first + k
    return _make(terms, blocks, noise, "RP+" if residual else "OPT_M+", assignment=assignment)


def opt_residual_plus(W: Any, noise: str = "gaussian", **kw) -> Strategy:
    """OPT_M+ with ResidualPlanner's optimal strategy for the marginal part (Gaussian)."""
    return opt_marginals_plus(W, noise, residual=True, **kw)


#: Largest dense factor (entries) the per-query candidate materialises.
PER_QUERY_FACTOR_LIMIT = 1 << 24


def opt_per_query(W: Any, noise: str = "gaussian", **_ignored) -> Strategy:
    """The per-query mechanism as a strategy: every query measured on its own.

    Query q's rows (its own Kron terms) form blocks with weight c_q = 1/(√k·Δ₂(q))
    (Gaussian, ρ/k each) or 1/(k·Δ₁(q)) (Laplace, ε/k each), so the union costs at most
    the budget (its exact sensitivity is ≤ 1 and used as is).  Each term is answered
    from its own block, so every query gets at most its per-query baseline variance:
    as a candidate it makes ``optimize`` never worse than noise per query (issue 16).
    Needs a workload built by ``Workload.of_queries`` (which records the queries).
    """
    p = noise_norm(noise)
    terms = workload_terms(W)
    if not terms.parts:
        raise UnsupportedQueryError("the per-query candidate needs a workload of queries",
                                    hint="build it with Workload.of_queries")
    k = len(terms.parts)
    blocks = []
    for part in terms.parts:
        if part.sensitivity <= 0:
            raise UnsupportedQueryError(f"query {part.name!r} has no rows to measure")
        c = 1.0 / (math.sqrt(k) * part.sensitivity) if p == 2 else 1.0 / (k * part.sensitivity)
        for j in part.terms:
            t = terms.terms[j]
            if not t.factors:
                raise UnsupportedQueryError("the workload's own factors are not known")
            size = max(int(r) * int(n) for r, n in zip(t.rows, terms.shape))
            if size > PER_QUERY_FACTOR_LIMIT:
                raise UnsupportedQueryError(
                    f"query {part.name!r} has a {size:,}-entry factor, too large to measure "
                    "densely on its own")
            factors = tuple(factor_dense(f) for f in t.factors)
            blocks.append(KronBlock(c * t.weight / math.sqrt(part.scale), factors))
    return _make(terms, blocks, noise, "per-query", assignment=list(range(len(blocks))))


def _query_name(terms: WorkloadTerms, j: int) -> str:
    for p in terms.parts:
        if j in p.terms:
            return p.name
    return f"workload term {j}"


def _marginal_name(terms: WorkloadTerms, clique) -> str:
    """The columns of a marginal with their cells, and a query that needs them together (when
    one query does), so a cap refusal says which column and query to change (issue 16)."""
    idx = [terms.attributes.index(a) for a in clique]
    cols = " x ".join(f"{a} ({terms.shape[i]:,})" for a, i in zip(clique, idx))
    need = set(idx)
    for j, t in enumerate(terms.terms):
        if need <= set(t.support):
            return f"over {cols}, for query {_query_name(terms, j)!r}"
    return f"over {cols}"


def _large_attribute_problem(terms: WorkloadTerms, op: str, caps: Caps) -> str | None:
    """Why ``op`` cannot plan this workload's large attributes (naming column and query),
    or None.  Large attributes (``gram.LARGE_CELLS``) are planned in their workload's row
    space (plan/large.py) by the OPT_0-based operators, which needs every factor there to
    be thin (no GROUP BY over every value); OPT_M would need identity marginals over them."""
    for i, n in enumerate(terms.shape):
        if n <= caps.opt0_cells:
            continue
        grams = [t.grams[i] for t in terms.terms]
        if op == "per-query":
            continue
        if not all(isinstance(g, LowRankGram) for g in grams):
            if op in ("OPT_M", "RP"):
                continue
            return (f"column {terms.attributes[i]!r} has {n:,} cells "
                    f"(dense OPT_0 cap {caps.opt0_cells:,})")
        if op in ("OPT_M", "OPT_M+", "RP", "RP+"):
            support = [j for j, t in enumerate(terms.terms) if i in t.support
                       and (op in ("OPT_M", "RP") or all(t.marginal_like))]
            if support:
                return (f"query {_query_name(terms, support[0])!r} would need every value of "
                        f"column {terms.attributes[i]!r} ({n:,} cells) counted as a marginal")
            if op in ("OPT_M", "RP"):
                continue
        if op in ("OPT_0", "OPT_kron") and len({t.large_kinds[i] for t in terms.terms}) > 1:
            return (f"one product cannot mix counts and sums over column "
                    f"{terms.attributes[i]!r} ({n:,} cells) on the measurement lattice")
        wide = [j for j, g in enumerate(grams) if isinstance(g, LowRankGram) and g.c > 0]
        if wide:
            return (f"query {_query_name(terms, wide[0])!r} groups by every value of column "
                    f"{terms.attributes[i]!r} ({n:,} cells)")
    return None


def _above_baseline(terms: WorkloadTerms, strat: Strategy) -> list[int]:
    """Queries (of a workload of queries) whose expected error exceeds their baseline."""
    if not terms.parts:
        return []
    errs = _term_tse(terms, strat)
    return [q for q, p in enumerate(terms.parts)
            if float(np.sum(errs[list(p.terms)])) > p.scale * p.rows * p.baseline * (1 + 1e-9)]


def _term_tse(terms: WorkloadTerms, strat: Strategy) -> np.ndarray:
    if strat.term_tse is not None and strat.workload is terms:
        return np.asarray(strat.term_tse)
    return term_errors(terms, strat.kron_blocks, strat.noise, strat.assignment)


def _unsupported(terms: WorkloadTerms, strat: Strategy) -> str:
    """Why a candidate has no finite error: the queries (or terms) it does not support."""
    errs = _term_tse(terms, strat)
    bad = [j for j, e in enumerate(errs) if not math.isfinite(e)]
    if not bad:
        return "its error could not be evaluated"
    if terms.parts:
        names = [p.name for p in terms.parts if any(j in bad for j in p.terms)]
        shown = "; ".join(repr(n) for n in names[:3]) + (" …" if len(names) > 3 else "")
        return f"does not support {len(names)} quer{'y' if len(names) == 1 else 'ies'} ({shown})"
    return f"does not support {len(bad)} workload term(s)"


# --- OPT_HDMM -----------------------------------------------------------------------------

def _names(terms: WorkloadTerms, idx) -> tuple[str, ...]:
    return tuple(terms.attributes[i] for i in sorted(idx))


def _planned_cliques(terms: WorkloadTerms, operator: str) -> list[tuple[str, ...]]:
    supports = set(t.support for t in terms.terms)
    if operator in ("OPT_0", "OPT_kron"):
        return [_names(terms, frozenset().union(*supports))]
    # Maximal supports: drop every proper subset of a support (enumerated: supports are
    # small, the workload may have thousands of them).
    dominated: set[frozenset[int]] = set()
    for o in supports:
        members = sorted(o)
        if len(members) > 16:
            dominated.update(s for s in supports if s < o)
            continue
        for r in range(len(members)):
            dominated.update(frozenset(c) for c in combinations(members, r))
    return [_names(terms, s) for s in supports - dominated]


def optimize(W: Any, noise: str = "gaussian", restarts: int = 3, seed: int = 0,
             caps: Caps | None = None, progress: Progress | None = None, *,
             operators: tuple[str, ...] | None = None, grid: float | None = DEFAULT_GRID,
             cache=None) -> Strategy | OrderedStrategy:
    """OPT_HDMM (thesis §3.8): best feasible strategy over the applicable operators.
    A workload with a CDF or range factor over a large attribute gets an
    ``OrderedStrategy`` (plan/ordered.py) instead.

    Deterministic for a seed: every operator draws from one generator in a fixed order.
    ``grid`` rounds real-valued factors so measured values lie on a lattice (None keeps
    them exact, e.g. for comparisons with the thesis tables).
    """
    # One BLAS thread: the optimisers make thousands of small and mid-sized BLAS/LAPACK
    # calls, where OpenBLAS's thread hand-off costs more than it saves (ALL RANGE at
    # n = 1024, Laplace: 0.88 s on one thread vs 2.08 s on two, quiet 2-core machine), and
    # on a loaded machine its spinning threads made the same call 10x slower (17 s vs 1.7 s;
    # bench/RESULTS.md; dpsql/linalg/threads.py).
    with one_blas_thread():
        return _optimize(W, noise, restarts, seed, caps, progress, operators=operators, grid=grid,
                         cache=cache)


def _optimize(W: Any, noise: str, restarts: int, seed: int, caps: Caps | None,
              progress: Progress | None, *, operators: tuple[str, ...] | None,
              grid: float | None, cache) -> Strategy | OrderedStrategy:
    noise_norm(noise)
    caps = Caps() if caps is None else caps
    terms = workload_terms(W)
    options = dict(restarts=restarts, seed=seed, caps=caps.__dict__, grid=grid,
                   operators=operators, planner=PLANNER_VERSION)
    if cache is not None:
        hit = cache.get(terms, noise, options)
        if hit is not None:
            return hit
    if ordered_attribute(terms) is not None:
        # a CDF or range factor over a large attribute: only a factored strategy over that
        # column plans it (plan/ordered.py), in closed form and in seconds (issue 35)
        return opt_ordered(terms, noise)
    d = len(terms.shape)
    marginal = all(all(t.marginal_like) for t in terms.terms)
    default_ops: tuple[str, ...]
    if d == 1:
        default_ops = ("OPT_0",)
    elif marginal and noise == "gaussian":
        # ResidualPlanner first: once it is certified optimal, OPT_kron and OPT_+ cannot
        # beat it and are not run (OPT_M still is: equal to it, it wins the tie).
        default_ops = ("RP", "OPT_M", "OPT_kron", "OPT_+")
    else:
        default_ops = ("OPT_kron", "OPT_+", "OPT_M", "OPT_M+") + (
            ("RP+",) if noise == "gaussian" else ())
    ops = default_ops if operators is None else tuple(operators)
    if operators is None and terms.parts and len(terms.parts) > 1:
        ops = ops + ("per-query",)
    run: dict[str, Callable] = {"OPT_0": opt_0, "OPT_kron": opt_kron, "OPT_+": opt_union,
                                "OPT_M": opt_marginals, "OPT_M+": opt_marginals_plus,
                                "RP": opt_residual, "RP+": opt_residual_plus,
                                "per-query": opt_per_query}
    rng = np.random.default_rng(seed)
    notes: list[str] = []
    cands: list[tuple[Strategy, int]] = []
    certified = None
    for op in ops:
        if certified is not None and op in ("OPT_kron", "OPT_+"):
            notes.append(f"{op} not run: ResidualPlanner is certified within "
                         f"{certified:.4f}x of the SVD bound, which no strategy beats")
            continue
        if op not in run:
            raise UnsupportedQueryError(f"unknown operator {op!r}",
                                        hint="use OPT_0, OPT_kron, OPT_+, OPT_M, OPT_M+ "
                                             "or per-query")
        if op == "OPT_+" and len(group_by_support(terms)) < 2:
            continue
        if op in ("OPT_M+", "RP+") and not all(terms.split_marginal()):
            continue
        if op == "RP" and not all(all(t.marginal_like) for t in terms.terms):
            continue
        if op == "per-query" and not terms.parts:
            continue
        cliques = _planned_cliques(terms, op)
        widest = max(cliques, key=lambda c: _prod(terms.shape[terms.attributes.index(a)] for a in c))
        biggest = _prod(terms.shape[terms.attributes.index(a)] for a in widest)
        if biggest > caps.marginal_cells:
            notes.append(f"{op} skipped: it would count a {biggest:,}-cell marginal "
                         f"{_marginal_name(terms, widest)} (cap {caps.marginal_cells:,})")
            continue
        size = junction_tree_size(terms.attributes, terms.shape, cliques)
        blocked = _large_attribute_problem(terms, op, caps)
        if blocked:
            notes.append(f"{op} skipped: {blocked}")
            continue
        if op in ("OPT_M", "OPT_M+", "RP", "RP+"):
            nparams = len(MarginalSpace.of(terms.shape, [t.support for t in terms.terms]).subsets)
            if nparams > caps.marginal_parameters and op in ("OPT_M", "OPT_M+"):
                notes.append(f"OPT_M skipped: {nparams:,} marginal weights "
                             f"(cap {caps.marginal_parameters:,})")
                continue
        token = _DEFER.set(grid is not None)
        try:
            strat = run[op](terms, noise, restarts=restarts, seed=rng, progress=progress)
        except UnsupportedQueryError as exc:
            notes.append(f"{op} not applicable: {exc.message}")
            continue
        finally:
            _DEFER.reset(token)
        if grid is not None:
            strat = round_strategy(strat, grid)
        if not math.isfinite(strat.expected_error):
            notes.append(f"{op} rejected: {_unsupported(terms, strat)}")
            continue
        if op == "RP":
            space = MarginalSpace.of(terms.shape, [t.support for t in terms.terms])
            bound = marginal_svd_bound(space, workload_kappa(space, terms))
            if bound > 0 and strat.expected_error <= 1.01 * bound:
                certified = strat.expected_error / bound
            if "Certificate" not in strat.explanation:
                strat = replace(strat, explanation=strat.explanation
                                + _certificate(strat.expected_error, bound))
        cands.append((strat, size))
        notes.append(f"{op}: expected error {strat.expected_error:.6g}, "
                     f"{len(strat.kron_blocks)} block(s), junction tree {size:,} cells")
    if not cands:
        raise ModelTooLargeError(
            "no candidate strategy is usable (caps or support): " + "; ".join(notes),
            cliques=_planned_cliques(terms, "OPT_M"),
            hint="split the workload, coarsen the named columns (bins), or raise the caps "
                 "([planner] max_clique_cells, model_size)")
    # Exact inference needs the junction tree; a larger one is still measurable and can be
    # fitted approximately (region graphs), so over-cap candidates lose only to fitting ones.
    finite = [s for s, size in cands if size <= caps.model_size]
    if not finite:
        notes.append(f"every candidate's junction tree exceeds {caps.model_size:,} cells: "
                     "the estimate will need approximate (region-graph) inference")
        finite = [s for s, _ in cands]
    # Never worse than noise per query (issue 16): among candidates, those leaving no query
    # above its own per-query baseline win; the per-query mechanism itself is one of them.
    above = {id(s): _above_baseline(terms, s) for s in finite}
    within = [s for s in finite if not above[id(s)]]
    for s in finite:
        if above[id(s)]:
            notes.append(f"{s.operator} would leave {len(above[id(s)])} quer"
                         f"{'y' if len(above[id(s)]) == 1 else 'ies'} above the per-query baseline")
    # Residual blocks (RP, RP+) only where they beat OPT_M's integer marginals: a tie goes to
    # the candidate without them (each of its marginals answers its own queries).
    best = min(within or finite, key=lambda s: s.expected_error * (
        1.0 + 1e-6 * any(factor_kind(F)[0] == "other" and F.shape[0] == F.shape[1] - 1
                         and np.all(F.sum(axis=1) == 0) for b in s.kron_blocks for F in b.factors)
        if s.operator in ("ResidualPlanner", "RP+") else 1.0))
    why = (f"{best.operator} chosen (lowest expected {'weighted ' if terms.parts else ''}"
           f"unit-noise squared error among feasible candidates"
           f"{' that keep every query within its per-query baseline' if within and terms.parts else ''}). "
           + "; ".join(notes) + ".")
    best = Strategy(best.attributes, best.shape, best.kron_blocks, best.operator, noise,
                    best.expected_error, why + best.explanation.replace(why, ""),
                    best.assignment, terms, best.term_tse if best.workload is terms else None)
    if cache is not None:
        cache.put(terms, noise, options, best)
    return best
