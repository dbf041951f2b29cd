"""One builder for the L2 loss matrix P (``dpsql.pgm.loss.measurement_matrix``).

The junction-tree fit (``SparseLoss``, hosts: maximal cliques, queries densified) and the
relaxed fit's exact step (``relaxed_polish.loss_matrix``, hosts: regions, Kronecker factors
kept apart) build P with the same code and differ only in the host function, how a query's
non-zeros are found, and which size limit applies.  Here P is checked against its definition,
written cell by cell: row r of measurement i, column (host h, host cell x) holds
Q_i[r, marginal cell of x] — for both kinds of host, and the limits at their exact boundary.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpsql.linalg import Explicit, Identity, Kron, Prefix, Total, Weighted
from dpsql.pgm import JunctionTree, Measurement
from dpsql.pgm.loss import SparseLoss, measurement_matrix
from dpsql.pgm.measurement import dense_entries, structured_entries
from dpsql.pgm.region_graph import RegionGraph


def _dense(entries) -> np.ndarray:
    i, j, v, shape = entries
    out = np.zeros(shape)
    np.add.at(out, (i, j), v)
    return out


QUERIES = [
    Identity(4),
    Kron([Identity(3), Prefix(4)]),
    Weighted(2.5, Kron([Prefix(3), Total(2), Identity(2)])),
    Kron([Weighted(0.5, Identity(2)), Explicit(np.array([[1.0, 0.0, -2.0], [0.0, 3.0, 0.0]]))]),
    np.array([[0.0, 1.5], [2.0, 0.0], [0.0, 0.0]]),
]


@pytest.mark.parametrize("k", range(len(QUERIES)))
def test_query_entries_are_the_dense_query(k):
    q = QUERIES[k]
    want = q if isinstance(q, np.ndarray) else np.asarray(q.dense(), dtype=float)
    for entries in (structured_entries(q), dense_entries(q)):
        np.testing.assert_array_equal(_dense(entries), want)
        assert np.all(entries[2] != 0)                             # structural zeros are not listed
    i, j, _, _ = dense_entries(q)
    assert list(zip(i, j)) == sorted(zip(i, j))                        # row-major, as np.nonzero


def test_structured_entries_keep_kronecker_factors_apart():
    # 8.1·10⁹ entries dense, 90,000 non-zeros
    e = structured_entries(Kron([Identity(300), Identity(300)]), limit=1000)
    assert e is not None and e[2].size == 90_000 and e[3] == (90_000, 90_000)
    np.testing.assert_array_equal(e[0], e[1])
    assert dense_entries(Kron([Identity(300), Identity(300)]), limit=1000) is None
    # a factor that is neither structured nor within the limit cannot be made sparse
    assert structured_entries(Kron([Identity(3), Prefix(40)]), limit=1000) is None
    assert structured_entries(Kron([Identity(3), Prefix(40)]), limit=1600) is not None


def _measurements(rng, sizes):
    attrs = list(sizes)
    specs = [(("a1", "a0"), lambda s: Kron([Prefix(s[0]), Identity(s[1])])),
             (("a2",), lambda s: Weighted(3.0, Identity(s[0]))),
             (("a0", "a2"), lambda s: rng.integers(-1, 2, size=(5, s[0] * s[1])).astype(float)),
             (("a3", "a1"), lambda s: Kron([Total(s[0]), Identity(s[1])])),
             ((), lambda s: np.ones((1, 1)))]
    out = []
    for clique, make in specs:
        q = make([sizes[a] for a in clique])
        out.append(Measurement(clique, q, rng.normal(size=q.shape[0]), float(rng.uniform(0.5, 2.0))))
    return attrs, out


def _definition(tables, sizes, hosts, measurements):
    """P from its definition, one host cell at a time."""
    cells = [int(np.prod([sizes[a] for a in t])) for t in tables]
    offsets = np.concatenate([[0], np.cumsum(cells)])
    blocks = []
    for m, h in zip(measurements, hosts):
        q = m.query if isinstance(m.query, np.ndarray) else np.asarray(m.query.dense(), dtype=float)
        block = np.zeros((q.shape[0], offsets[-1]))
        for x, cell in enumerate(itertools.product(*[range(sizes[a]) for a in tables[h]])):
            sub = tuple(cell[tables[h].index(a)] for a in m.clique)
            col = int(np.ravel_multi_index(sub, [sizes[a] for a in m.clique])) if m.clique else 0
            block[:, offsets[h] + x] = q[:, col]
        blocks.append(block)
    return np.vstack(blocks)


@pytest.mark.parametrize("kind", ["junction tree", "region graph"])
def test_matrix_is_its_definition_for_either_host(kind):
    rng = np.random.default_rng(7)
    sizes = {"a0": 3, "a1": 4, "a2": 2, "a3": 3}
    attrs, ms = _measurements(rng, sizes)
    cliques = [("a0", "a1", "a2"), ("a1", "a3"), ("a0", "a2")]
    if kind == "junction tree":
        s = JunctionTree(attrs, sizes, cliques)
        tables, host = s.cliques, s.host
    else:
        s = RegionGraph.saturated(attrs, sizes, cliques)
        tables, host = s.regions, s.host
    hosts = [host(m.clique) for m in ms]
    want = _definition(tables, sizes, hosts, ms)
    for entries in (dense_entries, structured_entries):
        P, w, y = measurement_matrix(ms, attrs, sizes, tables, host, entries)
        np.testing.assert_array_equal(P.dense(), want)
        np.testing.assert_array_equal(w, np.concatenate([np.full(m.query.shape[0], 1.0 / m.stddev ** 2) for m in ms]))
        np.testing.assert_array_equal(y, np.concatenate([m.values for m in ms]))
    if kind == "junction tree":
        np.testing.assert_array_equal(SparseLoss.build(s, ms).P.dense(), want)
    else:
        from dpsql.pgm.relaxed_polish import loss_matrix
        np.testing.assert_array_equal(loss_matrix(s, ms)[0].toarray(), want)

    # the limits, at their boundary: P's non-zeros, and Σ min(Σ_rows nnz(Q row)², host cells²)
    nnz = int(np.count_nonzero(want))
    assert measurement_matrix(ms, attrs, sizes, tables, host, dense_entries, max_nnz=nnz) is not None
    assert measurement_matrix(ms, attrs, sizes, tables, host, dense_entries, max_nnz=nnz - 1) is None
    bound = 0
    for m, h in zip(ms, hosts):
        q = m.query if isinstance(m.query, np.ndarray) else m.query.dense()
        per_row = np.count_nonzero(q, axis=1)
        bound += min(int((per_row ** 2).sum()), int(np.prod([sizes[a] for a in tables[h]])) ** 2)
    assert measurement_matrix(ms, attrs, sizes, tables, host, dense_entries, max_hessian_nnz=bound) is not None
    assert measurement_matrix(ms, attrs, sizes, tables, host, dense_entries, max_hessian_nnz=bound - 1) is None
    # a query the entries function refuses refuses the matrix
    assert measurement_matrix(ms, attrs, sizes, tables, host, lambda q: dense_entries(q, limit=8)) is None
