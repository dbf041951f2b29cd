"""A person view's flag of a condition on other tables' rows (``COUNT(DISTINCT person) …
WHERE o.priority = 1``, issue 32) counts alike on DuckDB, PostgreSQL and Spark, equals a
Python reference (persons with at least one such row, from the raw rows), and removing one
person with all their rows moves its marginals by at most 1 (docs/privacy.md §2a)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import shop
from dpsql.engine.config import load_config
from dpsql.measure.router import open_backend

pytestmark = pytest.mark.slow   # a Spark JVM and a PostgreSQL cluster
SQL = ("SELECT c.nation, COUNT(DISTINCT c.custkey) FROM customers c JOIN orders o ON o.custkey = c.custkey "
       "JOIN lineitem l ON l.orderkey = o.orderkey WHERE o.priority <= 2 AND l.flag = 'R' GROUP BY c.nation")


_load = shop.load


def _counts(tmp: Path, sources: dict):
    cfg = load_config(shop.config(tmp, sources, workload={"queries": [SQL]}))
    schema = cfg.tables["customers"]
    flag = next(c for c in schema.column_names if c.startswith("lineitem__has_"))
    backend = open_backend(cfg.sources)
    try:
        return cfg, flag, backend.count_marginals(schema, [(flag,), ("nation", flag)])
    finally:
        backend.close()


def reference(rows, cfg, flag) -> dict:
    schema = cfg.tables["customers"]
    orders = {o[0]: o for o in rows["orders"] if o[2] is not None}
    hit = {orders[li[0]][1] for li in rows["lineitem"]
           if li[0] in orders and orders[li[0]][3] <= 2 and li[2] == "R"}
    nation = schema.attribute("nation")
    out = {(flag,): np.zeros(2, dtype=np.int64), ("nation", flag): np.zeros((schema.domain["nation"], 2), np.int64)}
    for c in rows["customers"]:
        f = int(c[0] in hit)
        out[(flag,)][f] += 1
        out[("nation", flag)][nation.index_of(c[2]), f] += 1
    return out


@pytest.mark.parametrize("engine", ["duckdb", "postgres", "spark"])
def test_a_condition_flag_counts_like_the_reference_and_moves_by_at_most_one(engine, tmp_path, request):
    pg = request.getfixturevalue("pg_server") if engine == "postgres" else None
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    rows = shop.shop_rows()
    cfg, flag, full = _counts(tmp_path, _load(engine, rows, tmp_path, "full", pg, spark))
    expected = reference(rows, cfg, flag)
    for clique, counts in full.items():
        assert np.array_equal(counts, expected[clique]), (engine, clique, counts, expected[clique])
    assert 0 < full[(flag,)][1] < full[(flag,)].sum()
    for p in (7, 14, 1, 2):
        _, _, after = _counts(tmp_path, _load(engine, shop.without(rows, p), tmp_path, f"n{p}", pg, spark))
        for clique, counts in full.items():
            assert np.abs(counts - after[clique]).sum() <= 1, (engine, p, clique)
