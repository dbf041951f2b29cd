"""Slow, obvious references for the pgm tests: full joint tables and a full-vector solver.

Everything here materialises the data vector p over the whole domain (≤ 4⁶ cells), so
it is independent of junction trees, belief propagation and mirror descent.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.optimize import lsq_linear

from dpsql.domain import Domain
from dpsql.linalg import Explicit, Identity, Kron, Prefix
from dpsql.pgm import Measurement


def joint_from_model(model) -> np.ndarray:
    """p_θ over the whole domain (domain order), scaled to the model's total."""
    domain = model.domain
    logp = np.zeros(domain.shape)
    for clique, theta in model.potential_arrays():
        shape = [domain[a] if a in clique else 1 for a in domain.attributes]
        logp = logp + theta.reshape(shape)
    p = np.exp(logp - logp.max())
    return p / p.sum() * model.total


def marginal(domain: Domain, p: np.ndarray, attrs) -> np.ndarray:
    """Marginal of the full table ``p`` over ``attrs`` in the given order."""
    attrs = tuple(attrs)
    axes = tuple(i for i, a in enumerate(domain.attributes) if a not in attrs)
    canon = [a for a in domain.attributes if a in attrs]
    return p.sum(axis=axes).transpose([canon.index(a) for a in attrs])


def marginal_operator(domain: Domain, attrs) -> np.ndarray:
    """The 0/1 matrix M_r mapping the full vector (C order) to the marginal over attrs."""
    n = domain.size()
    cells = np.unravel_index(np.arange(n), domain.shape)
    pos = {a: i for i, a in enumerate(domain.attributes)}
    idx = np.ravel_multi_index(tuple(cells[pos[a]] for a in attrs), [domain[a] for a in attrs]) \
        if attrs else np.zeros(n, dtype=int)
    M = np.zeros((domain.size(attrs), n))
    M[idx, np.arange(n)] = 1.0
    return M


def design(domain: Domain, measurements) -> tuple[np.ndarray, np.ndarray]:
    """(A, b) with L2 loss ‖A p − b‖² = Σ_i ‖Q_i M_i p − y_i‖² / σ_i²."""
    rows, rhs = [], []
    for m in measurements:
        Q = m.query if isinstance(m.query, np.ndarray) else m.query.dense()
        rows.append(Q @ marginal_operator(domain, m.clique) / m.stddev)
        rhs.append(m.values / m.stddev)
    return np.vstack(rows), np.concatenate(rhs)


def solve_full(domain: Domain, measurements, total: float) -> tuple[np.ndarray, float]:
    """min ‖A p − b‖² over p ≥ 0, Σp = total, by the method of multipliers with BVLS.

    BVLS solves each bound-constrained least squares exactly (active set); the
    equality is enforced by a penalty row whose target is shifted by the running
    multiplier until the sum matches to 1e-12 relative.
    """
    A, b = design(domain, measurements)
    w = 10.0 * max(1.0, np.linalg.norm(A, 2))
    shift = 0.0
    p = np.full(A.shape[1], total / A.shape[1])
    for _ in range(50):
        A_aug = np.vstack([A, w * np.ones((1, A.shape[1]))])
        b_aug = np.concatenate([b, [w * (total + shift)]])
        p = lsq_linear(A_aug, b_aug, bounds=(0, np.inf), method="bvls", tol=1e-15).x
        gap = total - p.sum()
        shift += gap
        if abs(gap) <= 1e-12 * total:
            break
    p = p * (total / p.sum())
    r = A @ p - b
    return p, float(r @ r)


def loss_full(domain: Domain, measurements, p: np.ndarray) -> float:
    A, b = design(domain, measurements)
    r = A @ p.ravel() - b
    return float(r @ r)


def random_domain(rng: np.random.Generator, d: int, max_size: int = 4) -> Domain:
    return Domain([f"a{i}" for i in range(d)], [int(rng.integers(2, max_size + 1)) for _ in range(d)])


def random_cliques(rng: np.random.Generator, domain: Domain, k: int, cyclic: bool = True):
    """k random 2- or 3-attribute cliques, plus a 3-cycle of pairs when ``cyclic``."""
    attrs = list(domain.attributes)
    out = []
    if cyclic and len(attrs) >= 3:
        a, b, c = rng.choice(attrs, 3, replace=False)
        out += [(str(a), str(b)), (str(b), str(c)), (str(c), str(a))]
    while len(out) < k:
        size = int(rng.integers(2, 4))
        out.append(tuple(str(x) for x in rng.choice(attrs, size, replace=False)))
    return out


def random_data(rng: np.random.Generator, domain: Domain, records: int) -> np.ndarray:
    """A count table over the domain with some structure (a random log-linear model)."""
    logits = rng.normal(scale=1.5, size=domain.shape)
    p = np.exp(logits - logits.max())
    return rng.multinomial(records, (p / p.sum()).ravel()).reshape(domain.shape).astype(float)


def measure(rng, domain, data, cliques, queries, stddevs):
    """Measurements of ``data`` with Gaussian noise (0 noise where stddev is tiny)."""
    out = []
    for clique, Q, s in zip(cliques, queries, stddevs):
        mu = marginal(domain, data, clique).ravel()
        Qd = Q if isinstance(Q, np.ndarray) else Q.dense()
        out.append(Measurement(clique, Q, Qd @ mu + rng.normal(scale=s, size=Qd.shape[0]), s))
    return out


def all_cells(domain: Domain):
    return itertools.product(*[range(n) for n in domain.shape])


def _queries(rng, dom, cliques):
    """Identity, Prefix-Kron and random integer queries, in each clique's own order."""
    out = []
    for i, c in enumerate(cliques):
        n = dom.size(c)
        kind = i % 3
        if kind == 0:
            out.append(Identity(n))
        elif kind == 1:
            out.append(Kron([Prefix(dom[a]) for a in c]))
        else:
            out.append(Explicit(rng.integers(-1, 3, size=(n + 2, n)).astype(float)))
    return out


def problem(seed, d=5, max_size=3, records=3000, k=5):
    """A random domain, data and measurements of mixed query kinds and unequal noise."""
    rng = np.random.default_rng(seed)
    dom = random_domain(rng, d, max_size)
    data = random_data(rng, dom, records)
    cliques = random_cliques(rng, dom, k)
    queries = _queries(rng, dom, cliques)
    sd = [float(rng.uniform(1.0, 6.0)) for _ in cliques]  # unequal noise (appendix C.2)
    return dom, data, measure(rng, dom, data, cliques, queries, sd)
