"""Measure a large ordered attribute with its tree or Toeplitz strategy, and answer from
the release in closed form (issue 35 item 4).

The pipeline of ``plan.ordered.OrderedStrategy`` without an n×n matrix anywhere:

1. **count**: the attribute's exact histogram from the backend (one GROUP BY on its cell
   index, ``Backend.count_marginals``: 10⁶ int64 counts), nothing else leaves the engine;
2. **apply** the strategy exactly in integers: a tree's level sums by reshapes
   (``Tree.sums``; the rows over padded cells are 0), the Toeplitz root's integer
   coefficients by limb convolutions (``toeplitz.exact_convolve``);
3. **noise**: each block's values plus exact discrete noise, calibrated by
   ``release.calibrate`` to the requested ρ with the blocks' exact sensitivities (a tree
   level: every cell in one row, Δ₁ = Δ₂² = 1; the root: column 0 holds every coefficient,
   Δ₂² = Σ a_k², Δ₁ = Σ a_k), so the cost is the exact rational of ``docs/privacy.md``;
4. **fit**: least squares in closed form: the tree's two passes (``Tree.solve``), or
   x̂ = A⁻¹y by the inverse power series;
5. **answer** with standard errors: the CDF (every prefix), any query rows, and quantiles
   with the 95% interval of the noisy CDF's band (``sql.postprocess.quantile_band``) from
   the exact variance of C_j − q·N (the estimates are correlated; the band uses it, not a
   sum of independent cell variances).

A strategy with ``groups`` (I_G ⊗ T, ``plan/ordered.py``) counts the histogram of the groups'
and the column's cells, applies T to each group cell's row and fits each row alone: every
group's estimate has the same error structure, with independent noise.  A statement's
answer over groups is a combination c of the group rows (a GROUP BY's group, a WHERE's
selected cells, 1 for all): its cells c·X̂ and its variances Σ c_g² times one group's
(``OrderedEstimate.select``), exact as before.

The variances are those of the reported noise (``release.stddev``, the discrete Gaussian's
parameter: at most its actual variance, so conservative), and the tree is fitted with the
same weights, so every reported standard error is that estimator's exactly.
"""

from __future__ import annotations

import copy
import io
import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.errors import ProgrammingError, UnsupportedQueryError
from dpsql.linalg.toeplitz import EXACT_MAX, LowerToeplitz, convolve, exact_convolve, series_inverse
from dpsql.linalg.tree import Tree
from dpsql.measure import release as rel
from dpsql.plan.ordered import OrderedStrategy
from dpsql.sql.postprocess import Z95, quantile_band, quantile_from_histogram

__all__ = ["OrderedBlock", "OrderedRelease", "OrderedEstimate", "measure_ordered", "ordered_blocks",
           "counts_bound", "release_of", "pack", "unpack", "is_ordered"]


@dataclass(frozen=True, eq=False)
class OrderedBlock:
    """One measured block of an ordered strategy, with what ``release.calibrate``,
    ``release.noisy_values`` and the engine's measurement read of a ``LatticeBlock``
    (``clique``, ``scale``, ``weight``, ``factors``, ``offsets``, ``rows()``,
    ``apply(counts)``, the exact sensitivities): a tree level (every cell in one of its
    rows: Δ₁ = Δ₂² = 1) or the Toeplitz root's integer coefficients (column 0 holds every
    coefficient: Δ₂² = Σ a_k², Δ₁ = Σ a_k), over the column's histogram.

    ``bound`` is a public bound on the histogram's total (the declared rows times the rows a
    privacy unit may add), the only thing ``toeplitz.exact_convolve`` decides by.  With
    groups, ``shape`` is the clique's cells per attribute and ``axis`` the column's place in
    it: the block applies to each group cell's row (its values group-major)."""

    clique: tuple[str, ...]
    n: int
    tree: Tree | None
    level: int
    coeffs: np.ndarray | None
    scale: float
    weight: float
    bound: int
    shape: tuple[int, ...] = ()
    axis: int = 0
    offsets: None = None

    @property
    def groups(self) -> int:
        return math.prod(self.shape) // self.n if self.shape else 1

    def l2_sensitivity_sq(self) -> int:
        return 1 if self.coeffs is None else int(sum(int(x) * int(x) for x in self.coeffs))

    def l1_sensitivity(self) -> int:
        return 1 if self.coeffs is None else int(sum(abs(int(x)) for x in self.coeffs))

    def rows(self) -> int:
        return self.groups * (self.n if self.tree is None else self.tree.nodes[self.level])

    @property
    def factors(self) -> tuple[np.ndarray, ...]:
        """What the release key hashes: the tree's shape and level, or the coefficients
        (and the group cells, when measured per group)."""
        grouped = (np.array([*self.shape, self.axis], dtype=np.int64),) if self.groups > 1 else ()
        if self.tree is None:
            assert self.coeffs is not None
            return (np.asarray(self.coeffs, dtype=np.int64),) + grouped
        return (np.array([self.n, self.level, *self.tree.radices], dtype=np.int64),) + grouped

    def group_rows(self, counts: np.ndarray) -> np.ndarray:
        """The clique's histogram (its attributes' axes, or flat in their order) as one row
        of the column's cells per group cell (groups in domain order)."""
        counts = np.asarray(counts, dtype=np.int64)
        shape = self.shape or (self.n,)
        if counts.size != math.prod(shape):
            raise ProgrammingError(f"expected {math.prod(shape)} cells of {self.clique!r}, got {counts.shape}")
        return np.moveaxis(counts.reshape(shape), self.axis, -1).reshape(self.groups, self.n)

    def apply(self, counts: np.ndarray) -> np.ndarray:
        """The block's exact integer values on the clique's histogram (group-major)."""
        rows = self.group_rows(counts)
        if self.tree is None:
            assert self.coeffs is not None
            out = [exact_convolve(self.coeffs, r, self.n, bound=self.bound) for r in rows]
        else:
            out = [self.tree.sums(r)[self.level] for r in rows]
        return out[0] if len(out) == 1 else np.concatenate(out)


def counts_bound(strategy: OrderedStrategy, rows: int | None, unit_rows: int = 1) -> int:
    """A public bound on the histogram's total for ``exact_convolve``: the declared ``rows``
    (``[tables.<t>] rows``) times ``unit_rows``, or, undeclared, the largest total the
    Toeplitz coefficients keep exact below 2^62 (2^46 rows: any real table)."""
    top = (EXACT_MAX - 1) // max(1, int(np.max(strategy.coeffs))) if strategy.coeffs is not None \
        else EXACT_MAX - 1
    return top if rows is None else max(1, int(rows) * int(unit_rows))


def ordered_blocks(strategy: OrderedStrategy, bound: int) -> list[OrderedBlock]:
    """The measured blocks of ``strategy`` (public: no data)."""
    clique = strategy.clique
    shape = tuple(strategy.shape[strategy.attributes.index(a)] for a in clique) if strategy.groups else ()
    axis = clique.index(strategy.attribute) if strategy.groups else 0
    if strategy.coeffs is not None:
        if int(np.max(strategy.coeffs)) * int(bound) >= EXACT_MAX:
            # before any data is read: exact_convolve would refuse it after counting
            raise UnsupportedQueryError(
                f"the Toeplitz strategy over {strategy.attribute!r} is measured exactly in int64 "
                f"for at most {(EXACT_MAX - 1) // int(np.max(strategy.coeffs)):,} rows, and the "
                f"table declares {bound:,} (rows times the rows one unit may add)",
                hint="declare the table's rows as its real size")
        return [OrderedBlock(clique, strategy.size, None, 0, np.asarray(strategy.coeffs, dtype=np.int64),
                             float(strategy.scale), 1.0, bound, shape=shape, axis=axis)]
    assert strategy.tree is not None
    return [OrderedBlock(clique, strategy.size, strategy.tree, lv, None, 1.0, float(w), bound, shape=shape, axis=axis)
            for lv, w in enumerate(strategy.weights) if w > 0]


@dataclass(frozen=True)
class OrderedRelease:
    """The noisy blocks of one measurement (tree: measured levels root first, values over
    every node including padded ones; Toeplitz: one block; group-major with groups) and
    their noise sd in query units; ``rho`` the exact cost."""

    strategy: OrderedStrategy
    values: tuple[np.ndarray, ...]
    stddev: tuple[float, ...]
    rho: Fraction


def measure_ordered(backend: Any, schema: Any, strategy: OrderedStrategy,
                    rho: Fraction | float, *, charge: Callable[[rel.NoisePlan], Any],
                    unit_rows: int = 1, rows: int | None = None) -> OrderedRelease:
    """Count, apply, charge, and add calibrated discrete noise (module docstring, steps 1–3),
    in the engine's order (``Engine.measure_strategy``, which is how SQL reaches this
    measurement): the blocks and their noise are planned from public metadata, the
    counts read and applied, then ``charge(plan)`` is called (a durable ledger charge: if
    it raises, no noise is drawn and nothing is released), and only then the noise."""
    blocks = ordered_blocks(strategy, counts_bound(strategy, rows, unit_rows))
    plan = rel.calibrate(blocks, rho, family=strategy.noise,  # type: ignore[arg-type]
                         unit_rows=unit_rows)
    clique = strategy.clique
    counts = backend.count_marginals(schema, [clique])[clique]
    exact = [b.apply(counts) for b in blocks]
    charge(plan)
    released = [(b, rel.noisy_values(b, e, p, strategy.noise),  # type: ignore[arg-type]
                 rel.stddev(b, p, strategy.noise))  # type: ignore[arg-type]
                for b, e, p in zip(blocks, exact, plan.params)]
    return release_of(strategy, released, plan.rho)


def release_of(strategy: OrderedStrategy, released: Sequence[tuple[OrderedBlock, np.ndarray, float]],
               rho: Fraction) -> OrderedRelease:
    """The ``OrderedRelease`` of noisy blocks (in ``ordered_blocks``' order)."""
    return OrderedRelease(strategy, tuple(np.asarray(v, dtype=np.float64) for _, v, _ in released),
                          tuple(float(sd) for _, _, sd in released), Fraction(rho))


def _floored(sd: float, scale: float) -> float:
    """A noise sd of at least ``release.FIT_STDDEV_FLOOR`` lattice units: at a huge budget
    the discrete noise is 0 and the weights would divide by it (the floor is a thousandth of
    a count, far below what any answer is rounded to)."""
    return max(float(sd), rel.FIT_STDDEV_FLOOR * scale)


class OrderedEstimate:
    """Least-squares cell estimates of one release and their answers' exact variances.

    ``group_cells`` holds each group cell's estimate (one row without groups); ``cells`` and
    every answer are those of the combination the estimate was ``select``-ed for (the sum
    over all groups by default), whose variances are ``_factor`` = Σ c_g² times one
    group's: the groups' noise is independent and identically calibrated."""

    def __init__(self, release: OrderedRelease) -> None:
        s = self.strategy = release.strategy
        self.n = s.size
        g = s.group_cells
        self._gram_rows: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        if s.coeffs is not None:
            a = s.coeffs.astype(np.float64) * s.scale
            self._d = series_inverse(a, self.n)               # A⁻¹'s coefficients
            self._m = np.cumsum(self._d)                      # rows of P A⁻¹
            self._s2 = _floored(release.stddev[0], s.scale) ** 2
            Y = np.asarray(release.values[0], dtype=np.float64).reshape(g, self.n)
            self.group_cells = convolve(self._d, Y.T, self.n).T
        else:
            tree = s.tree
            assert tree is not None
            it = iter(zip(release.values, release.stddev))
            ys, self._v = [], []
            for lv, w in enumerate(s.weights):
                if w > 0:
                    y, sd = next(it)
                    ys.append(np.asarray(y, dtype=np.float64).reshape(g, tree.nodes[lv]))
                    self._v.append(_floored(sd, 1.0) ** 2)
                else:
                    ys.append(np.zeros((g, 0)))
                    self._v.append(np.inf)
            self.group_cells = np.stack([tree.solve([y[k] for y in ys], self._v)[:self.n] for k in range(g)])
        self.cells = self.group_cells.sum(axis=0)
        self._factor = float(g)

    def select(self, c: np.ndarray) -> OrderedEstimate:
        """The estimate of Σ_g c_g · (group g's cells): its cells and, by the groups'
        independent noise, every variance times Σ c_g²."""
        c = np.asarray(c, dtype=np.float64).reshape(-1)
        if c.shape != (self.group_cells.shape[0],):
            raise ProgrammingError(f"expected {self.group_cells.shape[0]} group weights, got {c.shape}")
        out = copy.copy(self)            # the shared solves and caches are per unit group
        out.cells = c @ self.group_cells
        out._factor = float(c @ c)
        return out

    # -- answers --------------------------------------------------------------------------
    def cdf(self) -> tuple[np.ndarray, np.ndarray]:
        """Every prefix count C_j = Σ_{i≤j} x_i and its variance."""
        if self.strategy.coeffs is not None:
            var = self._s2 * np.cumsum(self._m ** 2)
        else:
            tree = self.strategy.tree
            assert tree is not None
            var = tree.variance(tree.prefix_norms(np.arange(self.n)), self._v)
        return np.cumsum(self.cells), self._factor * var

    def cell_variance(self) -> np.ndarray:
        """The variance of each cell's estimate (x̂ = A⁻¹y: Σ_{k≤i} d_k² noise units for the
        Toeplitz root; the same for every cell of a tree, whose unit row e_i has
        ‖P_l e_i‖² = 1/s_l)."""
        if self.strategy.coeffs is not None:
            return self._factor * self._s2 * np.cumsum(self._d * self._d)
        tree = self.strategy.tree
        assert tree is not None
        unit = np.array([[1.0 / s for s in tree.sizes]])
        return np.full(self.n, self._factor * float(tree.variance(unit, self._v)[0]))

    def answer(self, Q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows Q (k × n) over the cells: answers and variances."""
        Q = np.atleast_2d(np.asarray(Q, dtype=np.float64))
        if Q.shape[1] != self.n:
            raise ProgrammingError(f"query rows must have {self.n} columns")
        if self.strategy.coeffs is not None:
            R = LowerToeplitz(self._d).rmatmat(Q.T)           # (q A⁻¹)ᵀ
            var = self._s2 * np.sum(R * R, axis=0)
        else:
            tree = self.strategy.tree
            assert tree is not None
            var = tree.variance(tree.norms(Q), self._v)
        return Q @ self.cells, self._factor * var

    def ranges(self, lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Counts of cells lo..hi (inclusive) and their variances."""
        lo = np.asarray(lo, dtype=np.int64)
        hi = np.asarray(hi, dtype=np.int64)
        if lo.size and (lo.min() < 0 or hi.max() >= self.n or np.any(lo > hi)):
            raise ProgrammingError(f"ranges must satisfy 0 ≤ lo ≤ hi < {self.n}")
        if self.strategy.coeffs is not None:
            # rows v_hi − v_{lo−1} of P A⁻¹: ‖v_i‖² + ‖v_j‖² − 2⟨v_i, v_j⟩ with
            # ⟨v_i, v_j⟩ = Σ_{t≤j} m_{i−t} m_{j−t} (j < i): O(j) per range, no FFT
            m = self._m
            own = np.concatenate([[0.0], np.cumsum(m * m)])      # own[i + 1] = ‖v_i‖²
            cum = np.concatenate([[0.0], np.cumsum(self.cells)])
            var = np.empty(lo.size)
            for k, (a, b) in enumerate(zip(lo, hi)):
                j = a - 1
                cross = float(m[b - j:b + 1] @ m[:j + 1]) if j >= 0 else 0.0
                var[k] = own[b + 1] + own[j + 1] - 2.0 * cross
            return cum[hi + 1] - cum[lo], self._factor * self._s2 * var
        Q = np.zeros((lo.size, self.n))
        for k, (a, b) in enumerate(zip(lo, hi)):
            Q[k, a:b + 1] = 1.0
        return self.answer(Q)

    def _rank_sd(self, q: float, cells: int | None = None, start: int = 0) -> np.ndarray:
        """sd of D_j = C_j − q·N for every j < m, N = C_{m−1}: the first m = ``cells``
        cells (all n by default; n − 1 leaves out a NULL cell, which sits last).  From
        ``start`` = a > 0, the cells a..m−1 only (a WHERE on the column that keeps a range
        of its cells): D_j = (C_j − C_{a−1}) − q·(C_{m−1} − C_{a−1}) for a ≤ j < m."""
        n = self.n if cells is None else int(cells)
        if start:
            return self._range_rank_sd(q, int(start), n)
        if self.strategy.coeffs is not None:
            if n not in self._gram_rows:        # q-free: one FFT per estimate, not per quantile
                m = self._m[:n]                                 # v_j (j < n) reads m_0..m_j only
                self._gram_rows[n] = (np.cumsum(m * m),                      # ‖v_j‖²
                                      convolve(m, m[::-1, None], n)[:, 0])  # ⟨v_j, v_{n−1}⟩
            own, cross = self._gram_rows[n]
            var = own - 2.0 * q * cross + q * q * own[-1]
            return np.sqrt(np.maximum(self._factor * self._s2 * var, 0.0))
        tree = self.strategy.tree
        assert tree is not None
        j = np.arange(n)
        norms = np.empty((n, tree.levels))
        for lv, s in enumerate(tree.sizes):
            # c_b: the cells of block b among the first n (the row is (1−q) up to j, −q after)
            c = np.clip(n - np.arange(tree.nodes[lv]) * s, 0, s).astype(np.float64)
            c2 = np.concatenate([[0.0], np.cumsum(c * c)])     # exclusive prefix sums
            beta = j // s
            part = (j - beta * s + 1).astype(np.float64)
            before = (1 - q) ** 2 * c2[beta]
            after = q * q * (c2[-1] - c2[beta + 1])
            own = (part - q * c[beta]) ** 2
            norms[:, lv] = (before + after + own) / s
        return np.sqrt(np.maximum(self._factor * tree.variance(norms, self._v), 0.0))

    def _range_rank_sd(self, q: float, a: int, n: int) -> np.ndarray:
        """:meth:`_rank_sd` over the cells a..n−1 (0 < a < n), exactly as over a prefix.

        Toeplitz root: with v_i the rows of P A⁻¹ (v_{a−1} the one subtracted),
        D_j = v_j − q·v_{n−1} − (1 − q)·v_{a−1}, whose variance needs ⟨v_j, v_{a−1}⟩ for
        j ≥ a − 1: Σ_{u<a} m_u m_{u+j−a+1}, one FFT correlation of m_0..m_{a−1} with m.
        Tree: per level, the row's block sums are (1 − q)·(its cells in a..j) − q·(its cells
        in j+1..n−1), the prefix's closed form with each block's count of cells in a..n−1."""
        if self.strategy.coeffs is not None:
            m = self._m[:n]
            own = np.cumsum(m * m)                                   # ‖v_j‖²
            to_end = convolve(m, m[::-1, None], n)[:, 0]             # ⟨v_j, v_{n−1}⟩, j < n
            to_start = convolve(m[:a][::-1], m[:, None], n)[:, 0]    # ⟨v_j, v_{a−1}⟩, j ≥ a − 1
            p = 1.0 - q
            var = (own[a:] + q * q * own[-1] + p * p * own[a - 1] - 2.0 * q * to_end[a:]
                   - 2.0 * p * to_start[a:] + 2.0 * q * p * to_start[n - 1])
            return np.sqrt(np.maximum(self._factor * self._s2 * var, 0.0))
        tree = self.strategy.tree
        assert tree is not None
        j = np.arange(a, n)
        norms = np.empty((j.size, tree.levels))
        for lv, s in enumerate(tree.sizes):
            first = np.arange(tree.nodes[lv]) * s
            c = np.clip(np.minimum(n, first + s) - np.maximum(a, first), 0, s).astype(np.float64)
            c2 = np.concatenate([[0.0], np.cumsum(c * c)])
            beta = j // s
            part = (j - np.maximum(a, beta * s) + 1).astype(np.float64)
            before = (1 - q) ** 2 * c2[beta]
            after = q * q * (c2[-1] - c2[beta + 1])
            own_ = (part - q * c[beta]) ** 2
            norms[:, lv] = (before + after + own_) / s
        return np.sqrt(np.maximum(self._factor * tree.variance(norms, self._v), 0.0))

    def quantile(self, q: float, values: np.ndarray | None = None, method: str = "disc", *,
                 low: np.ndarray | None = None, high: np.ndarray | None = None,
                 z: float = Z95, cells: int | None = None, start: int = 0) -> tuple[float | None, tuple[float, float]]:
        """The q-quantile of the first ``cells`` cells (all by default; a nullable column's
        NULL cell, the last, is left out), from cell ``start`` on (a WHERE on the column
        keeping a range of its cells), valued ``values`` in increasing order (one per cell
        ``start..cells−1``; the cell index by default), and its 95% interval from the noisy
        CDF's band."""
        m = self.n if cells is None else int(cells)
        if not 0 <= start < m <= self.n:
            raise ProgrammingError(f"cells must be in 1..{self.n} and start below them")
        v = np.arange(start, m, dtype=np.float64) if values is None else np.asarray(values, float)
        if v.shape != (m - start,) or np.any(np.diff(v) < 0):
            raise ProgrammingError("quantile values must be one increasing value per cell")
        x = self.cells[start:m]
        # from the unclipped CDF made monotone: clipping the noisy cells at 0 first (as a
        # histogram's point estimate does) adds their negative parts' mass and moved a
        # median over 100,000 cells by 30%
        cum = np.maximum.accumulate(np.cumsum(x))
        point = quantile_from_histogram(np.diff(cum, prepend=0.0), v, q, method)
        lo = v if low is None else np.asarray(low, dtype=float)
        hi = v if high is None else np.asarray(high, dtype=float)
        band = quantile_band(np.cumsum(x), self._rank_sd(q, m, start), lo, hi, q, z=z)
        return point, band


# -- the ledger's payload -------------------------------------------------------------------
#: The npz member that marks an ordered release (``release.pack``'s payloads hold ``__meta__``).
ORDERED_META = "__ordered__"
# Its format version (``release.version_stamp``, since ledger format 2): a newer one is refused
# with LedgerVersionError, one without the entry (written before) is read.
ORDERED_FORMAT = "dpsql-ordered-release"
ORDERED_VERSION = 1


def pack(release: OrderedRelease) -> bytes:
    """Serialize an ordered release: the strategy's public shape (tree radices and level
    weights, or the integer coefficients and their scale) and the noisy values."""
    s = release.strategy
    meta = {"attribute": s.attribute, "n": s.size, "noise": s.noise, "scale": float(s.scale),
            "radices": list(s.tree.radices) if s.tree is not None else None,
            "weights": [float(w) for w in s.weights], "stddev": list(release.stddev),
            "rho": str(release.rho), "blocks": len(release.values),
            "groups": [[a, s.shape[s.attributes.index(a)]] for a in s.groups], "clique": list(s.clique)}
    # Any: numpy's type annotation of savez would read a key as allow_pickle (as in release.pack)
    arrays: dict[str, Any] = {f"y{i}": np.asarray(v, dtype=np.float64) for i, v in enumerate(release.values)}
    if s.coeffs is not None:
        arrays["coeffs"] = np.asarray(s.coeffs, dtype=np.int64)
    arrays[ORDERED_META] = np.frombuffer(json.dumps(meta).encode(), dtype=np.uint8)
    arrays["__version__"] = rel.version_stamp(ORDERED_FORMAT, ORDERED_VERSION)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def is_ordered(payload: bytes) -> bool:
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        return ORDERED_META in z.files


def unpack(payload: bytes) -> OrderedRelease:
    """The ``OrderedRelease`` of a payload written by :func:`pack` (its strategy carries what
    the estimator reads; the planner's errors are not stored)."""
    with np.load(io.BytesIO(payload), allow_pickle=False) as z:
        rel.check_stamp(z, ORDERED_FORMAT, ORDERED_VERSION)
        meta = json.loads(bytes(z[ORDERED_META]).decode())
        values = tuple(np.asarray(z[f"y{i}"], dtype=np.float64) for i in range(int(meta["blocks"])))
        coeffs = np.asarray(z["coeffs"], dtype=np.int64) if "coeffs" in z.files else None
    n = int(meta["n"])
    tree = Tree(n, meta["radices"]) if meta["radices"] is not None else None
    # the groups and the column (the clique), in domain order as measured; payloads written
    # before groups existed have none
    groups = [(str(a), int(k)) for a, k in meta.get("groups", [])]
    order = meta.get("clique") or [meta["attribute"]]
    sizes = dict(groups, **{meta["attribute"]: n})
    strategy = OrderedStrategy(tuple(order), tuple(sizes[a] for a in order), meta["attribute"], meta["noise"],
                               math.nan, tree=tree, weights=tuple(meta["weights"]), coeffs=coeffs,
                               scale=float(meta["scale"]), groups=tuple(a for a, _ in groups))
    return OrderedRelease(strategy, values, tuple(float(x) for x in meta["stddev"]), Fraction(meta["rho"]))
