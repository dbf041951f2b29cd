"""The fitted graphical model p_θ and everything answered from it (thesis §4.4).

:class:`GraphicalModel` holds the log-potentials θ on the cliques of a junction tree
and the number of records N.  It is calibrated once at construction (one pass of
belief propagation), so

* a marginal inside one clique is read from that clique's belief (thesis §4.4.1,
  r ∈ C₊);
* any other marginal, and any Kronecker query (Algorithm 4), goes through variable
  elimination on the smallest covering subtree, planned, cost-checked and cached by
  the query's structure (:mod:`dpsql.pgm.elimination`);
* synthetic records are drawn clique by clique along the tree (§4.4.3,
  :mod:`dpsql.pgm.synthetic`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from dpsql.domain import Domain
from dpsql.pgm.clique_vector import CliqueVector
from dpsql.pgm.elimination import KEEP, Eliminator
from dpsql.pgm.factor import Factor
from dpsql.pgm.inference import BeliefPropagation
from dpsql.pgm.junction_tree import JunctionTree
from dpsql.pgm.measurement import dense, group_rows, into_buckets

__all__ = ["GraphicalModel"]

# Query answering may build intermediate tables up to this many cells (800 MB).
DEFAULT_QUERY_CAPACITY = 100_000_000


class GraphicalModel:
    """p_θ(x) ∝ exp Σ_C θ_C(x_C) over the cliques of ``tree``, scaled to ``total`` records.

    ``theta[i]`` is the log-potential of ``tree.cliques[i]`` (canonical axis order).
    ``measured`` records the measured cliques and ``loss`` the loss per iteration.
    """

    # How a fit ended (set by dpsql.pgm.estimation; None for a model built otherwise): the
    # exact face step's report, the direct solve's certificate, the workload-metric choice.
    polished: tuple | None = None
    solved: tuple | None = None
    metric: Any = None
    refused: str | None = None     # why the face step was not taken, when it was tried
    gap: tuple | None = None       # the first-order fit's (atol, rtol) as applied

    def __init__(self, domain: Domain, tree: JunctionTree, theta: Sequence[np.ndarray],
                 total: float, *, measured: Iterable[Sequence[str]] = (),
                 loss: Sequence[float] = (), query_capacity: int = DEFAULT_QUERY_CAPACITY) -> None:
        theta = [np.asarray(t, dtype=float) for t in theta]
        belief, log_z = BeliefPropagation(tree).beliefs(theta)
        self._set(domain, tree, theta, total, [np.exp(b - log_z) for b in belief], log_z, measured, loss,
                  query_capacity)

    @classmethod
    def from_parts(cls, domain: Domain, tree: JunctionTree, theta: Sequence[np.ndarray], total: float,
                   probs: Sequence[np.ndarray], log_partition: float, *,
                   measured: Iterable[Sequence[str]] = (), loss: Sequence[float] = (),
                   query_capacity: int = DEFAULT_QUERY_CAPACITY) -> GraphicalModel:
        """A model from stored parts: the calibrated clique probabilities ``probs`` (as
        computed for ``theta``) are taken as given, so no belief propagation runs
        (``dpsql.pgm.store`` loads saved models this way)."""
        self = cls.__new__(cls)
        probs = [np.asarray(p, dtype=float) for p in probs]
        theta = [np.asarray(t, dtype=float) for t in theta]
        if [p.shape for p in probs] != [t.shape for t in theta]:
            raise ValueError("from_parts: probabilities and potentials have different shapes")
        self._set(domain, tree, theta, total, probs, float(log_partition), measured, loss, query_capacity)
        return self

    def _set(self, domain: Domain, tree: JunctionTree, theta: list[np.ndarray], total: float,
             probs: list[np.ndarray], log_partition: float, measured: Iterable[Sequence[str]],
             loss: Sequence[float], query_capacity: int) -> None:
        """The state of a model, from its calibrated clique probabilities ``probs`` (either
        constructor: ``__init__`` runs belief propagation for them, ``from_parts`` is given them)."""
        self.domain = domain
        self.tree = tree
        self.theta = theta
        self.total = float(total)
        self.measured = [tuple(c) for c in measured]
        self.loss = list(loss)
        self.log_partition = log_partition
        self._probs = probs
        self._elim = Eliminator(tree, probs, query_capacity)
        self._position = {a: i for i, a in enumerate(domain.attributes)}

    # --- structure -----------------------------------------------------------------------
    @property
    def cliques(self) -> list[tuple[str, ...]]:
        """The model's (maximal, junction-tree) cliques, canonical order."""
        return list(self.tree.cliques)

    def supports(self, attrs: Iterable[str]) -> bool:
        """True when ``attrs`` lie inside one fitted clique (answered from a belief)."""
        attrs = set(attrs)
        return not attrs or any(attrs <= s for s in self.tree.clique_sets)

    @property
    def potentials(self) -> CliqueVector:
        return CliqueVector({c: Factor(self.domain.project(c), t)
                             for c, t in zip(self.tree.cliques, self.theta)})

    def potential_arrays(self) -> list[tuple[tuple[str, ...], np.ndarray]]:
        return list(zip(self.tree.cliques, self.theta))

    @property
    def marginals(self) -> CliqueVector:
        """Calibrated clique marginals μ (sum = total), the fitted clique vector."""
        return CliqueVector({c: Factor(self.domain.project(c), p * self.total)
                             for c, p in zip(self.tree.cliques, self._probs)})

    # --- marginals -----------------------------------------------------------------------
    def _canonical(self, attrs: Iterable[str]) -> tuple[str, ...]:
        attrs = tuple(attrs)
        for a in attrs:
            if a not in self._position:
                raise ValueError(f"attribute {a!r} is not in the model's domain")
        if len(set(attrs)) != len(attrs):
            raise ValueError(f"attributes repeat in {attrs}")
        return tuple(sorted(attrs, key=self._position.__getitem__))

    def marginal(self, attrs: Sequence[str]) -> Factor:
        """μ_r = M_r p_θ (sum = total) over ``attrs`` in the given order (thesis §4.4.1)."""
        attrs = tuple(attrs)
        canon = self._canonical(attrs)
        arr = self._canonical_marginal(canon)
        if canon != attrs:
            arr = arr.transpose([canon.index(a) for a in attrs])
        return Factor(self.domain.project(attrs), arr * self.total)

    def _canonical_marginal(self, canon: tuple[str, ...]) -> np.ndarray:
        want = set(canon)
        for i in self.tree.by_attribute.get(canon[0], ()) if canon else (self.tree.root,):
            if want <= self.tree.clique_sets[i]:
                clique = self.tree.cliques[i]
                axes = tuple(j for j, a in enumerate(clique) if a not in want)
                return self._probs[i].sum(axis=axes) if axes else self._probs[i]
        plan = self._elim.plan(tuple((a, KEEP) for a in canon))
        return self._elim.run(plan, {})

    def marginals_many(self, cliques: Iterable[Sequence[str]]) -> list[Factor]:
        """Many marginals; calibration and elimination plans are shared across them."""
        return [self.marginal(c) for c in cliques]

    # --- linear queries (Algorithm 4) -----------------------------------------------------
    def answer(self, query) -> np.ndarray:
        """Q p_θ (scaled to the total) for a Kron over ``domain.attributes`` or a Union /
        Weighted of such; Union rows are concatenated in block order."""
        if hasattr(query, "blocks"):
            parts = [self.answer(b) for b in query.blocks]
            return np.concatenate(parts) if parts else np.zeros(0)
        if hasattr(query, "weight") and hasattr(query, "base"):
            return float(query.weight) * self.answer(query.base)
        if not hasattr(query, "factors"):
            raise TypeError(f"answer: expected a Kron, Union or Weighted query, got {type(query).__name__}")
        factors = list(query.factors)
        if len(factors) != len(self.domain.attributes):
            raise ValueError(f"answer: Kron has {len(factors)} factors for "
                             f"{len(self.domain.attributes)} attributes")
        roles: list[tuple[str, str | int]] = []
        matrices: dict[str, np.ndarray] = {}
        buckets: list[tuple[int, np.ndarray, int]] = []   # (output axis, mapping, rows)
        for a, n, f in zip(self.domain.attributes, self.domain.shape, factors):
            rows, cols = (int(s) for s in f.shape)
            if cols != n:
                raise ValueError(f"answer: factor for {a!r} has {cols} columns, attribute has {n} cells")
            kind = type(f).__name__
            if kind == "Total":
                continue
            if kind == "Identity":
                roles.append((a, KEEP))
                continue
            mapping = group_rows(f)
            if mapping is not None:
                # a GROUP BY (with or without a filter): keep the attribute, then pick its
                # cells into their rows; never the rows × n dense matrix (1,459² on a large
                # categorical: 20 ms a query, issue 35)
                buckets.append((len(roles), mapping, rows))
                roles.append((a, KEEP))
                continue
            d = dense(f)
            if rows == 1 and np.all(d == 1.0):
                continue
            if rows == n and np.array_equal(d, np.eye(n)):
                roles.append((a, KEEP))
                continue
            roles.append((a, rows))
            matrices[a] = d
        plan = self._elim.plan(tuple(roles))
        out = self._elim.run(plan, matrices)
        for axis, mapping, rows in buckets:
            out = into_buckets(out, axis, mapping, rows)
        return out.ravel() * self.total

    def answer_many(self, queries: Iterable) -> list[np.ndarray]:
        """Answers to many queries; queries of the same structure share one plan."""
        return [self.answer(q) for q in queries]

    # --- synthetic data -------------------------------------------------------------------
    def synthetic(self, rows: int | None = None, method: str = "rounding",
                  rng: np.random.Generator | None = None) -> np.ndarray:
        """Synthetic records (rows × attributes, cell indices in domain order; §4.4.3)."""
        from dpsql.pgm.synthetic import synthesize
        rows = int(round(self.total)) if rows is None else int(rows)
        return synthesize(self.tree, self._probs, self.domain.attributes, rows, method,
                          rng if rng is not None else np.random.default_rng())

    def __repr__(self) -> str:
        return (f"GraphicalModel({len(self.domain)} attributes, {len(self.tree.cliques)} cliques, "
                f"size={self.tree.size}, total={self.total:.6g})")

