"""Hostile and huge statements: compile (or refusal) time against the 2 s bound (issue 21).

Each statement is compiled over examples/adult; the figure is the median wall and CPU time
of ``dpsql.sql.compile`` (what every front end calls) over a few runs, next to the 2 s bound
and, as a yardstick measured in the same run, the time sqlglot alone needs to tokenize the
same text (a lower bound for any front end built on it).  The old leading-EXPLAIN regex
(``^(?:\\s+|--…|/\\*.*?\\*/)*explain…``, removed in issue 21) is timed side by side on a
few leading newlines to show the exponential backtracking the lexer replaced.

    .venv/bin/python bench/sql_hostile.py [--repeat 3] [--append bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import re
import statistics
import subprocess
import time
from pathlib import Path

import sqlglot

from dpsql.domain_file import load_domain
from dpsql.errors import Error
from dpsql.sql import compile as compile_sql

BOUND_S = 2.0
ROOT = Path(__file__).resolve().parents[1]
OLD_EXPLAIN = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*explain(\s+analyze)?(\s+verbose)?\s+",
                         re.IGNORECASE | re.DOTALL)


def cases() -> list[tuple[str, str]]:
    labels = ["'Bachelors'", "'HS-grad'", "'Masters'", "'Doctorate'", "'11th'", "'Some-college'"]
    n = 100_000
    out = [
        ("100,000-item IN list (ages)", "SELECT COUNT(*) FROM adult WHERE age IN ("
         + ", ".join(str(17 + i % 74) for i in range(n)) + ")"),
        ("100,000-item IN list (labels)", "SELECT sex, COUNT(*) FROM adult WHERE education IN ("
         + ", ".join(labels[i % len(labels)] for i in range(n)) + ") GROUP BY sex"),
        ("100,000 distinct values IN list", "SELECT COUNT(*) FROM adult WHERE age IN ("
         + ", ".join(str(17 + i) for i in range(n)) + ")"),
    ]
    filler = "SELECT COUNT(*) FROM adult WHERE education IN ("
    items, size = [], len(filler)
    while size < 1_000_000:
        items.append(labels[len(items) % len(labels)])
        size += len(items[-1]) + 2
    out.append(("1 MB statement: IN list of labels", filler + ", ".join(items) + ")"))
    ors, size = [], 0
    while size < 1_000_000:
        ors.append(f"age = {17 + len(ors) % 70}")
        size += len(ors[-1]) + 4
    out.append(("1 MB statement: OR of equalities", "SELECT COUNT(*) FROM adult WHERE " + " OR ".join(ors)))
    out.append(("1 MB statement: whitespace and comments", "SELECT COUNT(*) FROM adult "
                + "/* padding */\n  -- more\n" * 40_000))
    out.append(("1 MB statement: one string literal", "SELECT COUNT(*) FROM adult WHERE sex = '"
                + "x" * 1_000_000 + "'"))
    out.append(("100,000 leading newlines + EXPLAIN", "\n" * 100_000 + "EXPLAIN SELECT COUNT(*) FROM adult"))
    out.append(("500 nested parentheses", "SELECT COUNT(*) FROM adult WHERE " + "(" * 500 + "age > 3"
                + ")" * 500))
    out.append(("5,000-term OR", "SELECT COUNT(*) FROM adult WHERE "
                + " OR ".join(f"age = {17 + i % 70}" for i in range(5000))))
    out.append(("3,000-term AND", "SELECT COUNT(*) FROM adult WHERE "
                + " AND ".join(f"age > {i % 10}" for i in range(3000))))
    return out


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    result = fn()
    return time.perf_counter() - w0, time.process_time() - c0, result


def measure(repeat: int):
    catalog = load_domain(ROOT / "examples" / "adult" / "adult.toml")
    compile_sql("SELECT COUNT(*) FROM adult", catalog)
    rows = []
    for label, sql in cases():
        walls, cpus, outcome = [], [], ""
        for _ in range(repeat):
            def run():
                try:
                    compile_sql(sql, catalog)
                    return "compiled"
                except Error as err:
                    return f"refused {err.sqlstate}"
            w, c, outcome = _timed(run)
            walls.append(w)
            cpus.append(c)
        tok, _, _ = _timed(lambda: sqlglot.tokenize(sql, read="postgres"))
        rows.append((label, len(sql), outcome, statistics.median(walls), statistics.median(cpus), tok))
    regex = []
    for n in (12, 16, 20):
        text = "\n" * n + "SELECT 1"          # no EXPLAIN: the regex must fail, and backtracks
        w, _, _ = _timed(lambda: OLD_EXPLAIN.match(text))
        regex.append((n, w))
    return rows, regex


def report(rows, regex) -> list[str]:
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip()
    except OSError:
        commit = "?"
    worst = max(r[3] for r in rows)
    lines = [
        "", "## SQL front end: hostile and huge statements (bench/sql_hostile.py)", "",
        f"{now}; commit {commit}; machine: 2-core AMD EPYC VM, 24 GB; Python {platform.python_version()}; "
        f"`uptime`: {load}", "",
        f"Slowest compile or refusal: **{worst:.2f} s wall** against the {BOUND_S:.0f} s bound "
        f"({'met' if worst <= BOUND_S else 'NOT met'}).  Yardstick: sqlglot's tokenizer alone on the same text.",
        "", "| statement | bytes | outcome | wall s | CPU s | sqlglot tokenize s |", "|---|---:|---|---:|---:|---:|",
    ]
    for label, size, outcome, w, c, tok in rows:
        lines.append(f"| {label} | {size:,} | {outcome} | {w:.3f} | {c:.3f} | {tok:.3f} |")
    lines += ["", "The removed leading-EXPLAIN regex on n leading newlines (no EXPLAIN), same run: "
              + ", ".join(f"n = {n}: {w:.3f} s" for n, w in regex)
              + " (each 4 more newlines multiply it by ~16; 40 never finished)."]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--append", type=Path, default=None, help="append a markdown section to this file")
    args = parser.parse_args()
    rows, regex = measure(args.repeat)
    lines = report(rows, regex)
    print("\n".join(lines))
    if args.append is not None:
        with open(args.append, "a") as fh:
            fh.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
