"""A ResidualPlanner strategy through the engine (issue 16): measured, fitted, answered.

Residual blocks support a marginal only together (each spans one eigenspace), so before
``JointSupport`` every answer from such a strategy would have been marked inferred, with
no standard error, and policy "measure" would have paid again for queries already paid
for.  At a near-infinite budget the answers equal DuckDB's and carry standard errors.
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest

import dpsql
from dpsql.engine.config import load_config
from dpsql.measure.exact import ExactOracle
from dpsql.plan.algebra import algebra_form

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adult"
ATTRS = ["sex", "race", "income", "relationship"]
QUERIES = ([f"SELECT {a}, COUNT(*) FROM adult GROUP BY {a}" for a in ATTRS]
           + [f"SELECT {a}, {b}, COUNT(*) FROM adult GROUP BY {a}, {b}"
              for a, b in itertools.combinations(ATTRS, 2)])


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rp")
    con = dpsql.connect(EXAMPLE / "dpsql.toml", user="tester", ledger=str(tmp / "l"),
                        cache_dir=str(tmp / "c"), workload={"queries": QUERIES},
                        budget={"epsilon": 1e7, "delta": 1e-6}, fit_iters=3000)
    report = con.session.plan()
    con.session.measure()
    cfg = load_config(EXAMPLE / "dpsql.toml")
    oracle = ExactOracle(cfg.tables, cfg.sources)
    yield con, report, oracle
    oracle.close()
    con.close()
    dpsql.dbapi._engines.clear()


def test_the_plan_is_residual_and_certified(measured):
    _, report, _ = measured
    s = report.strategy
    assert s.operator == "ResidualPlanner"
    assert algebra_form(s.kron_blocks, s.shape).residual
    assert "Certificate" in s.explanation
    assert report.bound_rmse is not None and report.rmse <= 1.001 * report.bound_rmse


@pytest.mark.parametrize("sql", QUERIES)
def test_answers_are_supported_and_exact(measured, sql):
    con, _, oracle = measured
    result = con.session.execute(sql)
    assert not any(result.inferred), sql
    exact = {tuple(r[:-1]): r[-1] for r in oracle.query(sql)}
    for row, err in zip(result.rows, result.stderr):
        assert math.isfinite(err[-1])
        assert row[-1] == pytest.approx(exact.get(tuple(row[:-1]), 0), rel=1e-3, abs=1.0)


def test_standard_errors_run_on_one_blas_thread(measured, monkeypatch):
    """Issue 17: standard errors take pseudo-inverses of factor grams and eigendecompose
    residual factors; on a loaded 2-core machine a 74×74 ``eigh`` took 225 ms on two
    OpenBLAS threads and 1-2 ms on one (``dpsql.linalg.threads``)."""
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    con, _, _ = measured
    _, variance, _ = con.session.engine.model("adult")
    variance.joint._basis.clear()
    for p in variance.prepared:
        p._parts = None
    seen = []

    def spy(name):
        original = getattr(np.linalg, name)

        def call(*args, **kwargs):
            seen.append(max(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"))
            return original(*args, **kwargs)
        monkeypatch.setattr(np.linalg, name, call)

    spy("pinv")
    spy("eigh")
    spy("qr")        # the factor grams' factorisation (linalg/rowscaled.py, issue 28)
    spy("solve")
    with threadpool_limits(limits=2, user_api="blas"):
        for sql in QUERIES:
            con.session.execute(sql + " -- not the cached answer")
    assert seen and set(seen) == {1}
