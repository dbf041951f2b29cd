"""Pseudo-inverses of per-attribute strategy grams, and the cells a workload cannot tell apart.

Every error formula of the planner needs, per attribute, tr(V (FᵀF)⁺) for a workload gram V
and a strategy factor F, and whether F supports V (V(I − F⁺F) = 0; thesis Prop. 9).  Two
facts make this cheaper and more robust than an SVD of F:

* **Column classes.**  Cells whose columns of F are equal (and cells whose column is zero)
  can be merged: with F = A·B, B the 0/1 cell→class matrix (orthogonal rows, BBᵀ = D),
  (FᵀF)⁺ = Uᵀ (D^½AᵀAD^½)⁺ U with U = D^-½B (orthonormal rows), so only the r×r gram of
  the distinct columns is inverted.  The same classes on a workload gram V (cells with equal
  workload columns, i ~ j iff V[i] = V[j]) reduce OPT_0 to the cells the workload can tell
  apart without changing its optimum: every column of A·B is a column of A, so sensitivity
  (L1 or L2) is unchanged, and tr(V(BᵀA ᵀAB)⁺) = tr(V′(AᵀA)⁺) with V′ the gram on class
  representatives.  One BETWEEN over 100,000 cells is a 1-cell problem.
* **Cholesky first.**  A full-rank class gram is inverted by Cholesky (a few percent of an
  SVD's cost at n = 1024); only a rank-deficient one falls back to the SVD of the distinct
  columns, whose cutoff keeps F's numerical rank without squaring its condition number.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from dpsql.linalg.rowscaled import GramPinv, span_form

__all__ = ["column_classes", "FactorPinv", "ThinPinv", "LowRankGram", "RangeGram", "Gram", "gram_trace", "psd_root",
           "class_matrix", "class_sum", "span_coefficients", "scaled_identity", "SPAN_CELLS", "LARGE_CELLS"]

#: Relative tolerance for two workload columns to count as equal.
CLASS_RTOL = 1e-10

#: Attributes with more cells than this are never given n×n grams (``LowRankGram``) and
#: their strategy factors are thin (few rows, ``ThinPinv``).
LARGE_CELLS = 4096


def column_classes(R: np.ndarray, rtol: float = CLASS_RTOL) -> tuple[np.ndarray, np.ndarray]:
    """Classes of equal rows of R (rows = cells): labels (−1 for zero rows) and one
    representative row index per class, in order of first appearance.

    Rows are hashed by two fixed random projections, then every candidate is compared with
    its class representative, so a hash collision can only split a class, never merge two.
    """
    R = np.atleast_2d(np.asarray(R, dtype=float))
    n = R.shape[0]
    scale = float(np.abs(R).max(initial=0.0))
    labels = np.full(n, -1, dtype=np.int64)
    if scale == 0.0:
        return labels, np.zeros(0, dtype=np.int64)
    tol = rtol * scale
    nonzero = np.flatnonzero(np.abs(R).max(axis=1) > tol)
    if nonzero.size == 0:
        return labels, np.zeros(0, dtype=np.int64)
    proj = R[nonzero] @ np.random.default_rng(12345).standard_normal((R.shape[1], 2))
    keys = np.round(proj / (tol * 64.0 * math.sqrt(R.shape[1]))).astype(np.int64)
    _, first, inverse = np.unique(keys, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    # Verify every member against its representative; a mismatch (hash collision) becomes
    # a class of its own.
    rep_rows = nonzero[first[inverse]]
    bad = np.abs(R[nonzero] - R[rep_rows]).max(axis=1) > tol
    provisional = np.where(bad, first.size + np.arange(nonzero.size), inverse)
    # Number classes in order of first appearance.
    _, firsts, lab = np.unique(provisional, return_index=True, return_inverse=True)
    order = np.argsort(firsts, kind="stable")
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    labels[nonzero] = rank[lab.reshape(-1)]
    reps = nonzero[np.sort(firsts)]
    return labels, reps.astype(np.int64)


#: From this many cells on, grams in span{I, 1} take the closed forms (``span_coefficients``).
#: Below it an eigendecomposition costs under a millisecond, and the plans of small domains
#: stay bit-identical to those computed before the closed forms (a last-bit difference in
#: a trace can tip a discrete choice of the optimiser: 4e-5 relative on one plan).
SPAN_CELLS = 128


def span_coefficients(V: np.ndarray, rtol: float = 1e-12) -> tuple[float, float] | None:
    """(b, c) with V = b·I + c·11ᵀ when a dense square V of at least ``SPAN_CELLS`` cells
    lies in span{I, 1}, else None.

    Such are the grams of an Identity (a GROUP BY), a Total (a sum over the attribute) and
    every weighted sum of them: on a 1,459-label column each is a 1,459-square matrix whose
    eigendecomposition (n³) the callers replace by closed forms (issue 35 item 2).  The
    first row rejects most other grams in O(n); accepting costs one O(n²) pass over the
    off-diagonal entries (a strided view: the flat array from entry 1 on, in rows of n + 1,
    has the diagonal in its last column).  The tolerance is relative to the largest entry
    of the first row: sums of I and 11ᵀ grams are exact, anything else falls back."""
    if not isinstance(V, np.ndarray) or V.ndim != 2 or V.shape[0] != V.shape[1] \
            or V.shape[0] < SPAN_CELLS:
        return None
    n = V.shape[0]
    c = float(V[0, 1])
    b = float(V[0, 0]) - c
    tol = rtol * max(abs(float(V[0, 0])), abs(c))
    if abs(float(V[0, 1:].max()) - c) > tol or abs(float(V[0, 1:].min()) - c) > tol:
        return None
    d = np.diagonal(V)
    if abs(float(d.max()) - (b + c)) > tol or abs(float(d.min()) - (b + c)) > tol:
        return None
    off = np.ascontiguousarray(V).reshape(-1)[1:].reshape(n - 1, n + 1)[:, :n]
    if abs(float(off.max()) - c) > tol or abs(float(off.min()) - c) > tol:
        return None
    return b, c


def scaled_identity(F: np.ndarray) -> float | None:
    """c when F = c·I (c ≠ 0) exactly, else None, without building an n×n identity to
    compare with (a 1,459-square one is 17 MB, and the planner asked thousands of times)."""
    if F.ndim != 2 or F.shape[0] != F.shape[1]:
        return None
    n = F.shape[0]
    c = float(F[0, 0])
    if c == 0.0:
        return None
    d = np.diagonal(F)
    if not (d.min() == c and d.max() == c):
        return None
    if n > 1:
        off = np.ascontiguousarray(F).reshape(-1)[1:].reshape(n - 1, n + 1)[:, :n]
        if off.min() != 0.0 or off.max() != 0.0:
            return None
    return c


def class_matrix(labels: np.ndarray, r: int) -> np.ndarray:
    """The 0/1 matrix B (r × n) with B[labels[i], i] = 1 (zero columns for label −1)."""
    B = np.zeros((r, labels.size))
    cells = np.flatnonzero(labels >= 0)
    B[labels[cells], cells] = 1.0
    return B


def class_sum(M: np.ndarray, labels: np.ndarray, r: int) -> np.ndarray:
    """B·M: the rows of M summed per class (rows of label −1 dropped), in O(size of M)."""
    cells = np.flatnonzero(labels >= 0)
    order = cells[np.argsort(labels[cells], kind="stable")]
    if order.size == 0:
        return np.zeros((r,) + M.shape[1:])
    starts = np.flatnonzero(np.r_[True, np.diff(labels[order]) != 0])
    return np.add.reduceat(M[order], starts, axis=0)


@dataclass(frozen=True, eq=False)
class FactorPinv:
    """(FᵀF)⁺ of one dense factor F, kept on the classes of its distinct non-zero columns.

    ``root`` is L with K⁺ = L Lᵀ for K = D^½AᵀAD^½ (A = the distinct columns, D = class
    sizes) and ``basis`` an orthonormal basis of range(K) when K is singular (None: full
    rank).  Quadratic forms are ‖q L‖², never q K⁺ qᵀ through K⁺ itself: a rounded strategy
    (round_strategy: the matrix actually measured) has light rows beside heavy ones, K⁺ then
    has entries ~1/d_light², and q K⁺ qᵀ for a heavy-row query cancels them down to ~1/d_heavy²
    (issue 28: 0.2-0.4% off at rows 2²² apart).
    """

    labels: np.ndarray
    sizes: np.ndarray
    root: np.ndarray
    basis: np.ndarray | None
    trivial: bool          # every cell its own class: U = I

    @classmethod
    def of(cls, F: np.ndarray) -> FactorPinv | ThinPinv:
        F = np.atleast_2d(np.asarray(F, dtype=float))
        m, n = F.shape
        if n > LARGE_CELLS and m < n:
            return ThinPinv(F)
        c = float(F.flat[0])
        if m == n and scaled_identity(F) is not None:                      # c·I
            return cls(np.arange(n), np.ones(n), np.eye(n) / abs(c), None, True)
        form = span_form(F)
        if form is not None:                                               # a·I + b·11ᵀ
            # K = FᵀF has eigenvalue a² off the ones direction and (a + bn)² on it: its
            # root K^-½ in closed form, not a factorisation of the n×n F (issue 35 item 3)
            a, top = abs(form[0]), abs(form[0] + form[1] * n)
            root = np.full((n, n), (1.0 / top - 1.0 / a) / n)
            root[np.diag_indices(n)] += 1.0 / a
            return cls(np.arange(n), np.ones(n), root, None, True)
        if c != 0.0 and m == 1 and np.all(F == c):                         # c·1ᵀ
            return cls(np.zeros(n, dtype=np.int64), np.array([float(n)]),
                       np.array([[1.0 / (abs(c) * math.sqrt(n))]]), None, n == 1)
        labels, reps = column_classes(F.T)
        r = reps.size
        trivial = r == n and bool(np.all(labels == np.arange(n)))
        sizes = np.bincount(labels[labels >= 0], minlength=r).astype(float)
        A = F[:, reps] * np.sqrt(sizes)[None, :]
        if r == 0:
            return cls(labels, sizes, np.zeros((0, 0)), None, trivial)
        # from the unit rows of A with the row weights applied exactly: a Cholesky of AᵀA or
        # an SVD of A is only accurate relative to the heaviest row (issue 28)
        g = GramPinv(A)
        return cls(labels, sizes, g.factor, None if g.rank == r else g.basis, trivial)

    @property
    def rank(self) -> int:
        return self.root.shape[0] if self.basis is None else self.basis.shape[1]

    @property
    def inv(self) -> np.ndarray:
        """K⁺ (tests: quadratic forms go through ``root``)."""
        return self.root @ self.root.T

    def reduce(self, V: np.ndarray) -> np.ndarray | None:
        """Ṽ = U V Uᵀ, or None when V is not constant on the classes (F cannot support it)."""
        if self.trivial:
            return V
        r = self.sizes.size
        BV = class_sum(V, self.labels, r)
        VB = class_sum(BV.T, self.labels, r).T
        scale = max(float(np.abs(V).max(initial=0.0)), 1e-300)
        # V must equal its projection onto class-constant vectors: V = Vᵀ-side B⁺B.
        back = (BV / self.sizes[:, None])[np.maximum(self.labels, 0)]
        back[self.labels < 0] = 0.0
        if np.abs(V - back).max(initial=0.0) > 1e-7 * scale:
            return None
        root = np.sqrt(self.sizes)
        return VB / root[:, None] / root[None, :]

    def trace(self, V: Gram) -> float:
        """tr(V (FᵀF)⁺) = ‖R L‖²_F with Ṽ = RᵀR, inf when F does not support V.

        Through a root of Ṽ, not Σ Ṽ∘K⁺: an error of ε‖V‖ in Ṽ meets K⁺'s light directions
        at first order, one in R only at second (R L is small there)."""
        if isinstance(V, LowRankGram):
            return self._low_rank_trace(V)
        span = span_coefficients(V)
        if span is not None and span[0] >= 0.0 and span[1] >= 0.0:
            got = self._span_trace(*span)
            if got is not None:
                return got
        Vt = self.reduce(V)
        if Vt is None:
            return math.inf
        if self.basis is not None:
            resid = Vt - (Vt @ self.basis) @ self.basis.T
            if np.abs(resid).max(initial=0.0) > 1e-7 * max(float(np.abs(Vt).max(initial=0.0)), 1e-300):
                return math.inf
        R = psd_root(Vt)
        return float(np.sum((R @ self.root) ** 2))

    def _span_trace(self, b: float, c: float) -> float | None:
        """tr(V (FᵀF)⁺) for V = b·I + c·11ᵀ (b, c ≥ 0) in O(n·r), without reducing or
        factoring V (a GROUP BY or a sum over a 1,459-label column, issue 35 item 2);
        None where the general path decides (a rank-deficient F, or b within the
        class test's tolerance of 0).

        Every cell its own class and F of full rank: V has the exact root [√b·I; √c·1ᵀ],
        so ‖R L‖² = b‖L‖² + c‖1ᵀL‖² (nothing cancels).  Merged cells (or cells F never
        sees) with b > 0: V is not constant on the classes, F cannot support it (what
        ``reduce`` finds in O(n²)).  b = 0 and every cell in a class: Ṽ = c·ssᵀ with
        s = √sizes, root √c·sᵀ."""
        if self.basis is not None:
            return None
        scale = b + c
        if self.trivial:
            ones = self.root.sum(axis=0)
            return b * float(np.sum(self.root * self.root)) + c * float(ones @ ones)
        if b > 1e-6 * scale:
            return math.inf
        if b != 0.0:
            return None
        if c == 0.0:
            return 0.0
        if np.any(self.labels < 0):
            return math.inf
        s = np.sqrt(self.sizes) @ self.root
        return c * float(s @ s)

    def _low_rank_trace(self, V: LowRankGram) -> float:
        """tr((c·I + RᵀR)(FᵀF)⁺) = c·tr(K⁺) + ‖R L‖²_F without forming V: a square factor
        (an identity) over a large attribute meets the attribute's LowRankGram terms here.
        c·I needs every cell its own class and K of full rank (tr K⁺ = ‖L‖²_F, U = I)."""
        total = 0.0
        if V.c != 0.0:
            if not self.trivial or self.basis is not None:
                return math.inf
            total += V.c * float(np.sum(self.root * self.root))
        if V.rows.size:
            q = self.diag_quadratic(V.rows)
            if q is None:
                return math.inf
            total += float(np.sum(q))
        return total

    def diag_quadratic(self, Q: np.ndarray) -> np.ndarray | None:
        """diag(Q (FᵀF)⁺ Qᵀ) for query rows Q (k × n); None when F does not support Q."""
        Q = np.atleast_2d(np.asarray(Q, dtype=float))
        if self.trivial:
            Qt = Q
        else:
            QB = class_sum(Q.T, self.labels, self.sizes.size).T
            back = (QB / self.sizes[None, :])[:, np.maximum(self.labels, 0)]
            back[:, self.labels < 0] = 0.0
            if np.abs(Q - back).max(initial=0.0) > 1e-7 * max(float(np.abs(Q).max(initial=0.0)), 1e-300):
                return None
            Qt = QB / np.sqrt(self.sizes)[None, :]
        if self.basis is not None:
            resid = Qt - (Qt @ self.basis) @ self.basis.T
            if np.abs(resid).max(initial=0.0) > 1e-7 * max(float(np.abs(Qt).max(initial=0.0)), 1e-300):
                return None
        c = Qt @ self.root
        return np.einsum("ij,ij->i", c, c)

    def dense(self) -> np.ndarray:
        """(FᵀF)⁺ as an n×n matrix (tests)."""
        if self.trivial:
            return self.inv
        B = class_matrix(self.labels, self.sizes.size) / np.sqrt(self.sizes)[:, None]
        return B.T @ self.inv @ B


def psd_root(V: np.ndarray) -> np.ndarray:
    """R with RᵀR = V for a PSD V, from eigh.  Eigenvalues within V's own rounding
    (n·ε of the largest) are zero: their eigenvectors are arbitrary, and kept they would
    reach the light directions of a stiff factor's pseudo-inverse."""
    w, P = np.linalg.eigh(0.5 * (V + V.T))
    keep = w > float(w.max(initial=0.0)) * V.shape[0] * np.finfo(float).eps
    return np.sqrt(w[keep])[:, None] * P[:, keep].T


class LowRankGram:
    """V = c·I + RᵀR over a large attribute (n cells), never formed as an n×n array.

    Workload factors on an attribute with tens of thousands of cells are thin — a Total,
    a few BETWEEN indicators, a SUM's value row — or the identity (GROUP BY): their grams
    are a multiple of I plus a low-rank part, and every quantity the planner needs (trace,
    sum, diagonal, traces against a strategy, the SVD bound) follows from the m×n rows R in
    O(n·m²).  Scaling by c² and adding grams of the same attribute stay in this form.
    """

    __slots__ = ("n", "c", "rows")

    def __init__(self, n: int, c: float = 0.0, rows: np.ndarray | None = None) -> None:
        self.n = int(n)
        self.c = float(c)
        self.rows = np.zeros((0, self.n)) if rows is None else np.atleast_2d(np.asarray(rows, dtype=float))

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    def scaled(self, s2: float) -> LowRankGram:
        """s²·V."""
        return LowRankGram(self.n, s2 * self.c, math.sqrt(s2) * self.rows)

    @staticmethod
    def combine(grams, coeffs2) -> LowRankGram:
        """Σ_j coeffs2_j · grams_j (grams of one attribute)."""
        n = grams[0].n
        c = sum(w * g.c for g, w in zip(grams, coeffs2))
        rows = [math.sqrt(w) * g.rows for g, w in zip(grams, coeffs2) if w > 0 and g.rows.size]
        return LowRankGram(n, c, np.vstack(rows) if rows else None)

    def trace(self) -> float:
        return self.c * self.n + float(np.sum(self.rows * self.rows))

    def dense(self) -> np.ndarray:
        """The n×n matrix; only for small n (tests, dense fallbacks on small domains)."""
        return self.c * np.eye(self.n) + self.rows.T @ self.rows

    def total(self) -> float:
        """1ᵀV1."""
        return self.c * self.n + float(np.sum(self.rows.sum(axis=1) ** 2))

    def diag(self) -> np.ndarray:
        return self.c + (self.rows * self.rows).sum(axis=0)

    def is_constant(self) -> bool:
        """V = μ·11ᵀ (every row of R constant, no identity part)."""
        if self.c != 0.0:
            return False
        r = self.rows
        return bool(np.all(np.abs(r - r[:, :1]) <= 1e-12 * max(float(np.abs(r).max(initial=0.0)), 1e-300)))

    def eigenvalues(self) -> np.ndarray:
        """The non-trivial eigenvalues: c + those of RRᵀ (the other n − m equal c)."""
        ev = np.linalg.eigvalsh(self.rows @ self.rows.T) if self.rows.size else np.zeros(0)
        return self.c + np.clip(ev, 0.0, None)

    def svd_bound(self) -> float:
        """(Σ √eigenvalues)² / n (thesis Definition 12) without forming V."""
        ev = self.eigenvalues()
        rest = self.n - ev.size
        total = float(np.sqrt(ev).sum()) + rest * math.sqrt(max(self.c, 0.0))
        return total * total / self.n

    def fingerprint(self) -> bytes:
        return np.float64(self.c).tobytes() + np.ascontiguousarray(self.rows).tobytes()


class RangeGram:
    """WᵀW of a prefix (CDF), suffix or all-range factor over a large attribute (issue 35):
    G[i, j] = a[min(i, j)] · b[max(i, j)] (``linalg.ranges.Semiseparable``), kept as a and
    b.  Such a factor has n or n(n+1)/2 rows, too many to keep thin; only the tree
    strategies of ``plan/tree.py`` plan it.

    Singular values in closed form (Definition 12's SVD bound at any n): the n×n prefix
    matrix P has σ_k = 1 / (2 sin((2k−1)π / (2(2n+1)))), k = 1…n (PPᵀ = (L Lᵀ)⁻¹ with L the
    first differences, whose eigenvalues are 2 − 2cos((2k−1)π/(2n+1))), and the all-range
    gram is (n+1)·K⁻¹ for K = tridiag(−1, 2, −1), the Dirichlet Laplacian with eigenvalues
    4 sin²(kπ / (2(n+1))): G[i, j] = (min + 1)(n − max) is its Green's function."""

    __slots__ = ("n", "kind", "a", "b")

    KINDS = ("prefix", "suffix", "allrange")

    def __init__(self, kind: str, a: np.ndarray, b: np.ndarray) -> None:
        if kind not in self.KINDS:
            raise ValueError(f"unknown range gram kind {kind!r}")
        self.kind = kind
        self.a = np.asarray(a, dtype=float)
        self.b = np.asarray(b, dtype=float)
        self.n = int(self.a.size)

    @property
    def shape(self) -> tuple[int, int]:
        return (self.n, self.n)

    def trace(self) -> float:
        return float(self.a @ self.b)

    def total(self) -> float:
        """1ᵀG1 = Σ_j b_j (a_j + 2 Σ_{i<j} a_i)."""
        below = np.concatenate([[0.0], np.cumsum(self.a)[:-1]])
        return float(np.sum(self.b * (self.a + 2.0 * below)))

    def dense(self) -> np.ndarray:
        """The n×n matrix; only for small n (tests)."""
        i = np.arange(self.n)
        return self.a[np.minimum.outer(i, i)] * self.b[np.maximum.outer(i, i)]

    def singular_values(self) -> np.ndarray:
        n, k = self.n, np.arange(1, self.n + 1, dtype=float)
        if self.kind == "allrange":
            return math.sqrt(n + 1) / (2.0 * np.sin(k * math.pi / (2.0 * (n + 1))))
        return 1.0 / (2.0 * np.sin((2.0 * k - 1.0) * math.pi / (2.0 * (2 * n + 1))))

    def svd_bound(self) -> float:
        return float(self.singular_values().sum()) ** 2 / self.n

    def fingerprint(self) -> bytes:
        return self.kind.encode() + np.ascontiguousarray(self.a).tobytes() + \
            np.ascontiguousarray(self.b).tobytes()


#: A workload factor's gram V as the planner holds it: dense n×n, or c·I + RᵀR over a large
#: attribute.  Every ``trace`` of a strategy factor's pseudo-inverse takes either.
Gram = np.ndarray | LowRankGram


def gram_trace(V: Gram | RangeGram) -> float:
    """tr V of any form."""
    return V.trace() if isinstance(V, (LowRankGram, RangeGram)) else float(np.trace(V))


class ThinPinv:
    """(FᵀF)⁺ for a thin factor F (k × n, k ≪ n) on a large attribute: traces and
    quadratic forms in O(n·k·m), support by projecting onto F's row space.

    Through ``GramPinv`` (unit rows, weights applied exactly): the eigenvalues of FFᵀ cut at
    1e-12 of the largest dropped a rounded factor's light rows, 2²² below its heavy ones, and
    the queries they support came out unsupported (issue 28)."""

    def __init__(self, F: np.ndarray) -> None:
        self.F = F
        self.gram = GramPinv(F)
        self.rank = self.gram.rank

    def _coords(self, Q: np.ndarray) -> np.ndarray | None:
        """Q L with (FᵀF)⁺ = L Lᵀ (so diag(Q (FᵀF)⁺ Qᵀ) is its rows' squared norms), or None
        when Q is not in F's row space."""
        resid = Q - self.gram.project(Q)
        if np.abs(resid).max(initial=0.0) > 1e-7 * max(float(np.abs(Q).max(initial=0.0)), 1e-300):
            return None
        return self.gram.coords(Q)

    def trace(self, V: Gram) -> float:
        """tr(V (FᵀF)⁺) = ‖R L‖²_F for V = RᵀR (R in F's row space), inf otherwise."""
        if not isinstance(V, LowRankGram):
            # a dense gram (a small workload factor beside a thin strategy factor): its root
            V = LowRankGram(V.shape[0], 0.0, psd_root(V))
        if V.c > 0:
            return math.inf        # the identity part needs every cell: a thin F cannot
        if not V.rows.size:
            return 0.0
        coords = self._coords(V.rows)
        return math.inf if coords is None else float(np.sum(coords * coords))

    def diag_quadratic(self, Q: np.ndarray) -> np.ndarray | None:
        coords = self._coords(np.atleast_2d(np.asarray(Q, dtype=float)))
        return None if coords is None else np.einsum("ij,ij->i", coords, coords)
