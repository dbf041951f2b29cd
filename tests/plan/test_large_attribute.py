"""Large attributes (issue 16): planned in the workload's row space, never densely.

Reproduced: an integer column declared ``lo = 0, hi = 99999`` made planning fail with
"refusing to materialise a 100000x100000 query matrix … use matvec/rmatvec", naming
neither the column nor the query.  The exactness tests lower ``LARGE_CELLS`` so that the
large-attribute code paths run on an attribute small enough to check densely.
"""

import math

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.errors import ModelTooLargeError, UnsupportedQueryError
from dpsql.linalg import Bucket, Identity, Indicator, Kron, Total, Values
from dpsql.plan import QuerySpec, Workload, optimize
from dpsql.plan.gram import FactorPinv, LowRankGram, ThinPinv
from dpsql.plan.large import opt0_large

from plan_oracles import dense_tse, supports


def _queries(n, sexes=2):
    income = Values(n, np.arange(n, dtype=float))
    return [
        QuerySpec("between", Kron([Indicator(n, range(n // 5, n // 2)), Total(sexes)])),
        QuerySpec("rich by sex", Kron([Indicator(n, range(3 * n // 5, n)), Identity(sexes)])),
        QuerySpec("sum by sex", Kron([income, Identity(sexes)])),
        QuerySpec("count by sex", Kron([Total(n), Identity(sexes)])),
        QuerySpec("poor", Kron([Indicator(n, range(0, n // 10)), Total(sexes)])),
    ]


@pytest.fixture
def small_large(monkeypatch):
    """LARGE_CELLS lowered to 50: a 120-cell attribute takes the large-attribute paths."""
    import dpsql.plan.gram as gram
    import dpsql.plan.workload as workload
    monkeypatch.setattr(gram, "LARGE_CELLS", 50)
    monkeypatch.setattr(workload, "LARGE_CELLS", 50)
    return 120


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_large_attribute_errors_equal_dense_recomputation(small_large, noise):
    n = small_large
    D = Domain(["income", "sex"], [n, 2])
    W = Workload.of_queries(D, _queries(n), noise)
    assert isinstance(W.terms.terms[0].grams[0], LowRankGram)
    s = optimize(W, noise=noise, restarts=1, caps=_caps())
    assert math.isfinite(s.expected_error), s.explanation
    Wd, A = W.matrix.dense(), s.dense()
    assert supports(Wd, A)
    if s.operator == "OPT_kron" or len(s.kron_blocks) == 1:
        assert s.expected_error == pytest.approx(dense_tse(Wd, A, noise), rel=1e-6)
    else:       # local least squares (§3.9): an upper bound on the dense (global) error
        assert s.expected_error >= dense_tse(Wd, A, noise) * (1 - 1e-6)
    # Counts and the SUM over the large attribute sit in different blocks, each on its
    # own integer lattice (their rows differ in scale by the column's values).
    for b in s.kron_blocks:
        assert all(np.all(F == np.round(F)) or g != 1.0 for F, g in zip(b.factors, b.grids or (1.0,) * 2))


def _caps():
    from dpsql.plan import Caps
    return Caps(opt0_cells=50)


def test_row_space_dual_matches_dense_opt0(small_large):
    """The row-space Gaussian dual reaches the dense dual's optimum on the same gram."""
    from dpsql.plan.opt0 import gaussian_dual

    n = small_large
    rows = np.vstack([np.asarray(Indicator(n, range(10, 60)).dense()),
                      np.asarray(Indicator(n, range(40, 100)).dense()),
                      np.ones((1, n))])
    V = LowRankGram(n, 0.0, rows)
    res, S = opt0_large(V, "gaussian")
    dense = gaussian_dual(rows.T @ rows, maxiter=200, gap_tol=1e-6)
    assert res.loss == pytest.approx(dense.loss, rel=2e-3)
    assert res.loss >= res.lower_bound * (1 - 1e-9)
    # The strategy is C·S over an integer basis of the row space.
    assert np.all(S == np.round(S))
    assert ThinPinv(res.matrix).trace(V) < math.inf


def test_thin_pinv_matches_dense():
    rng = np.random.default_rng(0)
    F = rng.normal(size=(3, 200))
    R = rng.normal(size=(2, 3)) @ F
    V = LowRankGram(200, 0.0, R)
    want = np.trace(R.T @ R @ np.linalg.pinv(F.T @ F))
    assert ThinPinv(F).trace(V) == pytest.approx(want, rel=1e-8)
    assert ThinPinv(F).trace(LowRankGram(200, 0.0, rng.normal(size=(1, 200)))) == math.inf
    assert ThinPinv(F).trace(LowRankGram(200, 1.0)) == math.inf


@pytest.mark.parametrize("kind", ["identity", "full rank", "merged columns", "thin"])
def test_either_gram_form_has_the_same_trace_under_either_pinv(kind):
    # Gram = ndarray | LowRankGram (plan/gram.py): FactorPinv.trace read a LowRankGram as an
    # array (an identity factor over a large attribute: "'LowRankGram' object has no
    # attribute 'T'") and ThinPinv.trace a dense gram as a LowRankGram ("no attribute 'c'").
    rng = np.random.default_rng(1)
    n = 40
    F = {"identity": np.eye(n), "full rank": rng.normal(size=(n + 5, n)),
         "merged columns": np.repeat(rng.normal(size=(6, n // 2)), 2, axis=1),
         "thin": rng.normal(size=(4, n))}[kind]
    pinvs = [FactorPinv.of(F)] + ([ThinPinv(F)] if kind == "thin" else [])
    inside = rng.normal(size=(2, F.shape[0])) @ F          # rows in F's row space
    for V in (LowRankGram(n, 0.0, inside), LowRankGram(n, 0.7, inside),
              LowRankGram(n, 0.0, rng.normal(size=(3, n)))):
        D = V.dense()
        supported = np.allclose(D @ np.linalg.pinv(F) @ F, D, atol=1e-9)
        want = np.trace(D @ np.linalg.pinv(F.T @ F)) if supported else math.inf
        for p in pinvs:
            assert p.trace(V) == pytest.approx(want, rel=1e-8), (kind, type(p).__name__)
            assert p.trace(D) == pytest.approx(p.trace(V), rel=1e-8), (kind, type(p).__name__)


def test_a_hundred_thousand_cell_column_plans_without_dense_matrices():
    n = 100_000
    D = Domain(["income", "sex", "age"], [n, 2, 72])
    q = _queries(n) and [QuerySpec(p.name, Kron(list(p.matrix.factors) + [Total(72)]), p.weight)
                         for p in _queries(n)]
    q.append(QuerySpec("age", Kron([Total(n), Total(2), Identity(72)])))
    s = optimize(Workload.of_queries(D, q), restarts=1)
    assert math.isfinite(s.expected_error)
    assert s.operator in ("OPT_M+", "RP+", "OPT_+", "per-query")
    for b in s.kron_blocks:
        assert b.factors[0].shape[0] <= 8          # thin: a few rows over 100,000 cells


def test_errors_name_the_column_and_the_query():
    n = 100_000
    D = Domain(["income", "sex"], [n, 2])
    # A GROUP BY over every income value: no operator can plan it.
    q = [QuerySpec("SELECT income, COUNT(*) FROM t GROUP BY income",
                   Kron([Identity(n), Total(2)]))]
    with pytest.raises(ModelTooLargeError) as err:
        optimize(Workload.of_queries(D, q), restarts=1)
    assert "'income'" in err.value.message and "GROUP BY income" in err.value.message
    # A factor with more rows than the planner keeps thin (a fine bucketing).
    buckets = Bucket(n, np.arange(n) // 50)
    q = [QuerySpec("SELECT income / 50, COUNT(*) FROM t GROUP BY 1", Kron([buckets, Total(2)]))]
    with pytest.raises(UnsupportedQueryError) as err:
        _ = Workload.of_queries(D, q).terms
    assert "'income'" in err.value.message and "GROUP BY 1" in err.value.message
    assert err.value.hint
