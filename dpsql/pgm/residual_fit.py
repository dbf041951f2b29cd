"""Marginals reconstructed from residuals, with local non-negativity (GReM-LNN).

Mullins, Fuentes, Xiao, Kifer, Musco, Sheldon, "Efficient and Private Marginal
Reconstruction with Local Non-Negativity" (NeurIPS 2024): when every measurement is a
Kronecker product of per-attribute factors whose grams keep the constant vector an
eigenvector (identity marginals, totals, ResidualPlanner's residual factors R with R·1 = 0),
the least-squares problem separates over attribute subsets and is solved in closed form;
non-negativity of the reconstructed workload marginals is then a small convex problem.
The facts are the paper's; the code, and the solver of the second step, are ours.

*Residual coordinates.*  For each attribute a let U_a be an orthonormal basis of 1^⊥
(n_a × (n_a − 1)).  A table x has, for each attribute set S, the coordinates
z_S = (⊗_{a∈S} U_aᵀ ⊗_{a∉S} 1ᵀ) x, and every marginal is

    m_A = Σ_{S⊆A} (⊗_{a∈S} U_a ⊗_{a∈A∖S} 1/n_a) z_S                      (1)

(the decomposition I = 11ᵀ/n + UUᵀ per attribute).  Marginals built from one z by (1) agree
on every shared subset, so z parametrises exactly the affine hull of the consistent tables:
the local polytope L(G) of the saturated region graph (NeurIPS 2021 §4) is {z : m_A(z) ≥ 0
for the maximal cliques A}.

*GReM (least squares).*  A block c·⊗_{a∈C} F_a with F_aᵀF_a·1 ∝ 1 maps (1) to pieces
B_S z_S whose ranges are orthogonal (U_aᵀF_aᵀF_a1 = 0), so its loss is Σ_S ‖B_S z_S − y‖²
up to a constant.  When U_a also diagonalises every factor gram of a (a common eigenbasis:
identity and one residual factor per attribute, ResidualPlanner's blocks), B_SᵀB_S is
diagonal, and the normal equations are h_S ⊙ z_S = b_S coordinate by coordinate:
ẑ_S = b_S / h_S, the global least-squares estimate over all blocks at once, in time linear in
the cells of the measured marginals.  The L2 loss is Σ_S ‖z_S − ẑ_S‖²_{h_S} + L(x̂).

*LNN.*  Problem 2 of NeurIPS 2021 with the L2 loss is then

    min_z ½ Σ_S ‖z_S − ẑ_S‖²_{h_S}   subject to  T_A z = m_A(z) ≥ 0 for every maximal clique A,

solved through its Lagrange dual, max_{λ≥0} g(λ) = −½‖Tᵀλ‖²_{H⁻¹} − λᵀTẑ, a bound-
constrained quadratic in one multiplier per cell, by L-BFGS-B (scipy): each evaluation is
one map (1) each way, z(λ) = ẑ + H⁻¹Tᵀλ and ∇(−g) = T z(λ).  On temporal-match2 this took
~140 evaluations where ADMM on the same splitting was still 10⁴ loss units from the
optimum after 400 iterations (bench/RESULTS.md, "Wide tables").  Directions no measurement
determines (h_S = 0) get a ridge of 10⁻⁸ of the largest curvature toward z_S = 0
(independence), as the relaxed exact step keeps them where they were.

*Certificate.*  Every evaluation gives a lower bound g(λ) on the optimum and a feasible
point: z(λ) with every non-empty coordinate shrunk toward the uniform tables of its total by
the least t that makes all m_A ≥ 0 (same total, exactly consistent).  The fit stops when
twice the gap between the best of each, in the loss's units (noise variances), is within the
caller's tolerance — the test the engine's other fits pass (``FitLimits.gap``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Sequence
from math import prod

import numpy as np

from dpsql.domain import Domain
from dpsql.pgm.limits import FitLimits
from dpsql.pgm.measurement import Measurement, dense
from dpsql.pgm.region_graph import RegionGraph

__all__ = ["ResidualForm", "residual_form", "estimate_residual", "ResidualResult"]

# Attributes with more than FitLimits.residual_max_attribute_cells cells are not handled (an
# eigendecomposition per attribute).
#: Undetermined directions: ridge relative to the largest curvature (docstring).
RIDGE = 1e-8
_TOL = 1e-9


def _dct_basis(n: int) -> np.ndarray:
    """An orthonormal basis of 1^⊥: the DCT-II vectors without the constant one (n × (n−1))."""
    j = np.arange(n)
    k = np.arange(1, n)
    return (np.cos(np.pi * (2 * j[:, None] + 1) * k[None, :] / (2 * n)) * np.sqrt(2.0 / n))


def _kron_factors(q) -> tuple[float, list] | None:
    """(scale, per-attribute factors in the clique's order) of a Kron/Weighted/leaf query."""
    if hasattr(q, "weight") and hasattr(q, "base"):
        inner = _kron_factors(q.base)
        return None if inner is None else (float(q.weight) * inner[0], inner[1])
    if hasattr(q, "factors"):
        scale, out = 1.0, []
        for f in q.factors:
            inner = _kron_factors(f)
            if inner is None:
                return None
            scale *= inner[0]
            out.extend(inner[1])
        return scale, out
    if hasattr(q, "blocks") or hasattr(q, "terms"):
        return None
    return 1.0, [q]


class _AttributeBasis:
    """U_a and, per distinct factor of attribute a, its eigenvalues on U_a and total part."""

    def __init__(self, n: int, factors: list[np.ndarray]) -> None:
        self.n = n
        V = _dct_basis(n)
        grams = [F.T @ F for F in factors]
        restricted = [V.T @ G @ V for G in grams]
        scalar = [np.allclose(R, np.eye(n - 1) * (np.trace(R) / max(n - 1, 1)),
                              atol=_TOL * max(np.abs(R).max(), 1.0)) for R in restricted]
        mixed = [R / max(np.abs(R).max(), 1e-300) * (1.0 + 0.37 * k)
                 for k, (R, s) in enumerate(zip(restricted, scalar)) if not s]
        if mixed and n > 1:
            _, W = np.linalg.eigh(np.sum(mixed, axis=0))
            self.U = V @ W
        else:
            self.U = V
        self.lam: list[np.ndarray] = []
        self.ok = True
        for G in grams:
            D = self.U.T @ G @ self.U
            off = D - np.diag(np.diag(D))
            if np.abs(off).max(initial=0.0) > 1e-7 * max(np.abs(D).max(initial=0.0), 1.0):
                self.ok = False
            self.lam.append(np.clip(np.diag(D), 0.0, None))
        self.t0 = [float(np.ones(n) @ G @ np.ones(n)) / (n * n) for G in grams]
        self.perp = [(F @ self.U).T for F in factors]           # (n−1) × rows
        self.one = [(F.sum(axis=1) / n)[None, :] for F in factors]  # 1 × rows


class ResidualForm:
    """The measurements in residual coordinates: per attribute set S the curvature h_S and
    the data b_S (canonical attribute order), ready for :func:`estimate_residual`."""

    def __init__(self, domain: Domain, bases: dict[str, _AttributeBasis], h: dict, b: dict,
                 const: float, cliques: list[tuple[str, ...]]) -> None:
        self.domain, self.bases, self.h, self.b, self.const = domain, bases, h, b, const
        self.cliques = cliques

    def least_squares(self, cliques: Sequence[Sequence[str]]) -> list[np.ndarray]:
        """GReM's least-squares marginals ẑ_S = b_S/h_S mapped by (1) to ``cliques`` (canonical
        order): consistent, unbiased where measured, possibly negative (undetermined
        directions at 0)."""
        zhat = {S: np.divide(self.b[S], self.h[S], out=np.zeros_like(self.b[S]),
                             where=self.h[S] > 0) for S in self.h}
        cl = [tuple(c) for c in cliques]
        return _Solver(self, cl).forward(zhat)


def residual_form(domain: Domain, measurements: Sequence[Measurement],
                  max_attribute_cells: int = FitLimits().residual_max_attribute_cells) -> ResidualForm | str:
    """The residual form of ``measurements``, or a sentence saying why they have none (a query
    that is not a Kronecker product of per-attribute factors, a factor whose gram does not keep
    1 an eigenvector, or factors of one attribute without a common eigenbasis)."""
    pos = {a: i for i, a in enumerate(domain.attributes)}
    sizes = dict(zip(domain.attributes, domain.shape))
    parsed = []
    per_attr: dict[str, list[np.ndarray]] = {}
    keys: dict[str, dict[bytes, int]] = {}
    for m in measurements:
        kf = _kron_factors(m.query)
        if kf is None or len(kf[1]) != len(m.clique):
            return f"the query on {m.clique} is not a Kronecker product of per-attribute factors"
        scale, fs = kf
        idx = []
        for a, f in zip(m.clique, fs):
            n = sizes[a]
            if n > max_attribute_cells:
                return f"attribute {a!r} has {n:,} cells (more than {max_attribute_cells:,})"
            if int(f.shape[1]) != n:
                return f"the query on {m.clique} does not match the domain"
            F = dense(f)
            G1 = F.T @ F.sum(axis=1)
            if not np.allclose(G1, G1.mean(), atol=_TOL * max(np.abs(F).max() ** 2 * n, 1.0)):
                return (f"a factor on {a!r} of the query on {m.clique} mixes the attribute's total "
                        f"with its differences")
            key = F.tobytes() + bytes(str(F.shape), "ascii")
            book = keys.setdefault(a, {})
            if key not in book:
                book[key] = len(book)
                per_attr.setdefault(a, []).append(F)
            idx.append(book[key])
        parsed.append((m, scale, idx))
    bases = {}
    for a, fs in per_attr.items():
        basis = _AttributeBasis(sizes[a], fs)
        if not basis.ok:
            return f"the query factors on {a!r} have no common eigenbasis"
        bases[a] = basis
    h: dict[tuple[str, ...], np.ndarray] = {}
    b: dict[tuple[str, ...], np.ndarray] = {}
    const = 0.0
    for m, scale, idx in parsed:
        w = 1.0 / (m.stddev * m.stddev)
        y = np.asarray(m.values, dtype=float)
        const += w * float(y @ y)
        rows = [bases[a].perp[i].shape[1] for a, i in zip(m.clique, idx)]
        Y = y.reshape(rows) if rows else y.reshape(())
        # apply, axis by axis, either U_aᵀF_aᵀ (a ∈ S) or 1ᵀF_aᵀ/n_a (a ∉ S)
        parts: list[tuple[tuple[bool, ...], np.ndarray]] = [((), Y)]
        for j, (a, i) in enumerate(zip(m.clique, idx)):
            nxt = []
            for mask, arr in parts:
                for inside in (False, True):
                    mat = bases[a].perp[i] if inside else bases[a].one[i]
                    out = np.moveaxis(np.tensordot(mat, arr, axes=([1], [j])), 0, j)
                    nxt.append((mask + (inside,), out))
            parts = nxt
        for mask, arr in parts:
            S = tuple(a for a, inside in zip(m.clique, mask) if inside)
            canon = tuple(sorted(S, key=pos.__getitem__))
            shape = tuple(sizes[a] - 1 for a in S)
            arr = arr.reshape(shape)
            order = [S.index(a) for a in canon]
            arr = arr.transpose(order) if order else arr
            curv = np.ones(())
            for a in canon:
                curv = np.multiply.outer(curv, bases[a].lam[idx[m.clique.index(a)]])
            other = prod(bases[a].t0[i] for a, i, inside in zip(m.clique, idx, mask) if not inside)
            curv = curv * (scale * scale * w * other)
            if canon in h:
                h[canon] = h[canon] + curv
                b[canon] = b[canon] + scale * w * arr
            else:
                h[canon] = np.asarray(curv, dtype=float)
                b[canon] = np.asarray(scale * w * arr, dtype=float)
    if not np.any(h.get((), np.zeros(())) > 0):
        return "no measurement determines the number of records"
    cliques = sorted({tuple(sorted(m.clique, key=pos.__getitem__)) for m in measurements})
    return ResidualForm(domain, bases, h, b, const, cliques)


class ResidualResult:
    """What :func:`estimate_residual` produced: the region graph, the tables (probabilities
    per region), the total, the loss before/after non-negativity, ADMM's iterations, the
    certified gap (in loss units) and the seconds taken."""

    __slots__ = ("graph", "probs", "total", "loss", "iterations", "gap", "seconds", "shrink")

    def __init__(self, graph, probs, total, loss, iterations, gap, seconds, shrink) -> None:
        self.graph, self.probs, self.total, self.loss = graph, probs, total, loss
        self.iterations, self.gap, self.seconds, self.shrink = iterations, gap, seconds, shrink


class _Solver:
    """Forward/backward maps (1) between z and the tables of a list of cliques."""

    def __init__(self, form: ResidualForm, cliques: list[tuple[str, ...]]) -> None:
        self.form = form
        self.cliques = cliques
        self.sizes = dict(zip(form.domain.attributes, form.domain.shape))
        self.subsets = []
        for A in cliques:
            subs = []
            for r in range(len(A) + 1):
                for S in itertools.combinations(A, r):
                    if S in form.h:
                        subs.append(S)
            self.subsets.append(subs)

    def _expand(self, S: tuple[str, ...], arr: np.ndarray, transpose: bool = False) -> np.ndarray:
        """(⊗_{a∈S} U_a) arr, or (⊗ U_aᵀ) arr with ``transpose``."""
        for j, a in enumerate(S):
            U = self.form.bases[a].U
            arr = np.moveaxis(np.tensordot(U.T if transpose else U, arr, axes=([1], [j])), 0, j)
        return arr

    def _place(self, A: tuple[str, ...], S: tuple[str, ...]) -> tuple[tuple[int, ...], int]:
        return (tuple(self.sizes[a] if a in S else 1 for a in A),
                prod(self.sizes[a] for a in A if a not in S))

    def table(self, z: dict, A: tuple[str, ...], subs) -> np.ndarray:
        out = np.zeros(tuple(self.sizes[a] for a in A))
        for S in subs:
            shape, div = self._place(A, S)
            out += self._expand(S, z[S]).reshape(shape) / div
        return out

    def forward(self, z: dict) -> list[np.ndarray]:
        # Each (⊗U_a) z_S once, shared by every clique containing S (a singleton's by ~34 pairs).
        full = {S: self._expand(S, v) for S, v in z.items()}
        out = []
        for A, subs in zip(self.cliques, self.subsets):
            tab = np.zeros(tuple(self.sizes[a] for a in A))
            for S in subs:
                shape, div = self._place(A, S)
                tab += full[S].reshape(shape) / div
            out.append(tab)
        return out

    def diagonal(self, inv: dict) -> list[np.ndarray]:
        """Per cell of each clique, the diagonal of T H⁻¹ Tᵀ (``inv`` = H⁻¹ per S)."""
        out = []
        full = {}
        for S, v in inv.items():
            arr = np.asarray(v, dtype=float)
            for j, a in enumerate(S):
                U2 = self.form.bases[a].U ** 2
                arr = np.moveaxis(np.tensordot(U2, arr, axes=([1], [j])), 0, j)
            full[S] = arr
        for A, subs in zip(self.cliques, self.subsets):
            tab = np.zeros(tuple(self.sizes[a] for a in A))
            for S in subs:
                shape, div = self._place(A, S)
                tab += full[S].reshape(shape) / (div * div)
            out.append(tab)
        return out

    def backward(self, tables: list[np.ndarray]) -> dict:
        sizes = self.sizes
        acc = {S: np.zeros(tuple(sizes[a] for a in S)) for S in self.form.h}
        for A, subs, v in zip(self.cliques, self.subsets, tables):
            for S in subs:
                axes = tuple(j for j, a in enumerate(A) if a not in S)
                arr = v.sum(axis=axes) if axes else v
                acc[S] += arr / prod(sizes[a] for a in A if a not in S)
        return {S: self._expand(S, arr, transpose=True) for S, arr in acc.items()}


def estimate_residual(form: ResidualForm, *, gap: tuple[float, float] = (0.5, 1e-6),
                      iters: int = 5000, total: float | None = None,
                      callback=None) -> ResidualResult:
    """GReM's least-squares ẑ, then LNN through its dual by L-BFGS-B until twice the certified
    duality gap is at most ``gap[0] + gap[1]·loss`` (module docstring) or ``iters`` iterations.
    ``callback(evaluations, loss, certified_gap)`` sees every evaluation; True from it stops."""
    import scipy.optimize as so      # only here: the other fits of small models do without it

    start = time.perf_counter()
    dom = form.domain
    sizes = dict(zip(dom.attributes, dom.shape))
    graph = RegionGraph.saturated(dom.attributes, sizes, form.cliques)
    maximal = graph.maximal()
    solver = _Solver(form, maximal)
    hmax = max(float(np.max(h, initial=0.0)) for h in form.h.values())
    hr = {S: np.where(h > 0, h, RIDGE * hmax) for S, h in form.h.items()}
    zhat = {S: form.b[S] / hr[S] for S in form.h}
    ls_loss = form.const - sum(float(np.sum(form.b[S] * zhat[S])) for S in form.h)
    empty: tuple[str, ...] = ()
    # The total is held at its least-squares value (= estimate_total's inverse-variance mean,
    # the relaxed fit's), or the caller's: left free, clipping the noise of the many empty
    # cells at 0 buys loss by raising it (+11% on temporal-match2, three times least squares'
    # L2 error on the pair tables).
    if total is not None:
        ls_loss += float(hr[empty]) * (float(total) - float(zhat[empty])) ** 2
        zhat[empty] = np.asarray(float(total))
    inv = {S: 1.0 / h for S, h in hr.items()}
    inv[empty] = np.zeros(())
    shapes = [tuple(sizes[a] for a in A) for A in maximal]
    cuts = np.cumsum([0] + [prod(sh) for sh in shapes])
    state = _Best(zhat, int(cuts[-1]))

    def split(v: np.ndarray) -> list[np.ndarray]:
        return [v[cuts[i]:cuts[i + 1]].reshape(sh) for i, sh in enumerate(shapes)]

    def feasible(z: dict, tables: list[np.ndarray]) -> tuple[dict, float]:
        """z shrunk toward the uniform tables of its total until every table is ≥ 0."""
        total = float(z.get(empty, np.array(0.0)))
        t = 0.0
        for tab in tables:
            low = float(tab.min())
            if low < 0:
                t = 1.0 if total <= 0 else max(t, -low / (-low + total / tab.size))
        if t == 0.0:
            return z, 0.0
        return {S: (v if S == empty else v * (1.0 - t)) for S, v in z.items()}, t

    # Jacobi scaling of the dual, λ = D·μ with D = diag(T H⁻¹ Tᵀ)^(−1/2): the curvatures of
    # the residual coordinates span orders of magnitude (a block's weight, its σ), and
    # L-BFGS-B's first steps and bound handling are not scale-free.
    diag = np.concatenate([t.ravel() for t in solver.diagonal(inv)])
    D = 1.0 / np.sqrt(np.maximum(diag, 1e-300 + 1e-12 * float(diag.max(initial=1.0))))

    def negdual(mu: np.ndarray) -> tuple[float, np.ndarray]:
        # −g(λ) = ½‖Tᵀλ‖²_{H⁻¹} + λᵀTẑ; its gradient is T z(λ), z(λ) = ẑ + H⁻¹Tᵀλ
        lam = D * mu
        back = solver.backward(split(lam))
        z = {S: zhat[S] + back[S] * inv[S] for S in zhat}
        value = sum(float(np.sum(back[S] * (0.5 * back[S] * inv[S] + zhat[S]))) for S in zhat)
        tables = solver.forward(z)
        zf, t = feasible(z, tables)
        primal = 0.5 * sum(float(np.sum(hr[S] * (zf[S] - zhat[S]) ** 2)) for S in zf if S != empty)
        state.evals += 1
        if primal < state.primal:
            state.primal, state.z, state.shrink = primal, zf, t
        if -value > state.dual:
            state.dual, state.mu = -value, mu
        loss = ls_loss + 2.0 * state.primal
        certified = 2.0 * (state.primal - state.dual)
        if certified <= gap[0] + gap[1] * loss:
            raise _Done
        if callback is not None and callback(state.evals, loss, certified):
            raise _Done
        return value, D * np.concatenate([t.ravel() for t in tables])

    try:
        # L-BFGS-B ends on its own line-search tests before the certificate at times (on
        # temporal-match2 after ~400 evaluations, gap 2.5): restart it from the best λ with a
        # fresh memory while that still makes progress.
        while state.evals < iters:
            before, was = state.evals, state.primal - state.dual
            so.minimize(negdual, state.mu, jac=True, method="L-BFGS-B",
                        bounds=so.Bounds(0.0, np.inf),
                        options={"maxiter": iters, "maxfun": iters - before, "maxcor": 20,
                                 "ftol": 0.0, "gtol": 0.0})
            if state.evals - before < 5 or state.primal - state.dual > 0.99 * was:
                break   # no progress: rounding limits the certificate (see the summary)
    except _Done:
        pass
    zf, shrink = state.z, state.shrink
    total = float(zf.get(empty, np.array(1.0)))
    probs = []
    for r in graph.regions:
        subs = [S for k in range(len(r) + 1) for S in itertools.combinations(r, k) if S in form.h]
        tab = solver.table(zf, r, subs)
        probs.append(np.maximum(tab, 0.0) / max(total, 1e-300))
    certified = 2.0 * (state.primal - state.dual)
    return ResidualResult(graph, probs, total, [ls_loss, ls_loss + 2.0 * state.primal],
                          state.evals, certified, time.perf_counter() - start, shrink)


class _Best:
    """The best feasible point (primal value, z, its shrink), the best dual value and its
    scaled multipliers μ, and the number of evaluations so far."""

    def __init__(self, z: dict, cells: int) -> None:
        self.evals = 0
        self.primal, self.dual = np.inf, -np.inf
        self.z, self.shrink = z, 0.0
        self.mu = np.zeros(cells)


class _Done(Exception):
    """Raised inside the dual's evaluation once the gap is certified or the callback asks to
    stop (ends L-BFGS-B; the best feasible point so far is kept)."""
