"""The thesis's own first-order methods (``dpsql.pgm.experimental``), which the engine never
runs: Algorithm 2 (mirror descent with an Armijo line search; the η₀/√t schedule for the L1
loss) and Algorithm 3 (accelerated dual averaging), against a full-data-vector reference."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import linprog

from dpsql.pgm import estimate
from pgm_brute import design, joint_from_model, loss_full, problem, solve_full


@pytest.mark.parametrize("seed", range(6))
def test_mirror_descent_reaches_the_full_vector_optimum(seed):
    dom, data, ms = problem(seed)
    total = float(data.sum())
    _, best = solve_full(dom, ms, total)
    model = estimate(dom, ms, iters=12000, total=total, tol=1e-13, method="md")
    got = loss_full(dom, ms, joint_from_model(model))
    # The loss the estimator tracks is the same function of μ as the brute-force loss of p.
    assert got == pytest.approx(model.loss[-1], rel=1e-9)
    assert abs(got - best) <= 1e-6 * best


def test_accelerated_method_meets_its_convergence_bound():
    dom, data, ms = problem(3, d=4)
    total = float(data.sum())
    _, best = solve_full(dom, ms, total)
    t = 3000
    model = estimate(dom, ms, iters=t, total=total, method="accelerated")
    got = loss_full(dom, ms, joint_from_model(model))
    assert got == pytest.approx(model.loss[-1], rel=1e-9)
    # Algorithm 3 (Nesterov dual averaging): gap ≤ 4·K·N²·D / (t(t+1)) with K the
    # Lipschitz constant per unit N² and D = KL(p*‖uniform) ≤ log n.
    from dpsql.pgm.measurement import lipschitz
    bound = 4 * lipschitz(ms) * total ** 2 * np.log(dom.size()) / (t * (t + 1))
    assert best - 1e-9 * best <= got <= best + bound


def test_l1_loss_approaches_the_linear_programming_optimum():
    dom, data, ms = problem(5, d=4)
    total = float(data.sum())
    A, b = design(dom, ms)
    A = A * np.array([m.stddev for m in ms for _ in range(m.values.size)])[:, None]
    b = b * np.array([m.stddev for m in ms for _ in range(m.values.size)])
    w = np.concatenate([np.full(m.values.size, 1 / m.stddev) for m in ms])
    # min Σ w|Ap − b| as an LP over (p, t): −t ≤ Ap − b ≤ t, Σp = N, p ≥ 0.
    m_, n = A.shape
    c = np.concatenate([np.zeros(n), w])
    A_ub = np.block([[A, -np.eye(m_)], [-A, -np.eye(m_)]])
    lp = linprog(c, A_ub=A_ub, b_ub=np.concatenate([b, -b]),
                 A_eq=np.concatenate([np.ones(n), np.zeros(m_)])[None], b_eq=[total],
                 bounds=(0, None), method="highs")
    gaps = []
    for T in (250, 4000):
        model = estimate(dom, ms, iters=T, total=total, norm="l1")
        p = joint_from_model(model).ravel()
        got = float(w @ np.abs(A @ p - b))
        assert got == pytest.approx(model.loss[-1], rel=1e-9)
        assert got >= lp.fun * (1 - 1e-9)  # nothing beats the LP optimum
        # Entropic MD with η_t = √(2 log n)/(G√t): best-iterate gap ≤ N·G·√(log n)·(1 + ln T)/√(8T).
        from dpsql.pgm.measurement import subgradient_bound
        G, log_n = subgradient_bound(ms), np.log(dom.size())
        assert got - lp.fun <= total * G * np.sqrt(log_n) * (1 + np.log(T)) / np.sqrt(8 * T)
        gaps.append(got - lp.fun)
    assert gaps[1] <= gaps[0] / 2  # the O(1/√t) rate predicts a factor of 4 over 16× iterations
