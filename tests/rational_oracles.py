"""Rational oracles shared by the linalg and plan tests (on sys.path through tests/conftest.py)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np


def exact_quad(A: np.ndarray, q: np.ndarray) -> Fraction:
    """q (AᵀA)⁺ qᵀ in rationals (A's entries exact binary fractions), for q in A's row space:
    q·x for any x with AᵀA x = qᵀ.  The oracle for badly scaled strategies (issue 28), where
    a dense pinv is itself wrong."""
    k, n = A.shape
    rows = [[Fraction(float(v)) for v in row] for row in A]
    a = [[sum(rows[t][i] * rows[t][j] for t in range(k)) for j in range(n)] + [Fraction(float(q[i]))]
         for i in range(n)]
    pivots, r = [], 0
    for c in range(n):
        p = next((i for i in range(r, n) if a[i][c] != 0), None)
        if p is None:
            continue
        a[r], a[p] = a[p], a[r]
        for i in range(n):
            if i != r and a[i][c] != 0:
                f = a[i][c] / a[r][c]
                a[i] = [x - f * y for x, y in zip(a[i], a[r])]
        pivots.append(c)
        r += 1
    assert all(a[i][n] == 0 for i in range(r, n)), "q is not in the row space"
    return sum(Fraction(float(q[c])) * a[i][n] / a[i][c] for i, c in enumerate(pivots))
