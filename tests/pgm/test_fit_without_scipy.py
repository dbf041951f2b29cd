"""Issue 17: the fit's own machinery is numpy only (the 27-clique fit in ≤ 1 s).

Importing scipy.sparse and networkx took 0.4-0.6 s of a 0.9 s fit of the adult dashboard
(bench/RESULTS.md), in the process that fits and nowhere else: the measurement matrix is now a
numpy ``RowMatrix`` and the junction tree is spanned in plain Python.  scipy is still used by
the exact last step on small trees (``dpsql.pgm.polish``), after its size test."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from dpsql.pgm.sparse import RowMatrix, expand_columns


@pytest.mark.parametrize("seed", range(6))
def test_row_matrix_products_equal_the_dense_matrix(seed):
    rng = np.random.default_rng(seed)
    m, n = int(rng.integers(1, 9)), int(rng.integers(1, 12))
    dense = np.where(rng.random((m, n)) < 0.35, rng.normal(size=(m, n)), 0.0)
    if seed % 2:
        dense = (dense != 0).astype(float)        # 0/1 matrices skip the multiply
    dense[0, :] = 0.0                             # an empty row
    dense[:, -1] = 0.0                            # an empty column
    row, col = np.nonzero(dense)
    P = RowMatrix(row, col, dense[row, col], (m, n))
    v, u = rng.normal(size=n), rng.normal(size=m)
    np.testing.assert_allclose(P @ v, dense @ v, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(P.rmatvec(u), dense.T @ u, rtol=1e-13, atol=1e-13)
    np.testing.assert_array_equal(P.dense(), dense)
    np.testing.assert_array_equal(P.to_scipy().toarray(), dense)
    np.testing.assert_array_equal(P.row_counts(), np.count_nonzero(dense, axis=1))


def test_expand_columns_is_the_column_gather():
    rng = np.random.default_rng(3)
    q = np.where(rng.random((4, 5)) < 0.5, rng.integers(1, 4, size=(4, 5)).astype(float), 0.0)
    cell = rng.integers(0, 5, size=17)          # host cell -> marginal cell (some unused)
    i, j = np.nonzero(q)
    r, c, d = expand_columns(i, j, q[i, j], 5, cell, 100)
    got = np.zeros((4, 117))
    np.add.at(got, (r, c), d)
    np.testing.assert_array_equal(got[:, 100:], q[:, cell])
    assert not got[:, :100].any()


FIT = """
import json, sys
import numpy as np
from dpsql.domain import Domain
from dpsql.linalg import Identity, Kron, Total
from dpsql.pgm import Measurement
from dpsql.pgm.auto import fit

dom = Domain(["a", "b", "c"], [40, 40, 3])
rng = np.random.default_rng(0)
x = rng.integers(0, 20, size=(40, 40, 3)).astype(float)
ms = [Measurement(("a", "b"), Kron([Identity(40), Identity(40)]), x.sum(axis=2).ravel() + 1.0, 2.0),
      Measurement(("b", "c"), Kron([Identity(40), Identity(3)]), x.sum(axis=0).ravel(), 2.0),
      Measurement(("a", "b"), Kron([Total(40), Total(40)]), [x.sum()], 1.0)]
model = fit(dom, ms, iters=3000, exact_method="adaptive", gap=(0.5, 1e-6))
print(json.dumps({"stopped": model.stopped, "polished": model.polished is not None,
                  "loaded": sorted(m for m in ("scipy", "networkx") if m in sys.modules)}))
"""


def test_a_fit_over_the_exact_steps_limits_imports_neither_scipy_nor_networkx():
    # The total over the 1,600-cell (a, b) table makes the exact step's Hessian bound
    # 1,600² > FitLimits.face_step_max_nnz, as the adult dashboard's total over its 1,480-cell root does.
    out = subprocess.run([sys.executable, "-c", FIT], capture_output=True, text=True, check=True)
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "converged" in got["stopped"], got
    assert not got["polished"]
    assert got["loaded"] == [], got


def test_the_estimator_takes_the_cheaper_loss():
    # Many marginals inside one large clique (NLTCS's one- and two-way marginals: 137 in a
    # 65,536-cell clique, 9 million non-zeros) go to the sum-tree loss; a few small tables
    # to the sparse one.  Both are the same function (tests/pgm/test_convergence.py).
    from dpsql.linalg import Identity, Kron
    from dpsql.pgm import Measurement
    from dpsql.pgm.estimation import choose_loss
    from dpsql.pgm.junction_tree import JunctionTree
    from dpsql.pgm.loss import MarginalLoss, SparseLoss

    names = [f"x{i}" for i in range(12)]
    sizes = dict.fromkeys(names, 2)
    pairs = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
    many = [Measurement(c, Kron([Identity(2), Identity(2)]), np.zeros(4), 1.0) for c in pairs]
    tree = JunctionTree(names, sizes, [m.clique for m in many])
    assert len(tree.cliques) == 1 and tree.size == 4096
    assert isinstance(choose_loss(tree, many), MarginalLoss)          # 66 × 4,096 non-zeros
    few = many[:3]
    small = JunctionTree(names, sizes, [m.clique for m in few])
    assert isinstance(choose_loss(small, few), SparseLoss)
    assert isinstance(choose_loss(small, few, method="md"), MarginalLoss)
