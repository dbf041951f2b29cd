"""Each leaf against a dense matrix built directly from its definition
(ICML 2019 appendix Table 2; thesis §3.10 range workloads), and the closed-form
Gram matrices of the range leaves against AᵀA."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsql.errors import NotSupportedError, ProgrammingError
from dpsql.linalg import (
    DENSE_LIMIT, AllRange, Bucket, Diagonal, Difference, Explicit, Identity, Indicator, Ones,
    Prefix, Semiseparable, Suffix, Total, Tridiagonal, Values, WidthRange,
)
from linalg_checks import assert_close, check_against_dense


def allrange_ref(n):
    rows = []
    for i, j in itertools.combinations_with_replacement(range(n), 2):
        r = np.zeros(n)
        r[i:j + 1] = 1
        rows.append(r)
    return np.array(rows)


def widthrange_ref(n, w):
    return np.array([[1.0 if s <= a < s + w else 0.0 for a in range(n)]
                     for s in range(n - w + 1)])


def bucket_ref(mapping, r):
    R = np.zeros((r, len(mapping)))
    for a, b in enumerate(mapping):
        if b >= 0:
            R[b, a] = 1
    return R


def leaf_cases():
    rng = np.random.default_rng(7)
    vals = rng.integers(-3, 4, size=6).astype(float)
    arr = rng.standard_normal((4, 6))
    return [
        (Identity(6), np.eye(6)),
        (Total(6), np.ones((1, 6))),
        (Ones(3, 5), np.ones((3, 5))),
        (Prefix(6), np.tril(np.ones((6, 6)))),
        (Suffix(6), np.triu(np.ones((6, 6)))),
        (Difference(6), np.linalg.inv(np.tril(np.ones((6, 6))))),
        (AllRange(5), allrange_ref(5)),
        (AllRange(1), np.ones((1, 1))),
        (WidthRange(7, 3), widthrange_ref(7, 3)),
        (WidthRange(4, 4), np.ones((1, 4))),
        (WidthRange(5, 1), np.eye(5)),
        (Indicator(6, [1, 4]), np.array([[0, 1, 0, 0, 1, 0.0]])),
        (Indicator(6, np.array([True, False, False, False, False, True])),
         np.array([[1, 0, 0, 0, 0, 1.0]])),
        (Indicator(4, []), np.zeros((1, 4))),
        (Bucket(6, [0, 0, 1, -1, 2, 1]), bucket_ref([0, 0, 1, -1, 2, 1], 3)),
        (Bucket(4, [1, 1, -1, 0], buckets=3), bucket_ref([1, 1, -1, 0], 3)),
        (Values(6, vals), vals[None, :]),
        (Values(3, [0.0, 0.0, 0.0]), np.zeros((1, 3))),
        (Diagonal([2.0, -1.0, 0.0, 0.5]), np.diag([2.0, -1.0, 0.0, 0.5])),
        (Explicit(arr), arr),
        (Explicit(np.array([[1, 0, 2], [0, 1, 1]], dtype=np.int64)),
         np.array([[1, 0, 2], [0, 1, 1.0]])),
    ]


@pytest.mark.parametrize("case", leaf_cases(), ids=lambda c: repr(c[0]))
def test_leaf_matches_definition(case):
    M, ref = case
    check_against_dense(M, ref, np.random.default_rng(1))


@pytest.mark.parametrize("n", range(1, 65))
def test_range_grams_closed_form(n):
    for M in (AllRange(n), Prefix(n), Suffix(n)):
        D = M.dense()
        G = M.gram()
        assert_close(G.dense(), D.T @ D)
        x = np.random.default_rng(n).standard_normal(n)
        assert_close(G.matvec(x), D.T @ (D @ x), np.abs(D.T @ D).sum(1).max() * np.abs(x).max())
        assert_close(G.trace(), np.trace(D.T @ D))
    for w in {1, min(2, n), (n + 1) // 2, n}:
        D = widthrange_ref(n, w)
        assert_close(WidthRange(n, w).gram().dense(), D.T @ D)
        assert_close(WidthRange(n, w).gram().sum(), (D.T @ D).sum())


def test_allrange_gram_entry_formula():
    # Thesis-independent statement of the closed form: (min+1)(n-max), 0-based.
    n = 9
    G = AllRange(n).gram().dense()
    for i in range(n):
        for j in range(n):
            assert G[i, j] == (min(i, j) + 1) * (n - max(i, j))


def test_structured_pinvs_are_structured():
    assert isinstance(Prefix(5).pinv(), Difference)
    assert isinstance(Difference(5).pinv(), Prefix)
    assert isinstance(Identity(5).pinv(), Identity)
    assert_close(Prefix(8).pinv().dense() @ Prefix(8).dense(), np.eye(8))
    assert_close(Suffix(8).pinv().dense() @ Suffix(8).dense(), np.eye(8))


def test_allrange_is_never_materialised_for_products():
    A = AllRange(3000)  # 4.5M rows x 3000 columns would be 108 GB dense
    assert A.shape == (3000 * 3001 // 2, 3000)
    x = np.ones(3000)
    y = A.matvec(x)
    # Row (i, j) of all-ones input is the interval length j - i + 1.
    assert y[0] == 1 and y[2999] == 3000 and y[-1] == 1
    assert A.sensitivity(1) == max((a + 1) * (3000 - a) for a in range(3000))
    with pytest.raises(NotSupportedError) as info:
        A.dense()
    assert info.value.hint


def test_dense_limit_is_enforced():
    big = Ones(1 << 13, 1 << 13)
    assert big.shape[0] * big.shape[1] > DENSE_LIMIT
    with pytest.raises(NotSupportedError):
        big.dense()


@pytest.mark.parametrize("make", [
    lambda: Identity(0),
    lambda: Identity(2.5),
    lambda: Total(True),
    lambda: WidthRange(3, 4),
    lambda: Indicator(3, [3]),
    lambda: Indicator(3, np.array([True, False])),
    lambda: Bucket(3, [0, 1]),
    lambda: Bucket(3, [0, -2, 1]),
    lambda: Bucket(3, [0, 3, 1], buckets=2),
    lambda: Bucket(3, [0.0, 1.0, 1.0]),
    lambda: Values(3, [1.0, np.nan, 2.0]),
    lambda: Explicit(np.ones(3)),
    lambda: Explicit(np.array([[np.inf]])),
    lambda: Diagonal([]),
    lambda: Semiseparable([1.0, 2.0], [1.0]),
    lambda: Tridiagonal([1.0, 2.0], [1.0, 1.0]),
])
def test_bad_construction_raises_programming_error(make):
    with pytest.raises(ProgrammingError) as info:
        make()
    assert info.value.hint


def test_shape_and_argument_errors():
    P = Prefix(4)
    with pytest.raises(ProgrammingError):
        P.matvec(np.ones(5))
    with pytest.raises(ProgrammingError):
        P.rmatvec(np.ones((4, 1)))
    with pytest.raises(ProgrammingError):
        P.matmat(np.ones(4))
    with pytest.raises(ProgrammingError):
        P.sensitivity(3)
    with pytest.raises(ProgrammingError):
        Total(4).trace()
    with pytest.raises(ProgrammingError):
        P @ Prefix(3)
    with pytest.raises(ProgrammingError):
        P / 0


def test_explicit_keeps_integer_array_but_returns_float():
    a = np.array([[1, 2], [3, 4]], dtype=np.int64)
    E = Explicit(a)
    assert E.array.dtype == np.int64
    out = E.matvec(np.array([1, 1]))
    assert out.dtype == np.float64 and out.tolist() == [3.0, 7.0]


@pytest.mark.parametrize("width", [1, 63, 64, 200])
def test_range_products_on_narrow_and_wide_blocks(width):
    # Running sums switch strategy with the block width; both must agree with dense.
    rng = np.random.default_rng(width)
    for M in (Prefix(7), Suffix(7), AllRange(7), WidthRange(7, 3), AllRange(7).gram()):
        D = M.dense()
        X = rng.standard_normal((M.shape[1], width))
        Y = rng.standard_normal((M.shape[0], width))
        assert_close(M.matmat(X), D @ X, np.abs(D).sum(1).max() * np.abs(X).max())
        assert_close(M.rmatmat(Y), D.T @ Y, np.abs(D).sum(0).max() * np.abs(Y).max())


def semiseparable_cases():
    rng = np.random.default_rng(21)
    for n in (1, 2, 3, 8, 33):
        yield np.arange(1.0, n + 1), np.ones(n)                      # Suffix gram
        yield np.ones(n), n - np.arange(float(n))                     # Prefix gram
        yield np.arange(1.0, n + 1), n - np.arange(float(n))          # AllRange gram
        yield rng.standard_normal(n), rng.standard_normal(n)          # general signs


@pytest.mark.parametrize("ab", list(semiseparable_cases()), ids=lambda ab: f"n{ab[0].size}")
def test_semiseparable_inverse_is_tridiagonal(ab):
    a, b = ab
    G = Semiseparable(a, b)
    D = G.dense()
    d = a[1:] * b[:-1] - a[:-1] * b[1:]
    assert_close(np.linalg.det(D), a[0] * b[-1] * np.prod(d), abs(np.linalg.det(D)) + 1e-300,
                 rtol=1e-8)
    P = G.pinv()
    assert isinstance(P, Tridiagonal)
    want = np.linalg.inv(D)
    cond = np.linalg.cond(D)
    # Inverse perturbation bound: |ΔG⁻¹| ≲ cond · eps · |G⁻¹| (with slack for n).
    assert_close(P.dense(), want, rtol=max(1e-9, 1e3 * cond * np.finfo(float).eps))
    check_against_dense(P, P.dense(), np.random.default_rng(0), pinv=False)


def test_semiseparable_singular_falls_back_to_dense_pinv():
    G = Semiseparable(np.array([0.0, 1.0, 2.0]), np.ones(3))  # first row and column zero
    P = G.pinv()
    assert not isinstance(P, Tridiagonal)
    assert_close(P.dense(), np.linalg.pinv(G.dense()))


def test_allrange_pinv_structured_for_large_n():
    from dpsql.linalg import Product
    n = 4096  # a dense gram pinv would need 128 MiB; the tridiagonal needs 64 KiB
    A = AllRange(n)
    P = A.pinv()
    assert isinstance(P, Product) and isinstance(P.left, Tridiagonal)
    x = np.random.default_rng(4).standard_normal(n)
    # Full column rank, so A⁺A = I: recover x from its range answers.
    assert_close(P.matvec(A.matvec(x)), x, np.abs(x).max(), rtol=1e-8)


def test_new_leaf_needs_both_products():
    from dpsql.linalg import QueryMatrix

    class Half(QueryMatrix):
        def __init__(self):
            self._shape = (1, 1)

        def _matmat(self, X):
            return 0.5 * X

    with pytest.raises(TypeError):
        Half()
