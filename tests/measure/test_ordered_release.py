"""A large ordered column measured with its tree or Toeplitz strategy (issue 35 item 4):
counted by DuckDB, applied exactly, noised, fitted and answered in closed form."""

from __future__ import annotations

import math
from fractions import Fraction

import duckdb
import numpy as np
import pytest

import dpsql.errors

from dpsql.domain import Domain, IntegerRange, TableSchema
from dpsql.linalg import AllRange, Indicator, Prefix, Total
from dpsql.measure.backend import DuckDBBackend
from dpsql.measure.ordered import OrderedEstimate, measure_ordered
from dpsql.measure.source import Source
from dpsql.plan import QuerySpec, Workload, optimize
from dpsql.plan.ordered import toeplitz_strategy

N_CELLS = 100_000


@pytest.fixture(scope="module")
def incomes(tmp_path_factory):
    rng = np.random.default_rng(7)
    x = np.clip(rng.lognormal(10.0, 0.8, 30_000).astype(np.int64), 0, N_CELLS - 1)
    path = tmp_path_factory.mktemp("fine") / "t.csv"
    path.write_text("income\n" + "\n".join(map(str, x)) + "\n")
    schema = TableSchema("t", (IntegerRange("income", 0, N_CELLS - 1),))
    backend = DuckDBBackend({"t": Source("csv", path)}, threads=1)
    yield backend, schema, path
    backend.close()


def _strategy(schema, noise):
    n = N_CELLS
    queries = [QuerySpec("cdf", Prefix(n)), QuerySpec("ranges", AllRange(n)),
               QuerySpec("over 50k", Indicator(n, range(50_000, n))), QuerySpec("count", Total(n))]
    return optimize(Workload.of_queries(schema.domain, queries, noise), noise=noise)


@pytest.mark.parametrize("noise, operator", [("gaussian", "toeplitz"), ("laplace", "tree")])
def test_answers_at_a_huge_budget_are_duckdbs_exact_answers(incomes, noise, operator):
    backend, schema, path = incomes
    s = _strategy(schema, noise)
    assert s.operator == operator
    release = measure_ordered(backend, schema, s, Fraction(10 ** 12), charge=lambda plan: None)
    assert release.rho <= 10 ** 12
    est = OrderedEstimate(release)
    con = duckdb.connect()
    exact = np.zeros(N_CELLS, dtype=np.int64)
    for v, c in con.execute(f"SELECT income, COUNT(*) FROM read_csv('{path}') GROUP BY 1").fetchall():
        exact[v] = c
    cdf, var = est.cdf()
    assert np.array_equal(np.rint(cdf), np.cumsum(exact))
    assert np.all(var > 0) and np.all(np.isfinite(var))
    for lo, hi in [(0, 0), (20_000, 30_000), (99_000, 99_999), (12_345, 54_321)]:
        want = con.execute(f"SELECT COUNT(*) FROM read_csv('{path}') WHERE income BETWEEN {lo} AND {hi}"
                           ).fetchone()[0]
        got, _ = est.ranges(np.array([lo]), np.array([hi]))
        assert round(float(got[0])) == want
    for q in (0.1, 0.5, 0.9, 0.99):
        want = con.execute(f"SELECT quantile_disc(income, {q}) FROM read_csv('{path}')").fetchone()[0]
        point, (lo, hi) = est.quantile(q)
        assert point == want and lo <= want <= hi


def _fake_backend(counts):
    class Backend:
        def count_marginals(self, schema, cliques):
            return {cliques[0]: counts}
    return Backend()


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_reported_variances_are_the_estimators_own(monkeypatch, noise):
    """On 40 cells (LARGE_CELLS lowered): answers are linear in the release and their
    reported variances equal the dense least-squares variances Σ-weighted by the blocks'
    own noise; the quantile band's sd of C_j − q·N too."""
    import dpsql.plan.gram as gram
    import dpsql.plan.workload as workload
    monkeypatch.setattr(gram, "LARGE_CELLS", 20)
    monkeypatch.setattr(workload, "LARGE_CELLS", 20)
    n = 40
    dom = Domain(["x"], [n])
    W = Workload.of_queries(dom, [QuerySpec("cdf", Prefix(n)), QuerySpec("r", AllRange(n))], noise)
    strategies = [optimize(W, noise=noise)]
    if noise == "gaussian":
        strategies.append(toeplitz_strategy(W.terms))
    counts = np.random.default_rng(3).integers(0, 30, n)
    for s in strategies:
        rel = measure_ordered(_fake_backend(counts), None, s, Fraction(1, 3), charge=lambda plan: None)
        assert rel.rho <= Fraction(1, 3)
        est = OrderedEstimate(rel)
        # the dense estimator: weighted least squares over the (padded) strategy rows
        if s.tree is not None:
            N = s.tree.N
            blocks = [np.kron(np.eye(s.tree.nodes[lv]), np.ones((1, s.tree.sizes[lv])))
                      for lv, w in enumerate(s.weights) if w > 0]
            sds = rel.stddev
        else:
            N = n
            blocks = [np.asarray(s.blocks[0].query.dense()) * s.scale]
            sds = rel.stddev
        A = np.vstack([B / sd for B, sd in zip(blocks, sds)])
        y = np.concatenate([v / sd for v, sd in zip(rel.values, sds)])
        cov = np.linalg.inv(A.T @ A)
        xhat = cov @ A.T @ y
        assert np.allclose(est.cells, xhat[:n], atol=1e-6)
        P = np.pad(Prefix(n).dense(), ((0, 0), (0, N - n)))
        cdf, var = est.cdf()
        assert np.allclose(var, np.einsum("ij,jk,ik->i", P, cov, P), rtol=1e-8)
        Q = np.random.default_rng(4).normal(size=(3, n))
        got, qvar = est.answer(Q)
        Qp = np.pad(Q, ((0, 0), (0, N - n)))
        assert np.allclose(got, Q @ xhat[:n]) and np.allclose(qvar, np.einsum("ij,jk,ik->i", Qp, cov, Qp))
        lo, hi = np.array([0, 5, 17, 39]), np.array([3, 5, 30, 39])
        R = np.zeros((4, N))
        for k, (a, b) in enumerate(zip(lo, hi)):
            R[k, a:b + 1] = 1.0
        got, rvar = est.ranges(lo, hi)
        assert np.allclose(got, R @ xhat) and np.allclose(rvar, np.einsum("ij,jk,ik->i", R, cov, R))
        q = 0.3
        D = P - q * P[-1]
        assert np.allclose(est._rank_sd(q), np.sqrt(np.einsum("ij,jk,ik->i", D, cov, D)), rtol=1e-7)
        # over the first m cells (a nullable column's NULL cell, the last, left out)
        m = n - 3
        Dm = P[:m] - q * P[m - 1]
        assert np.allclose(est._rank_sd(q, m), np.sqrt(np.einsum("ij,jk,ik->i", Dm, cov, Dm)), rtol=1e-7)
        # over the cells a..m−1 (a WHERE x >= c on the column): D_j = (C_j − C_{a−1}) − q (C_{m−1} − C_{a−1})
        for a in (1, 7, m - 1):
            Da = P[a:m] - P[a - 1] - q * (P[m - 1] - P[a - 1])
            assert np.allclose(est._rank_sd(q, m, a), np.sqrt(np.einsum("ij,jk,ik->i", Da, cov, Da)), rtol=1e-7)
        x, (lo_, hi_) = est.quantile(0.5, np.arange(7, m) * 10.0, "disc", cells=m, start=7)
        inside = np.maximum.accumulate(np.cumsum(est.cells[7:m]))
        assert x == 10.0 * (7 + int(np.searchsorted(inside, 0.5 * inside[-1])))
        # the variance of each cell: the diagonal of the estimator's covariance
        assert np.allclose(est.cell_variance(), np.diag(cov)[:n], rtol=1e-7)
        assert math.isfinite(cdf[-1])


def test_the_overflow_refusal_reads_the_declared_rows_not_the_data(monkeypatch):
    """Review of issue 35: ``exact_convolve``'s overflow check read the counts' total, so
    whether a measurement was refused (after counting) depended on the data.  Now the
    declared rows decide it, before the backend is asked; counts beyond them only saturate."""
    import dpsql.plan.gram as gram
    import dpsql.plan.workload as workload
    monkeypatch.setattr(gram, "LARGE_CELLS", 20)
    monkeypatch.setattr(workload, "LARGE_CELLS", 20)
    n = 64
    W = Workload.of_queries(Domain(["x"], [n]), [QuerySpec("cdf", Prefix(n)), QuerySpec("r", AllRange(n))],
                            "gaussian")
    s = toeplitz_strategy(W.terms)
    asked = []

    class Spy:
        def count_marginals(self, schema, cliques):
            asked.append(cliques)
            return {cliques[0]: np.full(n, 1 << 44, dtype=np.int64)}   # 2^50 rows in all

    release = measure_ordered(Spy(), None, s, Fraction(1, 2), charge=lambda plan: None, rows=10 ** 6)
    assert asked and release.values[0].size == n and np.all(np.isfinite(release.values[0]))
    asked.clear()
    with pytest.raises(dpsql.errors.UnsupportedQueryError):
        measure_ordered(Spy(), None, s, Fraction(1, 2), charge=lambda plan: None, rows=1 << 50)
    assert not asked              # refused from the declaration, before any count


# -- per group (I_G ⊗ T) ---------------------------------------------------------------------
def _grouped(monkeypatch, noise):
    """A 40-cell column x (LARGE_CELLS lowered) with a 3-cell group attribute g after it."""
    import dpsql.plan.gram as gram
    import dpsql.plan.workload as workload
    from dpsql.linalg import Identity, Kron
    monkeypatch.setattr(gram, "LARGE_CELLS", 20)
    monkeypatch.setattr(workload, "LARGE_CELLS", 20)
    n = 40
    W = Workload.of_queries(Domain(["x", "g"], [n, 3]), [QuerySpec("cdf by g", Kron([Prefix(n), Identity(3)])),
                                                        QuerySpec("r", Kron([AllRange(n), Total(3)]))], noise)
    out = [optimize(W, noise=noise)]
    if noise == "gaussian":
        out.append(toeplitz_strategy(W.terms))
    for s in out:
        assert s.groups == ("g",) and s.clique == ("x", "g")
    return n, out


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_grouped_variances_are_the_estimators_own(monkeypatch, noise):
    """Each group cell's row is fitted alone, and a combination c of them (a GROUP BY's
    group, a WHERE's selected cells) has the dense least-squares variances of I_G ⊗ T:
    Σ c_g² times one group's.  Before, such a workload was refused at planning."""
    n, strategies = _grouped(monkeypatch, noise)
    counts = np.random.default_rng(5).integers(0, 30, (n, 3))        # the clique's axes: x, g
    for s in strategies:
        rel = measure_ordered(_fake_backend(counts), None, s, Fraction(1, 3), charge=lambda plan: None)
        est = OrderedEstimate(rel)
        if s.tree is not None:
            N = s.tree.N
            blocks = [np.kron(np.eye(s.tree.nodes[lv]), np.ones((1, s.tree.sizes[lv])))
                      for lv, w in enumerate(s.weights) if w > 0]
        else:
            N = n
            blocks = [np.asarray(s.coeffs * s.scale, dtype=float)[np.subtract.outer(np.arange(n), np.arange(n))]
                      * np.tri(n)]
        # group-major: the rows of group g's copy of each block, over group g's cells
        A = np.vstack([np.kron(np.eye(3), B) / sd for B, sd in zip(blocks, rel.stddev)])
        y = np.concatenate([v / sd for v, sd in zip(rel.values, rel.stddev)])
        cov = np.linalg.inv(A.T @ A)
        xhat = (cov @ A.T @ y).reshape(3, N)
        assert np.allclose(est.group_cells, xhat[:, :n], atol=1e-6)
        for c in (np.array([1.0, 0.0, 1.0]), np.array([0.0, 1.0, 0.0]), np.ones(3)):
            sel = est.select(c)
            assert np.allclose(sel.cells, c @ xhat[:, :n], atol=1e-6)
            P = np.kron(c, np.pad(Prefix(n).dense(), ((0, 0), (0, N - n))))
            _, var = sel.cdf()
            assert np.allclose(var, np.einsum("ij,jk,ik->i", P, cov, P), rtol=1e-8)
            q = 0.3
            D = P - q * P[-1]
            assert np.allclose(sel._rank_sd(q), np.sqrt(np.einsum("ij,jk,ik->i", D, cov, D)), rtol=1e-7)
            cells = np.kron(c, np.eye(N)[:n])
            assert np.allclose(sel.cell_variance(), np.einsum("ij,jk,ik->i", cells, cov, cells), rtol=1e-7)
        # the default: every group summed
        assert np.allclose(est.cells, xhat[:, :n].sum(axis=0), atol=1e-6)


@pytest.mark.parametrize("noise", ["gaussian", "laplace"])
def test_one_row_moves_a_grouped_release_by_the_columns_sensitivity(monkeypatch, noise):
    """docs/privacy.md, "Ordered columns per group": adding one row to any (x, g) cell moves
    each block of I_G ⊗ T by at most T's sensitivities, which calibrate() charges for, and
    some cell of every group reaches them (the first, for the Toeplitz root)."""
    n, strategies = _grouped(monkeypatch, noise)
    from dpsql.measure.ordered import ordered_blocks
    counts = np.random.default_rng(6).integers(0, 30, (n, 3))
    for s in strategies:
        for b in ordered_blocks(s, 10 ** 6):
            base = b.apply(counts)
            assert base.size == b.rows()
            for g in range(3):
                l2, l1 = [], []
                for i in range(n):
                    more = counts.copy()
                    more[i, g] += 1
                    d = (b.apply(more) - base).astype(np.int64)
                    l2.append(int(d @ d))
                    l1.append(int(np.abs(d).sum()))
                assert max(l2) == b.l2_sensitivity_sq() and max(l1) == b.l1_sensitivity()


def test_a_grouped_release_survives_the_ledger_payload(monkeypatch):
    from dpsql.measure.ordered import pack, unpack
    n, strategies = _grouped(monkeypatch, "gaussian")
    counts = np.random.default_rng(8).integers(0, 30, (n, 3))
    for s in strategies:
        rel = measure_ordered(_fake_backend(counts), None, s, Fraction(1, 3), charge=lambda plan: None)
        again = unpack(pack(rel))
        assert again.strategy.groups == ("g",) and again.strategy.group_shape == (3,)
        assert again.strategy.clique == ("x", "g")
        a, b = OrderedEstimate(rel), OrderedEstimate(again)
        assert np.array_equal(a.group_cells, b.group_cells)
        c = np.array([0.0, 1.0, 1.0])
        assert np.array_equal(a.select(c).cdf()[1], b.select(c).cdf()[1])


def test_an_ordered_payload_carries_its_version_and_a_newer_one_is_refused(monkeypatch):
    """Issue 35: the ordered release's payload names its format and version; a newer dpsql's is
    refused with LedgerVersionError (0AP02, a hint), one without the entry (before) is read."""
    import io
    import json

    from dpsql.errors import LedgerVersionError
    from dpsql.measure.ordered import pack, unpack
    n, strategies = _grouped(monkeypatch, "gaussian")
    rel = measure_ordered(_fake_backend(np.ones((n, 3), dtype=np.int64)), None, strategies[0], Fraction(1, 3),
                          charge=lambda plan: None)
    payload = pack(rel)
    with np.load(io.BytesIO(payload)) as z:
        arrays = {k: z[k] for k in z.files}
    assert json.loads(bytes(arrays["__version__"]).decode()) == {"format": "dpsql-ordered-release", "version": 1}

    def restamped(stamp):
        out = dict(arrays)
        del out["__version__"]
        if stamp is not None:
            out["__version__"] = np.frombuffer(json.dumps(stamp).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **out)
        return buf.getvalue()
    for stamp in (None, {"format": "dpsql-ordered-release", "version": 1}):
        assert np.array_equal(unpack(restamped(stamp)).values[0], rel.values[0])
    for stamp in ({"format": "dpsql-ordered-release", "version": 2}, {"format": "dpsql-release", "version": 1}):
        with pytest.raises(LedgerVersionError, match="newer dpsql") as info:
            unpack(restamped(stamp))
        assert info.value.sqlstate == "0AP02" and info.value.hint
