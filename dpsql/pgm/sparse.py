"""A sparse matrix in plain numpy: the fit's measurement matrix without scipy (issue 17).

The L2 loss of a small exact fit is two products with one sparse matrix P per evaluation
(:class:`dpsql.pgm.loss.SparseLoss`).  scipy.sparse did them in ~15 µs each on the adult
dashboard's 1,056 × 3,956 matrix (19,173 non-zeros), but importing it cost 0.23–0.34 s of a
0.9 s fit, in the process that fits and nowhere else since a saved model answers without
scipy.  Here a product is a gather and one ``np.add.reduceat`` per direction (~30–50 µs at
that size): the ~900 products of that fit cost less than the import did.  Only the products
the fit needs are offered; :meth:`RowMatrix.to_scipy` hands the same matrix to the code that
solves with it (``dpsql.pgm.polish``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["RowMatrix", "expand_columns"]


class _Reducer:
    """y = Σ_k data[k]·x[index[k]] grouped by ``group`` (sorted runs), of length ``length``."""

    __slots__ = ("index", "data", "starts", "where", "length")

    def __init__(self, group: np.ndarray, index: np.ndarray, data: np.ndarray, length: int) -> None:
        order = np.argsort(group, kind="stable")
        group = group[order]
        self.index = np.ascontiguousarray(index[order], dtype=np.intp)
        self.data = None if np.all(data == 1.0) else np.ascontiguousarray(data[order], dtype=float)
        counts = np.bincount(group, minlength=length) if group.size else np.zeros(length, dtype=np.intp)
        present = counts > 0
        self.starts = (np.cumsum(counts) - counts)[present].astype(np.intp)
        # np.add.reduceat cannot express an empty run: those outputs are filled with 0.
        self.where = None if present.all() else np.flatnonzero(present)
        self.length = length

    def __call__(self, x: np.ndarray) -> np.ndarray:
        if not self.starts.size:
            return np.zeros(self.length)
        g = x.take(self.index)
        if self.data is not None:
            g *= self.data
        out = np.add.reduceat(g, self.starts)
        if self.where is None:
            return out
        full = np.zeros(self.length)
        full[self.where] = out
        return full


class RowMatrix:
    """An m × n matrix from its non-zeros (``row``, ``col``, ``data``): ``P @ v``, ``P.T @ u``
    (``rmatvec``), per-row counts, and the same matrix for scipy."""

    def __init__(self, row: np.ndarray, col: np.ndarray, data: np.ndarray, shape: tuple[int, int]) -> None:
        m, n = (int(s) for s in shape)
        self.shape = (m, n)
        self.row = np.asarray(row, dtype=np.int64)
        self.col = np.asarray(col, dtype=np.int64)
        self.data = np.asarray(data, dtype=float)
        self.nnz = int(self.data.size)
        # Built on first use: a matrix that only goes to scipy (the relaxed fit's exact step)
        # never sorts its non-zeros here.
        self._forward: _Reducer | None = None
        self._backward: _Reducer | None = None

    def __matmul__(self, v: np.ndarray) -> np.ndarray:
        if self._forward is None:
            self._forward = _Reducer(self.row, self.col, self.data, self.shape[0])
        return self._forward(np.asarray(v, dtype=float))

    def rmatvec(self, u: np.ndarray) -> np.ndarray:
        """Pᵀu."""
        if self._backward is None:
            self._backward = _Reducer(self.col, self.row, self.data, self.shape[1])
        return self._backward(np.asarray(u, dtype=float))

    def row_counts(self) -> np.ndarray:
        return np.bincount(self.row, minlength=self.shape[0])

    def dense(self) -> np.ndarray:
        out = np.zeros(self.shape)
        np.add.at(out, (self.row, self.col), self.data)
        return out

    def to_scipy(self):
        """The same matrix as a scipy.sparse CSR matrix (imports scipy)."""
        import scipy.sparse as sp
        return sp.csr_matrix((self.data, (self.row, self.col)), shape=self.shape)


def expand_columns(row: np.ndarray, col: np.ndarray, vals: np.ndarray, k: int, cell: np.ndarray,
                   offset: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The non-zeros of ``q[:, cell]`` as (row, column + offset, value), never densified.

    ``q`` (m × k) is given by its non-zeros (``row``, ``col``, ``vals``) and acts on a marginal
    of k cells; ``cell[x]`` is the marginal cell of host cell x: column x of the result is
    column ``cell[x]`` of ``q``.  Each non-zero q[i, j] is repeated once per host cell of
    marginal cell j (a ragged range per non-zero), in the order the non-zeros are given."""
    counts = np.bincount(cell, minlength=k) if cell.size else np.zeros(k, dtype=np.int64)
    order = np.argsort(cell, kind="stable")          # host cells grouped by marginal cell
    first = np.cumsum(counts) - counts                # where marginal cell j's group starts
    lengths = counts[col]
    total = int(lengths.sum())
    ends = np.cumsum(lengths)
    within = np.arange(total, dtype=np.int64) - np.repeat(ends - lengths, lengths)
    cols = order[np.repeat(first[col], lengths) + within] + offset
    return np.repeat(row, lengths), cols, np.repeat(vals, lengths)
