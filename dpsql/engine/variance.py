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

import numpy as np

from dpsql.linalg import Kron, QueryMatrix, Sum, Union, Weighted
from dpsql.linalg.rowscaled import GramPinv
from dpsql.plan.joint import JointSupport

# The two-sided 95% normal quantile: a standard error times Z95 is the half-width of the
# 95% interval that every front end shows (``ci95`` error mode).
Z95 = 1.959963984540054

# per-attribute factor of a query term: dense (rows × n) or None for "summed out" (Total)
Term = tuple[float, dict[str, np.ndarray]]


@dataclass(frozen=True)
class RowBlock:
    """Consecutive output rows given by a sum of Kron terms with a common row structure."""

    terms: tuple[Term, ...]
    rows: int


def _is_total(f: np.ndarray) -> bool:
    return bool(f.shape[0] == 1 and np.all(f == f[0, 0]) and f[0, 0] != 0)


def decompose(matrix: QueryMatrix, attributes: Sequence[str]) -> list[RowBlock]:
    """Row blocks of a Union/Sum/Weighted/Kron tree whose Krons align with ``attributes``."""
    if isinstance(matrix, Union):
        out: list[RowBlock] = []
        for block in matrix.blocks:
            out.extend(decompose(block, attributes))
        return out
    if isinstance(matrix, Weighted):
        return [RowBlock(tuple((c * matrix.weight, f) for c, f in rb.terms), rb.rows)
                for rb in decompose(matrix.base, attributes)]
    if isinstance(matrix, Sum):
        parts = [decompose(t, attributes) for t in matrix.terms]
        if any(len(p) != 1 for p in parts):
            raise ValueError("sum of stacked blocks is not supported")
        return [RowBlock(tuple(t for p in parts for t in p[0].terms), parts[0][0].rows)]
    if isinstance(matrix, Kron):
        if len(matrix.factors) != len(attributes):
            raise ValueError("Kron factors do not align with the domain")
        factors = {}
        coef = 1.0
        for a, f in zip(attributes, matrix.factors):
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
    factors: tuple[np.ndarray, ...]   # per clique attribute, or one joint factor
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
        self._parts: list[GramPinv] | None = None

    @property
    def ginv(self) -> list[GramPinv]:
        if self._parts is None:
            block = self.block
            # a lattice block's rows are up to 2²² and more apart in weight: the SVD of M
            # (pinv) or of MᵀM loses the light rows' directions by ε·(d_max/d_min)², by an
            # amount that depends on the BLAS kernel (issue 28); GramPinv works on the unit
            # rows, applies the weights exactly, and never forms an n×n matrix.  The scale
            # goes on the first factor (measured row = scale · (⊗ factors) x).
            self._parts = [GramPinv(f.astype(np.float64) * (block.scale if i == 0 else 1.0))
                           for i, f in enumerate(block.factors)]
        return self._parts


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
    if block.values is None:
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
            for p in self.prepared:
                v = row_variances(rb, p, self.sizes)
                if v is None:
                    continue
                any_support = True
                with np.errstate(divide="ignore"):
                    inv += np.where(v > 0, 1.0 / np.maximum(v, 1e-300), np.inf)
                if estimates:
                    est = row_estimates(rb, p, self.sizes)
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
                nonneg.append(np.full(rb.rows, all(c >= 0 and all(np.all(f >= 0) for f in fs.values())
                                                   for c, fs in rb.terms)))
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
            for p in self.prepared:
                v = row_variances(rb, p, self.sizes)
                if v is None:
                    continue
                est = row_estimates(rb, p, self.sizes)
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
