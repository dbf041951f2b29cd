"""The relaxed model: pseudo-marginals on a region graph and the answers they give.

:class:`RelaxedModel` is what :func:`~dpsql.pgm.relaxed.estimate_relaxed` produces
wrapped in the interface of :class:`~dpsql.pgm.model.GraphicalModel` (``domain``,
``cliques``, ``total``, ``marginal``, ``marginals_many``, ``answer``,
``answer_many``, ``supports``), so callers need not know which estimator ran.

* A marginal inside a region is summed down from the smallest region containing it
  (NeurIPS 2021 §4, "in-model").  Regions agree on their overlaps to the oracle's
  tolerance, so the choice of region does not matter.
* Any other marginal is the maximum-entropy, least-inconsistent τ̂_r of Problem 4
  (:mod:`dpsql.pgm.out_of_model`), computed once per clique and cached.  There is no
  p_θ behind the pseudo-marginals (App. B.1: θ̂ is meaningful only to CONVEX-GBP),
  so variable elimination is neither possible nor wanted.
* A Kronecker query (factors aligned with ``domain.attributes``; Total or all-ones
  factors sum an attribute out) is answered by applying its factors to the marginal
  over the remaining attributes, as in thesis Algorithm 4 restricted to one table.
* Synthetic data needs a joint distribution, which pseudo-marginals do not define:
  :meth:`synthetic` raises NotSupportedError with a hint.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from dpsql.domain import Domain
from dpsql.errors import NotSupportedError
from dpsql.pgm.factor import Factor
from dpsql.pgm.measurement import dense, group_rows, into_buckets
from dpsql.pgm.out_of_model import max_entropy_marginal
from dpsql.pgm.relaxed import RelaxedFit
from dpsql.pgm.report import FitReport

__all__ = ["RelaxedModel"]


def _span(values) -> str:
    arr = np.atleast_1d(np.asarray(values, dtype=float))
    lo, hi = float(arr.min()), float(arr.max())
    return f"{lo:.3g}" if lo == hi else f"{lo:.3g}–{hi:.3g}"


class RelaxedModel:
    """Pseudo-marginals τ̂ ∈ L(G) scaled to ``total`` records, with out-of-model inference.

    ``fit`` is the :class:`RelaxedFit` of Problem 2; ``measured`` the measured cliques;
    ``reason`` says why the relaxed estimator was chosen (shown by :meth:`summary`).
    """

    def __init__(self, domain: Domain, fit: RelaxedFit, *, measured: Iterable[Sequence[str]] = (),
                 reason: str = "requested", seconds: float | None = None,
                 stopped: str | None = None, report: FitReport | None = None) -> None:
        self.domain = domain
        self.fit = fit
        self.graph = fit.graph
        self.total = float(fit.total)
        self.measured = [tuple(c) for c in measured]
        self.reason = reason
        self.seconds = seconds
        self.stopped = stopped
        self.report = report    # the finisher that ran, its certificate, the refusals
        self._position = {a: i for i, a in enumerate(domain.attributes)}
        self._cache: dict[tuple[str, ...], np.ndarray] = {}

    # --- structure -----------------------------------------------------------------------
    @property
    def cliques(self) -> list[tuple[str, ...]]:
        """The maximal regions (canonical order): the largest tables the model holds."""
        return self.graph.maximal()

    @property
    def theta(self) -> list[np.ndarray]:
        return self.fit.theta

    @property
    def messages(self) -> list[np.ndarray]:
        return self.fit.messages

    @property
    def loss(self) -> list[float]:
        return self.fit.loss

    def supports(self, attrs: Iterable[str]) -> bool:
        """True when ``attrs`` lie inside one region (answered without Problem 4)."""
        return self.graph.supports(self._canonical(attrs))

    @property
    def marginals(self) -> dict[tuple[str, ...], Factor]:
        """The fitted pseudo-marginals, one per region (sum = total)."""
        return {r: Factor(self.domain.project(r), p * self.total)
                for r, p in zip(self.graph.regions, self.fit.probs)}

    # --- marginals -----------------------------------------------------------------------
    def _canonical(self, attrs: Iterable[str]) -> tuple[str, ...]:
        attrs = tuple(attrs)
        for a in attrs:
            if a not in self._position:
                raise ValueError(f"attribute {a!r} is not in the model's domain")
        if len(set(attrs)) != len(attrs):
            raise ValueError(f"attributes repeat in {attrs}")
        return tuple(sorted(attrs, key=self._position.__getitem__))

    def _probabilities(self, canon: tuple[str, ...]) -> np.ndarray:
        """τ̂ over canonical ``canon`` as probabilities (in-model or Problem 4)."""
        if not canon:
            return np.ones(())
        hit = self._cache.get(canon)
        if hit is not None:
            return hit
        try:
            h = self.graph.host(canon)
        except KeyError:
            out = max_entropy_marginal(self.graph, self.fit.probs, canon)
        else:
            region = self.graph.regions[h]
            axes = tuple(i for i, a in enumerate(region) if a not in canon)
            out = self.fit.probs[h].sum(axis=axes) if axes else self.fit.probs[h]
        self._cache[canon] = out
        return out

    def marginal(self, attrs: Sequence[str]) -> Factor:
        """τ̂_r (sum = total) over ``attrs`` in the given order."""
        attrs = tuple(attrs)
        canon = self._canonical(attrs)
        arr = self._probabilities(canon)
        if canon != attrs:
            arr = arr.transpose([canon.index(a) for a in attrs])
        return Factor(self.domain.project(attrs), arr * self.total)

    def marginals_many(self, cliques: Iterable[Sequence[str]]) -> list[Factor]:
        """Many marginals; each distinct clique is estimated once."""
        return [self.marginal(c) for c in cliques]

    # --- linear queries ------------------------------------------------------------------
    def answer(self, query) -> np.ndarray:
        """Q τ̂ (scaled to the total) for a Kron over ``domain.attributes`` or a Union /
        Weighted / Sum of such; Union rows are concatenated in block order."""
        if hasattr(query, "blocks"):
            parts = [self.answer(b) for b in query.blocks]
            return np.concatenate(parts) if parts else np.zeros(0)
        if hasattr(query, "terms"):
            parts = [self.answer(t) for t in query.terms]
            return np.sum(parts, axis=0)
        if hasattr(query, "weight") and hasattr(query, "base"):
            return float(query.weight) * self.answer(query.base)
        if not hasattr(query, "factors"):
            raise TypeError(f"answer: expected a Kron, Union, Weighted or Sum query, "
                            f"got {type(query).__name__}")
        factors = list(query.factors)
        if len(factors) != len(self.domain.attributes):
            raise ValueError(f"answer: Kron has {len(factors)} factors for "
                             f"{len(self.domain.attributes)} attributes")
        keep: list[str] = []
        mats: list[np.ndarray | None] = []
        rows_of: list[int] = []
        for a, n, f in zip(self.domain.attributes, self.domain.shape, factors):
            rows, cols = (int(s) for s in f.shape)
            if cols != n:
                raise ValueError(f"answer: factor for {a!r} has {cols} columns, attribute has {n} cells")
            if type(f).__name__ == "Total":
                continue
            mapping = group_rows(f)
            if mapping is not None:
                keep.append(a)     # a GROUP BY: its cells picked into their rows, never densified
                mats.append(mapping)
                rows_of.append(rows)
                continue
            d = None if type(f).__name__ == "Identity" else dense(f)
            if d is not None and rows == 1 and np.all(d == 1.0):
                continue
            if d is not None and rows == n and np.array_equal(d, np.eye(n)):
                d = None
            keep.append(a)
            mats.append(d)
            rows_of.append(rows)
        table = self._probabilities(tuple(keep))
        for axis, d in enumerate(mats):
            if d is not None and d.ndim == 1:       # a group_rows map
                table = into_buckets(table, axis, d, rows_of[axis])
            elif d is not None:
                table = np.moveaxis(np.tensordot(d, table, axes=([1], [axis])), 0, axis)
        return np.asarray(table).ravel() * self.total

    def answer_many(self, queries: Iterable) -> list[np.ndarray]:
        return [self.answer(q) for q in queries]

    # --- synthetic data ------------------------------------------------------------------
    def synthetic(self, rows: int | None = None, method: str = "rounding", rng=None):
        raise NotSupportedError(
            "synthetic data needs a joint distribution; the relaxed model holds only "
            "locally consistent pseudo-marginals",
            hint="answer marginals and linear queries from this model, or fit the exact "
                 "model (method='exact', with a larger capacity or fewer/smaller cliques) "
                 "to sample records")

    # --- description ---------------------------------------------------------------------
    def summary(self) -> str:
        fit = self.fit
        if getattr(fit, "method", "prox-pgm") == "residual":
            lines = [
                "relaxed model (residual reconstruction: GReM least squares, then local "
                "non-negativity, NeurIPS 2024; Problem 2 of NeurIPS 2021 over the local polytope)",
                f"why: {self.reason}",
                f"structure: {self.graph.describe()}",
                f"measured cliques: {len(set(self.measured))}; total N = {self.total:,.6g}",
                f"loss: least squares {fit.loss[0]:.6g} → {fit.loss[-1]:.6g} with the tables "
                f"non-negative; {fit.iterations} dual evaluations",
                "out-of-model marginals: maximum entropy subject to minimum L2 violation "
                "(Problem 4)",
            ]
            return "\n".join(lines + self._ending())
        lines = [
            "relaxed model (Approx-Private-PGM: Prox-PGM over the local polytope, "
            "NeurIPS 2021 §4)",
            f"why: {self.reason}",
            f"structure: {self.graph.describe()}",
            f"measured cliques: {len(set(self.measured))}; total N = {self.total:,.6g}",
            f"oracle: Convex-GBP, counting numbers {_span(fit.kappa)}, damping {fit.damping}; "
            f"{fit.iterations} iterations, step {fit.stepsize:.3g}",
            f"loss: {fit.loss[0]:.6g} → {fit.loss[-1]:.6g}; "
            f"max local-consistency violation {fit.violation:.2e}",
            "out-of-model marginals: maximum entropy subject to minimum L2 violation "
            "(Problem 4)",
        ]
        return "\n".join(lines + self._ending())

    def _ending(self) -> list[str]:
        lines = [f"stopped: {self.stopped}"] if self.stopped else []
        if self.report is not None:
            lines += self.report.lines()
        if self.seconds is not None:
            lines.append(f"fitted in {self.seconds:.2f} s")
        return lines

    def __repr__(self) -> str:
        return (f"RelaxedModel({len(self.domain)} attributes, {len(self.graph.regions)} regions, "
                f"size={self.graph.size}, total={self.total:.6g})")
