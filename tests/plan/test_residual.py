"""ResidualPlanner (issue 16): the optimal Gaussian strategy for marginal workloads.

Reproduced: OPT_M, the only marginal operator, ends 2.04x above the SVD bound on nltcs's
all 3-way marginals and 1.06x on adult's all 2-way ones — its weighted marginals cannot
reach the optimum (thesis §3.7: Theorem 11's closed form goes negative).  The residual
strategy reaches the bound, which certifies it optimal.
"""

import itertools
import math

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.linalg import Identity, Indicator, Kron, Marginals, Prefix, Total
from dpsql.plan import QuerySpec, Workload, opt_marginals, optimize, svd_bound
from dpsql.plan.algebra import JointSupport, algebra_form, residual_factor
from dpsql.plan.operators import opt_residual, opt_residual_plus
from dpsql.plan.strategy import factor_kind

from plan_oracles import dense_tse, supports


def _all_k_way(D, k):
    return Workload(D, Marginals(D, [c for r in range(k + 1)
                                     for c in itertools.combinations(D.attributes, r)]))


@pytest.mark.parametrize("n", [2, 3, 5, 16, 101])
def test_residual_factor_is_an_integer_basis_of_the_complement_of_ones(n):
    R = residual_factor(n)
    assert R.shape == (n - 1, n)
    assert np.all(R == np.round(R)) and np.all(R.sum(axis=1) == 0)
    assert np.linalg.matrix_rank(R) == n - 1
    g = np.linalg.eigvalsh(R @ R.T)
    assert g.max() / g.min() < 1.01          # nearly orthogonal, equal norms
    if n == 2:
        assert np.array_equal(np.abs(R), [[1, 1]])


def test_residual_planner_meets_the_svd_bound_where_opt_m_cannot():
    D = Domain([f"b{i}" for i in range(6)], [2] * 6)
    W = _all_k_way(D, 3)
    bound = svd_bound(W)
    rp = opt_residual(W)
    om = opt_marginals(W, "gaussian", restarts=1)
    assert rp.expected_error == pytest.approx(bound, rel=1e-9)
    assert om.expected_error > 1.05 * bound
    assert "Certificate" in rp.explanation and "1.0000x the SVD bound" in rp.explanation


def test_residual_strategy_errors_equal_dense_recomputation():
    D = Domain(["a", "b", "c", "d"], [2, 3, 4, 2])
    W = _all_k_way(D, 2)
    s = optimize(W, "gaussian", restarts=1)
    assert s.operator == "ResidualPlanner"
    Wd, A = W.matrix.dense(), s.dense()
    assert supports(Wd, A)
    assert s.expected_error == pytest.approx(dense_tse(Wd, A, "gaussian"), rel=1e-7)
    assert s.expected_error <= 1.001 * svd_bound(W)
    form = algebra_form(s.kron_blocks, D.shape)
    assert form is not None and form.residual      # residual blocks are needed here


def test_marginal_blocks_are_kept_where_opt_m_is_optimal():
    """One marginal alone: OPT_M (the marginal itself) is optimal, and the LP keeps it."""
    D = Domain(["a", "b", "c"], [3, 4, 2])
    W = Workload(D, Marginals(D, [("a", "b")]))
    s = opt_residual(W)
    kinds = {factor_kind(F)[0] for b in s.kron_blocks for F in b.factors}
    assert kinds <= {"identity", "total"}
    assert s.expected_error == pytest.approx(svd_bound(W), rel=1e-9)


def test_rp_plus_plans_the_marginal_part_of_a_mixed_workload():
    D = Domain(["a", "b", "c"], [6, 4, 3])
    q = [QuerySpec(f"m{i}", m) for i, m in enumerate(_all_k_way(D, 2).matrix.blocks)]
    q.append(QuerySpec("prefix a by c", Kron([Prefix(6), Total(4), Identity(3)])))
    W = Workload.of_queries(D, q)
    s = opt_residual_plus(W, "gaussian", restarts=1)
    assert math.isfinite(s.expected_error)
    assert supports(W.matrix.dense(), s.dense())


def _released(strategy):
    """Blocks as the engine releases them: clique, integer factors, scale, σ (σ = 1/weight)."""
    out = []
    for b in strategy.kron_blocks:
        clique, factors, w = [], [], b.weight
        for a, F in zip(strategy.attributes, b.factors):
            kind, c = factor_kind(F)
            if kind == "total":
                w *= c
                continue
            clique.append(a)
            factors.append(F)
        out.append((tuple(clique), factors, 1.0, 1.0 / w))
    return out


def test_joint_support_variances_equal_dense_least_squares():
    D = Domain(["a", "b", "c", "d"], [3, 4, 2, 2])
    W = _all_k_way(D, 2)
    s = opt_residual(W)
    joint = JointSupport.build(D.attributes, dict(zip(D.attributes, D.shape)), _released(s))
    assert joint is not None
    A = s.dense()
    Xp = np.linalg.pinv(A.T @ A)
    queries = [
        {"a": np.eye(3), "b": np.eye(4)},                         # a 2-way marginal
        {"b": np.asarray(Indicator(4, [1, 2]).dense())},          # a filtered count
        {"a": np.asarray(Prefix(3).dense()), "c": np.eye(2)},     # prefixes by c
        {"d": np.eye(2)},                                          # a 1-way marginal
        {},                                                        # the total
    ]
    for f in queries:
        mats = [f.get(a, np.ones((1, n))) for a, n in zip(D.attributes, D.shape)]
        Q = mats[0]
        for m in mats[1:]:
            Q = np.kron(Q, m)
        want = np.einsum("ij,jk,ik->i", Q, Xp, Q)
        got = joint.row_variances(f)
        np.testing.assert_allclose(got, want, rtol=1e-7)
    # A query over attributes no block relates jointly beyond its cliques: unsupported.
    D3 = Domain(["a", "b", "c"], [3, 4, 2])
    s1 = opt_residual(Workload(D3, Marginals(D3, [("a",), ("b",)])))
    j1 = JointSupport.build(D3.attributes, dict(zip(D3.attributes, D3.shape)), _released(s1))
    if j1 is not None:
        assert j1.row_variances({"a": np.eye(3), "b": np.eye(4)}) is None


def test_marginal_queries_stay_within_their_baselines_near_the_svd_bound():
    """Reproduced on the suite's marginal workloads (titanic 46, adult 121 GROUP BY counts):
    ResidualPlanner's optimum left the total count 3.4x (titanic) above its per-query
    baseline, the dual-ascent heuristic meant to fix that gave up, and ``optimize`` fell back
    to the per-query mechanism at 2.8x the SVD bound.  The constrained optimum (the
    Lagrangian dual over the per-query caps) is feasible and costs a few % over the bound."""
    D = Domain(["a", "b", "c", "d", "e"], [2, 3, 7, 4, 10])
    cliques = [c for r in range(3) for c in itertools.combinations(D.attributes, r)]
    W = Workload.of_queries(D, [QuerySpec(f"m{i}", m) for i, m in
                                enumerate(Marginals(D, cliques).blocks)])
    s = optimize(W, "gaussian", restarts=1)
    assert s.operator in ("ResidualPlanner", "OPT_M"), s.explanation
    errs = np.asarray(s.term_tse)
    for p in W.parts:
        assert float(errs[list(p.terms)].sum()) <= p.scale * p.rows * p.baseline * (1 + 1e-9)
    bound = svd_bound(W)
    assert s.expected_error <= 1.10 * bound
