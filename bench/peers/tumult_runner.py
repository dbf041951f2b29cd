"""Tumult Analytics' side of bench/star.py, run under bench/peers/.venv-tumult.

Reads one job (JSON on stdin) and prints one JSON report (the last line of stdout):

    {"fact": "flights.parquet",
     "public": {"airlines": {"csv": "airlines.csv", "rename": {"name": "airline"}}, ...},
     "rho": 0.0243, "trials": 3,
     "queries": [{"name": "q01", "joins": ["airlines"], "filter": "month <= 6" | null,
                  "groupby": ["airline"], "keys": [["American Airlines Inc."], ...]}, ...]}

Each trial is a fresh ``Session`` over the fact table with the whole budget ``rho``
(``RhoZCDPBudget``, protected change ``AddOneRow``, the unit dpsql's ``privacy_unit = "row"``
protects); each query spends ``rho / len(queries)`` (Tumult's way to answer a dashboard), joins
the public tables with ``join_public`` on their common columns (renamed so: ``faa`` becomes
``dest``), and counts with the Gaussian mechanism over the given public key set.
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
             .config("spark.driver.memory", "2g").config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    from tmlt.analytics import AddOneRow, CountMechanism, KeySet, QueryBuilder, RhoZCDPBudget, Session
    fact = spark.read.parquet(job["fact"]).cache()
    public = {}
    for name, spec in job["public"].items():
        df = spark.read.csv(spec["csv"], header=True, inferSchema=True, nullValue=spec.get("null", ""))
        for old, new in spec.get("rename", {}).items():
            df = df.withColumnRenamed(old, new)
        public[name] = df.cache()
    share = job["rho"] / len(job["queries"])
    results = {q["name"]: [] for q in job["queries"]}
    t0 = time.perf_counter()
    for _ in range(job["trials"]):
        session = Session.from_dataframe(privacy_budget=RhoZCDPBudget(job["rho"]), source_id="fact",
                                         dataframe=fact, protected_change=AddOneRow())
        for name, df in public.items():
            session.add_public_dataframe(name, df)
        for q in job["queries"]:
            builder = QueryBuilder("fact")
            for table in q["joins"]:
                builder = builder.join_public(table)
            if q.get("filter"):
                builder = builder.filter(q["filter"])
            if q["groupby"]:
                keys = KeySet.from_tuples([tuple(k) for k in q["keys"]], q["groupby"])
                query = builder.groupby(keys).count(mechanism=CountMechanism.GAUSSIAN)
            else:
                query = builder.count(mechanism=CountMechanism.GAUSSIAN)
            frame = session.evaluate(query, RhoZCDPBudget(share)).toPandas()
            cols = list(q["groupby"])
            rows = [[[_plain(r[c]) for c in cols], float(r["count"])] for _, r in frame.iterrows()]
            results[q["name"]].append(rows)
    import tmlt.analytics
    print(json.dumps({"results": results, "seconds": time.perf_counter() - t0,
                      "version": getattr(tmlt.analytics, "__version__", "0.21.0")}, default=str))


if __name__ == "__main__":
    main()
