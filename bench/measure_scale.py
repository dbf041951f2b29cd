"""Counting at scale where the data lives (issue 19): dpsql's measurement round against a
hand-written GROUPING SETS query in the same engine, over the same data, in the same run.

* DuckDB: 100M rows (the 48,842 adult rows repeated 2,048 times, typed, one Parquet file),
  30 marginals (20 two-way, 10 three-way, seed 0).  Targets: dpsql's time <= 1.2x the
  hand-written query, dpsql's peak memory <= 4 GB.  Each side runs in a fresh process,
  alternately (hand, dpsql, hand, dpsql), and reports its peak RSS (VmHWM).
* PostgreSQL: 10M rows COPYed into a throw-away cluster (initdb in a temp dir); dpsql's
  PostgresBackend against the hand-written query over the same table, alternately.
* Spark ``local[2]``: 10M rows as a Parquet table; dpsql's SparkBackend against the
  hand-written query through ``spark.sql``, alternately, in one session.

The hand-written query is what an analyst with the codebook writes: categorical columns
grouped as they are, integer ranges binned by ``(x - lo) DIV width``, edge-binned integers
by a CASE chain, and ``GROUP BY GROUPING SETS`` over the same 30 sets.  It does none of
dpsql's work for totality (out-of-domain values, NULL cells, NaN, text read as numbers):
that is the price the ratio shows.

    .venv/bin/python bench/measure_scale.py                      # all three (DuckDB at 100M)
    .venv/bin/python bench/measure_scale.py --engine duckdb --rows 10000000
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import duckdb

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
sys.path.insert(0, str(ROOT / "tests" / "measure"))
import engines  # noqa: E402  (the cross-engine test fixtures: PgServer, Spark session, typed adult)

from dpsql.domain_file import load_domain  # noqa: E402

ADULT_ROWS = 48_842
SCHEMA = load_domain(engines.ADULT_DIR / "adult.toml")["adult"]


def cliques(seed: int = 0) -> list[tuple[str, ...]]:
    attrs = list(SCHEMA.domain.attributes)
    rng = random.Random(seed)
    return (rng.sample(list(itertools.combinations(attrs, 2)), 20)
            + rng.sample(list(itertools.combinations(attrs, 3)), 10))


def parquet(rows: int) -> Path:
    """The typed adult table repeated to ``rows`` (rounded up to whole copies), cached."""
    repeat = -(-rows // ADULT_ROWS)
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"adult_typed_interleaved_x{repeat}.parquet"
    if not path.exists():
        t0 = time.perf_counter()
        con = duckdb.connect()
        con.execute("SET preserve_insertion_order = false")
        tmp = path.with_suffix(".tmp")
        # copies interleaved (row i of copy k follows row i-1 of copy k): a file whose equal
        # rows were adjacent would compress to a few MB and measure no decoding at all
        con.execute(f"CREATE TABLE adult AS {engines.adult_relation(con)}")
        engines.write_parquet(con, f"SELECT a.* FROM range({int(repeat)}) AS r CROSS JOIN adult AS a", tmp)
        con.close()
        tmp.rename(path)
        print(f"# wrote {path.name} ({path.stat().st_size / 1e9:.2f} GB) in {time.perf_counter() - t0:.0f} s",
              flush=True)
    return path


def hand_written(table_sql: str, dialect: str, sets) -> str:
    """The analyst's query (module doc) in ``dialect`` (duckdb, postgres, spark)."""
    div = {"duckdb": "//", "postgres": "/", "spark": "DIV"}[dialect]
    exprs = {}
    for att in SCHEMA.attributes:
        col = f'"{att.name}"' if dialect != "spark" else f"`{att.name}`"
        if att.kind == "categorical":
            exprs[att.name] = col
        elif getattr(att, "edges", None):
            edges = list(att.edges)
            whens = " ".join(f"WHEN {col} < {e} THEN {i}" for i, e in enumerate(edges[1:]))
            exprs[att.name] = f"CASE {whens} ELSE {len(edges) - 1} END"
        else:
            width = int(getattr(att, "bin_width", 1) or 1)
            exprs[att.name] = col if width == 1 else f"({col} - {att.lo}) {div} {width}"
    inner = ", ".join(f"{e} AS {a}" for a, e in exprs.items())
    used = sorted({a for s in sets for a in s}, key=list(exprs).index)
    groups = ", ".join("(" + ", ".join(s) + ")" for s in sets)
    return (f"SELECT {', '.join(used)}, count(*) AS n FROM (SELECT {inner} FROM {table_sql}) AS t "
            f"GROUP BY GROUPING SETS ({groups})")


def load() -> str:
    return f"{os.getloadavg()[0]:.2f}, {os.getloadavg()[1]:.2f}, {os.getloadavg()[2]:.2f}"


# --- DuckDB: one process per side --------------------------------------------------------------

def duck_child(side: str, path: str) -> None:
    """Runs one side in this (fresh) process; prints {"seconds", "rows", "peak_mb"}.  The
    time is that of the call (modules already imported, as in a running engine); the peak
    is this process's VmHWM (reset by exec, unlike ru_maxrss, which keeps the parent's)."""
    sets = cliques()
    from dpsql.measure.backend import DuckDBBackend
    from dpsql.measure.source import Source
    t0 = time.perf_counter()
    if side == "dpsql":
        backend = DuckDBBackend({"adult": Source.from_config({"parquet": path}, Path(path).parent)})
        counts = backend.count_marginals(SCHEMA, sets)
        backend.close()
        rows = int(next(iter(counts.values())).sum())
    else:
        con = duckdb.connect()
        result = con.execute(hand_written(f"read_parquet('{path}')", "duckdb", sets)).fetchall()
        con.close()
        rows = sum(r[-1] for r in result) // len(sets)
    seconds = time.perf_counter() - t0
    status = Path("/proc/self/status").read_text()
    peak_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    print(json.dumps({"seconds": seconds, "rows": rows, "peak_mb": peak_kb / 1024}))


def run_child(args: list[str]) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], stdout=subprocess.PIPE, check=True).stdout
    return json.loads(out.decode().strip().splitlines()[-1])


def bench_duckdb(rows: int, reps: int) -> dict:
    path = parquet(rows)
    res = {"hand": [], "dpsql": []}
    for _ in range(reps):
        for side in ("hand", "dpsql"):
            r = run_child(["--child", side, str(path)])
            res[side].append(r)
            print(f"#   duckdb {side:5s} {r['seconds']:7.1f} s  peak {r['peak_mb']:6.0f} MB  rows {r['rows']:,}",
                  flush=True)
    return res


def alternate(engine: str, hand, backend, sets, reps: int) -> dict:
    """The hand-written query (``hand()`` returns its rows) and dpsql's backend on the same
    engine, alternating ``reps`` times in this process; each run's time and total count."""
    res = {"hand": [], "dpsql": []}
    for _ in range(reps):
        t0 = time.perf_counter()
        result = hand()
        res["hand"].append({"seconds": time.perf_counter() - t0, "rows": sum(r[-1] for r in result) // len(sets)})
        t0 = time.perf_counter()
        counts = backend.count_marginals(SCHEMA, sets)
        res["dpsql"].append({"seconds": time.perf_counter() - t0, "rows": int(next(iter(counts.values())).sum())})
        for side in ("hand", "dpsql"):
            r = res[side][-1]
            print(f"#   {engine} {side:5s} {r['seconds']:7.1f} s  rows {r['rows']:,}", flush=True)
    return res


# --- PostgreSQL ------------------------------------------------------------------------------

def bench_postgres(rows: int, reps: int) -> dict:
    import psycopg
    from dpsql.measure.postgres import PostgresBackend
    from dpsql.measure.source import Source

    path = parquet(rows)
    server = engines.PgServer({"shared_buffers": "1GB", "work_mem": "256MB",
                               "max_wal_size": "4GB", "checkpoint_timeout": "30min"}).start()
    try:
        con = duckdb.connect()
        rel = f"SELECT * FROM read_parquet('{path}')"
        server.execute(f"CREATE UNLOGGED TABLE adult ({engines.pg_ddl(con, rel)})")
        t0 = time.perf_counter()
        csv = OUT / f"{path.stem}.csv"
        if not csv.exists():
            con.execute(f"COPY ({rel}) TO '{csv}' (FORMAT csv, HEADER false)")
        with psycopg.connect(server.url, autocommit=True) as conn:
            with conn.cursor().copy("COPY adult FROM STDIN (FORMAT csv)") as copy, open(csv, "rb") as fh:
                while chunk := fh.read(1 << 22):
                    copy.write(chunk)
            conn.execute("VACUUM ANALYZE adult")
        print(f"# loaded {rows:,} rows into PostgreSQL in {time.perf_counter() - t0:.0f} s", flush=True)
        sets = cliques()
        sql = hand_written("adult", "postgres", sets)
        backend = PostgresBackend({"adult": Source.from_config(
            {"postgres": server.url, "table": "adult", "data_version": 1, "statement_timeout": 3600}, OUT)})
        def hand() -> list:
            with psycopg.connect(server.url) as conn:
                return conn.execute(sql).fetchall()

        try:
            return alternate("postgres", hand, backend, sets, reps)
        finally:
            backend.close()
    finally:
        server.stop()


# --- Spark local[2] ----------------------------------------------------------------------------

def bench_spark(rows: int, reps: int) -> dict:
    from dpsql.measure.source import Source
    from dpsql.measure.spark import SparkBackend

    path = parquet(rows)
    warehouse = OUT / "spark-warehouse"
    spark = engines.spark_session(warehouse)
    spark.conf.set("spark.sql.shuffle.partitions", "8")
    spark.sql("DROP TABLE IF EXISTS adult_scale")
    spark.sql(f"CREATE TABLE adult_scale USING parquet LOCATION '{path}'")
    sets = cliques()
    sql = hand_written("adult_scale", "spark", sets)
    backend = SparkBackend({"adult": Source.from_config({"spark": "local[2]", "table": "adult_scale"}, OUT)})
    try:
        res = alternate("spark", lambda: spark.sql(sql).collect(), backend, sets, reps)
    finally:
        backend.close()
        spark.sql("DROP TABLE IF EXISTS adult_scale")
        spark.stop()
    return res


def report(engine: str, rows: int, res: dict, memory_target: bool) -> str:
    hand = min(r["seconds"] for r in res["hand"])
    mine = min(r["seconds"] for r in res["dpsql"])
    n = {r["rows"] for side in res.values() for r in side}
    hand_s = ", ".join(f"{r['seconds']:.1f}" for r in res["hand"])
    mine_s = ", ".join(f"{r['seconds']:.1f}" for r in res["dpsql"])
    target = " (target <= 1.2x)" if memory_target else ""
    line = f"| {engine} | {sorted(n)[0]:,} | {hand_s} | {mine_s} | {mine / hand:.2f}x{target} |"
    if memory_target:
        peak = max(r["peak_mb"] for r in res["dpsql"])
        hand_peak = max(r["peak_mb"] for r in res["hand"])
        line += f" {peak / 1024:.2f} GB (hand-written {hand_peak / 1024:.2f} GB; target <= 4 GB) |"
    else:
        line += " (in the engine's server) |"
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--engine", choices=["duckdb", "postgres", "spark", "all"], default="all")
    ap.add_argument("--rows", type=int, help="rows (default: 100M for DuckDB, 10M for PostgreSQL and Spark)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        duck_child(*args.child)
        return
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True,
                         text=True).stdout.strip()
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; commit {rev}; {os.cpu_count()} cores; "
          f"load {load()}", flush=True)
    lines = []
    engines_run = ["duckdb", "postgres", "spark"] if args.engine == "all" else [args.engine]
    for engine in engines_run:
        rows = args.rows or (100_000_000 if engine == "duckdb" else 10_000_000)
        rows = -(-rows // ADULT_ROWS) * ADULT_ROWS
        before = load()
        res = {"duckdb": bench_duckdb, "postgres": bench_postgres, "spark": bench_spark}[engine](rows, args.reps)
        lines.append(report(engine, rows, res, engine == "duckdb") + f" {before} / {load()} |")
    print("| engine | rows | hand-written s | dpsql s | dpsql / hand (best) | dpsql peak memory "
          "| load before / after |")
    print("|---|---:|---|---|---:|---|---|")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
