"""Strategies: what the planner hands to the measure step, and how it is rounded.

A :class:`Strategy` is a union of weighted Kronecker products over the full domain (every
HDMM operator's output has this form: OPT_0/OPT_⊗ one product, OPT_+ several, OPT_M one per
marginal; thesis §3.5-3.7).  Internally each product is a :class:`KronBlock` of small dense
per-attribute factors.  The measure step sees :class:`MeasurementBlock`\\ s instead: a factor
that is a (scaled) row of ones sums its attribute out, so a block only needs the marginal on
the attributes whose factor is not a Total (its *clique*), with the Kron of the remaining
factors as the query on that marginal (thesis §3.9: measuring is Algorithm 1 applied to the
data vector; on a marginal it is the same product with the summed-out axes gone).

Privacy: measured values must lie on a lattice before noise is added (exact discrete
samplers).  Identity, Total and marginal factors are integer already; real-valued factors are
rounded to multiples of a grid ``g`` by :func:`round_blocks` (``planner.round_strategy``
recomputes the sensitivity and the expected error on the rounded matrix), so the numbers the planner reports
are those of the matrix actually measured.  A block's values then lie on the lattice
(Π of its factors' grids)·ℤ, recorded in :attr:`MeasurementBlock.grid`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.plan.gram import scaled_identity

__all__ = ["KronBlock", "MeasurementBlock", "Strategy", "factor_kind", "block_sensitivity",
           "eye_factor", "ones_factor",
           "union_sensitivity", "round_blocks"]


@functools.cache
def eye_factor(n: int) -> np.ndarray:
    """A shared read-only n×n identity (marginal blocks reuse it: ``factor_kind`` and the
    column norms recognise it by identity instead of comparing n² entries)."""
    E = np.eye(n)
    E.flags.writeable = False
    return E


@functools.cache
def ones_factor(n: int) -> np.ndarray:
    """A shared read-only 1×n row of ones (a Total factor)."""
    T = np.ones((1, n))
    T.flags.writeable = False
    return T


def factor_kind(F: np.ndarray) -> tuple[str, float]:
    """('total', c) for c·1ᵀ, ('identity', c) for c·I, else ('other', 1)."""
    m, n = F.shape
    if m == n and n <= 4096 and F is eye_factor(n):
        return "identity", 1.0
    if m == 1 and F is ones_factor(n):
        return "total", 1.0
    c = float(F.flat[0])
    if c != 0.0 and m == 1 and np.all(F == c):
        return "total", c
    if m == n and scaled_identity(F) is not None:
        return "identity", c
    return "other", 1.0


def _is_integer(F: np.ndarray) -> bool:
    return bool(np.all(F == np.round(F)))


@dataclass(frozen=True, eq=False)
class KronBlock:
    """weight · (F_1 ⊗ … ⊗ F_d), factors dense and aligned with the domain attributes."""

    weight: float
    factors: tuple[np.ndarray, ...]
    grids: tuple[float, ...] = ()
    # Per factor, None or an integer basis S with the factor = C·S (large attributes,
    # plan/large.py): rounding then rounds C, so the row space, and support, is kept.
    bases: tuple = ()

    def kinds(self) -> list[tuple[str, float]]:
        return [factor_kind(F) for F in self.factors]

    @property
    def rows(self) -> int:
        return int(np.prod([F.shape[0] for F in self.factors], dtype=object))


@dataclass(frozen=True, eq=False)
class MeasurementBlock:
    """``weight * query`` applied to the marginal on ``clique`` (clique order, C order).

    ``grid``: every entry of ``query`` is an integer multiple of it (1.0 for integer
    queries), so measured values lie on grid·ℤ.
    """

    clique: tuple[str, ...]
    query: Any
    weight: float
    grid: float = 1.0


def block_sensitivity(block: KronBlock, p: int) -> float:
    """Max column p-norm of one weighted Kron product (thesis Prop. 12)."""
    out = abs(block.weight)
    for F in block.factors:
        out *= float(np.abs(F).sum(axis=0).max()) if p == 1 else \
            float(np.sqrt((F * F).sum(axis=0).max()))
    return out


def union_sensitivity(blocks: Sequence[KronBlock], shape: Sequence[int], p: int,
                      exact_limit: int = 1 << 22) -> float:
    """Max over cells of the union's column p-norm: exact when the attributes on which
    some block's column norms vary span at most ``exact_limit`` cells
    (:func:`dpsql.linalg.max_column_sum`), otherwise the sum of per-block maxima, a
    valid upper bound."""
    from dpsql.linalg import max_column_sum

    if len(blocks) == 1:
        return block_sensitivity(blocks[0], p)
    norms: dict[int, np.ndarray] = {}

    def colnorm(F):
        v = norms.get(id(F))
        if v is None:
            v = norms[id(F)] = np.abs(F).sum(axis=0) if p == 1 else (F * F).sum(axis=0)
        return v

    vectors = [[colnorm(F) for F in b.factors] for b in blocks]
    scale = [abs(b.weight) if p == 1 else b.weight ** 2 for b in blocks]
    total = max_column_sum(scale, vectors, exact_limit)
    if total is None:
        total = sum(s * math.prod(float(c.max()) for c in per) for s, per in zip(scale, vectors))
    return total if p == 1 else math.sqrt(total)


@dataclass(frozen=True, eq=False)
class Strategy:
    """An HDMM strategy over the full domain (see module docstring).

    ``expected_error`` is the unit-noise total squared error on the workload it was
    optimised for (thesis Prop. 9; local least squares for OPT_+ on large domains, §3.9).
    """

    attributes: tuple[str, ...]
    shape: tuple[int, ...]
    kron_blocks: tuple[KronBlock, ...]
    operator: str
    noise: str
    expected_error: float
    explanation: str = ""
    assignment: tuple[int, ...] | None = None
    workload: Any = field(default=None, repr=False)
    # Unit-noise TSE of each workload term (their sum is expected_error), when known.
    term_tse: tuple[float, ...] | None = field(default=None, repr=False)

    # --- views -----------------------------------------------------------------------
    def sensitivity(self, p: int | None = None) -> float:
        p = (1 if self.noise == "laplace" else 2) if p is None else int(p)
        return union_sensitivity(self.kron_blocks, self.shape, p)

    @property
    def blocks(self) -> list[MeasurementBlock]:
        from dpsql.linalg import Explicit, Identity, Kron, Product, QueryMatrix

        out = []
        for b in self.kron_blocks:
            weight = b.weight
            clique: list[str] = []
            factors: list[QueryMatrix] = []
            grid = 1.0
            grids = b.grids or (1.0,) * len(b.factors)
            bases = b.bases or (None,) * len(b.factors)
            for attr, F, g, S in zip(self.attributes, b.factors, grids, bases):
                kind, c = factor_kind(F)
                if kind == "total":
                    weight *= c
                    continue
                clique.append(attr)
                if S is not None:
                    # Coefficients times an integer basis (a large attribute): the measure
                    # step rounds the coefficients only, keeping the row space.
                    C = np.linalg.lstsq(S.T, F.T, rcond=None)[0].T
                    factors.append(Product(Explicit(C), Explicit(S)))
                    grid *= g
                elif kind == "identity":
                    weight *= c
                    factors.append(Identity(F.shape[1]))
                else:
                    factors.append(Explicit(F))
                    grid *= g if not _is_integer(F) else 1.0
            query = Kron(factors) if len(factors) > 1 else (
                factors[0] if factors else Explicit(np.ones((1, 1))))
            out.append(MeasurementBlock(tuple(clique), query, float(weight), float(grid)))
        return out

    @property
    def cliques(self) -> list[tuple[str, ...]]:
        return [blk.clique for blk in self.blocks]

    @property
    def matrix(self):
        """The strategy as a dpsql.linalg matrix over the full domain."""
        from dpsql.linalg import Explicit, Identity, Kron, Total, Union, Weighted

        def leaf(F):
            kind, c = factor_kind(F)
            if kind == "identity" and c == 1.0:
                return Identity(F.shape[1])
            if kind == "total" and c == 1.0:
                return Total(F.shape[1])
            return Explicit(F)

        prods = [Weighted(b.weight, Kron([leaf(F) for F in b.factors])) for b in self.kron_blocks]
        return prods[0] if len(prods) == 1 else Union(prods)

    def dense(self) -> np.ndarray:
        rows = []
        for b in self.kron_blocks:
            M = np.ones((1, 1))
            for F in b.factors:
                M = np.kron(M, F)
            rows.append(b.weight * M)
        return np.vstack(rows)


# --- rounding --------------------------------------------------------------------------

# A value row's integer entries may reach 2·hi (its bins' lo + hi, the doubled midpoints of
# integer bins: 4,999 … 204,950 for prices to 104,950); one row of them times a count stays
# far inside int64, as an integer Values row of a column declared in whole units always did
VALUE_ROW_MAX = 1 << 24


def _integer_multiple(F: np.ndarray, max_entry: int = 1 << 16) -> tuple[np.ndarray, float] | None:
    """(K, g) with F = g·K and K a small integer matrix, when F is one (up to 1e-9).

    OPT_0 on a rank-one gram vvᵀ (a SUM's value row) returns a multiple of v; rounding
    it to a grid would tilt it out of span{v} and lose support of the SUM, whereas
    the integer K measures exactly the planned row space.  Multipliers 1..64 are tried;
    for a single row (a value row) also the least common denominator of its entries'
    ratios to the smallest one, with entries up to ``VALUE_ROW_MAX``: the search missed
    the midpoints of a price column's integer bins of 5,000 (2,499.5, 7,499.5, …, the
    last cut at hi: 102,475), and the per-query mechanism then supported none of the
    TPC-H template bench's SUMs of prices.
    """
    nz = np.abs(F[F != 0])
    if nz.size == 0:
        return None
    g0 = float(nz.min())
    top = float(nz.max()) / g0
    if top > max_entry:
        return None
    sample = nz[:256] / g0      # screen multipliers on a few entries, verify on all
    candidates = [m for m in range(1, 65) if top * m <= max_entry
                  and np.allclose(sample * m, np.round(sample * m), rtol=0.0, atol=1e-9 * max_entry)]
    if not candidates and F.shape[0] == 1:
        m = 1
        for x in np.unique(sample):
            d = Fraction(float(x)).limit_denominator(VALUE_ROW_MAX).denominator
            m = m * d // math.gcd(m, d)
        candidates = [m] if top * m <= VALUE_ROW_MAX else []
    for m in candidates:
        K = F * (m / g0)
        R = np.round(K)
        if np.allclose(K, R, rtol=0.0, atol=1e-9 * max(float(np.abs(K).max()), 1.0)):
            return R, g0 / m
    return None


def _round_factor(F: np.ndarray, S: np.ndarray | None, grid: float
                  ) -> tuple[np.ndarray, float, float, np.ndarray | None]:
    """(rounded factor, scale moved into the weight, its grid, basis kept or None)."""
    if factor_kind(F)[0] != "other" and F.flat[0] == 1.0:
        return F, 1.0, 1.0, None
    if S is not None and _is_integer(S) and not _is_integer(F):
        # F = C·S (a large attribute): round C, not F, so the measured rows span exactly
        # S's row space; the measure step rounds C again and keeps S (release.to_lattice).
        C = np.linalg.lstsq(S.T, F.T, rcond=None)[0].T
        top = float(np.abs(C).max())
        N = grid * np.round(C / (top * grid))
        N = N[np.any(N != 0, axis=1)]
        if N.size and np.linalg.matrix_rank(N) == np.linalg.matrix_rank(C):
            return N @ S, top, float(grid), S
    if _is_integer(F):
        return F, 1.0, 1.0, None
    snapped = _integer_multiple(F)
    if snapped is not None:
        return snapped[0], snapped[1], 1.0, None
    top = float(np.abs(F).max())
    R = grid * np.round(F / (top * grid))
    R = R[np.any(R != 0, axis=1)]
    return (R if R.size else np.zeros((1, F.shape[1]))), top, float(grid), None


def round_blocks(blocks: Sequence[KronBlock], grid: float) -> tuple[KronBlock, ...]:
    """Every non-integer factor on multiples of ``grid`` (after scaling its largest entry
    to 1; the scale moves into the block weight, which does not affect the lattice), or
    exactly as a multiple of a small integer matrix when it is one; a factor over a
    basis (``KronBlock.bases``) has its coefficients rounded instead.  All-zero rows that
    rounding leaves behind are dropped."""
    if not grid > 0:
        raise ValueError("grid must be positive")
    out = []
    for b in blocks:
        weight, factors, grids, kept = b.weight, [], [], []
        for F, S in zip(b.factors, b.bases or (None,) * len(b.factors)):
            R, scale, g, basis = _round_factor(F, S, grid)
            factors.append(R)
            grids.append(g)
            kept.append(basis)
            weight *= scale
        out.append(KronBlock(weight, tuple(factors), tuple(grids),
                             tuple(kept) if any(k is not None for k in kept) else ()))
    return tuple(out)
