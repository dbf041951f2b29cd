"""The HDMM operators (McKenna thesis ch. 3), each a function from a workload to a
:class:`~dpsql.plan.strategy.Strategy`: ``opt_0`` (explicit 1-D workloads, §3.3),
``opt_kron`` (OPT_⊗, Def. 19-20), ``opt_union`` (OPT_+, Def. 21), ``opt_marginals`` (OPT_M,
Def. 24), ResidualPlanner (``opt_residual``), their unions with OPT_⊗ blocks
(``opt_marginals_plus``, ``opt_residual_plus``) and the per-query mechanism.  Which of them
run for a workload, and which result is kept, is ``planner.optimize``'s decision.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

import numpy as np

from dpsql.errors import UnsupportedQueryError
from dpsql.plan.error import _unit_variance, kron_loss, noise_norm, term_errors
from dpsql.plan.kron import kron_strategy
from dpsql.plan.marginals import (
    MarginalSpace, marginal_svd_bound, opt_marginals_theta, term_kappas, workload_kappa,
)
from dpsql.plan.residual import (
    balanced_mu, residual_blocks, residual_mu, split_marginal_residual,
)
from dpsql.plan.opt0 import Progress
from dpsql.plan.strategy import (
    KronBlock, Strategy, eye_factor, factor_kind, ones_factor, round_blocks, union_sensitivity,
)
from dpsql.plan.balance import balanced_theta, baseline_shares, cap_score, query_caps
from dpsql.plan.union import group_by_support, union_strategy, union_weights
from dpsql.plan.workload import WorkloadTerms, factor_dense, workload_terms

__all__ = ["opt_0", "opt_kron", "opt_union", "opt_marginals", "opt_per_query", "opt_residual",
           "opt_residual_plus", "opt_marginals_plus", "round_strategy", "certificate"]


def _make(terms: WorkloadTerms, blocks, noise: str, operator: str, *, assignment=None,
          explanation: str = "", tse: float | None = None, defer: bool = False) -> Strategy:
    """The strategy of ``blocks`` with its expected error; ``defer`` (set by a caller that
    rounds the factors and evaluates the rounded strategy anyway) skips evaluating this one."""
    errs = None
    if tse is None and defer:
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
             progress: Progress | None = None, defer: bool = False) -> Strategy:
    """OPT_⊗ (thesis Definition 20): one Kronecker product over all attributes."""
    noise_norm(noise)
    terms = workload_terms(W)
    block, loss = kron_strategy(terms, noise, restarts=restarts, rng=_rng(seed),
                                progress=progress)
    # Theorem 4: the product of per-factor losses already is ‖Q‖²·tr(WᵀW(QᵀQ)⁺).
    return _make(terms, [block], noise, "OPT_kron", defer=defer,
                 tse=(2.0 if noise_norm(noise) == 1 else 1.0) * loss)


def opt_0(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
          progress: Progress | None = None, defer: bool = False) -> Strategy:
    """OPT_0 (thesis §3.3) for a one-attribute (explicit) workload."""
    terms = workload_terms(W)
    if len(terms.shape) != 1:
        raise UnsupportedQueryError("OPT_0 takes a one-attribute workload",
                                    hint="use opt_kron / optimize for multi-attribute ones")
    s = opt_kron(terms, noise, restarts=restarts, seed=seed, progress=progress, defer=defer)
    return Strategy(s.attributes, s.shape, s.kron_blocks, "OPT_0", noise, s.expected_error,
                    s.explanation, None, terms)


def opt_union(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
              groups=None, progress: Progress | None = None, defer: bool = False) -> Strategy:
    """OPT_+ (thesis Definition 21): one OPT_⊗ block per group of terms."""
    noise_norm(noise)
    terms = workload_terms(W)
    blocks, assignment, _ = union_strategy(terms, noise, groups=groups, restarts=restarts,
                                           rng=_rng(seed), progress=progress)
    return _make(terms, blocks, noise, "OPT_+", assignment=assignment, defer=defer)


def opt_marginals(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
                  progress: Progress | None = None, defer: bool = False) -> Strategy:
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
    return _marginal_strategy(terms, space, theta, noise, defer)


def _term_kappas(space: MarginalSpace, terms: WorkloadTerms) -> np.ndarray:
    return term_kappas(space, terms)


def _marginal_strategy(terms: WorkloadTerms, space: MarginalSpace, theta: np.ndarray,
                       noise: str, defer: bool) -> Strategy:
    blocks = []
    for s, th in zip(space.subsets, theta):
        if th <= 1e-9 * theta.max():
            continue
        factors = tuple(eye_factor(n) if i in s else ones_factor(n)
                        for i, n in enumerate(terms.shape))
        blocks.append(KronBlock(float(th), factors))
    return _make(terms, blocks, noise, "OPT_M", defer=defer)


def _residual_part(space: MarginalSpace, mu: np.ndarray, shape) -> list[KronBlock]:
    t, rho = split_marginal_residual(space, mu)
    return residual_blocks(space, t, rho)


def opt_residual(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
                 progress: Progress | None = None, defer: bool = False) -> Strategy:
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
    s = _make(terms, blocks, noise, "ResidualPlanner", defer=defer)
    note = f" ResidualPlanner: {len(blocks) - nres} marginal and {nres} residual block(s)."
    return replace(s, explanation=note + certificate(s.expected_error, bound))


def certificate(tse: float, bound: float) -> str:
    if not (math.isfinite(tse) and bound > 0):
        return ""
    return (f" Certificate: its expected error is {tse / bound:.4f}x the SVD bound "
            f"{bound:.6g}, which no strategy beats (thesis Prop. 10).")


def opt_marginals_plus(W: Any, noise: str = "gaussian", *, restarts: int = 1, seed=0,
                       progress: Progress | None = None, residual: bool = False,
                       defer: bool = False) -> Strategy:
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
               else _marginal_strategy(msub, space, theta, noise, defer=True).kron_blocks)
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
    return _make(terms, blocks, noise, "RP+" if residual else "OPT_M+", assignment=assignment,
                 defer=defer)


def opt_residual_plus(W: Any, noise: str = "gaussian", **kw) -> Strategy:
    """OPT_M+ with ResidualPlanner's optimal strategy for the marginal part (Gaussian)."""
    return opt_marginals_plus(W, noise, residual=True, **kw)


#: Largest dense factor (entries) the per-query candidate materialises.
PER_QUERY_FACTOR_LIMIT = 1 << 24


def opt_per_query(W: Any, noise: str = "gaussian", *, defer: bool = False, **_ignored) -> Strategy:
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
    return _make(terms, blocks, noise, "per-query", assignment=list(range(len(blocks))),
                 defer=defer)
