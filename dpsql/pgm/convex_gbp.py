"""Convex generalized belief propagation: the approximate marginal oracle (NeurIPS 2021 App. A).

CONVEX-GBP (Algorithm 2, after Hazan, Peng & Shashua 2012) solves Problem 3,

    τ̂ = argmin_{τ ∈ L(G)}  −τᵀθ − Σ_r κ_r H(τ_r),

for a region graph G and positive counting numbers κ (Theorem 1).  It is block
coordinate ascent on the Lagrangian dual: one multiplier λ_{t→p}(x_t) per edge p → t
enforces P_{p→t} τ_p = τ_t, and each region's belief is

    τ_r ∝ exp((θ_r + Σ_{children c} λ_{c→r} − Σ_{parents p} λ_{r→p}) / κ_r).

Updating all multipliers from a region t to its parents at once is an exact block
maximisation: with m_{p→t} = κ_p log Σ_{x_p∖x_t} exp((ψ_p − λ_{t→p})/κ_p) (ψ_p the
exponent above) the parents' marginals on t and τ_t all agree when

    λ_{t→p} = κ_p/(κ_t + Σ_{p'} κ_{p'}) · (θ_t + Σ_c λ_{c→t} + Σ_{p'} m_{p'→t}) − m_{p→t},

which is the λ line of Algorithm 2 with κ_{p,t} = κ_p/(κ_t + Σ_{p'→t} κ_{p'}).

Each region's exponent ψ_r is kept and patched by the change of each multiplier, so
a sweep costs a few passes over each parent's table per edge.  ``damping`` d mixes
every new multiplier with the old one, λ ← (1−d)λ_new + dλ_old; the paper (§6)
found damping stabilises dense region graphs.  Messages are returned to the caller
so that Prox-PGM can warm-start the next call (§6: one sweep per outer iteration).
All exponentials are shifted log-sum-exps, as in the exact oracle.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from dpsql.pgm.factor import logsumexp
from dpsql.pgm.region_graph import RegionGraph

__all__ = ["ConvexGBP", "GBPResult"]


@dataclass
class GBPResult:
    """Pseudo-marginals (scaled to ``total``), the messages to warm-start from, and
    the number of sweeps run and the largest multiplier change of the last one."""

    marginals: list[np.ndarray]
    messages: list[np.ndarray]
    sweeps: int
    change: float


class ConvexGBP:
    """A compiled CONVEX-GBP schedule on ``graph`` with counting numbers ``kappa``.

    ``kappa`` is a positive scalar or one positive number per region (default 1,
    the choice of the paper's experiments; Theorem 2 makes the estimate independent
    of it).  ``damping`` ∈ [0, 1) is the weight of the old multiplier.
    """

    def __init__(self, graph: RegionGraph, kappa: float | Sequence[float] | np.ndarray = 1.0,
                 damping: float = 0.5) -> None:
        n = len(graph.regions)
        k = np.broadcast_to(np.asarray(kappa, dtype=float), (n,)).copy()
        if not np.all(k > 0) or not np.all(np.isfinite(k)):
            raise ValueError("ConvexGBP: counting numbers must be positive and finite")
        if not 0.0 <= damping < 1.0:
            raise ValueError(f"ConvexGBP: damping must be in [0, 1), got {damping}")
        self.graph = graph
        self.kappa = k
        self.damping = float(damping)
        self.shapes = [graph.shape(i) for i in range(n)]
        # Per edge (p, t): the axes of p summed out to reach t, and the shape in which
        # a table over t broadcasts into p (canonical order makes this a reshape).
        self.sum_axes: list[tuple[int, ...]] = []
        self.up_shape: list[tuple[int, ...]] = []
        for p, t in graph.edges:
            child = set(graph.regions[t])
            par = graph.regions[p]
            self.sum_axes.append(tuple(i for i, a in enumerate(par) if a not in child))
            self.up_shape.append(tuple(graph.sizes[a] if a in child else 1 for a in par))
        # Children before parents would not matter for correctness (any order is block
        # coordinate ascent); sweeping small regions last lets one sweep carry evidence
        # from the large regions down and back up through the shared sub-regions.
        self.order = [t for t in range(n) if graph.parents[t]]
        self.order.sort(key=lambda t: -len(graph.regions[t]))

    def initial_messages(self) -> list[np.ndarray]:
        return [np.zeros(self.shapes[t]) for _, t in self.graph.edges]

    def _exponents(self, theta: Sequence[np.ndarray], lam: Sequence[np.ndarray]) -> list[np.ndarray]:
        """ψ_r = θ_r + Σ_c λ_{c→r} − Σ_p λ_{r→p} for every region."""
        psi = [np.array(np.broadcast_to(th, s), dtype=float) for th, s in zip(theta, self.shapes)]
        for e, (p, t) in enumerate(self.graph.edges):
            psi[p] += lam[e].reshape(self.up_shape[e])
            psi[t] -= lam[e]
        return psi

    def _sweep(self, psi: list[np.ndarray], lam: list[np.ndarray]) -> float:
        graph, kappa, d = self.graph, self.kappa, self.damping
        change = 0.0
        for t in self.order:
            edges = graph.parents[t]
            msgs = []
            for e in edges:
                p = graph.edges[e][0]
                inner = psi[p] - lam[e].reshape(self.up_shape[e])
                if kappa[p] != 1.0:
                    inner = inner / kappa[p]
                m = logsumexp(inner, self.sum_axes[e])
                msgs.append(m * kappa[p] if kappa[p] != 1.0 else m)
            a_t = psi[t] + sum(lam[e] for e in edges)
            phi = (a_t + sum(msgs)) / (kappa[t] + sum(kappa[graph.edges[e][0]] for e in edges))
            for e, m in zip(edges, msgs):
                p = graph.edges[e][0]
                new = kappa[p] * phi - m
                if d:
                    new = (1.0 - d) * new + d * lam[e]
                delta = new - lam[e]
                # Normalisation makes a constant shift of a multiplier irrelevant;
                # removing it keeps magnitudes bounded and the change test honest.
                delta -= delta.mean()
                change = max(change, float(np.abs(delta).max()))
                lam[e] = lam[e] + delta
                psi[p] += delta.reshape(self.up_shape[e])
                psi[t] -= delta
        return change

    def beliefs(self, psi: Sequence[np.ndarray], total: float = 1.0) -> list[np.ndarray]:
        """τ_r ∝ exp(ψ_r/κ_r), each scaled to sum to ``total``."""
        out = []
        for r, x in enumerate(psi):
            if self.kappa[r] != 1.0:
                x = x / self.kappa[r]
            z = logsumexp(x, tuple(range(x.ndim)))
            out.append(np.exp(x - z) * total)
        return out

    def run(self, theta: Sequence[np.ndarray], total: float = 1.0,
            messages: Sequence[np.ndarray] | None = None, *, sweeps: int = 1000,
            tol: float = 1e-10) -> GBPResult:
        """CONVEX-GBP(θ): up to ``sweeps`` sweeps, stopping once no multiplier moves by
        more than ``tol`` (log units), warm-started from ``messages`` when given."""
        if len(theta) != len(self.shapes):
            raise ValueError(f"ConvexGBP: {len(theta)} parameter tables for {len(self.shapes)} regions")
        lam = self.initial_messages() if messages is None else [np.array(m, dtype=float) for m in messages]
        psi = self._exponents(theta, lam)
        change, done = np.inf, 0
        for done in range(1, sweeps + 1):  # noqa: B007 - the sweeps run, read after the loop
            change = self._sweep(psi, lam)
            if change <= tol:
                break
        return GBPResult(self.beliefs(psi, total), lam, done, change)

    # --- a persistent state for Prox-PGM (§6 warm starts) ------------------------------
    def start(self, theta: Sequence[np.ndarray], messages: Sequence[np.ndarray] | None = None
              ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """(ψ, λ) for ``theta`` and warm-start ``messages``; owned by the caller, which then
        alternates :meth:`shift` (a change of θ_r is the same change of ψ_r) and
        :meth:`advance`, so no exponent table is rebuilt between outer iterations."""
        lam = self.initial_messages() if messages is None else [np.array(m, dtype=float) for m in messages]
        return self._exponents(theta, lam), lam

    @staticmethod
    def shift(psi: list[np.ndarray], region: int, delta: np.ndarray) -> None:
        psi[region] += delta

    def advance(self, psi: list[np.ndarray], lam: list[np.ndarray], sweeps: int, tol: float = 0.0
                ) -> tuple[int, float]:
        """Run up to ``sweeps`` sweeps in place; returns (sweeps run, last change)."""
        change, done = np.inf, 0
        for done in range(1, sweeps + 1):  # noqa: B007 - the sweeps run, read after the loop
            change = self._sweep(psi, lam)
            if change <= tol:
                break
        return done, change

    def marginals(self, theta: Sequence[np.ndarray], total: float = 1.0, **kw) -> list[np.ndarray]:
        """MARGINAL-ORACLE(θ) run to convergence (same signature as the exact oracle)."""
        return self.run(theta, total, **kw).marginals

    def violation(self, tau: Sequence[np.ndarray]) -> float:
        """max over edges p → t of ‖P_{p→t} τ_p − τ_t‖₁ / 1ᵀτ_t (relative L1)."""
        worst = 0.0
        for e, (p, t) in enumerate(self.graph.edges):
            proj = tau[p].sum(axis=self.sum_axes[e]) if self.sum_axes[e] else tau[p]
            proj = proj.reshape(self.shapes[t])
            worst = max(worst, float(np.abs(proj - tau[t]).sum() / max(tau[t].sum(), 1e-300)))
        return worst
