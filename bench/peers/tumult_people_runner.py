"""Tumult Analytics' side of bench/people_tpch.py, run under bench/peers/.venv-tumult.

Reads one job (JSON on stdin) and prints one JSON report (the last line of stdout):

    {"tables": {"customers": {"parquet": "customers.parquet", "rename": {"c_custkey": "custkey"}},
                "orders": {...}, "lineitem": {...}},
     "id_column": "custkey", "rho": 0.0244, "trials": 3,
     "views": {"lineitem_path": {"from": "lineitem",
                                 "joins": [["orders", ["custkey", "o_orderkey"]], ["customers", ["custkey"]]]}},
     "queries": [{"name": "q01", "from": "lineitem_path", "bound": 128, "groupby": ["l_returnflag"],
                  "keys": [["A"], ["N"], ["R"]], "agg": ["count"] | ["sum", "l_quantity", 1, 50]}, ...]}

Each trial is a fresh ``Session`` with the whole budget ``rho`` (``RhoZCDPBudget``) over the
three private tables, all in one ID space: every table carries the person's id (``custkey``;
line items get it from their order before the run, as Tumult requires of a table in an ID
space) and is protected with ``AddRowsWithID``, the unit dpsql's ``[people]`` protects (a
person with all their rows).  The joins are Tumult views of the session (``create_view`` of
``join_private`` along the keys, the person's id among the join columns: no truncation at the
join; cached, so each join runs once per trial, as dpsql reads each of its views once).  Each
query spends ``rho / len(queries)``: ``enforce(MaxRowsPerID(bound))`` on its view — the same
per-person bound as dpsql's — and a Gaussian count or sum over the public key set.
"""

import json
import sys
import time

from pyspark.sql import SparkSession


def _plain(v):
    """A pandas/numpy scalar as the Python value it holds (an int group key stays an int)."""
    return v.item() if hasattr(v, "item") else v


def main() -> None:
    job = json.load(sys.stdin)
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.driver.memory", "4g").config("spark.sql.shuffle.partitions", "4")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from tmlt.analytics import (AddRowsWithID, CountMechanism, KeySet, MaxRowsPerID, QueryBuilder,
                                RhoZCDPBudget, Session, SumMechanism)
    frames = {}
    for name, spec in job["tables"].items():
        df = spark.read.parquet(spec["parquet"])
        for old, new in spec.get("rename", {}).items():
            df = df.withColumnRenamed(old, new)
        frames[name] = df.cache()
        frames[name].count()
    share = job["rho"] / len(job["queries"])
    results = {q["name"]: [] for q in job["queries"]}
    t0 = time.perf_counter()
    for _ in range(job["trials"]):
        builder = Session.Builder().with_privacy_budget(RhoZCDPBudget(job["rho"])).with_id_space("people")
        for name, df in frames.items():
            builder = builder.with_private_dataframe(
                name, df, protected_change=AddRowsWithID(id_column=job["id_column"], id_space="people"))
        session = builder.build()
        for name, view in job["views"].items():
            query = QueryBuilder(view["from"])
            for table, columns in view["joins"]:
                query = query.join_private(table, join_columns=columns)
            session.create_view(query, name, cache=True)
        for q in job["queries"]:
            query = QueryBuilder(q["from"])
            if q.get("filter"):
                query = query.filter(q["filter"])
            query = query.enforce(MaxRowsPerID(q["bound"]))
            if q["groupby"]:
                query = query.groupby(KeySet.from_tuples([tuple(k) for k in q["keys"]], q["groupby"]))
            agg = q["agg"]
            if agg[0] == "count":
                expr = query.count(name="value", mechanism=CountMechanism.GAUSSIAN)
            else:
                expr = query.sum(agg[1], agg[2], agg[3], name="value", mechanism=SumMechanism.GAUSSIAN)
            frame = session.evaluate(expr, RhoZCDPBudget(share)).toPandas()
            cols = list(q["groupby"])
            rows = [[[_plain(r[c]) for c in cols], float(r["value"])] for _, r in frame.iterrows()]
            results[q["name"]].append(rows)
    import tmlt.analytics
    print(json.dumps({"results": results, "seconds": time.perf_counter() - t0,
                      "version": getattr(tmlt.analytics, "__version__", "0.21.0")}, default=str))


if __name__ == "__main__":
    main()
