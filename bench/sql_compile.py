"""Compile time of typical dashboard queries (SQL front-end issue).

Compiles ~20 dashboard queries over examples/adult (counts by category, crosstabs,
range filters, AVG, a quantile, a disjunction, HAVING/ORDER BY/LIMIT) and reports each
query's median compile time over repeated runs, plus the median over queries, against
the 5 ms target.  Compilation reads only the SQL and the declared domain, so this is the
whole cost a query pays before planning.  Times are wall clock and CPU time of this
process (the machine is shared; CPU time is the fairer figure).

    .venv/bin/python bench/sql_compile.py [--repeat 30] [--append bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import subprocess
import time
from pathlib import Path

from dpsql.domain_file import load_domain
from dpsql.sql import compile as compile_sql

TARGET_MS = 5.0
ROOT = Path(__file__).resolve().parents[1]

QUERIES = [
    "SELECT COUNT(*) FROM adult",
    "SELECT sex, COUNT(*) FROM adult GROUP BY sex",
    "SELECT race, COUNT(*) FROM adult GROUP BY race",
    "SELECT education, COUNT(*) FROM adult GROUP BY education ORDER BY 2 DESC",
    "SELECT occupation, COUNT(*) FROM adult GROUP BY occupation",
    "SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income",
    "SELECT race, income, COUNT(*) FROM adult GROUP BY race, income",
    "SELECT workclass, income, COUNT(*) FROM adult GROUP BY workclass, income",
    "SELECT age, COUNT(*) FROM adult GROUP BY age",
    "SELECT COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40",
    "SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40 GROUP BY sex",
    "SELECT income, COUNT(*) FROM adult WHERE hours_per_week < 35 GROUP BY income",
    "SELECT income, COUNT(*) FROM adult WHERE capital_gain > 0 GROUP BY income",
    "SELECT sex, AVG(age), AVG(hours_per_week) FROM adult GROUP BY sex",
    "SELECT education_num, AVG(hours_per_week) FROM adult WHERE sex = 'Female' GROUP BY education_num",
    "SELECT age / 10 AS decade, COUNT(*) FROM adult GROUP BY decade ORDER BY decade",
    "SELECT sex, 100.0 * COUNT(*) FILTER (WHERE income = '>50K') / COUNT(*) AS pct FROM adult GROUP BY sex",
    "SELECT income, median(age) FROM adult GROUP BY income",
    "SELECT COUNT(*) FROM adult WHERE sex = 'Female' OR income = '>50K'",
    "SELECT native_country, COUNT(*) FROM adult GROUP BY native_country HAVING COUNT(*) > 100 "
    "ORDER BY 2 DESC LIMIT 10",
]


def measure(repeat: int):
    catalog = load_domain(ROOT / "examples" / "adult" / "adult.toml")
    rows = []
    for sql in QUERIES:
        compile_sql(sql, catalog)  # warm caches (imports, sqlglot dialect tables)
        wall, cpu = [], []
        for _ in range(repeat):
            w0, c0 = time.perf_counter(), time.process_time()
            compile_sql(sql, catalog)
            cpu.append(time.process_time() - c0)
            wall.append(time.perf_counter() - w0)
        rows.append((sql, statistics.median(wall) * 1e3, statistics.median(cpu) * 1e3))
    return rows


def report(rows) -> list[str]:
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    med_wall = statistics.median(r[1] for r in rows)
    med_cpu = statistics.median(r[2] for r in rows)
    lines = [
        "", "## SQL front end: compile time of dashboard queries (bench/sql_compile.py)", "",
        f"{now}; machine: 2-core AMD EPYC VM, 24 GB; Python {platform.python_version()}; `uptime`: {load}",
        "",
        f"Median over {len(rows)} queries of each query's median compile time: **{med_wall:.2f} ms wall, "
        f"{med_cpu:.2f} ms CPU** (target ≤ {TARGET_MS:.0f} ms: "
        f"{'met' if med_wall <= TARGET_MS else 'NOT met'}); slowest query {max(r[1] for r in rows):.2f} ms.",
        "", "| query | wall ms | CPU ms |", "|---|---:|---:|",
    ]
    for sql, w, c in rows:
        lines.append(f"| `{sql if len(sql) <= 90 else sql[:87] + '...'}` | {w:.2f} | {c:.2f} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--append", type=Path, default=None,
                        help="append a markdown section to this results file")
    args = parser.parse_args()
    rows = measure(args.repeat)
    lines = report(rows)
    print("\n".join(lines))
    if args.append is not None:
        if not args.append.exists():
            args.append.write_text("# Benchmark results\n")
        with open(args.append, "a") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
