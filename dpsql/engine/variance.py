"""Support and standard errors of answers.

A linear query q (one row per output group) over the full domain is *supported* by a
released measurement block b (clique C, query M_b, noise σ_b) when q only depends on the
marginal of C and lies in the row space of M_b: then the local least-squares estimate
q (M_bᵀM_b)⁺ M_bᵀ y_b is unbiased with variance σ_b² · diag(q (M_bᵀM_b)⁺ qᵀ)
(thesis §3.9; the ordinary least-squares variance for independent noise).

When several blocks support q, their unbiased estimates are independent and the
inverse-variance combination has variance 1 / Σ_b 1/var_b.  This is the standard error
dpsql reports.  It is exact for the least-squares estimate from the best single block and
an upper bound on the variance of the joint least-squares estimate over all supporting
blocks.  The graphical-model answer is a constrained (non-negative, consistent) estimate,
biased where the constraints bind (sparse domains), so the standard error reported with it
is widened until its interval contains the least-squares one (:func:`interval_stderr`,
``docs/engine.md``, "Standard errors").

A query no block supports is answered from the model's inference (``inferred``); it has no
unbiased estimate and its standard error is reported as NaN.

Everything is computed per attribute: the query and the strategy are Kronecker products,
so q G⁺ qᵀ factors attribute by attribute (thesis §3.4: (A⊗B)⁺ = A⁺⊗B⁺).
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from functools import cached_property

import numpy as np

from dpsql.linalg import Bucket, Identity, Kron, QueryMatrix, Sum, Union, Weighted
from dpsql.linalg.lattice import StructuredFactor, scaled_identity
from dpsql.linalg.rowscaled import GramPinv, SpanPinv, gram_pinv
from dpsql.pgm.measurement import group_rows, into_buckets
from dpsql.plan.joint import JointSupport

# The two-sided 95% normal quantile: a standard error times Z95 is the half-width of the
# 95% interval that every front end shows (``ci95`` error mode).
Z95 = 1.959963984540054

# per-attribute factor of a query term: dense (rows × n); attributes summed out (Total) absent
Term = tuple[float, dict[str, np.ndarray]]
# the same with each factor as compiled: a one-row factor dense, others the QueryMatrix leaf
Leaves = tuple[float, dict[str, "np.ndarray | QueryMatrix"]]


@dataclass(frozen=True)
class RowBlock:
    """Consecutive output rows given by a sum of Kron terms with a common row structure.

    ``leaves`` keeps a GROUP BY's factor as its ``Bucket``; ``terms`` is the dense form,
    made on first use: on a 1,459-label column it is a 17 MB matrix, which the marginal
    blocks' least squares (``MarginalJoint``) never needs (issue 35)."""

    leaves: tuple[Leaves, ...]
    rows: int

    @cached_property
    def terms(self) -> tuple[Term, ...]:
        return tuple((c, {a: _dense(f) for a, f in fs.items()}) for c, fs in self.leaves)


def _dense(f) -> np.ndarray:
    return f if isinstance(f, np.ndarray) else np.asarray(f.dense(), dtype=np.float64)


def _is_total(f: np.ndarray) -> bool:
    return bool(f.shape[0] == 1 and np.all(f == f[0, 0]) and f[0, 0] != 0)


def _buckets(f) -> np.ndarray | None:
    """The cell → row map of a factor that is a 0/1 matrix with at most one 1 per row and per
    column (a GROUP BY's ``Bucket``: ``group_rows``; the identity), or None.  Its row sums,
    rowwise products and products with a tensor are then the dense ones to the last bit."""
    if isinstance(f, Identity):
        return np.arange(f.shape[0])
    return group_rows(f) if isinstance(f, Bucket) else None


def _row_sums(f) -> np.ndarray:
    """q·1 per row of a factor."""
    m = _buckets(f)
    if m is None:
        return _dense(f).sum(axis=1)
    return np.bincount(m[m >= 0], minlength=f.shape[0]).astype(np.float64)


def _row_dots(f, g) -> np.ndarray:
    """Rowwise q·q' of two factors with the same rows."""
    m1, m2 = _buckets(f), _buckets(g)
    if m1 is None or m2 is None:
        return np.einsum("ij,ij->i", _dense(f), _dense(g))
    both = m1[(m1 == m2) & (m1 >= 0)]
    return np.bincount(both, minlength=f.shape[0]).astype(np.float64)


def _apply(f, z: np.ndarray, axis: int) -> np.ndarray:
    """``f`` applied along ``axis`` of the tensor ``z`` (the axis becomes f's rows)."""
    m = _buckets(f)
    if m is None:
        return np.moveaxis(np.tensordot(_dense(f), z, axes=([1], [axis])), 0, axis)
    return into_buckets(z, axis, m, int(f.shape[0]))


def _nonneg(f) -> bool:
    return _buckets(f) is not None or bool(np.all(_dense(f) >= 0))


def decompose(matrix: QueryMatrix, attributes: Sequence[str]) -> list[RowBlock]:
    """Row blocks of a Union/Sum/Weighted/Kron tree whose Krons align with ``attributes``."""
    if isinstance(matrix, Union):
        out: list[RowBlock] = []
        for block in matrix.blocks:
            out.extend(decompose(block, attributes))
        return out
    if isinstance(matrix, Weighted):
        return [RowBlock(tuple((c * matrix.weight, f) for c, f in rb.leaves), rb.rows)
                for rb in decompose(matrix.base, attributes)]
    if isinstance(matrix, Sum):
        parts = [decompose(t, attributes) for t in matrix.terms]
        if any(len(p) != 1 for p in parts):
            raise ValueError("sum of stacked blocks is not supported")
        return [RowBlock(tuple(t for p in parts for t in p[0].leaves), parts[0][0].rows)]
    if isinstance(matrix, Kron):
        if len(matrix.factors) != len(attributes):
            raise ValueError("Kron factors do not align with the domain")
        factors: dict = {}
        coef = 1.0
        for a, f in zip(attributes, matrix.factors):
            if int(f.shape[0]) != 1:    # not a total: kept as it is until a dense form is needed
                factors[a] = f
                continue
            d = np.asarray(f.dense(), dtype=np.float64)
            if _is_total(d):
                coef *= float(d[0, 0])
                continue
            factors[a] = d
        return [RowBlock(((coef, factors),), matrix.shape[0])]
    raise ValueError(f"cannot decompose {type(matrix).__name__}")


@dataclass(frozen=True)
class SupportBlock:
    """A released measurement seen by the variance analysis (structure and σ only)."""

    clique: tuple[str, ...]
    factors: tuple[np.ndarray | StructuredFactor, ...]   # per clique attribute, or one joint factor
    stddev: float                     # noise σ of each measured row, in query units
    scale: float                      # measured row = scale · (M x)
    values: np.ndarray | None = None  # the noisy measurement (for least-squares answers)


class _Prepared:
    """One block's factors in query units: M and the factorisation of its gram (``GramPinv``:
    G⁺ = L Lᵀ and the row space), computed on first use (a query touches few of a large
    workload's blocks: a new process answering one query on 55 marginals spent 2.4 s here
    preparing all of them)."""

    def __init__(self, block: SupportBlock) -> None:
        self.block = block
        self.joint = len(block.factors) == 1 and len(block.clique) != 1
        self._parts: list[GramPinv | SpanPinv] | None = None

    @property
    def ginv(self) -> list[GramPinv | SpanPinv]:
        if self._parts is None:
            block = self.block
            # a lattice block's rows are up to 2²² and more apart in weight: the SVD of M
            # (pinv) or of MᵀM loses the light rows' directions by ε·(d_max/d_min)², by an
            # amount that depends on the BLAS kernel (issue 28); GramPinv works on the unit
            # rows, applies the weights exactly, and never forms an n×n matrix.  The scale
            # goes on the first factor (measured row = scale · (⊗ factors) x).
            self._parts = [gram_pinv(_scaled(f, block.scale if i == 0 else 1.0))
                           for i, f in enumerate(block.factors)]
        return self._parts


def _scaled(f, s: float):
    """``f.astype(float64) * s``, a factor read from a payload kept as its structure."""
    return f.scaled(s) if isinstance(f, StructuredFactor) else f.astype(np.float64) * s


def _within(rowblock: RowBlock, clique: Sequence[str]) -> bool:
    """Whether every attribute the row block reads is in ``clique`` (else ``_lift`` fails:
    checked before the dense factors are made)."""
    return all(a in clique for _, fs in rowblock.leaves for a in fs)


def _lift(term_factors: dict[str, np.ndarray], clique: Sequence[str], sizes: dict[str, int]):
    """Query factors on the clique's attributes (ones rows for attributes it sums out)."""
    if any(a not in clique for a in term_factors):
        return None
    return [term_factors.get(a, np.ones((1, sizes[a]))) for a in clique]


def _kron_all(mats):
    if not mats:  # the empty clique: its marginal is the total, a 1-vector
        return np.ones((1, 1))
    out = mats[0]
    for m in mats[1:]:
        out = np.kron(out, m)
    return out


def row_variances(rowblock: RowBlock, prepared: _Prepared, sizes: dict[str, int]) -> np.ndarray | None:
    """σ_b² diag(q G⁺ qᵀ) for one row block, or None if the block does not support it."""
    block = prepared.block
    if not _within(rowblock, block.clique):
        return None
    lifted = []
    for coef, factors in rowblock.terms:
        lf = _lift(factors, block.clique, sizes)
        if lf is None:
            return None
        lifted.append((coef, lf))
    if prepared.joint:
        q = sum(c * _kron_all(lf) for c, lf in lifted)
        gi = prepared.ginv[0]
        if not np.allclose(gi.project(q), q, atol=1e-8 * max(1.0, np.abs(q).max())):
            return None
        return block.stddev ** 2 * gi.quad(q, q)
    for _, lf in lifted:
        for qa, gi in zip(lf, prepared.ginv):
            if not gi.spans(qa, atol=1e-8 * max(1.0, np.abs(qa).max())):
                return None
    total = None
    for c1, lf1 in lifted:
        for c2, lf2 in lifted:
            diag = np.ones(1)
            for qa, qb, gi in zip(lf1, lf2, prepared.ginv):
                if qa.shape[0] != qb.shape[0]:
                    return None
                diag = np.kron(diag, gi.quad(qa, qb))
            part = c1 * c2 * diag
            total = part if total is None else total + part
    if total is None or total.shape[0] != rowblock.rows:
        return None
    return block.stddev ** 2 * np.maximum(total, 0.0)


def _kron_apply(mats, y: np.ndarray) -> np.ndarray:
    """(⊗ mats) y without forming the product (thesis Algorithm 1)."""
    x = y.reshape(tuple(m.shape[1] for m in mats))
    for axis, m in enumerate(mats):
        x = np.moveaxis(np.tensordot(m, x, axes=([1], [axis])), 0, axis)
    return x.reshape(-1)


def row_estimates(rowblock: RowBlock, prepared: _Prepared, sizes: dict[str, int]) -> np.ndarray | None:
    """Local least-squares estimate q (MᵀM)⁺ Mᵀ y of one row block from one block (§3.9)."""
    block = prepared.block
    if block.values is None or not _within(rowblock, block.clique):
        return None
    y = np.asarray(block.values, dtype=np.float64)
    out = np.zeros(rowblock.rows)
    for coef, factors in rowblock.terms:
        lf = _lift(factors, block.clique, sizes)
        if lf is None:
            return None
        if prepared.joint:
            q = _kron_all(lf)
            out += coef * (prepared.ginv[0].estimator(q) @ y)
        else:
            mats = [gi.estimator(qa) for qa, gi in zip(lf, prepared.ginv)]
            out += coef * _kron_apply(mats, y)
    return out


def interval_stderr(answer: np.ndarray, estimate: np.ndarray, stderr: np.ndarray,
                    nonneg: np.ndarray) -> np.ndarray:
    """The standard error to report for the model's ``answer`` of supported rows, so that
    ``answer ± Z95·se`` contains the least-squares interval ``estimate ± Z95·stderr``
    (truncated at 0 for a row whose true value cannot be negative).

    The model's answer is a projection of the least-squares one onto the consistent,
    non-negative tables (docs/engine.md, "The fit's metric"): on a sparse domain it moves
    mass from populated cells into empty ones (the negative noise of empty cells is clipped,
    the total is kept), so populated cells come back biased low and their interval around
    the model's answer missed the truth far more than 5% of the time (issue 29: 24 of 101
    flight destinations).  The least-squares estimate is unbiased with exactly ``stderr``
    (Gaussian noise; the inverse-variance combination of independent block estimates), so
    its 95% interval covers the truth 95% of the time; an interval containing it covers at
    least as often.  Where the two answers agree (dense tables) nothing is widened.
    Rows without an estimate (NaN: joint ResidualPlanner support) keep ``stderr``."""
    a, e, s = (np.asarray(x, dtype=np.float64) for x in (answer, estimate, stderr))
    ok = np.isfinite(a) & np.isfinite(e) & np.isfinite(s)
    e = np.where(ok, e, a)
    lower = np.minimum(a, e) - Z95 * s
    lower = np.where(np.asarray(nonneg, bool), np.maximum(lower, 0.0), lower)
    upper = np.maximum(a, e) + Z95 * s
    half = np.maximum(upper - a, a - lower)
    return np.where(ok, np.maximum(half / Z95, 0.0), s)


def _marginal_of(p: _Prepared, sizes: dict[str, int]) -> tuple[np.ndarray, float] | None:
    """A released block that counts its clique's cells (every factor a multiple of the
    identity): its noisy marginal table in cell units and the noise variance of each cell;
    None for any other block (or one without values)."""
    b = p.block
    if not b.stddev > 0:
        return None
    shape = tuple(sizes[a] for a in b.clique)
    c = float(b.scale)
    for f in b.factors:
        d = scaled_identity(f)
        if d is None:
            return None
        c *= d
    if int(np.prod(shape, dtype=np.int64)) != int(np.prod([f.shape[0] for f in b.factors], dtype=np.int64)):
        return None
    if b.values is None:          # standard errors only: a table of NaN
        return np.full(shape, np.nan), (b.stddev / c) ** 2
    values = np.asarray(b.values, dtype=np.float64)
    if values.size != int(np.prod(shape, dtype=np.int64)):
        return None
    return values.reshape(shape) / c, (b.stddev / c) ** 2


class MarginalJoint:
    """Least squares over the released *marginal* blocks together (thesis Theorems 7-9).

    Each marginal table splits into orthogonal components, one per subset a of its clique:
    the a-marginal centred on every attribute of a.  Block b's estimate of component a has
    covariance v_b·Π_{i∈b∖a} n_i on the centred space (v_b its cell variance), and blocks
    are independent, so the least-squares estimate of component a is their
    inverse-variance combination with information Ω_a = Σ_{b⊇a} 1/(v_b·Π_{b∖a} n_i).  A
    Kron query row q = ⊗ q_i (1ᵀ off its attributes T) reads Σ_{a⊆T} Π_{i∈T∖a}(q_i·1/n_i)
    · (⊗_{i∈a} q_i) ẑ_a, with variance Σ_a Π_{T∖a}(q_i·1/n_i)² Π_a ‖q_i P_i‖² / Ω_a.

    This is the estimate whose error the planner promises for marginal strategies (OPT_M,
    the marginal part of OPT_M+: ``plan/algebra.py``), and the one the fitted model matches
    where its non-negativity does not bind.  Combining each block's *local* estimate
    instead (one block at a time, then inverse variances) ignores what other blocks say
    about the lower-order components: ``GROUP BY sex`` on the adult dashboard came out at
    29.2 where the plan promised 22.5 (issue 35 item 6)."""

    def __init__(self, attributes: Sequence[str], sizes: dict[str, int],
                 prepared: Sequence[_Prepared]) -> None:
        self.attributes = tuple(attributes)
        self.sizes = sizes
        self.blocks: list[tuple[tuple[str, ...], np.ndarray, float]] = []
        self.members: set[int] = set()
        for k, p in enumerate(prepared):
            got = _marginal_of(p, sizes)
            if got is not None:
                self.blocks.append((tuple(p.block.clique), got[0], got[1]))
                self.members.add(k)
        self._components: dict[frozenset, tuple[np.ndarray, float] | None] = {}

    def component(self, a: frozenset) -> tuple[np.ndarray, float] | None:
        """(ẑ_a as a tensor over a's attributes in domain order, Ω_a), or None when no
        block contains a."""
        if a in self._components:
            return self._components[a]
        order = [x for x in self.attributes if x in a]
        num, info = None, 0.0
        for clique, table, var in self.blocks:
            if not a <= set(clique):
                continue
            drop = tuple(i for i, x in enumerate(clique) if x not in a)
            m = table.sum(axis=drop) if drop else table
            kept = [x for x in clique if x in a]
            m = np.transpose(m, [kept.index(x) for x in order]) if order else np.asarray(m)
            for axis in range(len(order)):
                m = m - m.mean(axis=axis, keepdims=True)
            w = 1.0 / (var * float(np.prod([self.sizes[clique[i]] for i in drop])))
            num = w * m if num is None else num + w * m
            info += w
        got = None if num is None else (num / info, info)
        self._components[a] = got
        return got

    def rows(self, rb: RowBlock) -> tuple[np.ndarray, np.ndarray] | None:
        """(estimate, variance) per row of the row block, or None when the marginal blocks
        do not support it (a component it needs is in no block, or its terms' rows differ)."""
        if not self.blocks:
            return None
        T = [x for x in self.attributes if any(x in fs for _, fs in rb.leaves)]
        shapes = []
        for x in T:
            counts = {int(fs[x].shape[0]) for _, fs in rb.leaves if x in fs}
            if len(counts) != 1 or any(x not in fs and counts != {1} for _, fs in rb.leaves):
                return None
            shapes.append(counts.pop())
        if int(np.prod(shapes, dtype=np.int64)) != rb.rows:
            return None
        # a GROUP BY's Bucket stays a cell → row map (``_row_sums``, ``_row_dots``, ``_apply``)
        qs = [(c, [fs[x] if x in fs and _buckets(fs[x]) is not None
                   else np.asarray(_dense(fs[x]) if x in fs else np.ones((1, self.sizes[x])), dtype=np.float64)
                   for x in T])
              for c, fs in rb.leaves]
        est = np.zeros(rb.rows)
        var = np.zeros(rb.rows)
        # per term and attribute: row sums s = q·1; per pair of terms: rowwise q·q'.  The
        # centred rows q P never need forming: ⟨qP, q'P⟩ = q·q' − (q·1)(q'·1)/n, and
        # (q P)·z = q·z for the components z, which are centred on their attributes.
        sums = [[_row_sums(q[i]) for i in range(len(T))] for _, q in qs]
        dots = {(t1, t2): [_row_dots(qs[t1][1][i], qs[t2][1][i]) for i in range(len(T))]
                for t1 in range(len(qs)) for t2 in range(t1, len(qs))}
        for mask in range(1 << len(T)):
            inside = [bool(mask >> i & 1) for i in range(len(T))]
            energy = np.zeros(rb.rows)
            for t1, (c1, _) in enumerate(qs):
                for t2 in range(t1, len(qs)):
                    e = np.ones(1)
                    for i, x in enumerate(T):
                        n = self.sizes[x]
                        s1, s2 = sums[t1][i], sums[t2][i]
                        e = np.kron(e, dots[t1, t2][i] - s1 * s2 / n if inside[i] else s1 * s2 / (n * n))
                    energy += (1.0 if t1 == t2 else 2.0) * c1 * qs[t2][0] * e
            if not np.any(np.abs(energy) > 1e-12 * max(float(np.abs(energy).max()), 1e-300)):
                continue
            a = [x for x, inn in zip(T, inside) if inn]
            got = self.component(frozenset(a))
            if got is None:
                return None
            z, info = got
            var += np.maximum(energy, 0.0) / info
            for t, (c, q) in enumerate(qs):
                part = z
                for j, i in enumerate([i for i in range(len(T)) if inside[i]]):
                    part = _apply(q[i], part, j)
                full = np.ones(())
                for i in range(len(T)):
                    full = np.multiply.outer(full, np.ones(int(q[i].shape[0])) if inside[i]
                                             else sums[t][i] / self.sizes[T[i]])
                shaped = part.reshape([int(q[i].shape[0]) if inside[i] else 1 for i in range(len(T))])
                est += c * (full * shaped).reshape(-1)
        return est, var


#: Largest table (product of the query's attributes' cells) solved by least squares over every
#: block that informs it (``TableLS``); beyond, the marginal blocks' components
#: (``MarginalJoint``) with the other blocks one at a time.
TABLE_CELLS = 512


def _gather(M: np.ndarray, order: Sequence[str], T: Sequence[str], sizes: dict[str, int]) -> np.ndarray:
    """M's rows as rows over the table of T (C order): M's columns index the cells of the
    attributes ``order`` (C order, ``order`` ⊆ T); the other attributes of T are summed
    over, so each T cell takes the column of its sub-cell."""
    shape = [sizes[x] for x in T]
    idx = np.indices(shape).reshape(len(T), -1) if T else np.zeros((0, 1), dtype=np.int64)
    if not order:
        return np.repeat(M[:, :1], idx.shape[1], axis=1)
    flat = np.ravel_multi_index([idx[list(T).index(x)] for x in order], [sizes[x] for x in order])
    return M[:, flat]


def _query_rows(rb: RowBlock, T: Sequence[str], sizes: dict[str, int]) -> np.ndarray | None:
    """The row block's rows over the table of T (dense, rows × Π n), or None when its
    terms' rows are not one Kron layout."""
    out = None
    for c, fs in rb.terms:
        q: np.ndarray = np.ones((1, 1))
        for x in T:
            q = np.kron(q, np.asarray(fs.get(x, np.ones((1, sizes[x]))), dtype=np.float64))
        if q.shape[0] != rb.rows:
            return None
        out = c * q if out is None else out + c * q
    return out


class TableLS:
    """Least squares on the table of a query's attributes T from every block that informs it.

    A block over clique C measures s·(⊗ F_i) x_C.  On an attribute of C outside T, the
    least-squares estimate of the sum over it, u = F(FᵀF)⁺1 applied to its rows (when 1 is in
    F's row space: a marginal's identity, a p-Identity), turns the block into rows over the
    (C ∩ T)-marginal, each with variance σ²·‖u‖²; rows inside T are kept as they are.
    Stacked with weights 1/σ they give the least-squares estimate of any query on T with its
    variance q G⁺ qᵀ (``GramPinv``), one factorisation per T, kept.  A block that cannot tell
    a sum it would need is left to the one-block estimates, independent of these.  This is
    the estimate the plan's error model promises for marginal strategies and for a filtered
    count answered beside them, and what the fitted model matches where non-negativity does
    not bind (issue 35 item 6)."""

    def __init__(self, sizes: dict[str, int], prepared: Sequence[_Prepared]) -> None:
        self.sizes = sizes
        self.prepared = prepared
        self._solved: dict[tuple[str, ...], tuple[GramPinv, np.ndarray, frozenset[int]] | None] = {}
        self._totals: dict[tuple[int, int], tuple[np.ndarray, float] | None] = {}

    def _total_row(self, k: int, i: int) -> tuple[np.ndarray, float] | None:
        """u with uᵀF = 1ᵀ for factor i of block k (the least-squares estimate of the sum over
        that attribute from its rows: u = F(FᵀF)⁺1) and ‖u‖², or None when 1 is not in F's
        row space (the block then cannot tell the sum over that attribute)."""
        key = (k, i)
        if key not in self._totals:
            F = _scaled(self.prepared[k].block.factors[i], 1.0)
            g = gram_pinv(F)
            ones = np.ones((1, F.shape[1]))
            got = None
            if g.spans(ones, atol=1e-8 * max(1.0, F.max_abs() if isinstance(F, StructuredFactor)
                                              else float(np.abs(F).max(initial=0.0)))):
                got = (g.estimator(ones)[0], float(g.quad(ones, ones)[0]))
            self._totals[key] = got
        return self._totals[key]

    def _block_rows(self, k: int, T: tuple[str, ...]):
        """Block k's measurement as rows over the table of T: (K, y, variance of each y), the
        attributes of its clique outside T summed out through ``_total_row``; None when it
        cannot tell anything about that table on its own."""
        b = self.prepared[k].block
        if not b.stddev > 0:
            return None
        clique = tuple(b.clique)
        var = float(b.stddev) ** 2
        values = (np.full(int(np.prod([f.shape[0] for f in b.factors], dtype=np.int64)), np.nan)
                  if b.values is None else np.asarray(b.values, dtype=np.float64))   # NaN: errors only
        if len(b.factors) != len(clique):            # one factor over a joint clique
            if not set(clique) <= set(T):
                return None
            M = b.factors[0].astype(np.float64) * b.scale
            return _gather(M, clique, T, self.sizes), values.reshape(-1), var
        Y = values.reshape([f.shape[0] for f in b.factors])
        kept = []
        axis = 0
        for i, x in enumerate(clique):
            if x in T:
                kept.append(i)
                axis += 1
                continue
            got = self._total_row(k, i)
            if got is None:
                return None
            u, uu = got
            Y = np.tensordot(Y, u, axes=([axis], [0]))
            var *= uu
        M = _kron_all([b.factors[i].astype(np.float64) for i in kept]) * b.scale
        return _gather(M, [clique[i] for i in kept], T, self.sizes), Y.reshape(-1), var

    def _solve(self, T: tuple[str, ...]):
        if T in self._solved:
            return self._solved[T]
        got = None
        if int(np.prod([self.sizes[x] for x in T], dtype=np.int64)) <= TABLE_CELLS:
            rows, ys, members = [], [], set()
            for k in range(len(self.prepared)):
                part = self._block_rows(k, T)
                if part is None:
                    continue
                K, y, var = part
                members.add(k)
                rows.append(K / np.sqrt(var))
                ys.append(y / np.sqrt(var))
            if rows:
                got = (GramPinv(np.vstack(rows)), np.concatenate(ys), frozenset(members))
        self._solved[T] = got
        return got

    def rows(self, rb: RowBlock, T: tuple[str, ...]):
        """(estimate, variance, blocks used) per row, or None (T too large, or unsupported)."""
        solved = self._solve(T)
        if solved is None:
            return None
        g, y, members = solved
        Q = _query_rows(rb, T, self.sizes)
        if Q is None or not g.spans(Q, atol=1e-8 * max(1.0, float(np.abs(Q).max(initial=0.0)))):
            return None
        return g.estimator(Q) @ y, np.maximum(g.quad(Q, Q), 0.0), members


def _known(estimate: np.ndarray) -> np.ndarray | None:
    """The estimate, or None where a block without values (standard errors only) entered it."""
    return None if np.isnan(estimate).any() else estimate


def cap_stderr(wide: np.ndarray, stderr: np.ndarray, baseline: float | None,
               other: np.ndarray | None = None) -> np.ndarray:
    """``interval_stderr``'s widening, kept within the query's per-query baseline where the
    least-squares error itself is within it.

    The widening allows for the model's bias where non-negativity moves its answer off the
    least-squares one; next to a dense table it only repeats the two estimates' noise (they
    use the same releases differently), and an answer whose standard error the plan
    promised at or below the per-query baseline came out above it (issue 35 item 6: 20 of
    31 adult counts, up to 1.9×).  So where s ≤ b the reported error is min(widened, b):
    the interval a ± Z95·b still covers a model answer whose bias is below Z95·(b − s).
    Where s > b the plan made no such promise (a plan that leaves a query above its
    baseline says so) and the widening is kept whole, as is every interval of a table without
    workload (no baseline).

    ``other``: per row, the standard error of an independent part the statement adds to this
    query (a SUM's measured binning offsets, ``results._answer_offsets``: the reported error
    is √(se² + other²)).  The promise is the statement's, so the cut leaves it room: where
    √(s² + other²) ≤ b the error is at most √(b² − other²) (TPC-H Q1's price sums were
    reported 0.2% over their baselines by the offsets' part, bench/fit_stop.py)."""
    if baseline is None or not np.isfinite(baseline):
        return wide
    # "within" to the plan's own relative 1e-9 (planner._above_baseline): a query planned at its
    # baseline exactly (the per-query mechanism at union sensitivity 1) computes s by least squares
    # a rounding error either side of b, and one above kept the whole widening; the cut is then
    # at s itself, never below the least-squares error
    tol = 1 + 1e-9
    if other is None:
        return np.where(stderr <= baseline * tol, np.minimum(wide, np.maximum(baseline, stderr)), wide)
    o2 = np.square(np.asarray(other, dtype=np.float64))
    within = np.isfinite(o2) & (np.square(stderr) + o2 <= (baseline * tol) ** 2)
    room = np.sqrt(np.maximum(baseline * baseline - np.where(np.isfinite(o2), o2, 0.0), 0.0))
    return np.where(within, np.minimum(wide, np.maximum(room, stderr)), wide)


class VarianceModel:
    """Standard errors and support for queries, given the released blocks of one table."""

    def __init__(self, attributes: Sequence[str], sizes: dict[str, int],
                 blocks: Sequence[SupportBlock]) -> None:
        self.attributes = tuple(attributes)
        self.sizes = dict(sizes)
        self.prepared = [_Prepared(b) for b in blocks]
        # ResidualPlanner strategies answer marginals from several blocks together
        # (plan/algebra.py); rows no single block supports are checked against them.
        self.joint = JointSupport.build(self.attributes, self.sizes,
                                        [(b.clique, b.factors, b.scale, b.stddev) for b in blocks])
        # blocks answer together by least squares where they can (on the query's table, or
        # the marginal blocks' components), the others one at a time
        self.table = TableLS(self.sizes, self.prepared)
        self.marginal = MarginalJoint(self.attributes, self.sizes, self.prepared)

    def _sources(self, rb: RowBlock, estimates: bool):
        """(variance, estimate or None) of each independent unbiased estimate of the row
        block: the least squares of the blocks that inform its table together (or of the
        marginal blocks, on a larger table), and each other supporting block's local one."""
        out = []
        T = tuple(x for x in self.attributes if any(x in fs for _, fs in rb.leaves))
        skip: set[int] | frozenset[int] = set()
        table = self.table.rows(rb, T)
        if table is not None:
            out.append((table[1], _known(table[0])))
            skip = table[2]
        else:
            joint = self.marginal.rows(rb)
            if joint is not None:
                out.append((joint[1], _known(joint[0])))
                skip = self.marginal.members
        for k, p in enumerate(self.prepared):
            if k in skip:
                continue
            v = row_variances(rb, p, self.sizes)
            if v is None:
                continue
            out.append((v, row_estimates(rb, p, self.sizes) if estimates else None))
        return out

    def _joint_variances(self, rb: RowBlock) -> np.ndarray | None:
        if self.joint is None or len(rb.terms) != 1:
            return None
        coef, factors = rb.terms[0]
        v = self.joint.row_variances(factors)
        return None if v is None or v.shape[0] != rb.rows else coef * coef * v

    def analyse(self, matrix: QueryMatrix) -> tuple[np.ndarray, np.ndarray]:
        """(stderr per row, supported per row).  Unsupported rows get NaN."""
        err, sup, _, _ = self._analyse(matrix, False)
        return err, sup

    def analyse_estimates(self, matrix: QueryMatrix):
        """``analyse`` plus, per row, the least-squares estimate whose variance the stderr is
        (the inverse-variance combination of the supporting blocks' local estimates; NaN where
        only the joint ResidualPlanner support holds) and whether every coefficient of the row
        is non-negative (its true value is then ≥ 0): what :func:`interval_stderr` needs."""
        return self._analyse(matrix, True)

    def _analyse(self, matrix: QueryMatrix, estimates: bool):
        rowblocks = decompose(matrix, self.attributes)
        errs, supported, ests, nonneg = [], [], [], []
        for rb in rowblocks:
            inv = np.zeros(rb.rows)
            num, den = np.zeros(rb.rows), np.zeros(rb.rows)
            any_support, all_values = False, True
            for v, est in self._sources(rb, estimates):
                any_support = True
                with np.errstate(divide="ignore"):
                    inv += np.where(v > 0, 1.0 / np.maximum(v, 1e-300), np.inf)
                if estimates:
                    if est is None:
                        all_values = False
                    else:
                        w = 1.0 / np.maximum(v, 1e-300)
                        num += w * est
                        den += w
            joint = None if any_support else self._joint_variances(rb)
            if any_support:
                with np.errstate(divide="ignore"):
                    errs.append(np.sqrt(np.where(np.isinf(inv), 0.0, 1.0 / inv)))
                supported.append(np.ones(rb.rows, bool))
            elif joint is not None:
                errs.append(np.sqrt(np.maximum(joint, 0.0)))
                supported.append(np.ones(rb.rows, bool))
            else:
                errs.append(np.full(rb.rows, np.nan))
                supported.append(np.zeros(rb.rows, bool))
            if estimates:
                ok = any_support and all_values
                ests.append(num / np.where(den > 0, den, 1.0) if ok else np.full(rb.rows, np.nan))
                nonneg.append(np.full(rb.rows, all(c >= 0 and all(_nonneg(f) for f in fs.values())
                                                   for c, fs in rb.leaves)))
        if not errs:
            return np.zeros(0), np.zeros(0, bool), np.zeros(0), np.zeros(0, bool)
        if not estimates:
            return np.concatenate(errs), np.concatenate(supported), None, None
        return np.concatenate(errs), np.concatenate(supported), np.concatenate(ests), np.concatenate(nonneg)

    def least_squares(self, matrix: QueryMatrix) -> tuple[np.ndarray, np.ndarray]:
        """HDMM's unbiased answers without the graphical model: per row, the inverse-variance
        combination of the local least-squares estimates of the supporting blocks
        (thesis §3.9).  Returns (answers, stderr); unsupported rows are NaN."""
        answers, errs = [], []
        for rb in decompose(matrix, self.attributes):
            num = np.zeros(rb.rows)
            den = np.zeros(rb.rows)
            for v, est in self._sources(rb, True):
                if est is None:
                    continue
                w = 1.0 / np.maximum(v, 1e-300)
                num += w * est
                den += w
            with np.errstate(invalid="ignore", divide="ignore"):
                answers.append(np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan))
                errs.append(np.where(den > 0, np.sqrt(1.0 / np.where(den > 0, den, 1.0)), np.nan))
        if not answers:
            return np.zeros(0), np.zeros(0)
        return np.concatenate(answers), np.concatenate(errs)
