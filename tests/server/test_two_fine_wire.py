"""Thin statements over two fine columns over the wire (issue 35 item 4): counts with range
predicates on a 100,000-cell and a 5,000-cell integer column in one WHERE, measured directly
(dpsql/engine/direct.py) beside a quantile of one of them, reach psycopg through ``dpsql
serve`` with the values and 95% half-widths the in-process driver reports.  Before, the
workload could not be planned (one strategy over two such columns is refused)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.sql.postprocess import Z95
from dpsql.testing import write_config

from test_clients import bounded

THIN = ["SELECT COUNT(*) FROM t WHERE gain > 5000 AND loss > 0",
        "SELECT sex, COUNT(*) FROM t WHERE gain BETWEEN 1 AND 9999 AND loss < 1000 GROUP BY sex"]
UNDER = "SELECT quantile_cont(gain, 0.9) FROM t WHERE loss < 500"
QUERIES = ["SELECT quantile_cont(gain, 0.9) FROM t", UNDER] + THIN


@pytest.fixture(scope="module")
def two_fine_server(measured_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two_fine_wire")
    rng = np.random.default_rng(5)
    gain = np.clip(rng.lognormal(8.0, 1.2, 3000).astype(np.int64), 0, 99999)
    loss = np.clip(rng.lognormal(6.0, 1.0, 3000).astype(np.int64), 0, 4999)
    sex = rng.choice(["F", "M"], gain.size)
    (tmp / "t.csv").write_text("gain,loss,sex\n" + "\n".join(f"{a},{b},{c}" for a, b, c in zip(gain, loss, sex))
                               + "\n")
    (tmp / "t.toml").write_text("[tables.t.columns.gain]\ntype = \"integer\"\nlo = 0\nhi = 99999\n"
                                "[tables.t.columns.loss]\ntype = \"integer\"\nlo = 0\nhi = 4999\n"
                                "[tables.t.columns.sex]\ntype = \"categorical\"\nlabels = [\"F\", \"M\"]\n"
                                "closed = true\n")
    config = write_config(tmp, table="t", domain=tmp / "t.toml", source={"csv": tmp / "t.csv"},
                          epsilon=1.0, queries=QUERIES)
    conn, local = measured_server(config)
    assert {"direct", "ordered gain (merged)"} <= {p.name for p in local.session.plan().strategy.parts}
    return conn, local


@pytest.mark.slow
@pytest.mark.parametrize("sql", THIN + [UNDER])
def test_psycopg_gets_the_direct_answers(two_fine_server, sql):
    conn, local = two_fine_server
    want = local.cursor().execute(sql)
    rows = want.fetchall()
    # a count from its direct block, the quantile under a predicate on the other fine column
    # from the ordered part over the merged cells
    model = want.result.model
    assert model == "direct" if sql in THIN else model.startswith("ordered ") and model.endswith("(merged)"), model
    cur = bounded(lambda: conn.execute(sql), timeout=120)
    got = bounded(cur.fetchall)
    names = [d.name for d in cur.description]
    ci = next(i for i, n in enumerate(names) if n.endswith("_ci95"))    # the wire's default error column
    assert len(got) == len(rows) > 0
    for g, w, se in zip(got, rows, want.result.stderr):
        assert math.isfinite(se[-1]) and (se[-1] > 0 or sql == UNDER)
        assert float(g[ci - 1]) == pytest.approx(float(w[-1]), rel=1e-6, abs=0.5)
        assert float(g[ci]) == pytest.approx(Z95 * se[-1], rel=0.05, abs=0.5)
        assert tuple(g[:ci - 1]) == tuple(w[:-1])
