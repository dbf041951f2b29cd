"""Kron products by thesis Algorithm 1 against np.kron, the slab/in-place paths of
the implementation, Union sensitivity (exact and bound), and the workload helpers."""

from __future__ import annotations

from functools import reduce

import numpy as np
import pytest

import dpsql.linalg.composite as composite
from dpsql.errors import NotSupportedError, ProgrammingError, UnknownColumnError
from dpsql.linalg import (
    AllRange, Explicit, Identity, Indicator, Kron, Marginals, Prefix, Suffix, Total, Union,
    Values, Weighted, WidthRange, dense_factors, is_kron_union, kron_terms,
)
from linalg_checks import assert_close, check_against_dense


def four_attribute_kron(rng):
    factors = [Explicit(rng.standard_normal((3, 5))), Prefix(4), Identity(3),
               AllRange(4), ]
    refs = [f.dense() for f in factors]
    return Kron(factors), reduce(np.kron, refs)


@pytest.mark.parametrize("slab", [1, 7, 64, 1 << 21])
def test_four_attribute_kron_vs_np_kron(monkeypatch, slab):
    # Small slabs force the chunked paths: one row split over columns (cl = 1) and
    # several rows per slab (cl > 1), including in-place updates of square factors.
    monkeypatch.setattr(composite, "_SLAB_ENTRIES", slab)
    monkeypatch.setattr(composite, "_MIN_SLAB_COLS", 1)
    rng = np.random.default_rng(11)
    K, ref = four_attribute_kron(rng)
    x = rng.standard_normal(K.shape[1])
    x_before = x.copy()
    assert_close(K.matvec(x), ref @ x, np.abs(ref).sum(1).max() * np.abs(x).max())
    assert np.array_equal(x, x_before), "matvec must not modify its input"
    X = rng.standard_normal((K.shape[1], 3))
    assert_close(K.matmat(X), ref @ X, np.abs(ref).sum(1).max() * np.abs(X).max())
    Y = rng.standard_normal((K.shape[0], 2))
    assert_close(K.rmatmat(Y), ref.T @ Y, np.abs(ref).sum(0).max() * np.abs(Y).max())


@pytest.mark.parametrize("slab", [5, 1 << 21])
def test_square_kron_in_place_and_noncontiguous_input(monkeypatch, slab):
    monkeypatch.setattr(composite, "_SLAB_ENTRIES", slab)
    monkeypatch.setattr(composite, "_MIN_SLAB_COLS", 1)
    rng = np.random.default_rng(3)
    factors = [Explicit(rng.standard_normal((4, 4))), Prefix(3), Suffix(5), Identity(2)]
    K = Kron(factors)
    ref = reduce(np.kron, [f.dense() for f in factors])
    X = np.asfortranarray(rng.standard_normal((K.shape[1], 4)))[:, ::2]
    X_before = X.copy()
    assert_close(K.matmat(X), ref @ X, np.abs(ref).sum(1).max() * np.abs(X).max())
    assert np.array_equal(X, X_before)
    out = Kron([Identity(3), Identity(2)]).matvec(np.arange(6.0))
    assert out.tolist() == list(range(6))


def test_kron_full_contract():
    rng = np.random.default_rng(5)
    K, ref = four_attribute_kron(rng)
    check_against_dense(K, ref, rng)
    assert isinstance(K.gram(), Kron) and isinstance(K.pinv(), Kron) and isinstance(K.T, Kron)


def test_huge_kron_shape_stays_implicit():
    K = Kron([Prefix(40)] * 12)
    assert K.shape == (40 ** 12, 40 ** 12)  # > 2^63: Python ints, never materialised
    assert K.sensitivity(1) == 40.0 ** 12
    assert K.trace() == 40.0 ** 12
    with pytest.raises(NotSupportedError):
        K.dense()
    with pytest.raises(NotSupportedError):
        K.column_norms(1)


def test_union_sensitivity_exact_and_bound(monkeypatch):
    # Disjoint single-cell queries: every column is hit at most once, so the exact
    # sensitivity is 1, while the block bound counts both blocks.
    U = Union([Kron([Indicator(3, [0]), Total(2)]), Kron([Indicator(3, [1]), Total(2)])])
    dense = U.dense()
    assert U.sensitivity(1) == np.abs(dense).sum(0).max() == 1.0
    monkeypatch.setattr(composite, "EXACT_SENSITIVITY_LIMIT", 0)
    assert U.sensitivity(1) == 2.0
    assert U.sensitivity(2) == pytest.approx(np.sqrt(2.0))
    # For marginals every block has constant column norms, so the bound is exact.
    M = Marginals({"a": 3, "b": 4, "c": 2}, [("a",), ("b", "c"), ("a", "c")], [1.0, 2.0, 0.5])
    D = M.dense()
    assert M.sensitivity(1) == pytest.approx(np.abs(D).sum(0).max(), rel=1e-12)
    assert M.sensitivity(2) == pytest.approx(np.linalg.norm(D, axis=0).max(), rel=1e-12)


def test_marginals_vs_dense():
    sizes = [("age", 4), ("sex", 2), ("income", 3)]
    cliques = [("sex", "age"), ("income",), ()]
    M = Marginals(sizes, cliques, weights=[1.0, 2.0, 3.0])
    I4, I2, I3 = np.eye(4), np.eye(2), np.eye(3)
    one = lambda n: np.ones((1, n))  # noqa: E731
    ref = np.vstack([np.kron(np.kron(I4, I2), one(3)),
                     2.0 * np.kron(np.kron(one(4), one(2)), I3),
                     3.0 * np.kron(np.kron(one(4), one(2)), one(3))])
    check_against_dense(M, ref, np.random.default_rng(0))
    assert isinstance(M, Union) and all(isinstance(b, Weighted) for b in M.blocks)
    # Counting the data vector: marginals of a histogram sum to its total.
    x = np.random.default_rng(1).integers(0, 5, size=24).astype(float)
    assert_close(M.matvec(x)[:8].sum(), x.sum())


def test_marginals_accepts_domain_like_and_validates():
    class DomainLike:
        attributes = ("a", "b")
        shape = (2, 3)

    M = Marginals(DomainLike(), [("b",)])
    assert M.shape == (3, 6)
    assert Marginals({"a": 2, "b": 3}, ["a"]).shape == (2, 6)
    with pytest.raises(UnknownColumnError) as info:
        Marginals({"a": 2}, [("z",)])
    assert "a" in info.value.hint
    with pytest.raises(ProgrammingError):
        Marginals({"a": 2}, [("a",)], weights=[1.0, 2.0])
    with pytest.raises(ProgrammingError):
        Marginals({"a": 2}, [])


def test_kron_terms_flattening():
    A, B, C = Prefix(3), Identity(2), Values(4, [1, 2, 3, 4])
    nested = Union([
        Weighted(2.0, Kron([A, Kron([Weighted(3.0, B), C])])),
        Union([Kron([Total(3), B, Total(4)])]),
    ])
    terms = kron_terms(nested)
    assert [w for w, _ in terms] == [6.0, 1.0]
    assert terms[0][1] == [A, B, C]
    assert is_kron_union(nested) and is_kron_union(nested, [3, 2, 4])
    assert not is_kron_union(nested, [3, 8])
    assert kron_terms(A) == [(1.0, [A])]
    assert not is_kron_union(Union([Kron([A, B]), Explicit(np.ones((1, 6)))]))
    # The flattened terms reproduce the matrix.
    rebuilt = np.vstack([w * reduce(np.kron, fs) for w, fs in dense_factors(nested)])
    assert_close(rebuilt, nested.dense())


def test_widthrange_and_allrange_factors_in_kron():
    K = Kron([WidthRange(5, 2), AllRange(3), Total(2)])
    ref = reduce(np.kron, [WidthRange(5, 2).dense(), AllRange(3).dense(), np.ones((1, 2))])
    check_against_dense(K, ref, np.random.default_rng(9))


def test_scalar_operators_and_numpy_scalars():
    P = Prefix(4)
    for c in (2, 2.0, np.float64(2.0), np.int64(2)):
        W = c * P
        assert isinstance(W, Weighted) and W.weight == 2.0
        assert_close(W.dense(), 2.0 * P.dense())
    W = 3.0 * (2.0 * P)
    assert isinstance(W.base, Prefix) and W.weight == 6.0
    assert_close((P / 4).dense(), P.dense() / 4)
    assert_close((-P).dense(), -P.dense())
    x = np.arange(4.0)
    assert_close(x @ P, x @ P.dense())
    assert_close(np.ones((2, 4)) @ P, np.ones((2, 4)) @ P.dense())


def test_gram_diag_and_trace_use_column_norms():
    v = Values(5, [1.0, -2.0, 0.0, 3.0, 0.5])
    G = v.gram()
    assert_close(G.diag(), v.dense()[0] ** 2)
    assert_close(G.trace(), float((v.dense() ** 2).sum()))


def test_union_of_huge_krons_has_python_int_shape():
    K = Kron([Prefix(40)] * 12)
    U = Union([K, 2.0 * K])
    assert U.shape == (2 * 40 ** 12, 40 ** 12)
    assert U.sensitivity(1) == pytest.approx(3.0 * 40.0 ** 12)  # bound path, exact here


def test_matrices_survive_pickling():
    # Strategies and workloads cross process boundaries (multiprocessing, caches).
    import pickle

    from dpsql.linalg import Bucket
    M = Union([Marginals({"a": 3, "b": 2}, [("a",), ("a", "b")]),
               Kron([AllRange(3), Bucket(2, [0, -1])]),
               0.5 * Kron([Prefix(3), Total(2)]).T.T])
    M2 = pickle.loads(pickle.dumps(M))
    assert_close(M2.dense(), M.dense())
    assert M2.sensitivity(2) == M.sensitivity(2)


def test_kron_matvec_memory_is_output_plus_slabs():
    # Thesis Algorithm 1 with in-place square steps: beyond the caller's x, a
    # product allocates its output and a few slab-sized scratch blocks (a slab,
    # its image, one transposed copy), never a second full-size intermediate.
    import tracemalloc

    rng = np.random.default_rng(0)
    K = Kron([Explicit(rng.standard_normal((32, 32))), Prefix(32), Suffix(32),
              Explicit(rng.standard_normal((32, 32)))])
    x = rng.random(32 ** 4)
    tracemalloc.start()
    try:
        y = K.matvec(x)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    slab_bytes = 8 * composite._SLAB_ENTRIES
    assert peak <= y.nbytes + 3 * slab_bytes + (1 << 19)
    assert peak < 2 * y.nbytes  # what a copy-per-factor implementation would need


def test_single_block_union_keeps_structured_pinv():
    K = Kron([Prefix(30)] * 5)  # 24.3M cells: a dense pseudo-inverse is impossible
    P = Union([Weighted(2.0, K)]).pinv()
    assert isinstance(P, Weighted) and isinstance(P.base, Kron)
    x = np.random.default_rng(2).standard_normal(K.shape[1] // 30 ** 3)
    small = Union([Weighted(2.0, Kron([Prefix(30)] * 2))])
    assert_close(small.pinv().matvec(small.matvec(x)), x, np.abs(x).max())
