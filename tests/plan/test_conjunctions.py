"""Random conjunction counts over binary attributes (a scaled-down nltcs range workload).

bench/workloads/nltcs/ranges.sql is 200 `COUNT(*) WHERE a = 1 AND b = 0 ...` over 16 binary
attributes.  OPT_M on it left 293 of its 432 marginal weights at < 1e-4 of the largest
(L-BFGS-B cannot drive them to zero, see marginals._prune); every one was measured with
its own huge-σ discrete Gaussian, and the suite timed out.  These tests keep the same shape
at 10 attributes and 40 queries.
"""

import numpy as np
import pytest
import scipy.linalg as sla

from dpsql.domain import Domain
from dpsql.linalg import Indicator, Kron, Total, Union
from dpsql.plan import Workload, optimize
from dpsql.plan import marginals as M
from dpsql.plan.workload import workload_terms


def _supports(Wd: np.ndarray, A: np.ndarray) -> bool:
    # Every workload row in A's row space.  Least squares rather than plan_oracles.supports:
    # numpy 2.4's pinv of the pruned 420×1024 strategy here misses A·A⁺·A = A by 9e-4
    # although its smallest nonzero singular value is 1.3 (scipy's lstsq/pinv: 1e-15).
    X = sla.lstsq(A.T, Wd.T)[0]
    return bool(np.allclose(A.T @ X, Wd.T, atol=1e-8))


def _conjunctions(d: int = 10, k: int = 40, seed: int = 7) -> Workload:
    rng = np.random.default_rng(seed)
    D = Domain([f"a{i}" for i in range(d)], [2] * d)
    rows = []
    for _ in range(k):
        attrs = set(rng.choice(d, size=int(rng.integers(2, 5)), replace=False).tolist())
        rows.append(Kron([Indicator(2, [int(rng.integers(2))]) if i in attrs else Total(2)
                          for i in range(d)]))
    return Workload(D, Union(rows))


def _theta(W: Workload, monkeypatch=None, relative=None):
    if monkeypatch is not None:
        monkeypatch.setattr(M, "PRUNE_RELATIVE", relative)
    terms = workload_terms(W)
    space = M.MarginalSpace.of(terms.shape, [t.support for t in terms.terms])
    kw = M.workload_kappa(space, terms)
    return M.opt_marginals_theta(space, kw, "gaussian", restarts=3,
                                 rng=np.random.default_rng(0))


def test_pruned_marginal_weights_lose_nothing(monkeypatch):
    W = _conjunctions()
    pruned, loss = _theta(W)
    unpruned, loss0 = _theta(W, monkeypatch, 0.0)     # 0: nothing counts as negligible
    assert np.count_nonzero(unpruned) > np.count_nonzero(pruned) > 0
    # What is left is only weights worth measuring, and the loss did not go up.
    kept = pruned[pruned > 0]
    assert kept.min() >= M.PRUNE_RELATIVE * kept.max()
    assert np.isfinite(loss) and loss <= loss0


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_planned_strategy_supports_the_conjunctions(noise):
    W = _conjunctions()
    s = optimize(W, noise, restarts=2, seed=0)
    assert np.isfinite(s.expected_error)
    assert _supports(W.matrix.dense(), s.dense())
    # No block left at a weight that only adds a measurement (see marginals._prune).
    if s.operator == "OPT_M":
        w = np.array([b.weight for b in s.kron_blocks])
        assert w.min() >= M.PRUNE_RELATIVE * w.max() * (1 - 1e-6)
