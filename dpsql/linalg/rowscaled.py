"""(MᵀM)⁺ of a matrix whose rows differ widely in scale, to working accuracy.

A measured block's rows come with very different weights: a lattice block holds the query's
row at weight 2²⁰ next to edge rows at weight 2⁻² (``measure/release.py`` rounds real
factors to a grid, and its tiny entries become light rows).  Any method that is only
*normwise* backward stable — the SVD of M, ``pinv(M)``, ``eigh(MᵀM)``, unpivoted QR of M —
makes errors of size ε·‖M‖ in every direction, so the directions only the light rows
reach come out wrong by ε·(d_max/d_min)²: 1.2% for rows 2²² apart, and how wrong depends
on how the machine's BLAS kernel rounds (issue 28).

The stiffness lives in a diagonal: M = D W with D the row norms and W the unit rows, which
is well scaled.  Everything below is computed from W, with D applied exactly:

1. Rows sorted by decreasing norm and cut into levels (rows within ``LEVEL`` of the heaviest
   row not yet seen).  Level by level, the rows are projected off the basis so far and the
   *pivots* are chosen as in QR with (threshold) column pivoting: largest residual first,
   while it is above ``RANK_TOL``.  The pivots W_p = T Q_bᵀ (T lower triangular, Q_b orthonormal) span
   M's row space; every other row is a combination E of pivots of its level or heavier ones.
2. In the pivots' coordinates the non-pivot rows are C·(D_p W_p) with C = D_n E D_p⁻¹, and
   |C_ij| ≤ LEVEL·|E_ij| because a non-pivot row is at most LEVEL times heavier than the
   pivots it combines — C is well scaled.  So MᵀM = (D_p W_p)ᵀ (I + CᵀC) (D_p W_p) = FᵀF
   with F = R_c D_p W_p, where [I; C] = Q_c R_c is an ordinary QR of a well-scaled matrix.
3. G⁺ = F⁺F⁺ᵀ = L Lᵀ with L = Q_b T⁻¹ D_p⁻¹ R_c⁻¹, and M L = Q_c (rows back in M's order).

Each factorisation is of a well-scaled matrix, so the result is accurate to ε times the
conditioning of W, whatever the spread of D; this is the row-wise stable weighted least
squares of Powell & Reid (1969) and Cox & Higham (1998) (Householder QR with row sorting and
column pivoting), mostly with BLAS-3 products.  Quadratic forms must be taken as ‖q L‖²: G⁺
itself has entries ~1/d_min², and q G⁺ qᵀ for a query of the heavy rows cancels them down
to ~1/d_max², losing everything (``dense`` is for tests).  Only the triangular solves touch
graded matrices, and they are done by substitution without pivoting (componentwise
backward stable).
"""

from __future__ import annotations

import numpy as np

from dpsql.linalg.lattice import StructuredFactor

#: A unit row whose distance from the span of the heavier pivots is at most this is in their
#: span.  Exact dependencies leave ~1e-15; integer rows that are independent stay far above
#: (the old row-space check, eigenvalues of the unit-row gram above 1e-15, cut at a singular
#: value of ~3e-8: the same scale).
RANK_TOL = 1e-8

#: Rows within this factor of a level's heaviest row are pivoted together, by residual; a
#: dependent row then combines pivots at most LEVEL times lighter than itself.
LEVEL = 256.0

_CLEAR = 1e-3  # a pivot's residual is at least this fraction of the largest remaining one
_BLOCK = 64    # rows factored together when choosing pivots


class GramPinv:
    """G⁺ = (MᵀM)⁺ = L Lᵀ and the row space of ``m`` (k × n), never an n × n matrix.

    ``basis`` (n × r, orthonormal) spans the row space; ``factor`` is L (n × r);
    ``orthonormal`` is M L (k × r, orthonormal columns; zero rows of M give zero rows).

    A matrix whose rows and columns split into independent blocks (no row touches two
    blocks' columns: an identity, a categorical's per-label rows, a Kron-free block
    diagonal) has a block-diagonal gram, so each block is factored alone and kept alone:
    an identity over a 1,459-label categorical is 1,459 one-by-one factorisations, not a
    1,459-square one (issue 35: 4 s of a new process's first answer), and the products
    with a query touch only the query's entries in each block's columns.  The blocks are
    orthogonal, so the pivots each one chooses are those the whole matrix would (up to the
    ``_CLEAR`` threshold, which only picks among equally good pivots): the same G⁺ to
    rounding.  The dense ``basis``/``factor``/``orthonormal`` are assembled on first use."""

    def __init__(self, m: np.ndarray) -> None:
        m = np.asarray(m, dtype=np.float64)
        if m.ndim != 2:
            raise ValueError("GramPinv needs a matrix")
        if not np.all(np.isfinite(m)):
            raise ValueError("GramPinv needs finite entries")
        k, n = m.shape
        self.shape = (k, n)
        groups: list[_Group] = []
        offset = 0
        # blocks of equal shape and rank are stacked, so a query meets them in one product
        stacks: dict[tuple[int, int, int], list[tuple[np.ndarray, np.ndarray, _Column | _Dense]]] = {}
        for rows, cols in _blocks(m):
            part = _Column(m[rows, cols[0]]) if cols.size == 1 else _Dense(m[np.ix_(rows, cols)])
            stacks.setdefault((rows.size, cols.size, part.rank), []).append((rows, cols, part))
        for (_, _, rc), items in stacks.items():
            groups.append(_Group(offset, np.stack([c for _, c, _ in items]),
                                 np.stack([r for r, _, _ in items]),
                                 np.stack([p.basis for _, _, p in items]),
                                 np.stack([p.factor for _, _, p in items]),
                                 np.stack([p.orthonormal for _, _, p in items])))
            offset += len(items) * rc
        self.rank = offset
        self._groups = groups
        self._dense: dict[str, np.ndarray] = {}

    def _scatter(self, name: str, size: int) -> np.ndarray:
        """The dense ``name`` (size × r) from the blocks' pieces."""
        if name not in self._dense:
            out = np.zeros((size, self.rank))
            for g in self._groups:
                idx = g.rows if name == "orthonormal" else g.cols
                out[idx[:, :, None], g.columns()[:, None, :]] = getattr(g, name)
            self._dense[name] = out
        return self._dense[name]

    @property
    def basis(self) -> np.ndarray:
        return self._scatter("basis", self.shape[1])

    @property
    def factor(self) -> np.ndarray:
        return self._scatter("factor", self.shape[1])

    @property
    def orthonormal(self) -> np.ndarray:
        return self._scatter("orthonormal", self.shape[0])

    def _apply(self, q: np.ndarray, name: str) -> np.ndarray:
        """q (the query's rows) times the blocks' ``name`` pieces: q · (dense ``name``)."""
        q = np.asarray(q, dtype=np.float64)
        out = np.zeros((q.shape[0], self.rank))
        for g in self._groups:
            piece = getattr(g, name)                           # blocks × n_b × r_b
            blocks, nb, rb = piece.shape
            if nb == 1:   # one column per block (an identity): a scaling, no products
                src = q[:, g.col_span] if g.col_span else q[:, g.cols[:, 0]]
                part = src * piece[:, 0, 0] if rb == 1 else src[:, :, None] * piece[None, :, 0, :]
            else:
                part = np.matmul(q[:, g.cols].transpose(1, 0, 2), piece).transpose(1, 0, 2)
            out[:, g.offset:g.offset + blocks * rb] = part.reshape(q.shape[0], -1)
        return out

    def coords(self, q: np.ndarray) -> np.ndarray:
        """q L: diag(qa G⁺ qbᵀ) is the row-wise dot product of coords(qa) and coords(qb)."""
        return self._apply(q, "factor")

    def quad(self, qa: np.ndarray, qb: np.ndarray) -> np.ndarray:
        """diag(qa G⁺ qbᵀ)."""
        ca = self.coords(qa)
        return np.einsum("ij,ij->i", ca, ca if qb is qa else self.coords(qb))

    def spans(self, q: np.ndarray, atol: float) -> bool:
        """Whether every row of q lies in M's row space: ``np.allclose(project(q), q,
        atol=atol)``, reading only q's entries in the columns where that can fail (a block
        whose row space is all of its columns projects q's entries there onto themselves)."""
        q = np.asarray(q, dtype=np.float64)
        full = np.zeros(self.shape[1], dtype=bool)
        partial = []
        for g in self._groups:
            if g.basis.shape[1] == g.basis.shape[2]:
                full[g.col_span or g.cols] = True
            else:
                partial.append(g)
        rest = np.flatnonzero(~full)
        if rest.size == 0:
            return True
        sub = q[:, rest]
        if not partial:      # the rest are columns no row touches: they project to 0
            return bool(np.allclose(np.zeros_like(sub), sub, atol=atol))
        return bool(np.allclose(self.project(q)[:, rest], sub, atol=atol))

    def estimator(self, q: np.ndarray) -> np.ndarray:
        """q G⁺ Mᵀ (local least squares), as (q L)(M L)ᵀ, block by block."""
        c = self.coords(q)
        out = np.zeros((c.shape[0], self.shape[0]))
        for g in self._groups:
            blocks, _, rb = g.factor.shape
            part = c[:, g.offset:g.offset + blocks * rb].reshape(c.shape[0], blocks, rb)
            if rb == 1 and g.row_span:
                out[:, g.row_span] = part[:, :, 0] * g.orthonormal[:, 0, 0]
            elif rb == 1:
                out[:, g.rows] = part * g.orthonormal[None, :, :, 0]
            else:
                est = np.matmul(part.transpose(1, 0, 2), g.orthonormal.transpose(0, 2, 1))
                out[:, g.rows] = est.transpose(1, 0, 2)         # rows × blocks × k_b
        return out

    def project(self, q: np.ndarray) -> np.ndarray:
        """Orthogonal projection of the rows of q onto M's row space."""
        q = np.asarray(q, dtype=np.float64)
        out = np.zeros_like(q)
        partial = [g for g in self._groups if g.basis.shape[1] != g.basis.shape[2]]
        for g in self._groups:
            if g.basis.shape[1] == g.basis.shape[2]:
                # the block's row space is all of its columns: q's entries there, exactly
                span = g.col_span or g.cols
                out[:, span] = q[:, span]
        if not partial:
            return out
        c = self._apply(q, "basis")
        for g in partial:
            blocks, _, rb = g.basis.shape
            part = c[:, g.offset:g.offset + blocks * rb].reshape(q.shape[0], blocks, rb)
            if rb == 1:
                out[:, g.cols] = part * g.basis[None, :, :, 0]
            else:
                back = np.matmul(part.transpose(1, 0, 2), g.basis.transpose(0, 2, 1))
                out[:, g.cols] = back.transpose(1, 0, 2)
        return out

    def dense(self) -> np.ndarray:
        """G⁺ as an n × n matrix (tests and small factors only)."""
        return self.factor @ self.factor.T


#: From this many columns on, a square factor a·I + b·11ᵀ is inverted in closed form.
SPAN_COLUMNS = 128


def span_form(m: np.ndarray) -> tuple[float, float] | None:
    """(a, b) when the square m is exactly a·I + b·11ᵀ with a ≠ 0 and a + b·n ≠ 0 (invertible)
    and has at least ``SPAN_COLUMNS`` columns, else None: OPT_0's Gaussian optimum on a
    GROUP BY or sum over a large categorical (``plan.opt0.gaussian_span``), which rounding to
    the measurement lattice keeps in that form.  The off-diagonal entries are read through a
    strided view (from entry 1 on, rows of n + 1 hold the diagonal last)."""
    if m.ndim != 2 or m.shape[0] != m.shape[1] or m.shape[0] < SPAN_COLUMNS:
        return None
    n = m.shape[0]
    b = float(m[0, 1])
    a = float(m[0, 0]) - b
    d = np.diagonal(m)
    if a == 0.0 or a + b * n == 0.0 or d.min() != a + b or d.max() != a + b:
        return None
    off = np.ascontiguousarray(m).reshape(-1)[1:].reshape(n - 1, n + 1)[:, :n]
    if off.min() != b or off.max() != b:
        return None
    return a, b


class SpanPinv:
    """``GramPinv``'s products for an invertible square factor F = a·I + b·11ᵀ, in closed form.

    F is symmetric with eigenvalue a on the n − 1 directions orthogonal to 1 and a + b·n on 1,
    so (FᵀF)⁻¹ and F⁻¹ act on a query row q through its centred part q⊥ = q − (q·1/n)1ᵀ and its
    sum: diag(qa G⁻¹ qbᵀ) = q⊥a·q⊥b/a² + (qa·1)(qb·1)/(n(a + bn)²), q G⁻¹ Fᵀ = q F⁻¹ =
    q⊥/a + (q·1)/(n(a + bn))·1ᵀ.  O(rows·n) where ``GramPinv`` factors the n×n matrix (13.7 CPU-s
    at n = 1,460: a dense dest block's first answer, issue 35 item 3); nothing cancels but the
    centring, which is exact for a row of equal entries (a Total)."""

    def __init__(self, n: int, a: float, b: float) -> None:
        self.shape = (n, n)
        self.rank = n
        self.a, self.top = a, a + b * n

    def _split(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q = np.atleast_2d(np.asarray(q, dtype=np.float64))
        s = q.sum(axis=1)
        return q - (s / self.shape[0])[:, None], s

    def quad(self, qa: np.ndarray, qb: np.ndarray) -> np.ndarray:
        """diag(qa G⁻¹ qbᵀ)."""
        ca, sa = self._split(qa)
        cb, sb = (ca, sa) if qb is qa else self._split(qb)
        n = self.shape[0]
        return (np.einsum("ij,ij->i", ca, cb) / (self.a * self.a)
                + sa * sb / (n * self.top * self.top))

    def spans(self, q: np.ndarray, atol: float) -> bool:
        """Always: F has full rank."""
        return True

    def project(self, q: np.ndarray) -> np.ndarray:
        return np.array(q, dtype=np.float64, copy=True)

    def estimator(self, q: np.ndarray) -> np.ndarray:
        """q G⁻¹ Fᵀ = q F⁻¹."""
        c, s = self._split(q)
        return c / self.a + (s / (self.shape[0] * self.top))[:, None]


def gram_pinv(m: np.ndarray | StructuredFactor) -> GramPinv | SpanPinv:
    """``SpanPinv`` for an invertible a·I + b·11ᵀ of at least ``SPAN_COLUMNS`` columns, else
    ``GramPinv``: the products the answer path takes of a measured factor."""
    if isinstance(m, StructuredFactor):      # read from a payload: its closed form, no n² matrix
        form = m.span_form(SPAN_COLUMNS)
        return SpanPinv(m.n, *form) if form is not None else GramPinv(m.astype(np.float64))
    m = np.asarray(m, dtype=np.float64)
    form = span_form(m)
    return GramPinv(m) if form is None else SpanPinv(m.shape[0], *form)


class _Group:
    """Independent blocks of one shape and rank, stacked: ``cols`` (blocks × n_b) and
    ``rows`` (blocks × k_b) index M; ``basis``, ``factor`` (blocks × n_b × r_b) and
    ``orthonormal`` (blocks × k_b × r_b) are each block's pieces; block i's coordinates
    are columns ``offset + i·r_b …`` of q L."""

    def __init__(self, offset: int, cols: np.ndarray, rows: np.ndarray, basis: np.ndarray,
                 factor: np.ndarray, orthonormal: np.ndarray) -> None:
        self.offset, self.cols, self.rows = offset, cols, rows
        self.basis, self.factor, self.orthonormal = basis, factor, orthonormal
        # one-column (one-row) blocks over consecutive columns (rows), as an identity's are:
        # a slice, so a query's entries are read without a gather
        self.col_span = _span(cols)
        self.row_span = _span(rows)

    def columns(self) -> np.ndarray:
        """Block i's columns of q L (blocks × r_b)."""
        blocks, _, rb = self.factor.shape
        return self.offset + np.arange(blocks * rb).reshape(blocks, rb)


def _span(idx: np.ndarray) -> slice | None:
    """``idx`` (blocks × 1) as a slice when it is consecutive, else None."""
    if idx.shape[1] != 1 or idx.size == 0:
        return None
    a = int(idx[0, 0])
    return slice(a, a + idx.shape[0]) if np.array_equal(idx[:, 0], np.arange(a, a + idx.shape[0])) else None


def _blocks(m: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
    """(rows, columns) of the independent blocks of ``m``, by first column: the connected
    components of the graph joining a row to the columns where it is non-zero (zero rows and
    columns belong to none: they add nothing to the gram)."""
    nz = m != 0
    row_nnz, col_nnz = nz.sum(axis=1), nz.sum(axis=0)
    live_rows, live_cols = np.flatnonzero(row_nnz), np.flatnonzero(col_nnz)
    if live_rows.size == 0:
        return []
    if row_nnz.max() == live_cols.size:      # a row touching every column: one block
        return [(live_rows, live_cols)]
    # Each column's label is the smallest column known to be in its block: a row takes the
    # least label of its columns, a column the least of its rows', then labels jump to their
    # label's label (pointer jumping: a path of blocks merges in log rounds, not its length).
    _, c = np.nonzero(nz)                                   # by row
    ct, r = np.nonzero(nz.T)                                # by column
    row_starts = np.concatenate([[0], np.cumsum(row_nnz[live_rows])[:-1]])
    col_starts = np.concatenate([[0], np.cumsum(col_nnz[live_cols])[:-1]])
    label = np.arange(m.shape[1])
    row_label = np.zeros(m.shape[0], dtype=label.dtype)
    while True:
        row_label[live_rows] = np.minimum.reduceat(label[c], row_starts)
        new = label.copy()
        new[live_cols] = np.minimum(label[live_cols], np.minimum.reduceat(row_label[r], col_starts))
        while True:
            jumped = new[new]
            if np.array_equal(jumped, new):
                break
            new = jumped
        if np.array_equal(new, label):
            break
        label = new
    row_label[live_rows] = label[c[row_starts]]
    rows = live_rows[np.argsort(row_label[live_rows], kind="stable")]
    cols = live_cols[np.argsort(label[live_cols], kind="stable")]
    labels, row_first = np.unique(row_label[rows], return_index=True)
    col_first = np.searchsorted(label[cols], labels)
    # a block's label is its smallest column, so sorting by label sorts by first column
    return list(zip(np.split(rows, row_first[1:]), np.split(cols, col_first[1:])))


class _Column:
    """A block of one column v (its rows' entries): G⁺ = 1/‖v‖², L = 1/‖v‖, M L = v/‖v‖, as
    ``_Dense`` finds them, without its factorisations (an identity is n such blocks).  ‖v‖
    is taken after scaling by the largest entry, so rows 2²² and more apart neither
    overflow nor lose the light ones beyond rounding."""

    def __init__(self, v: np.ndarray) -> None:
        top = float(np.abs(v).max())
        norm = top * float(np.sqrt(np.sum((v / top) ** 2)))
        self.rank = 1
        self.basis = np.ones((1, 1))
        self.factor = np.full((1, 1), 1.0 / norm)
        self.orthonormal = (v / norm)[:, None]


class _Dense:
    """The factorisation of one block (the steps in the module docstring)."""

    def __init__(self, m: np.ndarray) -> None:
        k, n = m.shape
        norms = np.sqrt(np.einsum("ij,ij->i", m, m))
        live = np.flatnonzero(norms > 0)
        order = live[np.argsort(-norms[live], kind="stable")]   # heaviest first, ties by index
        d = norms[order]
        w = m[order] / d[:, None]
        qb, piv, known = _pivot_rows(w, d)
        r = qb.shape[1]
        self.rank = r
        self.basis = qb
        if r == 0:
            self.factor = np.zeros((n, 0))
            self.orthonormal = np.zeros((k, 0))
            return
        y = w @ qb                                   # unit rows in the pivots' orthonormal basis
        rest = np.ones(len(order), dtype=bool)
        rest[piv] = False
        dep = np.flatnonzero(rest)
        t = np.tril(y[piv])                          # W_p = T Q_bᵀ (upper part: rounding only)
        # a non-pivot row lies in the span of the pivots of its level and the heavier ones: its
        # coordinates beyond them are rounding, and dropping them keeps C bounded (step 2)
        c = np.where(np.arange(r)[None, :] < known[dep][:, None], y[dep], 0.0)
        e = _solve_upper(t.T, c.T).T                 # E T = c (back substitution: zeros stay zero)
        cmat = e * (d[dep][:, None] / d[piv][None, :])
        if dep.size:
            qc, rc = np.linalg.qr(np.vstack([np.eye(r), cmat]))
        else:
            qc, rc = np.eye(r), np.eye(r)
        rc_inv = _solve_upper(rc, np.eye(r))
        s = _solve_lower(t, rc_inv / d[piv][:, None])   # T⁻¹ D_p⁻¹ R_c⁻¹
        self.factor = qb @ s
        out = np.zeros((k, r))
        out[order[piv]] = qc[:r]
        out[order[dep]] = qc[r:]
        self.orthonormal = out


def _pivot_rows(w: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pivot rows of the unit rows ``w`` (sorted by decreasing weight ``d``), level by level.

    A level is the heaviest rows not yet seen and every row within ``LEVEL`` of its weight.
    Its rows are projected off the basis of the heavier levels (twice: classical
    Gram–Schmidt with reorthogonalisation), then its pivots are chosen as in QR with
    column pivoting, while the largest residual is above ``RANK_TOL`` (``_level_pivots``).
    Choosing by residual keeps T well conditioned; choosing only within a level keeps
    C = D_n E D_p⁻¹ bounded by LEVEL·|E|.

    Returns the orthonormal basis (n × r), the pivots' positions in the order they were
    chosen, and for every row how many pivots were chosen by the end of its level."""
    k, n = w.shape
    basis = np.zeros((n, min(k, n)))
    piv: list[int] = []
    known = np.zeros(k, dtype=np.int64)
    s = 0
    start = 0
    while start < k:
        stop = int(np.searchsorted(-d, -d[start] / LEVEL, side="right"))
        if s < n:
            x = np.array(w[start:stop])
            if s:
                b = basis[:, :s]
                x -= (x @ b) @ b.T
                x -= (x @ b) @ b.T
            s = _level_pivots(x, start, basis, s, piv)
        known[start:stop] = s
        start = stop
    return basis[:, :s], np.asarray(piv, dtype=np.int64), known


def _level_pivots(x: np.ndarray, start: int, basis: np.ndarray, s: int, piv: list[int]) -> int:
    """Pivots among one level's projected rows ``x`` (see ``_pivot_rows``); returns the new
    basis size.

    Threshold column pivoting, a block at a time: the remaining rows sorted by residual,
    a Householder QR of the first ``_BLOCK``, and its leading run of rows whose residual
    stays within ``_CLEAR`` of the largest becomes pivots (at least that largest one).
    Residuals only shrink, so every pivot is within ``_CLEAR`` of the one QR with column
    pivoting would take, and a level of independent rows costs a few BLAS-3 steps."""
    n = basis.shape[0]
    rows = np.arange(start, start + x.shape[0])
    while rows.size and s < n:
        res = np.sqrt(np.einsum("ij,ij->i", x, x))
        top = float(res.max())
        if top <= RANK_TOL:
            break
        order = np.argsort(-res, kind="stable")
        x, rows, res = x[order], rows[order], res[order]
        m = min(rows.size, n - s, _BLOCK)
        q, r = np.linalg.qr(x[:m].T)
        low = np.flatnonzero(np.abs(np.diag(r)) < _CLEAR * top)
        j = int(low[0]) if low.size else m
        new = q[:, :j]
        if s:
            # a small residual leaves the new directions ε/residual off the basis: once more
            b = basis[:, :s]
            new = np.linalg.qr(new - b @ (b.T @ new))[0]   # nested spans, so T stays triangular
        basis[:, s:s + j] = new
        piv.extend(int(i) for i in rows[:j])
        s += j
        x, rows = x[j:], rows[j:]
        if rows.size:
            x = x - (x @ new) @ new.T
            x = x - (x @ new) @ new.T
    return s


def _solve_upper(u: np.ndarray, b: np.ndarray) -> np.ndarray:
    """U⁻¹ b for upper-triangular U by back substitution: LU with partial pivoting of an
    upper-triangular matrix finds every pivot on the diagonal (the entries below are 0), so
    it swaps nothing and is exactly substitution."""
    return np.linalg.solve(u, b)


def _solve_lower(low: np.ndarray, b: np.ndarray) -> np.ndarray:
    """L⁻¹ b for lower-triangular L by forward substitution: reversing rows and columns makes
    L upper triangular (see ``_solve_upper``); a pivoting LU of L itself could swap rows of a
    graded right-hand side and lose its light rows' accuracy."""
    return np.linalg.solve(low[::-1, ::-1], b[::-1])[::-1]
