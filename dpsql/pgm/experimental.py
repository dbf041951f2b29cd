"""First-order methods the engine never runs: thesis Algorithms 2 and 3 (issue 36 item 1).

The engine fits the exact model with the adaptive accelerated method
(:func:`dpsql.pgm.estimation.first_order`, ``method="adaptive"``) or solves it directly (the
finishers of :mod:`dpsql.pgm.finishers`).  The methods here are the thesis's own, kept as
references that tests compare against (``tests/pgm/test_experimental.py``) and benches measure
(``bench/pgm_scale.py``, ``pgm_vs_mbi.py``, ``relaxed_accuracy.py``, ``relaxed_scale.py``,
``relaxed_vs_mbi.py --variant exact-md``); they are reached only by asking for them:
``estimate(method="md"|"accelerated")``, ``estimate(norm="l1")`` or
``fit(exact_method=...)``.

* :func:`mirror_descent` — Algorithm 2, θ ← θ − η ∇L(μ), with an Armijo backtracking line
  search on η: the step is accepted when L drops by at least half of the linear
  prediction ⟨∇L(μ), μ − μ'⟩ (which is non-negative for a mirror step); η grows
  before each iteration (×2 until the first backtrack, ×1.05 after) so the search
  tracks the local curvature at about one oracle call per iteration.
* :func:`subgradient` — Algorithm 2 for the L1 loss with the classical η₀/√t schedule (a line
  search stalls at the kinks of ‖·‖₁).
* :func:`accelerated` — Algorithm 3, Nesterov's accelerated dual averaging with
  θ = −t(t+1)/(4K·N) ḡ, K the Lipschitz constant of the L2 loss (per unit N²) and N
  the total: the same O(1/t²) rate once the constant is known, no line search.
"""

from __future__ import annotations

import numpy as np

from dpsql.pgm.loss import MarginalLoss
from dpsql.pgm.measurement import lambda_max, lipschitz, subgradient_bound
from dpsql.pgm.progress import Progress, converged

__all__ = ["accelerated", "mirror_descent", "subgradient"]


def _curvature(loss: MarginalLoss, mu, measurements) -> float:
    """A bound on the curvature of L along mirror steps at μ, for the first step size.

    A mirror step moves μ_r by about μ_r ⊙ Δθ, so measurement i has curvature at most
    2 λ_max(Q_iᵀQ_i)/σ_i² · max_x μ_{r_i}(x); the worst case over p, 2 λ/σ² · N (the
    Lipschitz constant times N), is far too pessimistic once cliques have many cells.
    Armijo corrects the estimate either way; a good start saves iterations of ramp-up.
    """
    total = 0.0
    for g in loss.groups:
        peak = float(mu[g.host].max())
        for t in g.terms:
            total += 2.0 * t.weight * lambda_max(t.query) * peak
    return total


def mirror_descent(bp, loss, theta, total, measurements, iters, tol, callback, stepsize):
    """Thesis Algorithm 2 with Armijo backtracking (see the module docstring).

    Each rejected trial costs a full oracle call, so after the first backtrack the
    step grows by only 5% per iteration: trials then succeed ~95% of the time
    (≈1.07 oracle calls per iteration), while before it the step doubles so that a
    cautious first step is corrected geometrically.  The gradient is evaluated with
    the trial's loss, since almost every trial is accepted.
    """
    mu = bp.marginals(theta, total)
    value, grad = loss(mu)
    if stepsize is None:
        stepsize = 1.0 / max(_curvature(loss, mu, measurements), 1e-300)
    alpha = stepsize
    hosts = [i for i, g in enumerate(grad) if g is not None]
    history = [value]
    growth = 2.0
    for it in range(1, iters + 1):
        alpha *= growth
        while True:
            new_theta = list(theta)
            for h in hosts:
                new_theta[h] = theta[h] - alpha * grad[h]
            new_mu = bp.marginals(new_theta, total)
            new_value, new_grad = loss(new_mu)
            predicted = sum(float(np.vdot(grad[h], mu[h] - new_mu[h])) for h in hosts)
            if value - new_value >= 0.5 * predicted or alpha < 1e-300:
                break
            alpha *= 0.5
            growth = 1.05
        theta, mu, value, grad = new_theta, new_mu, new_value, new_grad
        history.append(value)
        if callback is not None and callback(Progress(it, value, alpha)):
            break
        if converged(history, tol) or predicted <= 0.0:
            break
    return theta, history


def subgradient(bp, loss, theta, total, measurements, iters, tol, callback, stepsize):
    """Thesis Algorithm 2 for the non-smooth L1 loss: η_t = η₀/√t, best iterate kept.

    A line search stalls at the kinks of ‖·‖₁, so the classical schedule for entropic
    mirror descent is used instead: η₀ = √(2 log n)/G with n the domain size and G
    a bound on ‖∇L‖_∞ (O(1/√t) convergence of the best iterate).
    """
    log_n = float(sum(np.log(s) for s in bp.tree.sizes.values()))
    eta0 = stepsize if stepsize is not None else np.sqrt(2.0 * max(log_n, 1.0)) / max(
        subgradient_bound(measurements), 1e-300)
    mu = bp.marginals(theta, total)
    value, grad = loss(mu)
    best, best_theta = value, theta
    history = [value]
    for t in range(1, iters + 1):
        eta = eta0 / np.sqrt(t)
        theta = [th if g is None else th - eta * g for th, g in zip(theta, grad)]
        mu = bp.marginals(theta, total)
        value, grad = loss(mu)
        if value < best:
            best, best_theta = value, theta
        history.append(best)
        if callback is not None and callback(Progress(t, best, eta)):
            break
        if converged(history, tol):
            break
    return best_theta, history


def accelerated(bp, loss, theta0, total, measurements, iters, tol, callback):
    """Thesis Algorithm 3 (accelerated dual averaging), started from ``theta0``; returns the
    averaged marginals μ (calibrated) and the loss history."""
    K = max(lipschitz(measurements), 1e-300) * total
    nu = bp.marginals(theta0, total)
    mu = [m.copy() for m in nu]
    gbar: list[np.ndarray | None] = [None] * len(mu)
    theta = theta0
    history = [loss.value(mu)]
    for t in range(1, iters + 1):
        c = 2.0 / (t + 1)
        omega = [(1 - c) * m + c * v for m, v in zip(mu, nu)]
        _, g = loss(omega)
        for h, gh in enumerate(g):
            prev = gbar[h]
            if gh is not None:
                gbar[h] = c * gh if prev is None else (1 - c) * prev + c * gh
            elif prev is not None:
                gbar[h] = (1 - c) * prev
        scale = -t * (t + 1) / (4.0 * K)
        theta = [th if gb is None else th + scale * gb for th, gb in zip(theta0, gbar)]
        nu = bp.marginals(theta, total)
        mu = [(1 - c) * m + c * v for m, v in zip(mu, nu)]
        value = loss.value(mu)
        history.append(value)
        if callback is not None and callback(Progress(t, value, 1.0 / K)):
            break
        if converged(history, tol):
            break
    # Algorithm 3 returns the averaged iterate μ, not the last oracle output ν.  μ is a
    # convex combination of calibrated marginals, hence calibrated on the junction tree,
    # so the junction-tree factorisation gives potentials reproducing it exactly (the
    # caller's estimation._theta_from_marginals).
    return mu, history
