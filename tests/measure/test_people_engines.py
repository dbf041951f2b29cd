"""Person views count alike on DuckDB, PostgreSQL and Spark, and one person moves every
marginal by at most the declared bound (issue 32, docs/privacy.md §2a).

The shop schema (``shop.py``: customers ← orders ← lineitem, with orphans and heavy
customers above every bound) is loaded into each engine.  For each table's view the
counts of every one-way marginal, a pair and the total must equal a Python reference
(the join along the declared keys, each view row's cells by ``Attribute.index_of``, and at
most ``max_rows`` rows per person kept by the keyed SHA-256 order), and removing one person
with all their rows — customer, orders, line items — must change each marginal by at most
the view's bound in L1 (hence in L2).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest

import shop
from dpsql.engine.config import load_config
from dpsql.measure.router import open_backend

pytestmark = pytest.mark.slow   # a Spark JVM and a PostgreSQL cluster
KEY = "people-key-of-the-operator"


def reference(rows, cfg, table: str, key: str = KEY):
    """{clique: counts} of ``table``'s view over ``rows``, computed in Python."""
    schema, view = cfg.tables[table], cfg.people.views[table]
    cols = {"customers": ("custkey", "segment", "nation"),
            "orders": ("orderkey", "custkey", "status", "priority"),
            "lineitem": ("orderkey", "linenumber", "flag", "qty")}
    dicts = {t: [dict(zip(cols[t], r)) for r in rows[t]] for t in cols}
    joined = [{"customers": c} for c in dicts["customers"] if c["custkey"] is not None]
    for hop in view.hops[1:]:
        joined = [{**j, hop.table: r} for j in joined for r in dicts[hop.table]
                  if r[hop.key] is not None and r[hop.key] == j[view.hops[len(j) - 1].table][hop.parent_key]]
    reaching = {}     # the person view's flags: persons with a row of each other table's view
    for table, hops in view.exists:
        frontier = [(r[hops[0].key], r) for r in dicts[hops[0].table] if r[hops[0].key] is not None]
        for hop in hops[1:]:
            frontier = [(pid, r2) for pid, r1 in frontier for r2 in dicts[hop.table]
                        if r2[hop.key] is not None and r2[hop.key] == r1[hop.parent_key]]
        reaching[table] = {pid for pid, _ in frontier}
    by_person: dict = {}
    for j in joined:
        cells = []
        for hop in view.hops:
            for src, name in hop.columns:
                cells.append(schema.attribute(name).index_of(j[hop.table][src]))
        pid = j["customers"]["custkey"]
        cells += [int(pid in reaching[table]) for table, _ in view.exists]
        h = hashlib.sha256(f"{key}|{pid}|{','.join(map(str, cells))}".encode()).hexdigest()
        by_person.setdefault(pid, []).append((h, tuple(cells)))
    kept = [c for v in by_person.values() for _, c in sorted(v)[:view.max_rows]]
    table_ = np.array(kept, dtype=np.int64).reshape(len(kept), len(schema.attributes))
    out = {}
    for clique in cliques(schema):
        if not clique:
            out[clique] = np.asarray(len(kept), dtype=np.int64)
            continue
        arr = np.zeros(tuple(schema.domain[a] for a in clique), dtype=np.int64)
        pos = [schema.column_names.index(a) for a in clique]
        np.add.at(arr, tuple(table_[:, p] for p in pos), 1)
        out[clique] = arr
    return out


def cliques(schema):
    names = schema.column_names
    return [(a,) for a in names] + [(names[0], names[-1]), ()]


_load = shop.load


def _counts(tmp: Path, sources: dict, bounds=None):
    key = tmp / "bound.key"
    key.write_text(KEY)
    spec = shop.config(tmp, sources, bounds)
    spec["people"]["hash_key_file"] = str(key)
    cfg = load_config(spec)
    backend = open_backend(cfg.sources)
    try:
        return cfg, {t: backend.count_marginals(cfg.tables[t], cliques(cfg.tables[t])) for t in shop.TYPES}
    finally:
        backend.close()


def _assert_within_bound(cfg, before, after, label):
    for table in shop.TYPES:
        k = cfg.people.views[table].max_rows
        for clique, counts in before[table].items():
            diff = np.abs(counts.astype(np.int64) - after[table][clique]).sum()
            assert diff <= k, (label, table, clique, diff, k)


@pytest.mark.parametrize("engine", ["duckdb", "postgres", "spark"])
def test_views_count_like_the_reference_and_one_person_moves_each_marginal_by_at_most_the_bound(
        engine, tmp_path, request):
    pg = request.getfixturevalue("pg_server") if engine == "postgres" else None
    spark = request.getfixturevalue("spark") if engine == "spark" else None
    rows = shop.shop_rows()
    cfg, full = _counts(tmp_path, _load(engine, rows, tmp_path, "full", pg, spark))
    for table in shop.TYPES:
        expected = reference(rows, cfg, table)
        for clique, counts in full[table].items():
            assert np.array_equal(counts, expected[clique]), (engine, table, clique, counts, expected[clique])
    # heavy customers (7, 14: above every bound), light ones, one with no orders (found below)
    persons = [7, 14, 1, 2]
    persons += [c[0] for c in rows["customers"] if not any(o[1] == c[0] for o in rows["orders"])][:1]
    if engine == "duckdb":
        persons = [c[0] for c in rows["customers"]]
    for p in persons:
        _, after = _counts(tmp_path, _load(engine, shop.without(rows, p), tmp_path, f"n{p}", pg, spark))
        _assert_within_bound(cfg, full, after, (engine, p))
    # the heavy customers really are truncated: their removal moves a view by exactly k
    if engine == "duckdb":
        _, after = _counts(tmp_path, _load(engine, shop.without(rows, 7), tmp_path, "n7b", pg, spark))
        assert int(np.abs(full["lineitem"][()] - after["lineitem"][()])) == cfg.people.views["lineitem"].max_rows


def test_an_unbounded_view_would_move_by_more_than_the_bound(tmp_path):
    """The brute-force check can fail: with a bound far above every person's rows, removing
    a heavy customer moves the line-item total by more than 5 (the usual bound)."""
    rows = shop.shop_rows()
    cfg, full = _counts(tmp_path, _load("duckdb", rows, tmp_path, "full"), {"lineitem": 1000})
    _, after = _counts(tmp_path, _load("duckdb", shop.without(rows, 7), tmp_path, "n7"), {"lineitem": 1000})
    assert int(full["lineitem"][()] - after["lineitem"][()]) > 5
