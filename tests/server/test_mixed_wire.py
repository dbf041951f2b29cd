"""A mixed workload over the wire (issue 35 item 4): a quantile over a 5,000-cell integer
column and a GROUP BY over another column, measured as two releases (the ordered part and
the rest, dpsql/engine/mixed.py), reach psycopg through ``dpsql serve`` each from its own
release, with the values and 95% half-widths the in-process driver reports.  Before, the
workload could not be planned."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpsql.sql.postprocess import Z95
from dpsql.testing import write_config

from test_clients import bounded
from ordered_parts import assert_routed

QUERIES = ["SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY income) FROM t",
           "SELECT sex, COUNT(*) FROM t GROUP BY sex",
           "SELECT COUNT(*) FROM t WHERE income BETWEEN 500 AND 1500"]


@pytest.fixture(scope="module")
def mixed_server(measured_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mixed_wire")
    rng = np.random.default_rng(3)
    x = np.clip(rng.lognormal(7.0, 0.7, 3001).astype(np.int64), 0, 4999)
    sex = rng.choice(["F", "M"], x.size)
    (tmp / "t.csv").write_text("income,sex\n" + "\n".join(f"{a},{b}" for a, b in zip(x, sex)) + "\n")
    (tmp / "t.toml").write_text("[tables.t.columns.income]\ntype = \"integer\"\nlo = 0\nhi = 4999\n"
                                "[tables.t.columns.sex]\ntype = \"categorical\"\nlabels = [\"F\", \"M\"]\n"
                                "closed = true\n")
    config = write_config(tmp, table="t", domain=tmp / "t.toml", source={"csv": tmp / "t.csv"},
                          epsilon=1.0, queries=QUERIES)
    conn, local = measured_server(config)
    assert local.session.plan().strategy.operator == "split"
    return conn, local


@pytest.mark.slow
@pytest.mark.parametrize("sql", QUERIES)
def test_psycopg_gets_each_answer_from_its_release(mixed_server, sql):
    conn, local = mixed_server
    want = local.cursor().execute(sql)
    rows = want.fetchall()
    # the quantile is read from the ordered release and the GROUP BY sex from the model; a thin
    # count both can answer comes from the part the plan put it in (5852c29)
    if "percentile" in sql:
        assert want.result.model.startswith("ordered"), want.result.model
    elif "sex" in sql:
        assert not want.result.model.startswith("ordered"), want.result.model
    assert_routed(want.result, sql, local.session.plan())
    cur = bounded(lambda: conn.execute(sql), timeout=120)
    got = bounded(cur.fetchall)
    names = [d.name for d in cur.description]
    ci = next(i for i, n in enumerate(names) if n.endswith("_ci95"))    # the wire's default error column
    assert names[ci] == names[ci - 1] + "_ci95", names
    assert len(got) == len(rows)
    for g, w, se in zip(got, rows, want.result.stderr):
        assert math.isfinite(se[-1]) and se[-1] > 0
        assert float(g[ci - 1]) == pytest.approx(float(w[-1]), rel=1e-6, abs=0.5)
        assert float(g[ci]) == pytest.approx(Z95 * se[-1], rel=0.05, abs=0.5)
        assert tuple(g[:ci - 1]) == tuple(w[:-1])
