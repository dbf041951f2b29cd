"""Property tests: random compositions of leaves (Kron, Union of weighted Krons,
Products, Sums, Transposes) agree with a dense reference built alongside them
from the definitions (np.kron, np.vstack, @), never from the code under test."""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dpsql.linalg import (
    AllRange, Bucket, Diagonal, Difference, Explicit, Identity, Indicator, Kron, Ones,
    Prefix, Product, Suffix, Sum, Total, Union, Values, Weighted, WidthRange,
)
from linalg_checks import check_against_dense

SETTINGS = settings(derandomize=True, deadline=None, max_examples=120,
                    suppress_health_check=[HealthCheck.too_slow])

WEIGHTS = st.sampled_from([0.5, 1.0, 2.0, -1.5, 3.0])


def _range_rows(n, starts, ends):
    return np.array([[1.0 if s <= a <= e else 0.0 for a in range(n)]
                     for s, e in zip(starts, ends)])


def draw_leaf(data, n):
    """A random leaf with n columns and its dense reference."""
    seed = data.draw(st.integers(0, 2**32 - 1), label="seed")
    rng = np.random.default_rng(seed)
    kind = data.draw(st.sampled_from([
        "identity", "total", "ones", "prefix", "suffix", "difference", "allrange",
        "widthrange", "indicator", "bucket", "values", "explicit", "diagonal"]), label="leaf")
    if kind == "identity":
        return Identity(n), np.eye(n)
    if kind == "total":
        return Total(n), np.ones((1, n))
    if kind == "ones":
        m = int(rng.integers(1, 4))
        return Ones(m, n), np.ones((m, n))
    if kind == "prefix":
        return Prefix(n), _range_rows(n, [0] * n, range(n))
    if kind == "suffix":
        return Suffix(n), _range_rows(n, range(n), [n - 1] * n)
    if kind == "difference":
        return Difference(n), np.eye(n) - np.eye(n, k=-1)
    if kind == "allrange":
        pairs = list(itertools.combinations_with_replacement(range(n), 2))
        return AllRange(n), _range_rows(n, [p[0] for p in pairs], [p[1] for p in pairs])
    if kind == "widthrange":
        w = int(rng.integers(1, n + 1))
        s = list(range(n - w + 1))
        return WidthRange(n, w), _range_rows(n, s, [t + w - 1 for t in s])
    if kind == "indicator":
        cells = sorted(set(rng.integers(0, n, size=int(rng.integers(0, n + 1))).tolist()))
        ref = np.zeros((1, n))
        ref[0, cells] = 1
        return Indicator(n, cells), ref
    if kind == "bucket":
        r = int(rng.integers(1, n + 1))
        f = rng.integers(-1, r, size=n)
        ref = np.zeros((r, n))
        for a, b in enumerate(f):
            if b >= 0:
                ref[b, a] = 1
        return Bucket(n, f, buckets=r), ref
    if kind == "values":
        v = rng.integers(-4, 5, size=n).astype(float)
        return Values(n, v), v[None, :]
    if kind == "diagonal":
        d = rng.choice([-2.0, -0.5, 1.0, 1.5, 3.0], size=n)
        return Diagonal(d), np.diag(d)
    m = int(rng.integers(1, 5))
    a = rng.standard_normal((m, n))
    return Explicit(a), a


def draw_kron(data, widths):
    parts = [draw_leaf(data, n) for n in widths]
    ref = parts[0][1]
    for _, r in parts[1:]:
        ref = np.kron(ref, r)
    return Kron([p[0] for p in parts]), ref


def draw_matrix(data, depth=2, n=None):
    """A random composition (bounded size) and its dense reference."""
    kinds = ["leaf", "kron", "union"] + (["product", "transpose", "sum", "weighted"]
                                         if depth > 0 else [])
    kind = data.draw(st.sampled_from(kinds), label="kind")
    if kind == "leaf":
        width = n if n is not None else data.draw(st.integers(1, 6))
        return draw_leaf(data, width)
    if kind in ("kron", "union"):
        if n is None:
            widths = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
        else:
            # factor n into attribute sizes so the composition keeps n columns
            widths = [d for d in (2, 3) if n % d == 0 and n > d][:1]
            widths = widths + [n // widths[0]] if widths else [n]
        if kind == "kron":
            return draw_kron(data, widths)
        blocks, refs = [], []
        for _ in range(data.draw(st.integers(1, 3), label="blocks")):
            K, r = draw_kron(data, widths)
            c = data.draw(WEIGHTS)
            blocks.append(Weighted(c, K))
            refs.append(c * r)
        return Union(blocks), np.vstack(refs)
    if kind == "product":
        B, rb = draw_matrix(data, depth - 1, n)
        if rb.shape[0] > 12:
            return B, rb
        A, ra = draw_matrix(data, depth - 1, rb.shape[0])
        return A @ B, ra @ rb
    if kind == "transpose":
        A, ra = draw_matrix(data, depth - 1, None)
        if n is not None and ra.shape[0] != n:
            return draw_leaf(data, n)
        return A.T, ra.T
    if kind == "sum":
        A, ra = draw_matrix(data, depth - 1, n)
        c = data.draw(WEIGHTS)
        seed = data.draw(st.integers(0, 2**32 - 1))
        e = np.random.default_rng(seed).standard_normal(ra.shape)
        return Sum([A, c * Explicit(e)]), ra + c * e
    A, ra = draw_matrix(data, depth - 1, n)
    c = data.draw(WEIGHTS)
    return c * A, c * ra


@SETTINGS
@given(st.data())
def test_leaves_match_dense(data):
    n = data.draw(st.integers(1, 7))
    M, ref = draw_leaf(data, n)
    check_against_dense(M, ref, np.random.default_rng(0))


@SETTINGS
@given(st.data())
def test_krons_match_dense(data):
    widths = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=4))
    M, ref = draw_kron(data, widths)
    check_against_dense(M, ref, np.random.default_rng(1))


@SETTINGS
@given(st.data())
def test_random_compositions_match_dense(data):
    M, ref = draw_matrix(data)
    check_against_dense(M, ref, np.random.default_rng(2))


@SETTINGS
@given(st.data())
def test_kron_product_mixed_rule(data):
    widths = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    B, rb = draw_kron(data, widths)
    A, ra = draw_kron(data, [f.shape[0] for f in B.factors])
    AB = A @ B
    assert isinstance(AB, Kron)
    check_against_dense(AB, ra @ rb, np.random.default_rng(3), pinv=False)
    assert isinstance(A @ Product(B, Identity(B.shape[1])), Product)


@SETTINGS
@given(st.data())
def test_kron_products_with_tiny_slabs(data):
    # Random factor types through every slab path of Algorithm 1 (row-split,
    # multi-row, innermost-axis rows, in place), including non-square factors.
    import dpsql.linalg.composite as composite
    widths = data.draw(st.lists(st.integers(1, 4), min_size=2, max_size=4))
    K, ref = draw_kron(data, widths)
    slab = data.draw(st.integers(1, 40), label="slab")
    k = data.draw(st.integers(1, 3), label="columns")
    saved = composite._SLAB_ENTRIES, composite._MIN_SLAB_COLS
    composite._SLAB_ENTRIES, composite._MIN_SLAB_COLS = slab, 1
    try:
        rng = np.random.default_rng(slab)
        X = rng.standard_normal((K.shape[1], k))
        Y = rng.standard_normal((K.shape[0], k))
        got_x, got_y, got_v = K.matmat(X), K.rmatmat(Y), K.matvec(X[:, 0])
    finally:
        composite._SLAB_ENTRIES, composite._MIN_SLAB_COLS = saved
    scale = max(1.0, np.abs(ref).sum(1).max(), np.abs(ref).sum(0).max()) * 4.0
    assert np.abs(got_x - ref @ X).max() <= 1e-9 * scale
    assert np.abs(got_y - ref.T @ Y).max() <= 1e-9 * scale
    assert np.abs(got_v - ref @ X[:, 0]).max() <= 1e-9 * scale
