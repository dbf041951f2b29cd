"""Strategies for CDF, range and quantile workloads on one large ordered attribute
(issue 35): hierarchical trees and the Toeplitz square root of the prefix matrix.

A prefix (CDF) or all-range factor over 10⁵–10⁶ cells has n or n(n+1)/2 rows: it cannot be
kept thin (plan/large.py) and its n×n gram never exists.  Two factored strategies answer
such workloads with error polylogarithmic in n, each with every error in closed form:

* **trees** (``dpsql.linalg.tree``; Hay et al. 2010, H_b of Qardaji, Yang, Li, VLDB 2013):
  a term's error under level weights w is ‖A‖² · Σ_k (τ_k − τ_{k−1}) / λ_k with
  λ_k = Σ_{l≥k} w_l² s_l and τ_l = tr(P_l V) its level traces.  The planner tries every
  number of levels (mixed radices with the least padding) and, per shape, optimises the
  weights: with u = w² on the simplex, Σ_k E_k / λ_k(u) is convex, and the multiplicative
  fixed point u_l ∝ u_l·√(s_l Σ_{k≤l} E_k/λ_k²) (the KKT condition: equal gradients on the
  support) converges to it; Laplace (‖A‖₁ = Σ w) runs the same update on w;
* **the Toeplitz square root** M of the prefix matrix (``dpsql.linalg.toeplitz``;
  Fichtenberger, Henzinger, Upadhyay, ICML 2023): measured with integer coefficients
  a = round(2^16 c) and scale 2^-16, with D = A⁻¹ (a power series inverse) and m = Σ d
  the rows of P A⁻¹ are Toeplitz: prefix i has variance Σ_{k≤i} m_k², so a prefix, suffix
  or all-range workload's total is O(n) (sums of differences of those rows), a thin row q
  costs one FFT (q A⁻¹).  Gaussian only (its L1 norm grows like √n).

``opt_ordered`` returns the candidate with the lower weighted error.

**Groups** (a quantile per ``GROUP BY sex``, a CDF ``WHERE sex = 'F'``): the other attributes
the workload asks about (its terms' supports) must be small, at most ``MAX_GROUPS`` cells
together (public metadata; else ``ModelTooLargeError``), and the strategy is the ordered one
on the large attribute Kron'd with the identity on them, I_G ⊗ T: the tree or root measured
once per group cell.  A term V_G ⊗ V_f has error tr(V_G) · tr(V_f (TᵀT)⁻¹) under it (the
pseudo-inverse of I ⊗ TᵀT is I ⊗ (TᵀT)⁻¹), so a group attribute's factor in the error model
is its gram's trace where a summed-out attribute's is sum(V)/n², and the search over trees,
level weights and the root is the ungrouped one.  Each row lies in exactly one group cell,
so I_G ⊗ T has T's sensitivities (docs/privacy.md, "Ordered columns per group").
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from dpsql.errors import ModelTooLargeError, UnsupportedQueryError
from dpsql.linalg.toeplitz import LowerToeplitz, series_inverse, sqrt_prefix_coefficients
from dpsql.linalg.tree import SemiseparableTraces, Tree
from dpsql.plan import gram as _gram
from dpsql.plan.gram import LowRankGram, RangeGram, gram_trace
from dpsql.plan.strategy import MeasurementBlock
from dpsql.plan.workload import WorkloadTerms

__all__ = ["OrderedStrategy", "opt_ordered", "toeplitz_strategy", "ordered_attribute", "candidate_trees",
           "level_traces", "tree_error", "toeplitz_errors", "group_attributes", "TOEPLITZ_GRID",
           "MAX_GROUPS", "MAX_GROUPED_CELLS", "above_baseline"]

#: The Toeplitz square root is measured as round(c · 2^16) / 2^16: exact integer products
#: with counts up to 2^46 rows, and coefficients off by at most 2^-17 (the error model
#: uses the rounded coefficients, so what is reported is what is measured).
TOEPLITZ_GRID = 1 << 16

#: The most group cells (the product of the other attributes' cells, NULL cells included)
#: an ordered strategy is measured per: each is one more copy of the column's histogram,
#: estimate and CDF in memory, and a quantile per group reads each.
MAX_GROUPS = 256

#: The most cells of the grouped histogram (group cells × the column's cells): 2²³, 64 MiB
#: per float64 copy (a 10⁶-cell column: 8 groups; 10⁵ cells: 83).
MAX_GROUPED_CELLS = 1 << 23

#: Widest fan-out tried (a 2-level tree over n cells has fan-out n: the flat histogram).
MAX_RADIX = 1 << 12


def ordered_attribute(terms: WorkloadTerms) -> int | None:
    """The attribute the strategy is built on: the one holding a ``RangeGram``."""
    for t in terms.terms:
        for i, g in enumerate(t.grams):
            if isinstance(g, RangeGram):
                return i
    return None


def group_attributes(terms: WorkloadTerms, i: int) -> tuple[int, ...]:
    """The attributes other than ``i`` that some term asks about (its support), in domain
    order, after checking their cells against the caps (public metadata only)."""
    groups = tuple(sorted({j for t in terms.terms for j in t.support if j != i}))
    if not groups:
        return ()
    name, n = terms.attributes[i], terms.shape[i]
    large = [terms.attributes[j] for j in groups if terms.shape[j] > _gram.LARGE_CELLS]   # read when used
    if large:
        raise UnsupportedQueryError(
            f"the workload asks about {name!r} ({n:,} cells) and {large[0]!r} "
            f"({terms.shape[terms.attributes.index(large[0])]:,} cells): a strategy is planned "
            f"over one column of more than {_gram.LARGE_CELLS:,} cells at a time",
            hint=f"plan the queries over {name!r} and those over {large[0]!r} in workloads of their own")
    cells = math.prod(int(terms.shape[j]) for j in groups)
    if cells > MAX_GROUPS or cells * n > MAX_GROUPED_CELLS:
        names = ", ".join(f"{terms.attributes[j]!r} ({terms.shape[j]:,})" for j in groups)
        raise ModelTooLargeError(
            f"the CDF and range queries over {name!r} ({n:,} cells) are measured once per cell of "
            f"the other columns the workload asks about with them, {names}: {cells:,} group cells, "
            f"and at most {min(MAX_GROUPS, MAX_GROUPED_CELLS // n):,} fit ({MAX_GROUPS:,} groups, "
            f"{MAX_GROUPED_CELLS:,} cells in all)",
            hint=f"group or filter the queries over {name!r} by fewer or coarser columns, or plan "
                 f"those queries in a workload of their own", size=cells * n)
    return groups


def candidate_trees(n: int) -> list[Tree]:
    """Per number of levels L, the mixed radix (b and b − 1, b = ⌈n^(1/L)⌉) with the
    fewest padded cells, and the uniform b^L (Qardaji's H_b)."""
    out: dict[tuple[int, ...], Tree] = {}
    top = max(1, math.ceil(math.log2(max(n, 2))))
    for L in range(1, top + 1):
        b = max(2, math.ceil(n ** (1.0 / L)))
        while b > 2 and (b - 1) ** L >= n:
            b -= 1
        while b ** L < n:
            b += 1
        if b > MAX_RADIX and L > 1:
            continue
        if b ** L <= 2 * n:                    # H_b itself when it pads at most n cells
            out.setdefault((b,) * L, Tree(n, (b,) * L))
        for k in range(L + 1):
            radices = (b,) * k + (b - 1,) * (L - k)
            if min(radices) >= 2 and math.prod(radices) >= n:
                out.setdefault(radices, Tree(n, radices))
                break
    return list(out.values())


def _other_factor(t, i: int, groups: tuple[int, ...] = ()) -> float:
    """tr(V_j S_j⁺) over the other attributes: sum(V_j)/n_j² for a summed-out one (S_j = 1ᵀ),
    tr(V_j) for a group attribute (S_j = I)."""
    out = 1.0
    for j, (g, mu) in enumerate(zip(t.grams, t.mean)):
        if j in groups:
            out *= gram_trace(g)
        elif j != i:
            out *= float(mu) / g.shape[0]
    return out


def _psd_rows(V: np.ndarray) -> np.ndarray:
    w, P = np.linalg.eigh(0.5 * (V + V.T))
    keep = w > float(w.max(initial=0.0)) * V.shape[0] * 1e-14
    return np.sqrt(w[keep])[:, None] * P[:, keep].T


def _per_gram(terms: WorkloadTerms, i: int, fn, groups: tuple[int, ...] = ()) -> np.ndarray:
    """fn(gram) for each term's gram on attribute i (computed once per distinct gram),
    times the term's weight² and the other attributes' factors."""
    cache: dict[int, Any] = {}
    out = []
    for t in terms.terms:
        g = t.grams[i]
        if id(g) not in cache:
            cache[id(g)] = fn(g)
        out.append(t.weight ** 2 * _other_factor(t, i, groups) * cache[id(g)])
    return np.array(out)


def level_traces(tree: Tree, terms: WorkloadTerms, i: int,
                 prepared: dict | None = None, groups: tuple[int, ...] = ()) -> np.ndarray:
    """τ[t, l] = w_t² · tr(P_l V_{t,i}) · (summed-out factors): terms × levels.
    ``prepared`` keeps each range gram's level-free sums across trees."""
    prepared = {} if prepared is None else prepared

    def traces(g):
        if isinstance(g, RangeGram):
            if id(g) not in prepared:
                prepared[id(g)] = SemiseparableTraces(g.a, g.b)
            return prepared[id(g)].levels(tree)
        if isinstance(g, LowRankGram):
            # tr(P_l · c I_real) = Σ_blocks |block ∩ real cells| / s_l = n / s_l
            tau = g.c * tree.n / np.asarray(tree.sizes, dtype=float)
            return tau + tree.norms(g.rows).sum(axis=0) if g.rows.size else tau
        return tree.norms(_psd_rows(np.asarray(g, dtype=float))).sum(axis=0)
    return _per_gram(terms, i, traces, groups)


def _lambdas(tree: Tree, u: np.ndarray) -> np.ndarray:
    return np.cumsum((u * np.asarray(tree.sizes, dtype=float))[::-1])[::-1]


def _increments(tau: np.ndarray) -> np.ndarray:
    E = np.diff(tau, axis=-1, prepend=0.0)
    return np.where(np.abs(E) <= 1e-12 * np.abs(tau[..., -1:]), 0.0, E)


def tree_error(tree: Tree, tau: np.ndarray, weights: np.ndarray, noise: str) -> np.ndarray:
    """Unit-noise squared error of each term (rows of ``tau``) under level weights."""
    w = np.asarray(weights, dtype=float)
    lam = _lambdas(tree, w * w)
    E = _increments(np.atleast_2d(tau))
    with np.errstate(divide="ignore", invalid="ignore"):
        per = np.where(E == 0.0, 0.0, E / lam[None, :]).sum(axis=1)
    sens2 = float(np.sum(w * w)) if noise == "gaussian" else 2.0 * float(np.sum(np.abs(w))) ** 2
    return sens2 * per


def _tree_weights(tree: Tree, tau: np.ndarray, noise: str, iters: int = 400) -> np.ndarray:
    """Level weights minimising the error at unit sensitivity (module docstring)."""
    E = _increments(tau.sum(axis=0))
    s = np.asarray(tree.sizes, dtype=float)
    w = np.full(tree.levels, 1.0 / tree.levels)        # H_b: uniform weights
    best_w, best = w, float(tree_error(tree, tau.sum(axis=0), w, noise)[0])
    for _ in range(iters):
        lam = np.maximum(_lambdas(tree, w * w), 1e-300)
        grad = s * np.cumsum(np.where(E > 0, E / lam ** 2, 0.0))   # −∂/∂u_l
        if noise == "gaussian":
            u = w * w * np.sqrt(grad)
            w = np.sqrt(u / u.sum())
        else:
            w = w * np.sqrt(np.maximum(w * grad, 0.0))
            w = w / w.sum()
        if not np.all(np.isfinite(w)) or w.sum() == 0:
            break
        err = float(tree_error(tree, tau.sum(axis=0), w, noise)[0])
        if err > best * (1 - 1e-9):       # no longer improving (or overshooting)
            if err < best:
                best_w, best = w, err
            break
        best_w, best = w, err
    return _prune(tree, tau, best_w, noise)


def _prune(tree: Tree, tau: np.ndarray, w: np.ndarray, noise: str) -> np.ndarray:
    """Drop levels whose weight is negligible (rows measured for nothing), never the
    leaves; keep the pruned weights only if the error does not grow."""
    top = float(np.max(w))
    cut = np.where(w < 1e-3 * top, 0.0, w)
    cut[-1] = max(w[-1], 1e-3 * top)
    total = tau.sum(axis=0)
    before = float(tree_error(tree, total, w, noise)[0])
    after = float(tree_error(tree, total, cut, noise)[0])
    out = cut if after <= before * (1 + 1e-9) else w
    return out / (np.sqrt(np.sum(out * out)) if noise == "gaussian" else np.sum(out))


# -- the Toeplitz square root ---------------------------------------------------------------
def toeplitz_coefficients(n: int) -> np.ndarray:
    """Integer coefficients of the measured square root: round(c_k · 2^16)."""
    return np.rint(sqrt_prefix_coefficients(n) * TOEPLITZ_GRID).astype(np.int64)


def _toeplitz_traces(a: np.ndarray, terms: WorkloadTerms, i: int, groups: tuple[int, ...] = ()) -> np.ndarray:
    """tr(V_t (AᵀA)⁻¹) per term for A = LowerToeplitz(a) (real coefficients)."""
    n = a.size
    d = series_inverse(a, n)
    m = np.cumsum(d)
    m2 = m * m
    k = np.arange(n, dtype=float)
    rows2 = np.cumsum(m2)                      # ‖v_i‖² = Σ_{k≤i} m_k²
    cm = np.cumsum(m)                          # (Σ_{i≥t} v_i)[t] = cm[n−1−t]

    def trace(g):
        if isinstance(g, RangeGram):
            if g.kind == "prefix":
                return float(np.sum(m2 * (n - k)))
            if g.kind == "allrange":
                return float((n + 1) * rows2.sum() - np.sum(cm ** 2))
            # suffix rows v_{n−1} − v_{i−1}: Σ ‖·‖² = n‖v_{n−1}‖² − 2⟨v_{n−1}, S⟩ + Σ_{j≤n−2}‖v_j‖²
            last = m[::-1]                         # v_{n−1}[t] = m_{n−1−t}
            S = np.zeros(n)
            S[:n - 1] = cm[n - 2::-1]              # S[t] = Σ_{j=t}^{n−2} m_{j−t} = cm[n−2−t]
            return float(n * rows2[-1] - 2.0 * last @ S + rows2[:-1].sum())
        D = LowerToeplitz(d)
        if isinstance(g, LowRankGram):
            out = g.c * float(np.sum(d * d * (n - k)))
            if g.rows.size:
                out += float(np.sum(D.rmatmat(g.rows.T) ** 2))
            return out
        return float(np.sum(D.rmatmat(_psd_rows(np.asarray(g, dtype=float)).T) ** 2))
    return _per_gram(terms, i, trace, groups)


def toeplitz_errors(a: np.ndarray, terms: WorkloadTerms, i: int, groups: tuple[int, ...] = ()) -> np.ndarray:
    """Unit-noise Gaussian squared error of each term under the Toeplitz strategy a (per
    group cell of ``groups``: I_G ⊗ A)."""
    return float(np.sum(a * a)) * _toeplitz_traces(a, terms, i, groups)


# -- the strategy ---------------------------------------------------------------------------
@dataclass(frozen=True, eq=False)
class OrderedStrategy:
    """A tree (level weights root first; 0 = level not measured) or a Toeplitz square
    root (integer ``coeffs`` times ``scale``) over one attribute, measured once per cell of
    the ``groups`` attributes (none: the others summed out), with the views of
    ``strategy.Strategy`` that the engine and the error model read."""

    attributes: tuple[str, ...]
    shape: tuple[int, ...]
    attribute: str
    noise: str
    expected_error: float
    tree: Tree | None = None
    weights: tuple[float, ...] = ()
    coeffs: np.ndarray | None = field(default=None, repr=False)
    scale: float = 1.0
    explanation: str = ""
    workload: Any = field(default=None, repr=False)
    term_tse: tuple[float, ...] | None = field(default=None, repr=False)
    kron_blocks: tuple = ()
    assignment: None = None
    groups: tuple[str, ...] = ()

    @property
    def operator(self) -> str:
        return "tree" if self.tree is not None else "toeplitz"

    @property
    def size(self) -> int:
        return self.shape[self.attributes.index(self.attribute)]

    @property
    def clique(self) -> tuple[str, ...]:
        """The measured attributes in domain order: the groups' and the column."""
        wanted = set(self.groups) | {self.attribute}
        return tuple(a for a in self.attributes if a in wanted)

    @property
    def group_shape(self) -> tuple[int, ...]:
        """Cells of each group attribute (domain order); () without groups."""
        return tuple(self.shape[self.attributes.index(a)] for a in self.groups)

    @property
    def group_cells(self) -> int:
        return math.prod(self.group_shape)

    def sensitivity(self, p: int | None = None) -> float:
        # I_G ⊗ T: a row's column lies in one group's copy of T, so T's norms (module docstring)
        p = (1 if self.noise == "laplace" else 2) if p is None else int(p)
        w = np.abs(np.asarray(self.weights, dtype=float) if self.coeffs is None
                   else self.coeffs * self.scale)
        return float(w.sum()) if p == 1 else float(np.sqrt(np.sum(w * w)))

    def _queries(self) -> list[tuple[Any, float]]:
        if self.coeffs is not None:
            return [(LowerToeplitz(self.coeffs.astype(float)), float(self.scale))]
        assert self.tree is not None
        return [(self.tree.level(lv), float(w)) for lv, w in enumerate(self.weights) if w > 0]

    def _factors(self, q) -> list:
        """The Kron factors of query q on the column, over the clique's attributes."""
        from dpsql.linalg import Identity
        return [q if a == self.attribute else Identity(self.shape[self.attributes.index(a)])
                for a in self.clique]

    @property
    def blocks(self) -> list[MeasurementBlock]:
        from dpsql.linalg import Kron
        out = []
        for q, w in self._queries():
            f = self._factors(q)
            out.append(MeasurementBlock(self.clique, Kron(f) if len(f) > 1 else f[0], w))
        return out

    @property
    def cliques(self) -> list[tuple[str, ...]]:
        return [self.clique]

    @property
    def matrix(self):
        """Over the full domain: the strategy on the attribute, the identity on the groups,
        the others summed out."""
        from dpsql.linalg import Kron, Total, Union
        rows = []
        for q, w in self._queries():
            factors = [Total(n) for n in self.shape]
            for a, f in zip(self.clique, self._factors(q)):
                factors[self.attributes.index(a)] = f
            rows.append(w * (Kron(factors) if len(factors) > 1 else factors[0]))
        return Union(rows)

    def dense(self) -> np.ndarray:
        return self.matrix.dense()


def toeplitz_strategy(terms: WorkloadTerms) -> OrderedStrategy:
    """The Toeplitz square root of the prefix matrix over the workload's ordered attribute
    (Gaussian noise), per group cell, with its errors."""
    i = ordered_attribute(terms)
    if i is None:
        raise UnsupportedQueryError("no prefix or range query on a large attribute")
    groups = group_attributes(terms, i)
    a = toeplitz_coefficients(terms.shape[i])
    per = toeplitz_errors(a / TOEPLITZ_GRID, terms, i, groups)
    return OrderedStrategy(tuple(terms.attributes), tuple(terms.shape), terms.attributes[i],
                           "gaussian", float(per.sum()), coeffs=a, scale=1.0 / TOEPLITZ_GRID,
                           explanation="Fichtenberger, Henzinger, Upadhyay 2023; errors in "
                                       "closed form", workload=terms,
                           term_tse=tuple(float(x) for x in per),
                           groups=tuple(terms.attributes[j] for j in groups))


def opt_ordered(terms: WorkloadTerms, noise: str = "gaussian", **_ignored) -> OrderedStrategy:
    """The best tree (shape and level weights) or, for Gaussian noise, the Toeplitz square
    root, whichever has the lower error on the workload."""
    i = ordered_attribute(terms)
    if i is None:
        raise UnsupportedQueryError("no prefix or range query on a large attribute")
    group_attributes(terms, i)       # the caps, before any search
    cache: dict = {}
    best, shape = _best_ordered(terms, noise, i, cache, candidate_trees(terms.shape[i]),
                                np.ones(len(terms.terms)))
    if not terms.parts:
        return best
    # Never worse than noise per query (issue 16, plan/balance.py): weigh the queries left
    # above their per-query baseline up and plan again, a few rounds; the candidate keeping
    # every query within its baseline wins, else the plan says which are above it.  The
    # rounds keep the first round's best tree shape (its level weights are re-optimised) and
    # scale the cached per-term traces: re-searching every shape made a 10⁶-cell mixed
    # workload take 85 s.
    boost = np.ones(len(terms.parts))
    chosen, over = best, above_baseline(best)
    for _ in range(8):
        if not over:
            break
        for k, ratio in over.items():
            boost[k] *= 1.25 * ratio
        scale = np.ones(len(terms.terms))
        for k, part in enumerate(terms.parts):
            scale[list(part.terms)] = boost[k]
        cand, _ = _best_ordered(terms, noise, i, cache, [shape], scale)
        over = above_baseline(cand)
        if not over:
            chosen = replace(cand, explanation=cand.explanation + "; queries reweighted to keep "
                             "every one within its per-query baseline")
    left = above_baseline(chosen)
    if left:
        names = ", ".join(terms.parts[k].name for k in sorted(left))
        chosen = replace(chosen, explanation=chosen.explanation + f"; {len(left)} quer"
                         f"{'y' if len(left) == 1 else 'ies'} above the per-query baseline: {names}")
    return chosen


def above_baseline(s: OrderedStrategy) -> dict[int, float]:
    """Queries whose error exceeds the per-query mechanism's (index: error / baseline)."""
    from dpsql.plan.objective import part_values

    terms = s.workload
    tse = part_values(terms.parts, np.asarray(s.term_tse))
    out = {}
    for k, (part, value) in enumerate(zip(terms.parts, tse)):
        base = part.rows * part.baseline
        if value > base * (1 + 1e-9):
            out[k] = float(value / base)
    return out


def _best_ordered(terms: WorkloadTerms, noise: str, i: int, cache: dict, trees: list[Tree],
                  scale: np.ndarray) -> tuple[OrderedStrategy, Tree]:
    """The candidate with the lowest error on the workload with term t's rows weighted by
    √scale[t] (the search objective), its errors reported on ``terms`` itself, and the best
    of the ``trees``.  ``cache`` keeps per-tree traces and the Toeplitz root's errors."""
    name = terms.attributes[i]
    n = terms.shape[i]
    groups = group_attributes(terms, i)
    prepared = cache.setdefault("prepared", {})
    best: tuple[float, Tree, np.ndarray, np.ndarray] | None = None
    for tree in trees:
        tau = cache.get(tree.radices)
        if tau is None:
            tau = cache[tree.radices] = level_traces(tree, terms, i, prepared, groups)
        if not np.all(np.isfinite(tau)):
            continue
        w = _tree_weights(tree, tau * scale[:, None], noise)
        err = float(tree_error(tree, tau * scale[:, None], w, noise).sum())
        if best is None or err < best[0]:
            best = (err, tree, w, tau)
    assert best is not None
    search_err, tree, w, tau = best
    tree_per = tree_error(tree, tau, w, noise)
    err = float(tree_per.sum())
    tree_note = (f"tree: {tree.levels} levels, radices {list(tree.radices)} "
                 f"({tree.N - n:,} padded cells), expected error {err:.6g}")
    per_group = "" if not groups else \
        " per cell of " + ", ".join(repr(terms.attributes[j]) for j in groups)
    if noise == "gaussian":
        root = cache.get("toeplitz")
        if root is None:
            root = cache["toeplitz"] = toeplitz_strategy(terms)
        root_search = float(np.sum(np.asarray(root.term_tse) * scale))
        t_note = f"Toeplitz square root of the prefix matrix: expected error {root.expected_error:.6g}"
        if root_search < search_err:
            return replace(root, explanation=f"Toeplitz square root over {name!r}{per_group} chosen "
                                             f"({t_note}; {tree_note}; {root.explanation})"), tree
        tree_note += f"; {t_note}"
    return OrderedStrategy(
        tuple(terms.attributes), tuple(terms.shape), name, noise, err, tree=tree,
        weights=tuple(float(x) for x in w), workload=terms,
        groups=tuple(terms.attributes[j] for j in groups),
        explanation=f"tree over {name!r}{per_group} chosen ({tree_note}; level weights "
                    f"{[round(float(x), 4) for x in w]}; Hay et al. 2010, Qardaji et al. 2013); "
                    "errors in closed form",
        term_tse=tuple(float(x) for x in tree_per)), tree
