"""Measuring a fine timestamp column (issue 35 item 4): a minute-binned TIMESTAMP column of
100,800 cells (ten weeks of minutes), counted by ``DuckDBBackend.count_marginals`` (what
``dpsql measure`` runs for its first round), from a DuckDB table and from the same values as
ISO text in a CSV, by

* ``arithmetic``: the reader as it is (``cellsql.time_arithmetic_sql``: one expression per row);
* ``chain (previous)``: the same reader with the arithmetic switched off, i.e. the chain of
  ``x < start`` comparisons over every bin start that it replaced (``cellsql.time_index_sql``'s
  fallback, unchanged code), built and run in the same process;
* ``DuckDB exact``: ``GROUP BY date_trunc('minute', ts)`` on the same table, the engine's own
  time for the question without totality or the declared bins.

Then months of an instant: a TIMESTAMPTZ column on a month axis in Europe/Paris (30 years,
360 bins, 60 runs of one offset; 100 years, 138 runs) and in UTC (100 years, 1,200 bins), and
days in Paris over the century (36,525 bins, 138 runs), read by the arithmetic
(``cellsql._instant_months_cell``: the local day of the instant at its run's offset) and by
the chain it replaced, next to DuckDB's exact ``GROUP BY date_trunc('month', ts AT TIME ZONE
zone)``.

The counts of the two readers are compared (they must be identical).  The machine is shared:
read the ratios.  Usage: ``python bench/time_reader.py [--rows 1000000] [--only minute|months]``.
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import duckdb
import numpy as np

from dpsql.domain import TableSchema
from dpsql.measure import cellsql
from dpsql.measure.backend import DuckDBBackend
from dpsql.measure.source import Source
from dpsql.temporal import TimestampRange

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"
ATT = TimestampRange("ts", "2013-01-01", "2013-03-11", "minute", nullable=True)   # 100,801 cells


def build(rows: int) -> tuple[Path, Path]:
    """A DuckDB table and a CSV of ``rows`` timestamps, to the second, over the period and a
    little around it (out-of-period rows go to the invalid place), 1% NULL."""
    OUT.mkdir(parents=True, exist_ok=True)
    db, csv = OUT / f"minutes_{rows}.duckdb", OUT / f"minutes_{rows}.csv"
    if not db.exists() or not csv.exists():
        for p in (db, csv):
            p.unlink(missing_ok=True)
        con = duckdb.connect(str(db))
        con.execute(f"""CREATE TABLE t AS SELECT CASE WHEN i % 100 = 0 THEN NULL ELSE
                        TIMESTAMP '2012-12-31 00:00:00' + to_seconds(CAST(hash(i) % (72 * 86400) AS BIGINT))
                        END AS ts FROM range({rows}) r(i)""")
        con.execute(f"COPY t TO '{csv}' (HEADER, DELIMITER ',')")
        con.close()
    return db, csv


def count(spec: dict, arithmetic: bool, att: TimestampRange = ATT) -> tuple[float, np.ndarray]:
    saved = cellsql.time_arithmetic_sql
    if not arithmetic:
        cellsql.time_arithmetic_sql = lambda *args: None      # the chain, as before
    try:
        backend = DuckDBBackend({"t": Source.from_config(spec, OUT)}, threads=2)
        t0 = time.perf_counter()
        counts = backend.count_marginals(TableSchema("t", (att,)), [(att.name,)])[(att.name,)]
        elapsed = time.perf_counter() - t0
        backend.close()
    finally:
        cellsql.time_arithmetic_sql = saved
    return elapsed, counts


MONTH_AXES = [TimestampRange("ts", "1995-01-01", "2025-01-01", "month", nullable=True, timezone="Europe/Paris"),
              TimestampRange("ts", "1925-01-01", "2025-01-01", "month", nullable=True),
              # more than 64 runs: the arithmetic when they hold 8 bins each (cellsql._BINS_PER_RUN)
              TimestampRange("ts", "1925-01-01", "2025-01-01", "month", nullable=True, timezone="Europe/Paris"),
              TimestampRange("ts", "1925-01-01", "2025-01-01", "day", nullable=True, timezone="Europe/Paris")]


def build_instants(rows: int) -> Path:
    """A DuckDB table of ``rows`` TIMESTAMPTZ values spread over 1920..2030 (the axes' periods
    and a little around them), to the second, 1% NULL."""
    OUT.mkdir(parents=True, exist_ok=True)
    db = OUT / f"instants_{rows}.duckdb"
    if not db.exists():
        con = duckdb.connect(str(db))
        con.execute(f"""CREATE TABLE t AS SELECT CASE WHEN i % 100 = 0 THEN NULL ELSE
                        TIMESTAMPTZ '1920-01-01 00:00:00+00' + to_seconds(CAST(hash(i) % {110 * 365 * 86400} AS BIGINT))
                        END AS ts FROM range({rows}) r(i)""")
        con.close()
    return db


def exact_months(db: Path, zone: str, unit: str = "month") -> float:
    con = duckdb.connect(str(db), read_only=True)
    t0 = time.perf_counter()
    con.execute(f"SELECT date_trunc('{unit}', ts AT TIME ZONE '{zone}') m, COUNT(*) FROM t GROUP BY 1").fetchall()
    elapsed = time.perf_counter() - t0
    con.close()
    return elapsed


def months(rows: int) -> None:
    db = build_instants(rows)
    print(f"\n{rows:,} TIMESTAMPTZ rows on zoned axes; load {os.getloadavg()[0]:.1f}")
    print(f"{'axis':<42} {'arithmetic':>11} {'chain (previous)':>17} {'ratio':>7} {'DuckDB exact':>13}")
    for att in MONTH_AXES:
        spec = {"duckdb": str(db), "table": "t"}
        # interleaved, best of three each: the first count in a process pays for warming up
        runs_a, runs_b = [], []
        for _ in range(3):
            runs_b.append(count(spec, False, att))
            runs_a.append(count(spec, True, att))
        (fast, a), (slow, b) = min(runs_a, key=lambda r: r[0]), min(runs_b, key=lambda r: r[0])
        assert np.array_equal(a, b), "the two readers disagree"
        runs = len(cellsql._offset_runs(att))
        label = f"{att.timezone} {att.bin}s, {len(att._starts):,} bins, {runs} runs"
        duck = exact_months(db, att.timezone, att.bin)
        print(f"{label:<42} {fast:>10.2f}s {slow:>16.2f}s {slow / fast:>6.1f}x {duck:>12.2f}s"
              f"   (counts identical, {int(a[:-1].sum()):,} rows in the period)")
    print(f"load {os.getloadavg()[0]:.1f}")


def exact(db: Path) -> float:
    con = duckdb.connect(str(db), read_only=True)
    t0 = time.perf_counter()
    con.execute("SELECT date_trunc('minute', ts) m, COUNT(*) FROM t GROUP BY 1").fetchall()
    elapsed = time.perf_counter() - t0
    con.close()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--only", choices=["minute", "months"])
    args = parser.parse_args()
    if args.only != "minute":
        months(args.rows)
    if args.only == "months":
        return
    db, csv = build(args.rows)
    print(f"{args.rows:,} rows, minute column of {ATT.size:,} cells; load {os.getloadavg()[0]:.1f}")
    print(f"{'source':<14} {'arithmetic':>11} {'chain (previous)':>17} {'ratio':>7}")
    for name, spec in (("DuckDB table", {"duckdb": str(db), "table": "t"}),
                       ("CSV text", {"csv": str(csv), "null": [""]})):
        fast, a = count(spec, True)
        slow, b = count(spec, False)
        assert np.array_equal(a, b), "the two readers disagree"
        print(f"{name:<14} {fast:>10.2f}s {slow:>16.2f}s {slow / fast:>6.0f}x   (counts identical, "
              f"{int(a[:-1].sum()):,} rows in the period)")
    print(f"DuckDB exact GROUP BY date_trunc('minute', ts): {exact(db):.2f}s; load {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
