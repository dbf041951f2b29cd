"""Least-squares reconstruction for the HDMM-only path (thesis §3.9).

The baseline the graphical-model path must beat: given the noisy answers of each
:class:`~dpsql.plan.strategy.MeasurementBlock` (its query applied to its clique's marginal,
plus noise of a known standard deviation), estimate the data vector by weighted least
squares and answer the workload with it.

* one Kronecker block: x̂ = (⊗ F_i)⁺ y, factor by factor (Prop. 11, Algorithm 1);
* OPT_+ on a domain too large for a full data vector: *local* least squares, each workload
  term answered from its own block, W_j Q_j⁺ y_j (§3.9 item 3) -- unbiased, not consistent;
* otherwise (marginals, small unions): the minimum-norm weighted least-squares solution by
  LSQR on the stacked blocks, which never forms the strategy matrix.

Answers are unbiased whenever the strategy supports the workload, with the variances of
:func:`dpsql.plan.error.per_query_variance`.
"""

from __future__ import annotations

from dataclasses import dataclass
from collections.abc import Sequence
from typing import Any

import numpy as np
import scipy.sparse.linalg as spla

from dpsql.errors import UnsupportedQueryError
from dpsql.plan.strategy import KronBlock, Strategy, factor_kind
from dpsql.plan.workload import factor_dense

__all__ = ["least_squares", "LeastSquaresEstimate", "kron_apply", "FULL_VECTOR_LIMIT"]

#: Largest domain for which a full data vector is reconstructed.
FULL_VECTOR_LIMIT = 1 << 24


def kron_apply(factors: Sequence[np.ndarray], x: np.ndarray) -> np.ndarray:
    """(F_1 ⊗ … ⊗ F_d) x one factor at a time (thesis Algorithm 1)."""
    shape = [F.shape[1] for F in factors]
    T = np.asarray(x, dtype=float).reshape(shape)
    for axis, F in enumerate(factors):
        T = np.moveaxis(np.tensordot(F, T, axes=([1], [axis])), 0, axis)
    return T.reshape(-1)


def _measured_factors(block: KronBlock) -> list[np.ndarray]:
    """Factors as measured: a scaled Total becomes a plain ones row (its scale is in the
    block weight of the MeasurementBlock), others stay."""
    out = []
    for F in block.factors:
        kind, c = factor_kind(F)
        out.append(np.ones((1, F.shape[1])) if kind == "total" else
                   (np.eye(F.shape[1]) if kind == "identity" else F))
    return out


@dataclass(frozen=True, eq=False)
class LeastSquaresEstimate:
    """The reconstruction: a full data vector, or per-term local answers for OPT_+."""

    strategy: Strategy
    data_vector: np.ndarray | None
    values: tuple[np.ndarray, ...]

    def answer(self, W: Any) -> np.ndarray:
        """Answers to the workload (a Workload, linalg matrix or dense array)."""
        matrix = W.matrix if hasattr(W, "matrix") else W
        if self.data_vector is not None:
            return np.asarray(matrix @ self.data_vector, dtype=float).reshape(-1)
        return self._local(matrix)

    def _local(self, matrix: Any) -> np.ndarray:
        from dpsql.linalg import kron_terms
        from dpsql.plan.error import kron_loss
        from dpsql.plan.workload import workload_terms

        s = self.strategy
        # Each term from the block that answers it with the least variance (for the OPT_+
        # workload this is at least as good as the block optimised for it).
        per = np.array([kron_loss(b, workload_terms(matrix)) for b in s.kron_blocks])
        if not np.all(np.isfinite(per.min(axis=0))):
            raise UnsupportedQueryError("a workload term is not supported by any single block",
                                        hint="local least squares needs a supporting block")
        choice = list(np.argmin(per, axis=0))
        out = []
        for j, (w, factors) in enumerate(kron_terms(matrix)):
            fs = _measured_factors(s.kron_blocks[choice[j]])
            ops = [factor_dense(f) @ np.linalg.pinv(F) for f, F in zip(factors, fs)]
            out.append(w * kron_apply(ops, self.values[choice[j]]))
        return np.concatenate(out)


def least_squares(strategy: Strategy, noisy_block_values: Sequence[np.ndarray],
                  stddevs: Sequence[float]) -> LeastSquaresEstimate:
    """Weighted least squares from the measured blocks (see module docstring).

    ``noisy_block_values[k]`` are block k's query answers on its marginal plus noise of
    standard deviation ``stddevs[k]`` (the block weight already divided out).
    """
    blocks = strategy.kron_blocks
    if len(noisy_block_values) != len(blocks) or len(stddevs) != len(blocks):
        raise UnsupportedQueryError(
            f"{len(noisy_block_values)} value arrays for {len(blocks)} strategy blocks")
    values = tuple(np.asarray(v, dtype=float).reshape(-1) for v in noisy_block_values)
    size = int(np.prod(strategy.shape, dtype=object))
    if len(blocks) == 1:
        fs = _measured_factors(blocks[0])
        x = kron_apply([np.linalg.pinv(F) for F in fs], values[0]) if size <= FULL_VECTOR_LIMIT \
            else None
        return LeastSquaresEstimate(strategy, x, values)
    if size > FULL_VECTOR_LIMIT:
        if strategy.assignment is None:
            raise UnsupportedQueryError(
                "least-squares reconstruction of this strategy needs a full data vector "
                f"of {size:,} cells", hint="use the graphical-model estimator")
        return LeastSquaresEstimate(strategy, None, values)
    facs = [_measured_factors(b) for b in blocks]
    inv = [1.0 / float(s) for s in stddevs]
    rows = [int(np.prod([F.shape[0] for F in fs])) for fs in facs]
    offsets = np.concatenate([[0], np.cumsum(rows)])

    def mv(x):
        return np.concatenate([c * kron_apply(fs, x) for c, fs in zip(inv, facs)])

    def rmv(y):
        out = np.zeros(size)
        for k, (c, fs) in enumerate(zip(inv, facs)):
            out += c * kron_apply([F.T for F in fs], y[offsets[k]:offsets[k + 1]])
        return out

    op = spla.LinearOperator((int(offsets[-1]), size), matvec=mv, rmatvec=rmv, dtype=float)
    rhs = np.concatenate([c * v for c, v in zip(inv, values)])
    x = spla.lsqr(op, rhs, atol=1e-12, btol=1e-12, iter_lim=10 * size + 100)[0]
    return LeastSquaresEstimate(strategy, x, values)
