"""GramPinv: (MᵀM)⁺ of a matrix whose rows differ widely in scale (issue 28), checked
against exact rational arithmetic and, for well-scaled matrices, against pinv."""


import numpy as np
import pytest

from dpsql.linalg.rowscaled import GramPinv
from rational_oracles import exact_quad


S, B = 2.0 ** -14, 2.0 ** 8     # light and heavy row weights, 2²² apart
N = 6
STIFF = {
    "heavy total, light identity": np.vstack([B * np.ones((1, N)), S * np.eye(N)]),
    "light identity, heavy total": np.vstack([S * np.eye(N), B * np.ones((1, N))]),
    "heavy prefix, light duplicates": np.vstack([B * np.tril(np.ones((N, N))), S * np.eye(N),
                                                 S * np.eye(N)[:2]]),
    "graded rows": np.vstack([2.0 ** (-4 * i) * (np.eye(N)[i] + 1) for i in range(N)]
                             + [2.0 ** -30 * np.ones(N)]),
    "lattice edge rows": np.vstack([np.r_[S, np.zeros(N - 1)], np.r_[np.zeros(N - 1), S],
                                    np.r_[0.0, B * np.ones(N - 1)]]),
    "rank deficient, zero row": np.vstack([B * np.r_[np.ones(3), np.zeros(N - 3)], np.zeros(N),
                                           S * np.r_[1.0, -1.0, np.zeros(N - 2)],
                                           S * np.r_[0.0, 1.0, -1.0, np.zeros(N - 3)]]),
}


def _queries(m):
    """Query rows in m's row space: its rows and a few combinations, exactly (dyadic)."""
    qs = [row / np.abs(row).max() for row in m if np.any(row)]
    qs.append(sum(qs))
    qs.append(qs[0] - 3 * qs[-2])
    return qs


@pytest.mark.parametrize("name", sorted(STIFF))
def test_stiff_gram_pinv_matches_exact_rationals(name):
    m = STIFF[name]
    g = GramPinv(m)
    for q in _queries(m):
        exact = float(exact_quad(m, q))
        assert g.quad(q[None], q[None])[0] == pytest.approx(exact, rel=1e-12, abs=0)
        assert np.allclose(g.project(q[None])[0], q, rtol=0, atol=1e-13 * np.abs(q).max())


def test_the_old_pinv_was_wrong_on_these_cases():
    """The reference above is not vacuous: the SVD-based pinv misses it (by 1e-3 here)."""
    m = STIFF["heavy total, light identity"]
    q = np.ones(N)
    old = q @ (np.linalg.pinv(m) @ np.linalg.pinv(m).T) @ q
    assert abs(old / float(exact_quad(m, q)) - 1) > 1e-6


@pytest.mark.parametrize("seed", range(6))
def test_well_scaled_matrices_match_pinv(seed):
    """On well-scaled integer matrices (dependent rows, zero rows, wide and tall) G⁺, the
    projector and the least-squares estimator agree with pinv to rounding."""
    rng = np.random.default_rng(seed)
    k, n = (int(v) for v in rng.integers(2, 30, size=2))
    m = rng.integers(-3, 4, size=(k, n)).astype(float)
    m[rng.random(k) < 0.2] = 0
    if k > 3:
        m[-1] = m[0] - 2 * m[1]
    g = GramPinv(m)
    ref = np.linalg.pinv(m.T @ m)
    assert g.rank == np.linalg.matrix_rank(m)
    assert np.allclose(g.dense(), ref, rtol=0, atol=1e-12 * np.abs(ref).max())
    assert np.allclose(g.project(np.eye(n)), np.linalg.pinv(m) @ m, rtol=0, atol=1e-12)
    assert np.allclose(g.estimator(np.eye(n)), ref @ m.T, rtol=0, atol=1e-12 * np.abs(ref).max())
    assert np.allclose(g.orthonormal.T @ g.orthonormal, np.eye(g.rank), atol=1e-13)


def test_stiff_estimator_recovers_the_data_exactly():
    """q G⁺ Mᵀ (M x) = q x for q in the row space, heavy and light rows alike."""
    m = STIFF["heavy total, light identity"]
    x = np.arange(1.0, N + 1)
    g = GramPinv(m)
    assert np.allclose(g.estimator(np.eye(N)) @ (m @ x), x, rtol=1e-12, atol=0)


def test_zero_matrix_has_an_empty_row_space():
    g = GramPinv(np.zeros((3, 4)))
    assert g.rank == 0 and g.dense().shape == (4, 4) and not g.dense().any()
    assert not g.project(np.ones((1, 4))).any()


def test_nearly_dependent_rows_of_one_weight_are_pivoted_by_residual():
    """Taking pivots strictly in order of weight made (1, 2e-8, 0) a pivot next to (1, 0, 0),
    and (0, 1, 0) a combination of the two with coefficients ±5e7: I + CᵀC had condition
    ~1e15 (7e-9 off here), and a rounded planner strategy (PREFIX 256, rows 0.22 to 3.5)
    got G⁺ 3.7% wrong.  Rows of one level are pivoted by residual, as in QR with column
    pivoting."""
    m = np.array([[3.0, 0.0, 0.0], [2.0, 4e-8, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]])
    g = GramPinv(m)
    for q in (np.eye(3), np.array([[1.0, 1.0, 1.0]])):
        for row in q:
            exact = float(exact_quad(m, row))
            assert g.quad(row[None], row[None])[0] == pytest.approx(exact, rel=1e-12, abs=0)


def _block_structured(rng, graded):
    """A matrix whose rows and columns split into independent blocks (one-column blocks, an
    identity, dense blocks, zero rows and columns), rows and columns shuffled; with
    ``graded`` the rows are up to 2²⁴ apart in weight."""
    parts = [np.eye(4), rng.integers(-3, 4, size=(5, 3)).astype(float),
             np.ones((3, 1)), rng.integers(0, 3, size=(2, 4)).astype(float),
             np.vstack([np.ones((1, 3)), np.eye(3)]), np.zeros((2, 2))]
    k, n = sum(p.shape[0] for p in parts), sum(p.shape[1] for p in parts)
    m = np.zeros((k, n))
    i = j = 0
    for p in parts:
        m[i:i + p.shape[0], j:j + p.shape[1]] = p
        i, j = i + p.shape[0], j + p.shape[1]
    if graded:
        m *= (2.0 ** rng.integers(-16, 9, size=k))[:, None]
    return m[rng.permutation(k)][:, rng.permutation(n)]


@pytest.mark.parametrize("seed", range(8))
def test_independent_blocks_give_the_whole_matrix_factorisation(seed):
    """Factoring each independent block alone (issue 35: an identity over 1,459 labels was
    one 1,459-square factorisation) gives the G⁺, projector and estimator of factoring the
    whole matrix at once, to 1e-12 relative."""
    from dpsql.linalg.rowscaled import _Dense
    rng = np.random.default_rng(seed)
    m = _block_structured(rng, graded=seed % 2 == 1)
    g, whole = GramPinv(m), _Dense(m)
    n = m.shape[1]
    q = np.vstack([np.eye(n), rng.integers(-2, 3, size=(5, n)).astype(float)])
    q = whole.basis @ whole.basis.T @ q.T
    q = q.T
    ref_c = q @ whole.factor
    assert g.rank == whole.rank
    ref_quad = np.sum(ref_c ** 2, axis=1)
    assert np.allclose(g.quad(q, q), ref_quad, rtol=1e-12, atol=0)
    ref_est = ref_c @ whole.orthonormal.T
    assert np.allclose(g.estimator(q), ref_est, rtol=0, atol=1e-12 * np.abs(ref_est).max())
    ref_proj = q @ whole.basis @ whole.basis.T
    assert np.allclose(g.project(q), ref_proj, rtol=0, atol=1e-12 * np.abs(q).max())
    ref_dense = whole.factor @ whole.factor.T
    assert np.allclose(g.dense(), ref_dense, rtol=0, atol=1e-12 * np.abs(ref_dense).max())
    assert np.allclose(g.orthonormal.T @ g.orthonormal, np.eye(g.rank), atol=1e-13)
    assert np.allclose(g.basis.T @ g.basis, np.eye(g.rank), atol=1e-13)


def test_each_independent_block_is_factored_alone(monkeypatch):
    """The factorisation never sees more than one block: an identity is n one-column blocks
    (no factorisation at all) and a block diagonal of dense blocks is one per block."""
    import dpsql.linalg.rowscaled as rowscaled
    seen = []
    real = rowscaled._Dense

    def spy(m):
        seen.append(m.shape)
        return real(m)

    monkeypatch.setattr(rowscaled, "_Dense", spy)
    g = GramPinv(np.eye(300))
    assert seen == [] and g.rank == 300
    assert np.array_equal(g.quad(np.eye(300), np.eye(300)), np.ones(300))
    a = np.array([[1.0, 2.0], [0.0, 1.0], [1.0, 1.0]])
    m = np.zeros((9, 6))
    m[:3, :2], m[3:6, 2:4], m[6:, 4:] = a, 2 * a, 4 * a
    GramPinv(m)
    assert seen == [(3, 2)] * 3


@pytest.mark.parametrize("seed", range(6))
def test_spans_is_the_projection_check(seed):
    """``spans(q)`` answers as ``allclose(project(q), q)`` while reading only the columns
    where a row can leave the row space: rows inside it, rows with an entry on a column no
    row touches, rows off a rank-deficient block's span."""
    rng = np.random.default_rng(seed)
    m = _block_structured(rng, graded=seed % 2 == 0)
    g = GramPinv(m)
    n = m.shape[1]
    inside = rng.integers(-2, 3, size=(4, m.shape[0])).astype(float) @ m
    assert g.spans(inside, atol=1e-8 * np.abs(inside).max())
    for j in range(n):
        q = inside.copy()
        q[1, j] += 1.0
        expect = np.allclose(g.project(q), q, atol=1e-8 * np.abs(q).max())
        assert g.spans(q, atol=1e-8 * np.abs(q).max()) == expect
    assert not g.spans(np.ones((1, n)), atol=1e-8)      # the zero columns are off the span


@pytest.mark.parametrize("seed", range(10))
def test_blocks_are_the_connected_components(seed):
    """``_blocks`` (label propagation with pointer jumping) finds scipy's connected
    components of the row–column graph: sparse random patterns, a bidiagonal chain (one
    block however long), zero rows and columns."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    from dpsql.linalg.rowscaled import _blocks
    rng = np.random.default_rng(seed)
    k, n = (int(v) for v in rng.integers(1, 60, size=2))
    m = (rng.random((k, n)) < rng.choice([0.01, 0.03, 0.1])).astype(float)
    if seed == 0:
        k, n = 80, 81
        m = np.eye(k, n) + np.eye(k, n, 1)
    got = _blocks(m)
    r, c = np.nonzero(m)
    graph = coo_matrix((np.ones(r.size), (r, k + c)), shape=(k + n, k + n))
    _, label = connected_components(graph, directed=False)
    expect = {}
    for i in np.flatnonzero(m.any(axis=1)):
        expect.setdefault(label[i], [set(), set()])[0].add(int(i))
    for j in np.flatnonzero(m.any(axis=0)):
        expect[label[k + j]][1].add(int(j))
    assert sorted((sorted(a), sorted(b)) for a, b in expect.values()) == \
        sorted((sorted(rows.tolist()), sorted(cols.tolist())) for rows, cols in got)
    assert [int(cols[0]) for _, cols in got] == sorted(int(cols.min()) for _, cols in got)
    if seed == 0:
        assert len(got) == 1


def test_span_factor_products_in_closed_form_equal_the_factorisation():
    """Issue 35 item 3: a measured a·I + b·11ᵀ factor over a large categorical (OPT_0's
    Gaussian optimum on span{I, 1}, kept by lattice rounding) is inverted in closed form:
    the same products as ``GramPinv`` (13.7 CPU-s to factor at n = 1,460)."""
    from dpsql.linalg.rowscaled import GramPinv, SpanPinv, gram_pinv, span_form
    n = 200
    rng = np.random.default_rng(4)
    for a, b in [(1021.0, 3.0), (7.0, -0.02), (0.5, 40.0)]:
        F = np.full((n, n), b)
        F[np.diag_indices(n)] += a
        F *= 0.37                                  # a block's scale on its first factor
        assert span_form(F) == (pytest.approx(0.37 * a), pytest.approx(0.37 * b))
        fast, slow = gram_pinv(F), GramPinv(F)
        assert isinstance(fast, SpanPinv)
        q = np.vstack([np.ones((1, n)), np.eye(n)[:3], rng.integers(0, 2, (4, n)), rng.standard_normal((2, n))])
        assert np.allclose(fast.quad(q, q), slow.quad(q, q), rtol=1e-10, atol=0)
        # cross terms: the factorisation's rounding is relative to the rows' own quads (the
        # closed form's ones-row cross term is exact: its centred part is 0)
        scale = float(np.max(slow.quad(q, q)))
        assert np.allclose(fast.quad(q, q[::-1]), slow.quad(q, q[::-1]), rtol=1e-9, atol=1e-10 * scale)
        exact = np.linalg.solve(F.T, q.T).T       # q F⁻¹ (F is invertible)
        top = float(np.abs(exact).max())
        assert np.allclose(fast.estimator(q), exact, rtol=0, atol=1e-13 * top)
        assert np.allclose(fast.estimator(q), slow.estimator(q), rtol=0, atol=1e-10 * top)
        assert fast.spans(q, 1e-8) and np.allclose(fast.project(q), q)
    singular = np.full((n, n), -1.0)
    singular[np.diag_indices(n)] += float(n)       # a + b·n = 0: the ones direction is lost
    assert span_form(singular) is None and isinstance(gram_pinv(singular), GramPinv)
    assert span_form(np.eye(50) + 1.0) is None     # small: the factorisation is cheap
