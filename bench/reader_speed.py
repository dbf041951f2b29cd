"""Cost of the total CSV reader (issue 15) against the reader it replaced.

Encodes a CSV with the adult schema (examples/adult replicated to ``--rows`` rows, built
once in bench/out/) into cell indices, as the first measurement round does:

* ``total reader``: dpsql.measure.backend.DuckDBBackend (own framing + declared dialect +
  RE2 field grammar + number grammar; docs/privacy.md §8.1);
* ``sniffing reader (old)``: DuckDB ``read_csv(header=true, all_varchar=true)`` (dialect
  sniffed from the rows) with ``TRY_CAST`` and the same bin CASEs — the pre-issue-15 path,
  which one malformed row could make fail or shift.

Runs alternate (the machine is shared: compare the ratio, not the seconds).  Reference:
the old path's time; the target is a small constant factor for a reader that is total.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import duckdb
from sqlglot import exp

from dpsql.domain_file import load_domain
from dpsql.measure.cellsql import index_sql
from dpsql.measure.backend import DuckDBBackend
from dpsql.measure.source import Source

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out"


def build(rows: int) -> Path:
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"adult_{rows}.csv"
    if not path.exists():
        lines = (ROOT / "examples" / "adult" / "adult.csv").read_bytes().split(b"\n")
        header, body = lines[0], [x for x in lines[1:] if x]
        reps = -(-rows // len(body))
        path.write_bytes(b"\n".join([header] + (body * reps)[:rows]) + b"\n")
    return path


def old_reader(path: Path, schema) -> float:
    scan = exp.func("read_csv", exp.Literal.string(str(path)),
                    exp.EQ(this=exp.column("header"), expression=exp.true()),
                    exp.EQ(this=exp.column("all_varchar"), expression=exp.true()))
    cols = []
    for i, a in enumerate(schema.attributes):
        col = exp.column(a.name, quoted=True)
        raw = col if a.kind == "categorical" else exp.TryCast(this=col, to=exp.DataType.build("DOUBLE"))
        cols.append(exp.alias_(index_sql(a, raw), f"c{i}"))
    con = duckdb.connect()
    t0 = time.perf_counter()
    con.execute("CREATE TEMP TABLE cells AS " + exp.select(*cols).from_(scan).sql("duckdb"))
    dt = time.perf_counter() - t0
    con.close()
    return dt


def new_reader(path: Path, schema) -> float:
    backend = DuckDBBackend({"adult": Source("csv", path)})
    t0 = time.perf_counter()
    backend._encode(schema)   # framing, hashing, fields, cells: what the first round pays
    dt = time.perf_counter() - t0
    backend.close()
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    path = build(args.rows)
    schema = load_domain(ROOT / "examples" / "adult" / "adult.toml")["adult"]
    old, new = [], []
    for _ in range(args.repeats):
        old.append(old_reader(path, schema))
        new.append(new_reader(path, schema))
    mo, mn = statistics.median(old), statistics.median(new)
    size = path.stat().st_size / 1e6
    print(f"{args.rows:,} rows, {size:.0f} MB, DuckDB {duckdb.__version__}, median of {args.repeats}")
    print(f"sniffing reader (old, reference): {mo:6.2f} s")
    print(f"total reader:                     {mn:6.2f} s   ({mn / mo:.2f}x the old reader)")


if __name__ == "__main__":
    main()
