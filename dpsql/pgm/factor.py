"""Factors: arrays with named axes over a :class:`~dpsql.domain.Domain` (thesis §4.3).

A :class:`Factor` is the unit the graphical model is built from: a clique marginal
μ_r, a log-potential θ_r, or a query answer over some attributes.  Arithmetic between
factors aligns axes by attribute name (expanding to the union of the two domains),
so callers never track axis positions.  Log-space reductions (:meth:`Factor.logsumexp`)
are shifted by the maximum so that potentials of any magnitude stay finite.

The estimator's inner loop does not build Factor objects (it works on raw arrays laid
out in canonical attribute order, see :mod:`dpsql.pgm.inference`); Factor is the
public, self-describing form of the same data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np

from dpsql.domain import Domain

__all__ = ["Factor", "logsumexp"]

_max, _sum = np.maximum.reduce, np.add.reduce
_exp, _log = np.exp, np.log


def logsumexp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool = False) -> np.ndarray:
    """``log Σ exp x`` over ``axes``, shifted by the maximum for numerical stability.

    Rows that are entirely ``-inf`` give ``-inf`` rather than NaN.
    """
    if not axes:
        return x
    m = _max(x, axis=axes, keepdims=True)
    if np.isfinite(_sum(m, axis=None)):
        # Every row has a finite maximum, so every sum is ≥ 1: no log(0), no guard.  (Bare
        # ufunc reductions: Convex-GBP calls this ~180 times per iteration on small tables,
        # where numpy's wrappers and the errstate context cost more than the arithmetic.)
        out = _log(_sum(_exp(x - m), axis=axes, keepdims=True)) + m
    else:   # a row of -inf (or a sum that overflowed): the guarded form
        m = np.where(np.isfinite(m), m, 0.0)
        with np.errstate(divide="ignore"):
            out = np.log(np.sum(np.exp(x - m), axis=axes, keepdims=True)) + m
    if not keepdims:
        out = out.squeeze(axis=axes)
    return out


class Factor:
    """An array ``values`` whose axes are ``domain.attributes`` (in that order)."""

    __slots__ = ("domain", "values")

    def __init__(self, domain: Domain, values) -> None:
        values = np.asarray(values, dtype=float)
        if values.size != domain.size():
            raise ValueError(f"Factor: {values.size} values for a domain of {domain.size()} cells")
        self.domain = domain
        self.values = values.reshape(domain.shape)

    # --- construction ------------------------------------------------------------------
    @classmethod
    def zeros(cls, domain: Domain) -> Factor:
        return cls(domain, np.zeros(domain.shape))

    @classmethod
    def ones(cls, domain: Domain) -> Factor:
        return cls(domain, np.ones(domain.shape))

    @classmethod
    def uniform(cls, domain: Domain, total: float = 1.0) -> Factor:
        return cls(domain, np.full(domain.shape, total / domain.size()))

    @property
    def attributes(self) -> tuple[str, ...]:
        return self.domain.attributes

    # --- axis bookkeeping --------------------------------------------------------------
    def transpose(self, attrs: Sequence[str]) -> Factor:
        """The same factor with axes in the order ``attrs`` (a permutation)."""
        attrs = tuple(attrs)
        if set(attrs) != set(self.attributes) or len(attrs) != len(self.attributes):
            raise ValueError(f"transpose: {attrs} is not a permutation of {self.attributes}")
        return Factor(self.domain.project(attrs), np.transpose(self.values, self.domain.axes(attrs)))

    def expand(self, domain: Domain) -> Factor:
        """Broadcast to the larger ``domain`` (constant along the new attributes)."""
        missing = [a for a in self.attributes if a not in domain]
        if missing:
            raise ValueError(f"expand: target domain lacks {missing}")
        present = [a for a in domain.attributes if a in self.domain]
        arr = np.transpose(self.values, self.domain.axes(present))
        shape = [domain[a] if a in self.domain else 1 for a in domain.attributes]
        return Factor(domain, np.broadcast_to(arr.reshape(shape), domain.shape).copy())

    def _reduce_axes(self, attrs: Iterable[str]) -> tuple[tuple[int, ...], tuple[str, ...]]:
        out = tuple(a for a in self.attributes if a not in set(attrs))
        return self.domain.axes(a for a in self.attributes if a not in out), out

    # --- reductions --------------------------------------------------------------------
    def sum(self, attrs: Iterable[str] | None = None) -> Factor | float:
        """Sum out ``attrs`` (all attributes when None, giving a float)."""
        if attrs is None:
            return float(self.values.sum())
        axes, keep = self._reduce_axes(attrs)
        return Factor(self.domain.project(keep), self.values.sum(axis=axes))

    def logsumexp(self, attrs: Iterable[str] | None = None) -> Factor | float:
        """``log Σ exp`` over ``attrs`` (all when None): sum-out in log space."""
        if attrs is None:
            return float(logsumexp(self.values, tuple(range(self.values.ndim))))
        axes, keep = self._reduce_axes(attrs)
        return Factor(self.domain.project(keep), logsumexp(self.values, axes))

    def project(self, attrs: Sequence[str], log: bool = False) -> Factor:
        """Marginal over ``attrs`` in the given order (log-space sum-out when ``log``)."""
        attrs = tuple(attrs)
        drop = [a for a in self.attributes if a not in attrs]
        out = self.logsumexp(drop) if log else self.sum(drop)
        assert isinstance(out, Factor)  # a list of attributes summed out: a table, not a float
        return out.transpose(attrs)

    # --- arithmetic --------------------------------------------------------------------
    def _binary(self, other, op) -> Factor:
        if isinstance(other, Factor):
            domain = self.domain.merge(other.domain)
            return Factor(domain, op(self.expand(domain).values, other.expand(domain).values))
        return Factor(self.domain, op(self.values, other))

    def __add__(self, other):
        return self._binary(other, np.add)

    __radd__ = __add__

    def __sub__(self, other):
        return self._binary(other, np.subtract)

    def __rsub__(self, other):
        return Factor(self.domain, other - self.values)

    def __mul__(self, other):
        return self._binary(other, np.multiply)

    __rmul__ = __mul__

    def __truediv__(self, other):
        def div(a, b):
            with np.errstate(divide="ignore", invalid="ignore"):
                out = np.divide(a, b)
            return np.where(b == 0, 0.0, out)  # 0/0 := 0 keeps zero cells zero
        return self._binary(other, div)

    def __neg__(self):
        return Factor(self.domain, -self.values)

    def exp(self) -> Factor:
        return Factor(self.domain, np.exp(self.values))

    def log(self) -> Factor:
        with np.errstate(divide="ignore"):
            return Factor(self.domain, np.log(self.values))

    def dot(self, other: Factor) -> float:
        other = other.transpose(self.attributes) if other.attributes != self.attributes else other
        return float(np.vdot(self.values, other.values))

    def normalize(self, total: float = 1.0, log: bool = False) -> Factor:
        """Scale to sum ``total`` (or shift log values so that ``exp`` sums to ``total``)."""
        if log:
            return Factor(self.domain, self.values - self.logsumexp() + np.log(total))
        return Factor(self.domain, self.values * (total / self.values.sum()))

    def datavector(self, flatten: bool = True) -> np.ndarray:
        """The values in C order over ``self.attributes`` (a copy)."""
        return self.values.ravel().copy() if flatten else self.values.copy()

    def __repr__(self) -> str:
        return f"Factor({self.attributes}, shape={self.values.shape})"
