"""Clique vectors: one factor per clique, as a single vector (thesis §4.3, μ and θ).

The marginal vector μ = (μ_r)_{r∈C} and the parameter vector θ = (θ_r)_{r∈C} of
thesis Definition 25 are both indexed by cliques.  :class:`CliqueVector` gives them
vector-space arithmetic (``+``, ``-``, scalar ``*``, :meth:`dot`) so that mirror-descent
updates such as θ − η∇L(μ) read as in Algorithm 2, plus the two maps between clique
sets: :meth:`expand` (potentials onto larger cliques, summing contributions) and
:meth:`project` (marginals down onto smaller cliques).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence

from dpsql.domain import Domain
from dpsql.pgm.factor import Factor

__all__ = ["CliqueVector"]


class CliqueVector(Mapping):
    """An immutable mapping ``clique (tuple of attributes) -> Factor``."""

    __slots__ = ("_factors",)

    def __init__(self, factors: Mapping[tuple[str, ...], Factor]) -> None:
        self._factors = {tuple(c): f for c, f in factors.items()}
        for c, f in self._factors.items():
            if set(c) != set(f.attributes):
                raise ValueError(f"CliqueVector: factor over {f.attributes} stored under clique {c}")

    @classmethod
    def zeros(cls, domain: Domain, cliques: Iterable[Sequence[str]]) -> CliqueVector:
        return cls({tuple(c): Factor.zeros(domain.project(c)) for c in cliques})

    @classmethod
    def uniform(cls, domain: Domain, cliques: Iterable[Sequence[str]],
                total: float = 1.0) -> CliqueVector:
        return cls({tuple(c): Factor.uniform(domain.project(c), total) for c in cliques})

    def __getitem__(self, clique) -> Factor:
        return self._factors[tuple(clique)]

    def __iter__(self) -> Iterator[tuple[str, ...]]:
        return iter(self._factors)

    def __len__(self) -> int:
        return len(self._factors)

    @property
    def cliques(self) -> list[tuple[str, ...]]:
        return list(self._factors)

    def _zip(self, other: CliqueVector, op) -> CliqueVector:
        if set(self._factors) != set(other._factors):
            raise ValueError("CliqueVector: operands are over different clique sets")
        return CliqueVector({c: op(f, other[c]) for c, f in self._factors.items()})

    def __add__(self, other):
        if isinstance(other, CliqueVector):
            return self._zip(other, lambda a, b: a + b)
        return CliqueVector({c: f + other for c, f in self._factors.items()})

    __radd__ = __add__

    def __sub__(self, other):
        if isinstance(other, CliqueVector):
            return self._zip(other, lambda a, b: a - b)
        return CliqueVector({c: f - other for c, f in self._factors.items()})

    def __mul__(self, scalar: float) -> CliqueVector:
        return CliqueVector({c: f * float(scalar) for c, f in self._factors.items()})

    __rmul__ = __mul__

    def __neg__(self):
        return self * -1.0

    def dot(self, other: CliqueVector) -> float:
        """⟨self, other⟩ = Σ_r ⟨self_r, other_r⟩ (the pairing μᵀθ of thesis §4.3.2)."""
        if set(self._factors) != set(other._factors):
            raise ValueError("CliqueVector.dot: operands are over different clique sets")
        return sum(f.dot(other[c]) for c, f in self._factors.items())

    def expand(self, domain: Domain, cliques: Iterable[Sequence[str]]) -> CliqueVector:
        """Potentials onto ``cliques``: each factor is added to one clique that contains it.

        Σ_r θ_r(x_r) is unchanged, so the distribution p_θ is the same.
        """
        out = {tuple(d): Factor.zeros(domain.project(d)) for d in cliques}
        for c, f in self._factors.items():
            host = next((d for d in out if set(c) <= set(d)), None)
            if host is None:
                raise ValueError(f"CliqueVector.expand: no target clique contains {c}")
            out[host] = out[host] + f
        return CliqueVector(out)

    def project(self, cliques: Iterable[Sequence[str]]) -> CliqueVector:
        """Marginals onto ``cliques``, each summed down from a factor that contains it."""
        out = {}
        for d in (tuple(c) for c in cliques):
            src = next((f for c, f in self._factors.items() if set(d) <= set(c)), None)
            if src is None:
                raise ValueError(f"CliqueVector.project: no clique contains {d}")
            out[d] = src.project(d)
        return CliqueVector(out)

    def __repr__(self) -> str:
        return f"CliqueVector({list(self._factors)})"

