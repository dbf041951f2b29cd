"""Reading a release payload keeps an identity / prefix / a·I + b·11ᵀ factor as its structure
(issue 35): unpacking the flights ledger built the 1,459-label ``dest`` identity densely
(17 MB of int64, then a float copy per consumer), although the answer path only needs its
closed forms.  The answers from the structured factors are those from the dense ones."""

from __future__ import annotations

import io
import json
import tracemalloc

import numpy as np
import pytest

from dpsql.engine.variance import SupportBlock, VarianceModel
from dpsql.linalg import Identity, Indicator, Kron, Prefix, Total
from dpsql.linalg.lattice import StructuredFactor, scaled_identity
from dpsql.linalg.rowscaled import SpanPinv, gram_pinv
from dpsql.measure import release as rel

N = 1459          # the FAA airport list with "(other)"


def _released(n: int):
    dpc = np.full((n, n), -3, dtype=np.int64)
    np.fill_diagonal(dpc, 4096)
    return [(rel.LatticeBlock(("dest",), (np.eye(n, dtype=np.int64),), 2.0, 0.5), np.arange(n, dtype=float), 3.0),
            (rel.LatticeBlock(("dest", "origin"), (dpc, np.eye(3, dtype=np.int64)), 0.25, 1.0),
             np.arange(3.0 * n), 1.5),
            (rel.LatticeBlock(("origin",), (np.tril(np.ones((3, 3), dtype=np.int64)),), 1.0, 1.0),
             np.arange(3.0), 1.0)]


def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_unpacking_a_1459_label_identity_builds_no_dense_matrix():
    released = _released(N)
    payload = rel.pack(released)
    back, peak = _peak(lambda: rel.unpack_all(payload))
    assert peak < N * N * 8 // 20          # an n×n int64 is 17 MB; the payload reads in < 1 MB
    assert isinstance(back[0][0].factors[0], StructuredFactor)
    assert isinstance(back[1][0].factors[0], StructuredFactor)
    for (b0, y0, s0), (b1, y1, s1) in zip(released, back):
        assert all(np.array_equal(f0, np.asarray(f1)) and np.asarray(f1).dtype == np.int64
                   for f0, f1 in zip(b0.factors, b1.factors))
        assert (b0.l2_sensitivity_sq(), b0.rows()) == (b1.l2_sensitivity_sq(), b1.rows())
        assert np.array_equal(y0, y1) and s0 == s1
    # the query matrix the model is fitted to is the implicit identity, built without n² entries
    query, peak = _peak(lambda: back[0][0].query())
    assert isinstance(query.base, Identity) and query.weight == 2.0 and peak < N * N
    # packed again: the same records, no array for the structured factors
    with np.load(io.BytesIO(rel.pack(back))) as z, np.load(io.BytesIO(payload)) as z0:
        assert json.loads(bytes(z["__meta__"]).decode()) == json.loads(bytes(z0["__meta__"]).decode())
        assert sorted(z.files) == sorted(z0.files)


@pytest.mark.parametrize("kind,args", [("identity", ()), ("prefix", ()), ("diagonal_plus_constant", (7, -2)),
                                       ("diagonal_plus_constant", (5, 0)), ("diagonal_plus_constant", (0, 3))])
@pytest.mark.parametrize("n", [1, 2, 130])
def test_structured_factor_reads_as_its_dense_matrix(kind, args, n):
    f = StructuredFactor(kind, n, *args)
    d = f.dense()
    assert f.shape == d.shape and f.ndim == 2 and f.dtype == d.dtype
    assert np.array_equal(np.asarray(f), d) and np.array_equal(f.astype(np.float64), d.astype(np.float64))
    assert np.array_equal(f[1:, :1], d[1:, :1]) and np.array_equal(f.T, d.T)
    assert f.max_abs() == float(np.abs(d).max())
    from dpsql.linalg.base import is_scaled_identity
    ref = float(d[0, 0]) if d[0, 0] != 0 and is_scaled_identity(d, float(d[0, 0])) else None
    assert scaled_identity(f) == ref == scaled_identity(d)
    s = 0.3
    g, g0 = gram_pinv(f.scaled(s)), gram_pinv(d.astype(np.float64) * s)
    assert type(g) is type(g0)
    q = np.random.default_rng(n).normal(size=(3, n))
    assert np.array_equal(g.quad(q, q), g0.quad(q, q))


def test_answers_from_a_read_payload_equal_those_from_dense_factors():
    released = rel.unpack_all(rel.pack(_released(N)))
    sizes = {"dest": N, "origin": 3}

    def blocks(dense: bool):
        return [SupportBlock(b.clique, tuple(np.asarray(f) for f in b.factors) if dense else b.factors,
                             sd, b.scale, y) for b, y, sd in released]

    queries = [Kron([Identity(N), Total(3)]), Kron([Indicator(N, [1, 5, 700]), Identity(3)]),
               Kron([Total(N), Total(3)]), Kron([Total(N), Prefix(3)]), Kron([Identity(N), Identity(3)])]
    structured, dense = VarianceModel(("dest", "origin"), sizes, blocks(False)), \
        VarianceModel(("dest", "origin"), sizes, blocks(True))
    assert isinstance(structured.prepared[0].ginv[0], SpanPinv)
    for q in queries:
        for got, ref in zip(structured.least_squares(q), dense.least_squares(q)):
            np.testing.assert_array_equal(got, ref)
        for got, ref in zip(structured.analyse(q), dense.analyse(q)):
            np.testing.assert_array_equal(got, ref)
    # a GROUP BY dest's errors from the read dest marginal never hold an n×n matrix
    fresh = VarianceModel(("dest", "origin"), sizes, blocks(False)[:1])
    _, peak = _peak(lambda: fresh.least_squares(queries[0]))
    assert peak < N * N * 8 // 4
