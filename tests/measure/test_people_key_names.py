"""A people schema whose keys are named apart in each table, as TPC-H names them
(``lineitem.l_orderkey = orders.o_orderkey``, ``orders.o_custkey = customers.c_custkey``):
the person view's flags check each key in the table that holds it (before, the parent's
key was looked up in the child's columns, so the TPC-H bench could not measure its
customers view: "the source has no column 'o_orderkey'")."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shop  # noqa: E402

import dpsql  # noqa: E402

RENAMED = {"customers": "SELECT custkey AS c_custkey, * EXCLUDE (custkey)",
           "orders": "SELECT orderkey AS o_orderkey, custkey AS o_custkey, * EXCLUDE (orderkey, custkey)",
           "lineitem": "SELECT orderkey AS l_orderkey, * EXCLUDE (orderkey)"}


def _tpch_named(tmp_path) -> dict[str, Path]:
    files = shop.write_parquet(shop.shop_rows(customers=40), tmp_path / "raw")
    con = duckdb.connect()
    out = {}
    for table, select in RENAMED.items():
        out[table] = tmp_path / f"{table}.parquet"
        con.execute(f"COPY ({select} FROM read_parquet('{files[table]}')) TO '{out[table]}' (FORMAT parquet)")
    con.close()
    return out


def test_keys_named_apart_measure_the_person_view_and_count_persons(tmp_path):
    files = _tpch_named(tmp_path)
    people = {"person": "customers", "key": "c_custkey",
              "tables": {"orders": {"parent": "customers", "foreign_key": "o_custkey", "primary_key": "o_orderkey",
                                    "max_rows": 20},
                         "lineitem": {"parent": "orders", "foreign_key": "l_orderkey", "max_rows": 200}}}
    sql = ("SELECT COUNT(DISTINCT c.c_custkey) FROM customers c JOIN orders o ON o.o_custkey = c.c_custkey "
           "JOIN lineitem l ON l.l_orderkey = o.o_orderkey")
    spec = {**shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                          workload={"queries": [sql, "SELECT l.flag, COUNT(*) FROM orders o JOIN lineitem l "
                                                     "ON l.l_orderkey = o.o_orderkey GROUP BY l.flag"]}),
            "people": people}
    con = dpsql.connect(spec, budget={"epsilon": 1e7, "delta": 1e-6})
    engine = con.session.engine
    for view in engine.view_shares(engine.workload_rho()):
        con.session.measure(view)
    cur = con.cursor()
    cur.execute("SET dpsql.estimator = 'least_squares'")
    cur.execute(sql)
    got = cur.fetchall()[0][0]
    exact = duckdb.connect().execute(
        f"SELECT COUNT(DISTINCT c.c_custkey) FROM read_parquet('{files['customers']}') c "
        f"JOIN read_parquet('{files['orders']}') o ON o.o_custkey = c.c_custkey "
        f"JOIN read_parquet('{files['lineitem']}') l ON l.l_orderkey = o.o_orderkey").fetchone()[0]
    assert abs(got - exact) < 0.5, (got, exact)
    con.close()
