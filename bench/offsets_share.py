"""Planned standard errors against the per-query baselines with binning offsets, this checkout vs a base.

    python bench/offsets_share.py [--base REV] [--scale 0.1] [--workdir DIR]

The binning offsets of the SUMs over wide bins take a share of the release's ρ (docs/engine.md,
"Binning offsets").  That share minimised the planner's summed objective, which left TPC-H Q1's
``SUM(l_quantity)`` (two bins, 1..23 and 24..50) planned above its per-query baseline; it is
now the nearest share at which every query keeps its baseline, where one exists
(``dpsql.engine.offsets.within_baselines``).  Plans (free: no data read, no ledger) in both
commits, each in its own process:

* TPC-H SF 0.1, the template workload's line-item view (``bench/people_tpch.py``, person-level
  privacy, ε = 1, δ = 10⁻⁶): every query's planned se / baseline, Q1's in full;
* adult's mixed corpus of ``bench/reported_errors.py`` (26 counts, 5 SUM/AVG, the example's domain);
* adult with ``hours_per_week`` in two bins (1..39, 40..99) and ``SUM(hours_per_week) GROUP BY
  sex`` beside the first n dashboard counts (the test's workload, n = 7, and more).

Prints per workload, per commit, the strategy, the offsets' share of ρ, the largest se / baseline,
the queries above their baseline and the counts' RMSE over their baseline RMSE; no assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from reported_errors import corpora, export

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

PLAN = r"""
import json, re, sys, tempfile
from pathlib import Path
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[2])
import dpsql
assert dpsql.__file__.startswith(sys.argv[1]), dpsql.__file__
from dpsql.privacy.accountant import epsilon_delta_to_rho
from dpsql.sql.split import split_statements
from dpsql.testing import write_config
ADULT = Path(sys.argv[2]).parent / "examples" / "adult"      # this checkout's (an export holds dpsql/ only)
work, what = Path(sys.argv[3]), sys.argv[4]
if what == "tpch":
    import people_tpch as P
    data = P.generate(float(sys.argv[5]))
    sqls = [P.to_sql(g, a, c) for _, g, a, c in P.WORKLOADS["templates"]]
    config = P.write_config(data, 32, 128, work, "templates")
    con = dpsql.connect(config, user="bench", ledger=str(work / "x.ledger"), cache_dir=str(work / "cache"),
                        budget={"rho": float(epsilon_delta_to_rho(1.0, 1e-6))}, workload=sqls)
    report = con.session.plan("lineitem")
elif what == "mixed":      # bench/reported_errors.py's mixed corpus on the example's own domain
    config = write_config(work, queries=json.loads(sys.argv[6]), domain=ADULT / "adult.toml",
                          source={"csv": str(ADULT / "adult.csv")}, planner={"restarts": 1, "seed": 0})
    con = dpsql.connect(config, user="bench")
    report = con.session.plan()
else:
    text = (ADULT / "adult.toml").read_text()
    text = re.sub(r"(\[tables\.adult\.columns\.hours_per_week\][^\[]*?)bin_width = 1", r"\1edges = [1, 40]",
                  text, flags=re.S)
    (work / "adult.toml").write_text(text)
    queries = split_statements((ADULT / "dashboard.sql").read_text())[:int(what)]
    queries.append("SELECT sex, SUM(hours_per_week) FROM adult GROUP BY sex")
    config = write_config(work, queries=queries, domain=work / "adult.toml", source={"csv": str(ADULT / "adult.csv")},
                          planner={"restarts": 1, "seed": 0})
    con = dpsql.connect(config, user="bench")
    report = con.session.plan()
print(json.dumps({"share": report.offsets_rho / report.rho, "operator": report.strategy.operator,
                  "rmse": [u.rmse for u in report.units if u.unit == "counts"][0],
                  "baseline": [u.baseline for u in report.units if u.unit == "counts"][0],
                  "rows": [[q.sql, q.stderr, q.baseline] for q in report.per_query]}))
"""


def plan(root: Path, what: str, scale: float, work: Path) -> dict:
    work.mkdir(parents=True, exist_ok=True)
    mixed = json.dumps(corpora(ROOT, work, ["mixed"])["mixed"][0]) if what == "mixed" else ""
    out = subprocess.run([sys.executable, "-c", PLAN, str(root), str(HERE), str(work), what, str(scale), mixed],
                         check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def short(sql: str) -> str:
    s = " ".join(sql.split())
    s = s.split(" FROM ")[0].replace("SELECT ", "")
    return s[:70]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="HEAD~1")
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--adult", default="5,7,8,10", help="numbers of dashboard counts beside the SUM")
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="dpsql-offsets-share-"))
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "dpsql"],
                                capture_output=True, text=True).stdout.strip())
    base_root = work / "base"
    base = export(args.base, base_root)[:7]
    load0, start = os.getloadavg()[0], time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    cases = ["tpch", "mixed"] + [n for n in args.adult.split(",") if n]
    got = {}
    for case in cases:
        for name, root in (("base", base_root), ("this", ROOT)):
            got[case, name] = plan(root, case, args.scale, work / f"{case}-{name}")
            print(f"planned {case} at {name}", file=sys.stderr, flush=True)
    print(f"{start}–{time.strftime('%H:%M UTC', time.gmtime())}; base {base}, this {head}"
          f"{' + uncommitted dpsql/' if dirty else ''}; {platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}; load {load0:.1f} → {os.getloadavg()[0]:.1f}")
    print("\n| workload | strategy base → this | offsets' share of ρ base → this | max se/baseline base → this "
          "| queries above baseline base → this | counts' RMSE / their baseline RMSE base → this |")
    print("|---|---|---|---|---|---|")
    for case in cases:
        b, t = got[case, "base"], got[case, "this"]
        rb = [se / bl for _, se, bl in b["rows"]]
        rt = [se / bl for _, se, bl in t["rows"]]
        name = {"tpch": "TPC-H templates, line items", "mixed": "adult, reported_errors' mixed corpus"}.get(
            case, f"adult (hours in 2 bins), {case} counts + SUM(hours) by sex")
        print(f"| {name} | {b['operator']} → {t['operator']} | {b['share']:.4f} → {t['share']:.4f} "
              f"| {max(rb):.4f} → {max(rt):.4f} "
              f"| {sum(r > 1 + 1e-9 for r in rb)} of {len(rb)} → {sum(r > 1 + 1e-9 for r in rt)} of {len(rt)} "
              f"| {b['rmse'] / b['baseline']:.4f} → {t['rmse'] / t['baseline']:.4f} |")
    b, t = got["tpch", "base"], got["tpch", "this"]
    print("\nTPC-H line-item queries, planned se / baseline (distinct queries, first of each):")
    print("\n| query | base | this |\n|---|---:|---:|")
    seen = set()
    for (sql, se0, bl), (_, se1, _) in zip(b["rows"], t["rows"]):
        key = short(sql)
        if key in seen:
            continue
        seen.add(key)
        print(f"| {key} | {se0 / bl:.4f} | {se1 / bl:.4f} |")


if __name__ == "__main__":
    main()
