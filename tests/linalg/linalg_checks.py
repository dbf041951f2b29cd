"""Shared oracle checks for the linalg tests: every structured operation of a
QueryMatrix against the same operation on an independently built dense array.

Tolerances: test matrices have entries of magnitude <= ~10, inner dimensions
<= ~10^3 and at most three chained stages, so float64 rounding is bounded by
about 3 * 10^3 * 2^-52 * |A|_inf |x|_inf ~ 1e-12 of the scale (Higham, Accuracy
and Stability, §3.1); RTOL = 1e-9 keeps three orders of margin while any wrong
entry (an O(1) error) still fails.  Pseudo-inverses are compared only for
matrices whose singular values are cleanly zero or cleanly non-zero, where
perturbation theory (Wedin) bounds the difference by ~cond * eps * |A⁺|.
"""

from __future__ import annotations

import numpy as np

RTOL = 1e-9


def assert_close(got, want, scale=None, rtol=RTOL):
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    if scale is None:
        scale = np.abs(want).max() if want.size else 0.0
    tol = rtol * max(1.0, float(scale))
    err = np.abs(got - want).max() if want.size else 0.0
    assert err <= tol, f"max abs error {err:.3g} > tol {tol:.3g}"


def _scale(A, x):
    """|A|_inf * |x|_inf, the size of the partial sums in A @ x."""
    return np.abs(A).sum(axis=1).max() * max(1.0, np.abs(x).max())


def clean_spectrum(ref, gap=1e-6):
    """True if every singular value is ~0 or clearly positive (pinv well posed)."""
    s = np.linalg.svd(ref, compute_uv=False)
    if s.size == 0 or s[0] == 0:
        return True
    rel = s / s[0]
    return bool(np.all((rel < 1e-12) | (rel > gap)))


def check_against_dense(M, ref, rng, pinv=True):
    """Assert every operation of ``M`` matches the dense reference ``ref``."""
    m, n = ref.shape
    assert M.shape == (m, n)
    assert isinstance(M.shape[0], int) and isinstance(M.shape[1], int)
    assert_close(M.dense(), ref)
    assert_close(M.T.dense(), ref.T)

    x = rng.standard_normal(n)
    y = rng.standard_normal(m)
    X = rng.standard_normal((n, 3))
    Y = rng.standard_normal((m, 2))
    assert_close(M.matvec(x), ref @ x, _scale(ref, x))
    assert_close(M @ x, ref @ x, _scale(ref, x))
    assert_close(M.rmatvec(y), ref.T @ y, _scale(ref.T, y))
    assert_close(y @ M, y @ ref, _scale(ref.T, y))
    assert_close(M.matmat(X), ref @ X, _scale(ref, X))
    assert_close(M @ X, ref @ X, _scale(ref, X))
    assert_close(M.rmatmat(Y), ref.T @ Y, _scale(ref.T, Y))
    assert_close(M.T.matvec(y), ref.T @ y, _scale(ref.T, y))
    assert M.matvec(x).dtype == np.float64

    G = M.gram()
    gref = ref.T @ ref
    assert G.shape == (n, n)
    assert_close(G.dense(), gref)
    assert_close(G.matvec(x), gref @ x, _scale(gref, x))
    assert_close(G.trace(), np.trace(gref))
    assert_close(G.diag(), np.diag(gref))

    for p, col in ((1, np.abs(ref).sum(axis=0)), (2, np.linalg.norm(ref, axis=0))):
        assert_close(M.column_norms(p), col)
        assert_close(M.sensitivity(p), col.max())
    assert_close(M.sum(), ref.sum(), np.abs(ref).sum())

    if m == n:
        assert_close(M.trace(), np.trace(ref), np.abs(ref).sum())
        assert_close(M.diag(), np.diag(ref))

    if pinv and clean_spectrum(ref):
        want = np.linalg.pinv(ref)
        P = M.pinv()
        assert P.shape == (n, m)
        assert_close(P.dense(), want, rtol=1e-6)
