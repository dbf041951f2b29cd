"""The shared sum tree of MarginalLoss against one np.sum per measurement."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsql.linalg import Explicit, Identity, Kron, Prefix, Total
from dpsql.pgm import JunctionTree, Measurement
from dpsql.pgm.loss import MarginalLoss


def _reference(tree, measurements, mu, norm):
    """L(μ) and ∇L(μ) projecting the host table separately for every measurement."""
    total = 0.0
    grads = [None] * len(mu)
    for m in measurements:
        h = tree.host(m.clique)
        hc = tree.cliques[h]
        axes = tuple(i for i, a in enumerate(hc) if a not in m.clique)
        kept = [a for a in hc if a in m.clique]
        x = mu[h].sum(axis=axes).transpose([kept.index(a) for a in m.clique])
        Q = m.query.dense()
        r = Q @ x.ravel() - m.values
        if norm == "l2":
            w = 1.0 / m.stddev ** 2
            total += w * float(r @ r)
            g = Q.T @ (2.0 * w * r)
        else:
            w = 1.0 / m.stddev
            total += w * float(np.abs(r).sum())
            g = Q.T @ (w * np.sign(r))
        g = g.reshape([tree.sizes[a] for a in m.clique]).transpose([m.clique.index(a) for a in kept])
        g = np.broadcast_to(g.reshape([tree.sizes[a] if a in m.clique else 1 for a in hc]), mu[h].shape)
        grads[h] = g.copy() if grads[h] is None else grads[h] + g
    return total, grads


def _problem(seed):
    """Ten attributes in one clique carrying many overlapping marginals, plus a second clique."""
    rng = np.random.default_rng(seed)
    names = [f"a{i}" for i in range(10)] + ["z"]
    sizes = {a: int(rng.integers(2, 4)) for a in names}
    big = tuple(names[:10])
    cliques = [big, ("a3", "z")]
    cliques += [(a,) for a in big]
    cliques += [c for c in itertools.combinations(big, 2) if rng.random() < 0.6]
    cliques += [c for c in itertools.combinations(big, 3) if rng.random() < 0.08]
    cliques += [c for c in itertools.combinations(big, 5) if rng.random() < 0.01]
    measurements = []
    for i, c in enumerate(cliques):
        c = tuple(rng.permutation(c)) if i % 4 == 1 else c  # measured in a non-canonical order
        n = int(np.prod([sizes[a] for a in c]))
        kind = i % 3 if len(c) < 10 else 3
        query = (Identity(n), Kron([Prefix(sizes[a]) for a in c]),
                 Explicit(rng.integers(-1, 3, size=(n + 1, n)).astype(float)), Total(n))[kind]
        values = rng.normal(0.0, 50.0, query.shape[0])
        measurements.append(Measurement(c, query, values, float(rng.uniform(0.5, 4.0))))
        if i % 5 == 0 and len(c) < 10:  # a second measurement of the same clique
            measurements.append(Measurement(c, Identity(n), rng.normal(0.0, 50.0, n), 2.0))
    tree = JunctionTree(names, sizes, cliques)
    mu = [rng.random(tuple(sizes[a] for a in c)) * 100.0 for c in tree.cliques]
    return tree, measurements, mu


@pytest.mark.parametrize("norm", ["l2", "l1"])
@pytest.mark.parametrize("seed", range(3))
def test_shared_sum_tree_equals_per_measurement_sums(seed, norm):
    tree, measurements, mu = _problem(seed)
    assert any(len(c) == 10 for c in tree.cliques)
    loss = MarginalLoss(tree, measurements, norm)
    want, want_grads = _reference(tree, measurements, mu, norm)
    value, grads = loss(mu)
    assert value == pytest.approx(want, rel=1e-10)
    assert loss.value(mu) == pytest.approx(want, rel=1e-10)
    for g, w in zip(grads, want_grads):
        assert (g is None) == (w is None)
        if w is not None:
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-10 * np.abs(w).max())


def test_gradient_is_fresh_and_leaves_mu_untouched():
    tree, measurements, mu = _problem(0)
    before = [m.copy() for m in mu]
    loss = MarginalLoss(tree, measurements)
    _, grads = loss(mu)
    for g in grads:
        if g is not None:
            g += 1.0  # estimation updates θ in place from these; they must own their memory
    assert all(np.array_equal(a, b) for a, b in zip(mu, before))
    _, again = loss(mu)
    for g, h in zip(grads, again):
        if g is not None:
            np.testing.assert_allclose(g, h + 1.0, rtol=1e-12)
