"""Standard errors: the per-attribute computation equals the dense least-squares formula."""

import math
from fractions import Fraction

import numpy as np
import pytest

from dpsql.engine.variance import SupportBlock, VarianceModel
from dpsql.linalg import Identity, Indicator, Kron, Prefix, Sum, Total, Union, Weighted

SIZES = {"a": 3, "b": 4, "c": 2}
ATTRS = ("a", "b", "c")


def full_matrix(clique, factors):
    """The block's rows over the full domain: its factors on the clique, ones elsewhere."""
    if len(clique) == 0:
        return np.kron(factors[0], np.ones((1, int(np.prod(list(SIZES.values()))))))
    if len(factors) == 1 and len(clique) > 1:  # one joint factor over the flattened clique
        assert tuple(clique) == ATTRS[:len(clique)]
        rest = np.ones((1, int(np.prod([SIZES[a] for a in ATTRS[len(clique):]]))))
        return np.kron(factors[0], rest)
    mats = []
    it = iter(factors)
    for a in ATTRS:
        mats.append(next(it) if a in clique else np.ones((1, SIZES[a])))
    out = mats[0]
    for m in mats[1:]:
        out = np.kron(out, m)
    return out


def dense_var(q, blocks):
    """Row by row: inverse-variance combination of the blocks whose row space holds the row."""
    inv = np.zeros(q.shape[0])
    for b in blocks:
        A = b.scale * full_matrix(b.clique, b.factors)
        G = A.T @ A
        P = np.linalg.pinv(G)
        ok = np.all(np.isclose(q @ P @ G, q, atol=1e-8), axis=1)
        inv[ok] += 1.0 / (b.stddev ** 2 * np.einsum("ij,jk,ik->i", q[ok], P, q[ok]))
    with np.errstate(divide="ignore"):
        return np.where(inv > 0, np.sqrt(1.0 / np.where(inv > 0, inv, 1.0)), np.nan)


BLOCKS = [
    SupportBlock(("a", "b"), (np.eye(3, dtype=np.int64), np.eye(4, dtype=np.int64)), 2.0, 1.0),
    SupportBlock(("b", "c"), (np.tril(np.ones((4, 4), dtype=np.int64)), np.eye(2, dtype=np.int64)), 3.0, 0.5),
    SupportBlock(("a",), (np.ones((1, 3), dtype=np.int64),), 1.5, 1.0),
]

QUERIES = [
    Kron([Identity(3), Total(4), Total(2)]),
    Kron([Indicator(3, [0, 2]), Identity(4), Total(2)]),
    Kron([Total(3), Prefix(4), Identity(2)]),
    Kron([Total(3), Total(4), Total(2)]),
    Union([Weighted(2.0, Kron([Identity(3), Total(4), Total(2)])),
           Kron([Total(3), Indicator(4, [1]), Identity(2)])]),
    Sum([Kron([Indicator(3, [0]), Identity(4), Total(2)]), Kron([Indicator(3, [1]), Identity(4), Total(2)])]),
]


def released(seed: int = 3, blocks=BLOCKS):
    """The blocks with noisy values of a random data vector over (a, b, c)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 30, size=24).astype(float)
    out = []
    for b in blocks:
        A = b.scale * full_matrix(b.clique, b.factors)
        out.append(SupportBlock(b.clique, b.factors, b.stddev, b.scale,
                                A @ x + rng.normal(0, b.stddev, size=A.shape[0])))
    return out


def estimator_oracle(q, blocks):
    """The reported estimate's coefficients on every measured value, found by measuring unit
    vectors (the estimate is linear in the values), so that its bias and variance follow
    from the blocks alone: C with estimate = C·y."""
    sizes = [len(b.values) for b in blocks]
    cols = []
    for j in range(sum(sizes)):
        y = np.zeros(sum(sizes))
        y[j] = 1.0
        parts = np.split(y, np.cumsum(sizes)[:-1])
        unit = [SupportBlock(b.clique, b.factors, b.stddev, b.scale, v) for b, v in zip(blocks, parts)]
        cols.append(VarianceModel(ATTRS, SIZES, unit).least_squares(q)[0])
    return np.column_stack(cols)


def global_var(q, blocks):
    """q (AᵀA)⁺ qᵀ over the full domain with every block: no unbiased estimate does better."""
    A = np.vstack([b.scale * full_matrix(b.clique, b.factors) / b.stddev for b in blocks])
    return np.einsum("ij,jk,ik->i", q, np.linalg.pinv(A.T @ A), q)


@pytest.mark.parametrize("i", range(len(QUERIES)))
def test_stderr_is_that_of_the_unbiased_estimate_reported(i):
    """Issue 35 item 6: the reported estimate is unbiased, its standard error is exactly its
    own, never above the blocks' one-at-a-time combination (what was reported before, above
    the plan's promise) and never below global least squares."""
    q = QUERIES[i]
    blocks = released()
    est, err = VarianceModel(ATTRS, SIZES, blocks).least_squares(q)
    dq = q.dense()
    ref = dense_var(dq, blocks)
    assert np.array_equal(np.isnan(err), np.isnan(ref))
    ok = ~np.isnan(ref)
    C = estimator_oracle(q, blocks)
    A = np.vstack([b.scale * full_matrix(b.clique, b.factors) for b in blocks])
    sd = np.concatenate([np.full(len(b.values), b.stddev) for b in blocks])
    assert np.allclose((C @ A)[ok], dq[ok], atol=1e-9)                        # unbiased
    assert np.allclose(err[ok] ** 2, ((C * C) @ (sd * sd))[ok], rtol=1e-9)     # its own variance
    assert np.all(err[ok] <= ref[ok] * (1 + 1e-9))
    assert np.all(err[ok] ** 2 >= global_var(dq, blocks)[ok] * (1 - 1e-9))
    # the same errors without the values (standard errors only)
    err2, sup = VarianceModel(ATTRS, SIZES, BLOCKS).analyse(q)
    assert np.allclose(err2[ok], err[ok], rtol=1e-12) and np.array_equal(sup, ok)


def test_the_marginal_blocks_answer_together():
    """A marginal of b measured inside two 2-way marginals beside a third without b: the
    joint estimate also takes the total from the third, as the plan's marginal algebra does
    (Theorem 9); the
    one-at-a-time combination reported 29.2 for the adult dashboard's GROUP BY sex where the
    plan promised 22.5."""
    blocks = released(5, [SupportBlock(("a", "b"), (np.eye(3, dtype=np.int64), np.eye(4, dtype=np.int64)), 2.0, 1.0),
                          SupportBlock(("b", "c"), (np.eye(4, dtype=np.int64), np.eye(2, dtype=np.int64)), 1.0, 1.0),
                          SupportBlock(("a", "c"), (np.eye(3, dtype=np.int64), np.eye(2, dtype=np.int64)), 0.5, 1.0)])
    q = Kron([Total(3), Identity(4), Total(2)])
    est, err = VarianceModel(ATTRS, SIZES, blocks).least_squares(q)
    dq = q.dense()
    assert np.allclose(err ** 2, global_var(dq, blocks), rtol=1e-9)
    assert np.all(err < dense_var(dq, blocks) * (1 - 1e-3))
    C = estimator_oracle(q, blocks)
    A = np.vstack([b.scale * full_matrix(b.clique, b.factors) for b in blocks])
    assert np.allclose(C @ A, dq, atol=1e-9)


def test_unsupported_query_is_flagged():
    model = VarianceModel(ATTRS, SIZES, BLOCKS)
    err, sup = model.analyse(Kron([Identity(3), Total(4), Identity(2)]))  # (a, c) never measured together
    assert not sup.any() and np.isnan(err).all()


def test_joint_factor_block():
    rng = np.random.default_rng(1)
    M = rng.integers(-3, 4, size=(20, 12)).astype(np.int64)  # over the flattened (a, b) marginal
    blocks = [SupportBlock(("a", "b"), (M,), 1.7, 0.25)]
    q = Kron([Indicator(3, [1]), Identity(4), Total(2)])
    err, sup = VarianceModel(ATTRS, SIZES, blocks).analyse(q)
    assert np.allclose(err, dense_var(q.dense(), blocks))


def test_least_squares_is_exact_without_noise():
    x = np.arange(24, dtype=float)
    blocks = [SupportBlock(b.clique, b.factors, b.stddev, b.scale,
                           b.scale * full_matrix(b.clique, b.factors) @ x) for b in BLOCKS]
    q = Kron([Indicator(3, [0, 2]), Identity(4), Total(2)])
    est, _ = VarianceModel(ATTRS, SIZES, blocks).least_squares(q)
    assert np.allclose(est, q.dense() @ x)


def test_total_block_over_the_empty_clique_supports_the_total():
    blocks = BLOCKS + [SupportBlock((), (np.ones((1, 1), dtype=np.int64),), 0.5, 1.0)]
    err, sup = VarianceModel(ATTRS, SIZES, blocks).analyse(Kron([Total(3), Total(4), Total(2)]))
    assert sup.all()
    assert np.allclose(err, dense_var(Kron([Total(3), Total(4), Total(2)]).dense(), blocks))


@pytest.mark.parametrize("small,big", [(4, 4096), (4, 2 ** 20), (1, 65536), (0.25, 2 ** 20)])
def test_lattice_blocks_with_tiny_rows_support_their_query(small, big):
    """Issue 21: a measured block of lattice rows (the query row at weight ``big`` plus edge
    cells at weight ``small``, 2⁻¹⁰ after scaling) supports the query it was measured for,
    and each row's variance is σ²/(scale·weight)², not truncated by an ill-conditioned pinv
    (pinv(MᵀM) reported 0.004 for the second query's 23,170 at weights 0.25 and 2²⁰; the
    SVD of M with singular values 2²² apart still missed the first by 1.2%, by an amount
    that depended on the BLAS kernel: issue 28).  Exact to rounding since."""
    n, scale = 74, 2.0 ** -12
    f = np.zeros((3, n))
    f[0, 0] = f[1, n - 1] = small
    f[2, 1:] = big
    vm = VarianceModel(("age",), {"age": n}, [SupportBlock(("age",), (f,), 1.0, scale)])
    at_least_18 = Union([Weighted(1.0, Kron([Indicator(n, np.arange(n) >= 1)]))])
    at_most_89 = Union([Weighted(1.0, Kron([Indicator(n, np.arange(n) <= n - 2)]))])
    err, sup = vm.analyse(at_least_18)
    assert sup.all() and err[0] == pytest.approx(1.0 / (scale * big), rel=1e-9)
    err, sup = vm.analyse(at_most_89)    # = cell 0 + (cells 1..73) − cell 73
    expected = np.sqrt(2.0 / (scale * small) ** 2 + 1.0 / (scale * big) ** 2)
    assert sup.all() and err[0] == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("n", [5, 74])
def test_stiff_block_with_dependent_rows_matches_the_exact_variance(n):
    """Issue 28: a heavy total row (2²⁰) over light identity rows (2⁻²): the rows are
    dependent and 2²² apart.  With G = b²11ᵀ + s²I exactly, the total's variance is
    n/(s² + n b²) and a cell's is (1 − b²/(s² + n b²))/s²; pinv(M) missed the total's by 1e-3
    (the sixth digit of its stderr), by an amount that depended on the BLAS kernel."""
    small, big, scale = Fraction(1, 4), Fraction(2 ** 20), Fraction(1, 4096)
    f = np.vstack([float(big) * np.ones((1, n)), float(small) * np.eye(n)])
    vm = VarianceModel(("age",), {"age": n}, [SupportBlock(("age",), (f,), 1.0, float(scale))])
    s2, b2 = (scale * small) ** 2, (scale * big) ** 2
    err, sup = vm.analyse(Kron([Total(n)]))
    assert sup.all() and err[0] == pytest.approx(math.sqrt(n / (s2 + n * b2)), rel=1e-12)
    err, sup = vm.analyse(Kron([Identity(n)]))
    cell = (1 - b2 / (s2 + n * b2)) / s2
    assert sup.all() and np.allclose(err, math.sqrt(cell), rtol=1e-12, atol=0)


def test_wide_lattice_block_with_tiny_rows_supports_its_query():
    """Issue 28: the large-attribute path (more than 4096 cells) took the eigenvalues of MMᵀ
    and cut those below 1e-12 of the largest, so the light edge rows of a lattice block were
    dropped and the query they make up was reported unsupported."""
    n, scale, small, big = 5000, 2.0 ** -12, 0.25, 2.0 ** 20
    f = np.zeros((3, n))
    f[0, 0] = f[1, n - 1] = small
    f[2, 1:] = big
    vm = VarianceModel(("v",), {"v": n}, [SupportBlock(("v",), (f,), 1.0, scale)])
    err, sup = vm.analyse(Union([Kron([Indicator(n, np.arange(n) >= 1)])]))
    assert sup.all() and err[0] == pytest.approx(1.0 / (scale * big), rel=1e-9)
    err, sup = vm.analyse(Union([Kron([Indicator(n, np.arange(n) <= n - 2)])]))
    expected = math.sqrt(2.0 / (scale * small) ** 2 + 1.0 / (scale * big) ** 2)
    assert sup.all() and err[0] == pytest.approx(expected, rel=1e-9)


@pytest.mark.slow   # the references factor 1,459-square matrices (~5 CPU-s)
def test_a_large_categorical_identity_block_matches_the_dense_formula():
    """Issue 35: a 1,459-label categorical measured by an identity (plus a light total and a
    heavy block of a few labels) — the standard errors, computed block by block, equal the
    previous computation (one factorisation of each whole block, ``_Dense``) to 1e-12
    relative, and the dense pinv formula to its own accuracy (1e-9: the total's rows are
    2¹⁰ apart, issue 28)."""
    from dpsql.linalg.rowscaled import _Dense
    n = 1459
    sizes = {"d": n, "o": 3}
    few = np.zeros((2, n))
    few[0, [5, 7]] = 1.0
    few[1, [11]] = 1.0
    blocks = [SupportBlock(("d",), (np.eye(n),), 2.0, 1.0),
              SupportBlock(("d",), (np.vstack([few, np.ones((1, n)) * 2.0 ** -10]),), 0.7, 1.0),
              SupportBlock(("o",), (np.eye(3),), 1.0, 1.0)]
    sel = Indicator(n, [5, 7, 11, 1000])
    queries = [Kron([Identity(n), Total(3)]), Kron([sel, Total(3)]), Kron([Total(n), Total(3)])]
    refs = [(b.stddev, _Dense(a), np.linalg.pinv(a.T @ a))
            for b, a in ((b, b.scale * b.factors[0]) for b in blocks[:2])]
    for q in queries:
        # the o block adds to the total only; on the others the marginal blocks' joint least
        # squares would also take its total for the d rows' common part (MarginalJoint)
        vm = VarianceModel(("d", "o"), sizes, blocks if q is queries[-1] else blocks[:2])
        err, sup = vm.analyse(q)
        assert sup.all()
        qd = q.factors[0].dense()
        inv, inv_pinv = np.zeros(qd.shape[0]), np.zeros(qd.shape[0])
        for sd, whole, p in refs:
            # a block supports a query's rows all together or not at all
            ok = np.full(qd.shape[0], np.allclose(qd @ whole.basis @ whole.basis.T, qd, atol=1e-8))
            inv[ok] += 1.0 / (sd ** 2 * np.sum((qd[ok] @ whole.factor) ** 2, axis=1))
            inv_pinv[ok] += 1.0 / (sd ** 2 * np.einsum("ij,jk,ik->i", qd[ok], p, qd[ok]))
        if q is queries[-1]:   # the total is also the sum of the o block's three rows
            inv, inv_pinv = inv + 1 / 3, inv_pinv + 1 / 3
        assert np.allclose(err, np.sqrt(1.0 / inv), rtol=1e-12, atol=0)
        assert np.allclose(err, np.sqrt(1.0 / inv_pinv), rtol=1e-9, atol=0)


def test_marginal_components_equal_the_table_fit(monkeypatch):
    """On a table above ``TABLE_CELLS`` the marginal blocks answer through their components
    (``MarginalJoint``, a 1,459-label GROUP BY); with marginal blocks only, that is the same
    least squares as the fit on the query's table."""
    from dpsql.engine import variance
    blocks = released(7, [SupportBlock(("a", "b"), (np.eye(3, dtype=np.int64), np.eye(4, dtype=np.int64)), 2.0, 1.0),
                          SupportBlock(("b", "c"), (np.eye(4, dtype=np.int64), np.eye(2, dtype=np.int64)), 1.0, 1.0),
                          SupportBlock(("a", "c"), (np.eye(3, dtype=np.int64), np.eye(2, dtype=np.int64)), 0.5, 1.0),
                          SupportBlock((), (np.ones((1, 1), dtype=np.int64),), 3.0, 1.0)])
    queries = QUERIES[:2] + QUERIES[3:] + [Kron([Identity(3), Identity(4), Total(2)]),
                                           Kron([Indicator(3, [1, 2]), Total(4), Identity(2)])]
    table = [VarianceModel(ATTRS, SIZES, blocks).least_squares(q) for q in queries]
    monkeypatch.setattr(variance, "TABLE_CELLS", 0)
    components = [VarianceModel(ATTRS, SIZES, blocks).least_squares(q) for q in queries]
    for (e1, s1), (e2, s2) in zip(table, components):
        assert np.allclose(e1, e2, rtol=1e-9) and np.allclose(s1, s2, rtol=1e-9)


def test_a_group_by_is_analysed_without_its_dense_matrix(monkeypatch):
    """Issue 35: a GROUP BY's Bucket (filtered: -1) reaches the marginal blocks' least squares
    as a cell → row map, never as its rows × n dense matrix (17 MB on a 1,459-label column);
    the standard errors and estimates are those of the same query given densely."""
    from dpsql.engine import variance
    from dpsql.linalg import Bucket, Explicit
    blocks = released(5, [SupportBlock(("a", "b"), (np.eye(3), np.eye(4)), 2.0, 1.0),
                          SupportBlock(("b", "c"), (np.eye(4), np.eye(2)), 1.0, 1.0),
                          SupportBlock(("a",), (np.eye(3),), 0.5, 1.0)])
    monkeypatch.setattr(variance, "TABLE_CELLS", 0)     # as on a large table: MarginalJoint
    by_b = Bucket(4, np.array([2, -1, 0, 3]), buckets=4)
    queries = [Kron([Identity(3), by_b, Total(2)]), Kron([Total(3), by_b, Total(2)]),
               Weighted(2.0, Kron([Bucket(3, np.array([1, 0, 2])), Total(4), Total(2)]))]
    dense = [Kron([Explicit(f.dense()) for f in q.factors]) if isinstance(q, Kron)
             else Weighted(q.weight, Kron([Explicit(f.dense()) for f in q.base.factors])) for q in queries]
    want = [VarianceModel(ATTRS, SIZES, blocks).analyse_estimates(q) for q in dense]
    monkeypatch.setattr(Bucket, "_dense", lambda self: pytest.fail("a GROUP BY was densified"))
    for q, w in zip(queries, want):
        got = VarianceModel(ATTRS, SIZES, blocks).analyse_estimates(q)
        assert got[1].all()
        for g, x in zip(got, w):
            np.testing.assert_allclose(g, x, rtol=1e-12, atol=0)


def test_identity_blocks_are_recognised_without_an_identity_matrix(monkeypatch):
    """Issue 35: recognising a marginal's identity factor built np.eye(n) for each block
    (JointSupport.build, MarginalJoint): 17 MB and ~10 ms a check on 1,459 labels, several
    per new process.  The same blocks are recognised without it."""
    n = 300
    blocks = [SupportBlock(("d",), (np.eye(n, dtype=np.int64),), 2.0, 1.0, np.arange(n, dtype=float)),
              SupportBlock(("d",), (3.0 * np.eye(n),), 1.0, 1.0, np.arange(n, dtype=float)),
              SupportBlock(("o",), (np.eye(3),), 1.0, 1.0, np.ones(3))]
    from dpsql.engine import variance
    monkeypatch.setattr(variance, "TABLE_CELLS", 0)     # as on a large table: MarginalJoint
    query = Kron([Indicator(n, [1, 2]), Total(3)])
    want = VarianceModel(("d", "o"), {"d": n, "o": 3}, blocks).analyse_estimates(query)
    eye = np.eye
    monkeypatch.setattr(np, "eye", lambda m, *a, **k: pytest.fail("np.eye(n) was built") if m == n
                        else eye(m, *a, **k))
    vm = VarianceModel(("d", "o"), {"d": n, "o": 3}, blocks)
    assert len(vm.marginal.blocks) == 3
    for g, w in zip(vm.analyse_estimates(query), want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("seed", range(3))
def test_is_scaled_identity_is_array_equal_to_d_times_eye(seed):
    from dpsql.linalg.base import is_scaled_identity
    rng = np.random.default_rng(seed)
    n = 5
    cases = [np.eye(n), 2.5 * np.eye(n), -np.eye(n), np.eye(n, dtype=np.int64), np.zeros((n, n)),
             rng.normal(size=(n, n)), np.eye(n, 4), np.eye(1)]
    odd = np.eye(n)
    odd[1, 3] = 1e-300
    nan = np.eye(n)
    nan[2, 0] = np.nan
    negzero = np.eye(n)
    negzero[0, 4] = -0.0
    diag = np.eye(n)
    diag[3, 3] = 1.0000000001
    for F in cases + [odd, nan, negzero, diag]:
        for d in (1.0, 2.5, -1.0, float(F.flat[0])):
            want = d != 0 and F.ndim == 2 and F.shape[0] == F.shape[1] and \
                np.array_equal(F, d * np.eye(F.shape[0]))
            assert is_scaled_identity(F, d) == want
