"""OPT_HDMM: run the applicable operators with restarts and keep the best (thesis §3.8).

The operators themselves are in ``plan/operators.py``.  Here each is a :class:`Candidate`:
what it measures (one Kronecker product, per-group products, marginals, or each query on its
own) decides, from public metadata only and before any optimisation runs, whether it
``applies`` to a workload and why not; ``optimize`` runs those that apply, in the order of
:data:`CANDIDATES`, and keeps the lowest expected error among the candidates that the measure
and reconstruct steps can afford.

Every operator's measured cliques are known in advance: OPT_⊗ must keep every attribute some
term does not sum out (one clique, their union), while OPT_+ and OPT_M measure the terms'
own supports.  A candidate whose largest counted marginal exceeds ``Caps.marginal_cells`` is
not run; one whose cliques induce a junction tree larger than ``Caps.model_size`` loses to
any candidate within it (if none fits, the best is kept and flagged for approximate
inference), and ``Strategy.explanation`` says why.
"""

from __future__ import annotations

import math
from itertools import combinations
from dataclasses import dataclass, replace
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from dpsql.errors import ModelTooLargeError, UnsupportedQueryError
from dpsql.linalg.threads import one_blas_thread
from dpsql.plan.gram import LowRankGram
from dpsql.plan.marginals import MarginalSpace, marginal_svd_bound, workload_kappa
from dpsql.plan.opt0 import Progress
from dpsql.plan.operators import (
    certificate, opt_0, opt_kron, opt_marginals, opt_marginals_plus, opt_per_query,
    opt_residual, opt_residual_plus, opt_union, round_strategy,
)
from dpsql.plan import shares
from dpsql.plan.ordered import OrderedStrategy, opt_ordered, ordered_attribute
from dpsql.plan.strategy import Strategy, block_sensitivity, factor_kind
from dpsql.plan.union import group_by_support
from dpsql.plan.error import noise_norm, term_errors
from dpsql.plan.workload import WorkloadTerms, workload_terms
from dpsql.triangulation import MAX_MODEL_CELLS, tree_cells

__all__ = ["Caps", "RowFactor", "Candidate", "CANDIDATES", "optimize", "junction_tree_size", "DEFAULT_GRID"]

#: Grid that real-valued strategy factors are rounded to (entries scaled to max 1 first).
DEFAULT_GRID = 2.0 ** -10

#: Part of the strategy-cache key: bump it when the same options yield a different strategy
#: (2: OPT_M drops negligible weights; 4: ResidualPlanner meets per-query caps by its dual), so
#: that stale cached strategies are not reused.
PLANNER_VERSION = 4


@dataclass(frozen=True)
class RowFactor:
    """The part of a view's squared row bound k² a strategy's noise will carry, in (0, 1]:
    ``of(strategy)`` is the calibration's average factor over its blocks divided by k² (a
    block that reads one group per value of a group-bounded view has S² ≤ k²,
    ``dpsql.measure.release.effective_rows_sq``).  ``key`` names the bound for the strategy
    cache (a strategy chosen with one factor is not the answer for another).  The planner
    package cannot compute it (the calibration lives in ``dpsql.measure``); the engine does."""

    of: Callable[[Strategy], float]
    key: str
    # each of a strategy's ``kron_blocks``' own factor S_b²/k² (1 where a block sums the
    # groups): lets ``optimize`` re-weight the blocks for them (``_reweighted``); optional
    blocks: Callable[[Strategy], Sequence[float]] | None = None


@dataclass(frozen=True)
class Caps:
    """Limits on what a strategy may ask of the measure and reconstruct steps."""

    marginal_cells: int = 10 ** 7      # cells of the largest marginal counted in the database
    model_size: int = MAX_MODEL_CELLS  # cells of the junction tree the cliques induce (the engine's default)
    opt0_cells: int = 4096             # largest attribute OPT_0 optimises densely
    marginal_parameters: int = 4096    # largest downward closure OPT_M optimises over


def _prod(xs) -> int:
    return int(math.prod(int(x) for x in xs))


def junction_tree_size(attributes, shape, cliques) -> int:
    """Cells of the junction tree for ``cliques`` (attribute-name tuples)."""
    return tree_cells({a: int(n) for a, n in zip(attributes, shape)}, cliques)


@dataclass(frozen=True)
class Problem:
    """What every candidate is asked, passed explicitly: the workload, the noise, the caps,
    and the optimiser's options.  ``defer`` is set when ``optimize`` rounds the strategy and
    evaluates the rounded one anyway, so the operator need not evaluate its own."""

    terms: WorkloadTerms
    noise: str
    caps: Caps
    restarts: int
    rng: np.random.Generator
    progress: Progress | None
    defer: bool


@dataclass(frozen=True)
class Refusal:
    """Why a candidate does not apply; ``quiet`` ones (nothing for it to do, e.g. OPT_+ with
    one group) are not worth a line in the plan's explanation."""

    reason: str
    quiet: bool = False


@dataclass(frozen=True)
class Candidate:
    """One operator as ``optimize`` sees it.  Its fields are facts about what it measures,
    from which :meth:`applies` decides on public metadata alone:

    - ``marginals``: "all" if it measures every term's support as a marginal (OPT_M, RP),
      "marginal" if only the marginal-like terms' (OPT_M+, RP+), "" if none;
    - ``one_product``: its terms share one Kronecker product (OPT_0, OPT_⊗), so it cannot
      mix counts and sums over a large column, and it measures the union of the supports;
    - ``per_query``: each query on its own dense blocks (its own size limit, no caps);
    - ``weights_optimised``: it optimises one weight per marginal of the downward closure
      (OPT_M, OPT_M+), capped by ``Caps.marginal_parameters``;
    - ``beaten_by_certificate``: not run once ResidualPlanner is certified at the SVD bound.
    """

    name: str
    solve: Callable[..., Strategy]
    needs: Callable[[WorkloadTerms], bool] = lambda terms: True
    marginals: str = ""
    one_product: bool = False
    per_query: bool = False
    weights_optimised: bool = False
    beaten_by_certificate: bool = False

    def applies(self, p: Problem) -> Refusal | None:
        terms, caps = p.terms, p.caps
        if not self.needs(terms):
            return Refusal("has nothing to plan", quiet=True)
        widest = max(_planned_cliques(terms, self.one_product),
                     key=lambda c: _prod(terms.shape[terms.attributes.index(a)] for a in c))
        biggest = _prod(terms.shape[terms.attributes.index(a)] for a in widest)
        if biggest > caps.marginal_cells:
            return Refusal(f"skipped: it would count a {biggest:,}-cell marginal "
                           f"{_marginal_name(terms, widest)} (cap {caps.marginal_cells:,})")
        blocked = None if self.per_query else self._large_attribute_problem(terms, caps)
        if blocked:
            return Refusal(f"skipped: {blocked}")
        if self.weights_optimised:
            nparams = len(MarginalSpace.of(terms.shape, [t.support for t in terms.terms]).subsets)
            if nparams > caps.marginal_parameters:
                return Refusal(f"skipped: {nparams:,} marginal weights "
                               f"(cap {caps.marginal_parameters:,})")
        return None

    def run(self, p: Problem) -> Strategy:
        return self.solve(p.terms, p.noise, restarts=p.restarts, seed=p.rng,
                          progress=p.progress, defer=p.defer)

    def _large_attribute_problem(self, terms: WorkloadTerms, caps: Caps) -> str | None:
        """Why this candidate cannot plan the workload's large attributes (naming column and
        query), or None.  Large attributes (``gram.LARGE_CELLS``) are planned in their
        workload's row space (plan/large.py) by the OPT_0-based operators, which needs every
        factor there to be thin (no GROUP BY over every value); a marginal candidate would
        need identity marginals over them."""
        for i, n in enumerate(terms.shape):
            if n <= caps.opt0_cells:
                continue
            grams = [t.grams[i] for t in terms.terms]
            if not all(isinstance(g, LowRankGram) for g in grams):
                if self.marginals == "all":
                    continue
                return (f"column {terms.attributes[i]!r} has {n:,} cells "
                        f"(dense OPT_0 cap {caps.opt0_cells:,})")
            if self.marginals:
                support = [j for j, t in enumerate(terms.terms) if i in t.support
                           and (self.marginals == "all" or all(t.marginal_like))]
                if support:
                    return (f"query {_query_name(terms, support[0])!r} would need every value of "
                            f"column {terms.attributes[i]!r} ({n:,} cells) counted as a marginal")
                if self.marginals == "all":
                    continue
            if self.one_product and len({t.large_kinds[i] for t in terms.terms}) > 1:
                return (f"one product cannot mix counts and sums over column "
                        f"{terms.attributes[i]!r} ({n:,} cells) on the measurement lattice")
            wide = [j for j, g in enumerate(grams) if isinstance(g, LowRankGram) and g.c > 0]
            if wide:
                return (f"query {_query_name(terms, wide[0])!r} groups by every value of column "
                        f"{terms.attributes[i]!r} ({n:,} cells)")
        return None


def _all_marginal(terms: WorkloadTerms) -> bool:
    return all(all(t.marginal_like) for t in terms.terms)


def _mixed(terms: WorkloadTerms) -> bool:
    return all(terms.split_marginal())


#: Every operator ``optimize`` knows, by the name ``operators=`` and the plan use.
CANDIDATES: dict[str, Candidate] = {c.name: c for c in (
    Candidate("OPT_0", opt_0, one_product=True),
    Candidate("OPT_kron", opt_kron, one_product=True, beaten_by_certificate=True),
    Candidate("OPT_+", opt_union, needs=lambda terms: len(group_by_support(terms)) >= 2,
              beaten_by_certificate=True),
    Candidate("OPT_M", opt_marginals, marginals="all", weights_optimised=True),
    Candidate("OPT_M+", opt_marginals_plus, needs=_mixed, marginals="marginal",
              weights_optimised=True),
    Candidate("RP", opt_residual, needs=_all_marginal, marginals="all"),
    Candidate("RP+", opt_residual_plus, needs=_mixed, marginals="marginal"),
    Candidate("per-query", opt_per_query, needs=lambda terms: bool(terms.parts), per_query=True),
)}


def _default_candidates(terms: WorkloadTerms, noise: str) -> tuple[str, ...]:
    if len(terms.shape) == 1:
        ops: tuple[str, ...] = ("OPT_0",)
    elif _all_marginal(terms) and noise == "gaussian":
        # ResidualPlanner first: once it is certified optimal, OPT_kron and OPT_+ cannot
        # beat it and are not run (OPT_M still is: equal to it, it wins the tie).
        ops = ("RP", "OPT_M", "OPT_kron", "OPT_+")
    else:
        ops = ("OPT_kron", "OPT_+", "OPT_M", "OPT_M+") + (("RP+",) if noise == "gaussian" else ())
    # never worse than noise per query (issue 16): the per-query mechanism is a candidate
    return ops + (("per-query",) if len(terms.parts) > 1 else ())


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


def _reweighted(strat: Strategy, row_factor: RowFactor) -> Strategy:
    """``strat`` with its blocks re-weighted for their row factors f_b, when that lowers its
    error with the factor (else ``strat``).  The noise is one σ over every block
    (``release.calibrate``), so block b's noise variance is ∝ 1/w_b² and the cost
    ∝ Σ_b f_b·Δ_b²·w_b².  Where each query is answered by one block alone (errors E_b/w_b²),
    (Σ_b f_b·Δ_b²·w_b²)(Σ_b E_b/w_b²) is least at w_b² ∝ √(E_b/(f_b·Δ_b²)) (Cauchy–Schwarz:
    ``_separable_weights``), which is HDMM's weights, when optimal at equal factors, times
    f_b^(-1/4).  Least-squares answers also draw on other blocks (a shared total), so both are
    candidates, each kept only when the error recomputed on its weights is lower."""
    if strat.workload is None or row_factor.blocks is None:
        return strat
    f = [float(x) for x in row_factor.blocks(strat)]
    if len(f) != len(strat.kron_blocks) or min(f, default=0.0) <= 0 or max(f) - min(f) < 1e-12:
        return strat
    best, score = strat, strat.expected_error * row_factor.of(strat)
    tries = ((_separable_weights(strat, f), "w_b ∝ (E_b/(f_b·Δ_b²))^(1/4)"),
             ([b.weight * fb ** -0.25 for b, fb in zip(strat.kron_blocks, f)], "scaled by f_b^(-1/4)"))
    for weights, how in tries:
        if weights is None:
            continue
        blocks = tuple(replace(b, weight=float(w)) for b, w in zip(strat.kron_blocks, weights))
        errs = tuple(float(e) for e in term_errors(strat.workload, blocks, strat.noise, strat.assignment, strat.shape))
        if not all(math.isfinite(e) for e in errs):
            continue
        new = replace(strat, kron_blocks=blocks, expected_error=float(sum(errs)), term_tse=errs,
                      explanation=strat.explanation + f" Block weights for the group bound: {how}.")
        if new.expected_error * row_factor.of(new) < score:
            best, score = new, new.expected_error * row_factor.of(new)
    return best


def _separable_weights(strat: Strategy, f: Sequence[float]) -> list[float] | None:
    """The weights minimising (Σ_b f_b·Δ_b²·w_b²)(Σ_b ε_b/w_b²) when every workload term is
    answered by one block (``assignment``, as OPT_+ and the per-query mechanism do): ε_b the
    unit-weight trace of block b's terms, Δ_b its sensitivity at unit weight.  None when the
    blocks share terms."""
    a = strat.assignment
    n = len(strat.kron_blocks)
    if a is None or any(x < 0 or x >= n for x in a) or len(set(a)) != n:
        return None
    errs = (np.asarray(strat.term_tse, dtype=float) if strat.term_tse is not None
            else term_errors(strat.workload, strat.kron_blocks, strat.noise, a, strat.shape))
    p = noise_norm(strat.noise)
    out = []
    for i, (b, fb) in enumerate(zip(strat.kron_blocks, f)):
        # a term's error is ∝ 1/w_b² at a fixed total sensitivity: × w_b² is its unit-weight trace
        eps = float(sum(errs[j] for j, x in enumerate(a) if x == i)) * b.weight ** 2
        d2 = block_sensitivity(replace(b, weight=1.0), p) ** 2
        if not (eps > 0 and d2 > 0):
            return None
        out.append((eps / (fb * d2)) ** 0.25)
    return out


def _above_baseline(terms: WorkloadTerms, strat: Strategy, factor: float = 1.0, *, offsets: bool = True) -> list[int]:
    """Queries (of a workload of queries) whose expected error, with the strategy's row
    factor (``RowFactor``; the baseline keeps the view's full bound), exceeds their baseline.
    Where SUMs have measured binning offsets (``QueryPart.offsets``), the strategy's rows get
    a share 1 − t of the budget and the offsets t: then the queries above at the share that
    leaves the fewest (none when one share keeps every query, ``shares.above``); without
    ``offsets``, as if there were none."""
    if not terms.parts:
        return []
    errs = _term_tse(terms, strat) * factor
    got = np.array([float(np.sum(errs[list(p.terms)])) for p in terms.parts])
    cap = np.array([p.scale * p.rows * p.baseline * (1 + 1e-9) for p in terms.parts])
    if not offsets or not any(p.offsets > 0 for p in terms.parts):
        return np.flatnonzero(got > cap).tolist()
    # per row, unweighted: c_j/(1 − t) + o_j/t against b_j (the 1e-9 as above)
    per = np.array([p.scale * p.rows for p in terms.parts])
    ok = np.isfinite(got) & (cap > 0) & (per > 0)
    out = np.flatnonzero(~ok & (got > cap)).tolist()
    idx = np.flatnonzero(ok)
    over = shares.above(got[idx] / per[idx], np.array([terms.parts[i].offsets for i in idx]), cap[idx] / per[idx])
    return sorted(out + [int(idx[i]) for i in over])


def _with_offsets(terms: WorkloadTerms, strat: Strategy, factor: float = 1.0) -> float:
    """The strategy's objective (times its row factor) with the SUMs' binning offsets at the
    share they will get (``shares.split_error``): the strategy's own ignores the share it
    leaves them, which differs between candidates planned against other baselines."""
    offsets = sum(p.scale * p.rows * p.offsets for p in terms.parts)
    if not offsets > 0:
        return strat.expected_error * factor
    errs = _term_tse(terms, strat) * factor
    per = np.array([p.scale * p.rows for p in terms.parts])
    got = np.array([float(np.sum(errs[list(p.terms)])) for p in terms.parts])
    return shares.split_error(strat.expected_error * factor, offsets, got / per,
                              np.array([p.offsets for p in terms.parts]), np.array([p.baseline for p in terms.parts]))


def _term_tse(terms: WorkloadTerms, strat: Strategy) -> np.ndarray:
    # a strategy planned on the same terms against other baselines (``_tightened``) has
    # the same term errors: those depend on the terms and blocks, not on the parts
    if strat.term_tse is not None and strat.workload is not None and strat.workload.terms is terms.terms:
        return np.asarray(strat.term_tse)
    return term_errors(terms, strat.kron_blocks, strat.noise, strat.assignment)


#: The shares the candidates are planned again at (``_tightened``), as multiples of
#: √(max_j o_j/b_j), in turn until one keeps every query; the one of lowest objective with the
#: offsets' share wins (``_with_offsets``).  Counts' planned RMSE / baseline at 1 alone and ½
#: alone: adult's mixed corpus 0.5927, 0.5803 (before: 0.5817 with one SUM above); hours in two
#: bins beside 8 and 10 dashboard counts 0.8874 / 0.8653 and 0.8455 / 0.8266 (¼: 0.5791, 0.9056,
#: 0.8427: no one multiple is best everywhere); on the 12-query flights dashboard (three AVGs
#: over wide bins) ½ keeps every query and 1 none.  ½ first: where it keeps every query, 1 is
#: not planned (planning CPU).
TIGHT_SHARES = (0.5, 1.0)


def _tightened(terms: WorkloadTerms, scale: float) -> tuple[float, WorkloadTerms]:
    """``terms`` with baselines b'_j that leave room for the binning offsets at one share t
    (``shares.tightened``), and t: the balance (balance.py) then keeps each query's strategy
    error within b'_j, and so its whole error within b_j at that share."""
    parts = terms.parts
    t, b = shares.tightened(np.array([p.offsets for p in parts]), np.array([p.baseline for p in parts]), scale)
    return t, WorkloadTerms(terms.attributes, terms.shape, terms.terms,
                            tuple(replace(p, baseline=float(x), offsets=0.0) for p, x in zip(parts, b)))


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


def _names(terms: WorkloadTerms, idx) -> tuple[str, ...]:
    return tuple(terms.attributes[i] for i in sorted(idx))


def _planned_cliques(terms: WorkloadTerms, one_product: bool) -> list[tuple[str, ...]]:
    supports = set(t.support for t in terms.terms)
    if one_product:
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
             cache=None, row_factor: RowFactor | None = None) -> Strategy | OrderedStrategy:
    """OPT_HDMM (thesis §3.8): best feasible strategy over the applicable operators.
    A workload with a CDF or range factor over a large attribute gets an
    ``OrderedStrategy`` (plan/ordered.py) instead.

    Deterministic for a seed: every operator draws from one generator in a fixed order.
    ``grid`` rounds real-valued factors so measured values lie on a lattice (None keeps
    them exact, e.g. for comparisons with the thesis tables).

    ``row_factor`` (a view's group bound, ``RowFactor``) scales each candidate's noise by
    the row factor its blocks will be calibrated with: candidates are compared, and checked
    against the per-query baselines, by ``expected_error`` times that factor, since a
    candidate whose blocks read one group per value gets less noise at the same budget
    (``docs/privacy.md`` §2a).  ``Strategy.expected_error`` stays the unit-noise figure.
    """
    # One BLAS thread: the optimisers make thousands of small and mid-sized BLAS/LAPACK
    # calls, where OpenBLAS's thread hand-off costs more than it saves (ALL RANGE at
    # n = 1024, Laplace: 0.88 s on one thread vs 2.08 s on two, quiet 2-core machine), and
    # on a loaded machine its spinning threads made the same call 10x slower (17 s vs 1.7 s;
    # bench/RESULTS.md; dpsql/linalg/threads.py).
    with one_blas_thread():
        return _optimize(W, noise, restarts, seed, caps, progress, operators=operators, grid=grid,
                         cache=cache, row_factor=row_factor)


def _optimize(W: Any, noise: str, restarts: int, seed: int, caps: Caps | None,
              progress: Progress | None, *, operators: tuple[str, ...] | None,
              grid: float | None, cache, row_factor: RowFactor | None = None) -> Strategy | OrderedStrategy:
    noise_norm(noise)
    caps = Caps() if caps is None else caps
    terms = workload_terms(W)
    options = dict(restarts=restarts, seed=seed, caps=caps.__dict__, grid=grid,
                   operators=operators, planner=PLANNER_VERSION)
    if row_factor is not None:      # another choice may win: a cache entry of its own
        options["row_factor"] = row_factor.key
    factor = (lambda s: 1.0) if row_factor is None else row_factor.of
    if cache is not None:
        hit = cache.get(terms, noise, options)
        if hit is not None:
            return hit
    if ordered_attribute(terms) is not None:
        # a CDF or range factor over a large attribute: only a factored strategy over that
        # column plans it (plan/ordered.py), in closed form and in seconds (issue 35)
        return opt_ordered(terms, noise)
    names = _default_candidates(terms, noise) if operators is None else tuple(operators)
    unknown = [n for n in names if n not in CANDIDATES]
    if unknown:
        raise UnsupportedQueryError(f"unknown operator {unknown[0]!r}",
                                    hint="use " + ", ".join(CANDIDATES))
    problem = Problem(terms, noise, caps, restarts, np.random.default_rng(seed), progress,
                      defer=grid is not None)
    notes: list[str] = []
    certified: float | None = None

    label: dict[int, str] = {}       # candidate name per strategy (the tightened pass re-runs some)

    def run(problem: Problem, names: Sequence[str], tag: str = "") -> list[tuple[Strategy, int]]:
        nonlocal certified
        out: list[tuple[Strategy, int]] = []
        for cand in (CANDIDATES[n] for n in names):
            # the certificate is at unit noise: under a row factor a candidate above the SVD
            # bound may still win with a smaller factor, so every candidate runs
            if certified is not None and cand.beaten_by_certificate and row_factor is None and not tag:
                notes.append(f"{cand.name} not run: ResidualPlanner is certified within "
                             f"{certified:.4f}x of the SVD bound, which no strategy beats")
                continue
            refusal = cand.applies(problem)
            if refusal is not None:
                if not refusal.quiet and not tag:
                    notes.append(f"{cand.name} {refusal.reason}")
                continue
            try:
                strat = cand.run(problem)
            except UnsupportedQueryError as exc:
                notes.append(f"{cand.name}{tag} not applicable: {exc.message}")
                continue
            if grid is not None:
                strat = round_strategy(strat, grid)
            if not math.isfinite(strat.expected_error):
                notes.append(f"{cand.name}{tag} rejected: {_unsupported(terms, strat)}")
                continue
            if row_factor is not None and row_factor.blocks is not None:
                strat = _reweighted(strat, row_factor)
            if cand.name == "RP" and not tag:
                space = MarginalSpace.of(terms.shape, [t.support for t in terms.terms])
                bound = marginal_svd_bound(space, workload_kappa(space, terms))
                if bound > 0 and strat.expected_error <= 1.01 * bound:
                    certified = strat.expected_error / bound
                if "Certificate" not in strat.explanation:
                    strat = replace(strat, explanation=strat.explanation
                                    + certificate(strat.expected_error, bound))
            size = junction_tree_size(terms.attributes, terms.shape,
                                      _planned_cliques(terms, cand.one_product))
            out.append((strat, size))
            label[id(strat)] = cand.name
            scaled = "" if row_factor is None else (
                f" (x{factor(strat):.4g} for the group bound: {strat.expected_error * factor(strat):.6g})")
            notes.append(f"{cand.name}{tag}: expected error {strat.expected_error:.6g}{scaled}, "
                         f"{len(strat.kron_blocks)} block(s), junction tree {size:,} cells")
        return out

    cands = run(problem, names)
    if not cands:
        raise ModelTooLargeError(
            "no candidate strategy is usable (caps or support): " + "; ".join(notes),
            cliques=_planned_cliques(terms, one_product=False),
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
    above = {id(s): _above_baseline(terms, s, factor(s)) for s in finite}
    within = [s for s in finite if not above[id(s)]]
    lowest = min(finite, key=lambda s: s.expected_error * factor(s))
    tight: set[int] = set()       # ids of the re-planned candidates' workloads
    if above[id(lowest)] and any(p.offsets > 0 for p in terms.parts):
        # The lowest candidate leaves the SUMs' binning offsets no share of the budget at which
        # every query keeps its baseline (plan/shares.py): the balance (balance.py) knows only
        # the strategy's own errors, and kept counts and the SUM's bin query at their baselines
        # with no room for that share (adult's mixed corpus: race, SUM(capital_gain) at 1.03x
        # under OPT_M+).  The per-query mechanism may keep every query, at 1.6x the counts'
        # error (its blocks' union sensitivity is below 1): so the candidates are planned again
        # against baselines tightened for a share (``_tightened``, at TIGHT_SHARES in turn), and
        # judged as before against the real ones.  Only those that kept every query without the
        # offsets (the others' balance already failed at the real baselines), never the
        # per-query mechanism (it ignores baselines).
        again = [label[id(s)] for s in finite if label[id(s)] in names and not CANDIDATES[label[id(s)]].per_query
                 and not _above_baseline(terms, s, factor(s), offsets=False)]
        fits = any(size <= caps.model_size for _, size in cands)
        for scale in TIGHT_SHARES if again else ():
            t, tightened = _tightened(terms, scale)
            if not all(p.baseline > 0 for p in tightened.parts):
                continue
            tight.add(id(tightened))
            extra = run(replace(problem, terms=tightened), again,
                        f" (baselines tightened for the binning offsets at {t:.3g} of the budget)")
            extra = [(s, size) for s, size in extra if size <= caps.model_size or not fits]
            finite += [s for s, _ in extra]
            above.update({id(s): _above_baseline(terms, s, factor(s)) for s, _ in extra})
            if any(not above[id(s)] for s, _ in extra):
                break
        within = [s for s in finite if not above[id(s)]]
    for s in finite:
        if above[id(s)]:
            name = label.get(id(s), s.operator) + (" (tightened)" if id(s.workload) in tight else "")
            notes.append(f"{name} would leave {len(above[id(s)])} quer"
                         f"{'y' if len(above[id(s)]) == 1 else 'ies'} above the per-query baseline")
    # Residual blocks (RP, RP+) only where they beat OPT_M's integer marginals: a tie goes to
    # the candidate without them (each of its marginals answers its own queries).
    best = min(within or finite, key=lambda s: _with_offsets(terms, s, factor(s)) * (
        1.0 + 1e-6 * any(factor_kind(F)[0] == "other" and F.shape[0] == F.shape[1] - 1
                         and np.all(F.sum(axis=1) == 0) for b in s.kron_blocks for F in b.factors)
        if s.operator in ("ResidualPlanner", "RP+") else 1.0))
    offsets_why = "" if not within or not any(p.offsets > 0 for p in terms.parts) else \
        " with the SUMs' binning offsets" + (", planned against baselines tightened for them"
                                            if id(best.workload) in tight else "")
    why = (f"{best.operator} chosen (lowest expected {'weighted ' if terms.parts else ''}"
           f"unit-noise squared error{'' if row_factor is None else ' times its group-bound row factor'} "
           "among feasible candidates"
           f"{' that keep every query within its per-query baseline' if within and terms.parts else ''}"
           f"{offsets_why}). "
           + "; ".join(notes) + ".")
    best = Strategy(best.attributes, best.shape, best.kron_blocks, best.operator, noise,
                    best.expected_error, why + best.explanation.replace(why, ""),
                    best.assignment, terms,
                    best.term_tse if best.workload is not None and best.workload.terms is terms.terms else None)
    if cache is not None:
        cache.put(terms, noise, options, best)
    return best
