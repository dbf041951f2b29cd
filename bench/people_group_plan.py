"""Group bounds in the plan: expected and observed error of a people workload whose views
declare ``group_by``/``max_groups``/``max_rows_per_group`` (issue 32, gap 1).

    python bench/people_group_plan.py --case shop|tpch [--trials 3] [--root DIR] [--data DIR]

``--root`` imports dpsql from another checkout (e.g. main before a change), so the same
script measures both sides.  Cases:

* ``shop``: examples/shop (its dashboard, its bounds), with orders bounded to 4 per status
  (g = 3, every status; r = 4: S = 5.66 < k = 8) and line items to 12 per return flag
  (g = 3, r = 12: S = 18.8 < k = 32).
* ``tpch``: bench/people_tpch.py's dashboard and bounds (32 orders, 128 line items per
  customer) on its SF 0.1 files (``--data``, made by that bench), with orders bounded to 10
  per priority (g = 5, r = 10; S = 17.4 < 32) and line items to 24 per ship mode (g = 7,
  r = 24; S = 54.3 < 128).

The bounds were read off the data's per-person histograms (a bench choice, not a private
one: ``dpsql bound`` is the private way).  Per trial a fresh ledger measures every view at its
share of ε = 1 (δ = 1e-6) and answers the workload.  Reported: each view's share, the row
factor of its planned noise (√rows_sq) and the plan's expected standard error per query;
the observed RMSE over trials of each query against (a) the truncated views' own answers (one
run at ρ = 10⁶, whose noise is negligible: the error the plan predicts, noise only) and (b)
the exact answers over the full tables (DuckDB; the truncation bias both sides share is in
it).  Counts are summarised over every row of every COUNT query; SUMs per query.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", choices=("shop", "tpch"), required=True)
    p.add_argument("--trials", type=int, default=3)
    p.add_argument("--root", default=str(HERE.parent), help="the checkout dpsql is imported from")
    p.add_argument("--data", default=str(HERE / "out" / "tpch-sf0.1"), help="people_tpch's prepared files")
    p.add_argument("--plan-only", action="store_true", help="the plan's figures only: measure nothing")
    p.add_argument("--out", default=None, help="JSON output (default bench/out/people_group_plan_<case>.json)")
    return p.parse_args()


ARGS = _args()
sys.path.insert(0, str(Path(ARGS.root).resolve()))
sys.path.insert(1, str(HERE))

import duckdb  # noqa: E402

import dpsql  # noqa: E402

EPSILON, DELTA = 1.0, 1e-6


def _shop(workdir: Path) -> tuple[Path, list[str], Path]:
    src = HERE.parent / "examples" / "shop"
    for f in src.iterdir():
        if f.suffix in (".toml", ".sql", ".parquet"):
            shutil.copy(f, workdir / f.name)
    text = (workdir / "dpsql.toml").read_text()
    # the example's own group bounds and truncation slice out: this case sets its bounds below
    text = re.sub(r"(?m)^(group_by|max_groups|max_rows_per_group|truncation_share) = .*\n", "", text)
    text = text.replace("max_rows = 8 ", 'max_rows = 8\ngroup_by = ["status"]\nmax_groups = 3\n'
                        "max_rows_per_group = 4 ", 1)
    text = text.replace("max_rows = 32 ", 'max_rows = 32\ngroup_by = ["returnflag"]\nmax_groups = 3\n'
                        "max_rows_per_group = 12 ", 1)
    assert text.count("group_by") == 2, "examples/shop/dpsql.toml changed: update this bench"
    (workdir / "dpsql.toml").write_text(text)
    sqls = [s.strip() for s in _statements((workdir / "dashboard.sql").read_text())]
    return workdir / "dpsql.toml", sqls, workdir


def _statements(text: str) -> list[str]:
    body = "\n".join(line for line in text.splitlines() if not line.strip().startswith("--"))
    return [s for s in body.split(";") if s.strip()]


def _tpch(workdir: Path) -> tuple[Path, list[str], Path]:
    import people_tpch as pt
    data = Path(ARGS.data)
    config = pt.write_config(data, 32, 128, workdir)
    text = config.read_text()
    text = text.replace("max_rows = 32\n", 'max_rows = 32\ngroup_by = ["o_orderpriority"]\nmax_groups = 5\n'
                        "max_rows_per_group = 10\n", 1)
    text = text.replace("max_rows = 128\n", 'max_rows = 128\ngroup_by = ["l_shipmode"]\nmax_groups = 7\n'
                        "max_rows_per_group = 24\n", 1)
    assert text.count("group_by") == 2, "bench/people_tpch.py's config changed: update this bench"
    config.write_text(text)
    return config, [pt.to_sql(g, a, c) for _, g, a, c in pt.DASHBOARD], data


def _keys(sql: str) -> int:
    """How many leading result columns are the group key (the GROUP BY items)."""
    upper = " ".join(sql.split()).upper()
    return len(upper.split(" GROUP BY ")[1].split(",")) if " GROUP BY " in upper else 0


def _rows(sql: str, rows) -> dict:
    n = _keys(sql)
    return {tuple(r[:n]): tuple(float(x) for x in r[n:]) for r in rows}


def _exact(data: Path, sqls: list[str]) -> list[dict]:
    con = duckdb.connect()
    for t in ("customers", "orders", "lineitem"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM '{data / (t + '.parquet')}'")
    out = [_rows(sql, con.execute(sql).fetchall()) for sql in sqls]
    con.close()
    return out


def _run(config: Path, sqls: list[str], rho: float, ledger: Path, cache: Path, plan: bool):
    con = dpsql.connect(config, user="bench", ledger=str(ledger), cache_dir=str(cache),
                        budget={"rho": rho}, workload=sqls)
    engine = con.session.engine
    views = engine.view_shares(engine.workload_rho())
    info = {}
    if plan:
        for view, share in views.items():
            report = con.session.plan(view)
            info[view] = {"share": float(share), "rows_factor": math.sqrt(engine.rows_sq(view, report.strategy)),
                          "max_rows": engine.config.people.bound(view), "operator": report.strategy.operator,
                          "expected": {q.sql: (q.stderr, q.rows) for q in report.per_query},
                          "baselines": {q.sql: q.baseline for q in report.per_query},
                          "parts": [(q.sql, q.aggregate, q.stderr, q.baseline, q.rows) for q in report.per_query]}
    if ARGS.plan_only:
        con.close()
        return None, info
    for view in views:
        con.session.measure(view)
    cur = con.cursor()
    answers = []
    for sql in sqls:
        cur.execute(sql)
        answers.append(_rows(sql, cur.fetchall()))
    con.close()
    return answers, info


def main() -> None:
    from dpsql.privacy.accountant import epsilon_delta_to_rho
    rho = float(epsilon_delta_to_rho(EPSILON, DELTA))
    workdir = Path(tempfile.mkdtemp(prefix="people_group_plan_"))
    config, sqls, data = (_shop if ARGS.case == "shop" else _tpch)(workdir)
    if ARGS.plan_only:
        _, info = _run(config, sqls, rho, workdir / "plan.ledger", workdir / "cache", plan=True)
        out = {"case": ARGS.case, "root": ARGS.root, "epsilon": EPSILON, "delta": DELTA, "plan_only": True,
               "views": {v: {k: x for k, x in d.items() if k not in ("expected", "baselines", "parts")}
                         for v, d in info.items()},
               "queries": [{"sql": s, "aggregate": a, "view": v, "expected": e, "baseline": b, "rows": n}
                           for v, d in info.items() for s, a, e, b, n in d["parts"]]}
        path = Path(ARGS.out) if ARGS.out else HERE / "out" / f"people_group_plan_{ARGS.case}_plan.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(out, indent=1))
        print(json.dumps(out["views"], indent=1))
        shutil.rmtree(workdir, ignore_errors=True)
        return
    exact = _exact(data, sqls)
    t0 = time.perf_counter()
    truth, _ = _run(config, sqls, 1e6, workdir / "truth.ledger", workdir / "cache-truth", plan=False)
    trials, info = [], {}
    for t in range(ARGS.trials):
        answers, got = _run(config, sqls, rho, workdir / f"t{t}.ledger", workdir / "cache", plan=t == 0)
        info = info or got
        trials.append(answers)
    seconds = time.perf_counter() - t0
    rows = []
    for i, sql in enumerate(sqls):
        width = len(next(iter(truth[i].values())))
        zero = (0.0,) * width
        noise = [a - b for trial in trials for k, v in truth[i].items() for a, b in zip(trial[i].get(k, zero), v)]
        full = [a - b for trial in trials for k in truth[i]
                for a, b in zip(trial[i].get(k, zero), exact[i].get(k, zero))]
        expected = next((e for v in info.values() for s, e in v["expected"].items() if s.strip() == sql.strip()),
                        None)
        rows.append({"sql": sql, "count": "COUNT(" in sql.upper() and "SUM(" not in sql.upper()
                     and "AVG(" not in sql.upper(), "cells": len(truth[i]),
                     "expected": expected[0] if expected else None,
                     "noise_rmse": math.sqrt(sum(x * x for x in noise) / len(noise)),
                     "full_rmse": math.sqrt(sum(x * x for x in full) / len(full))})
    counts = [r for r in rows if r["count"] and r["expected"] is not None]
    summary = {
        "expected_count_rmse": math.sqrt(sum(r["expected"] ** 2 * r["cells"] for r in counts)
                                         / sum(r["cells"] for r in counts)),
        "noise_count_rmse": math.sqrt(sum(r["noise_rmse"] ** 2 * r["cells"] for r in counts)
                                      / sum(r["cells"] for r in counts)),
        "full_count_rmse": math.sqrt(sum(r["full_rmse"] ** 2 * r["cells"] for r in counts)
                                     / sum(r["cells"] for r in counts)),
    }
    result = {"case": ARGS.case, "root": ARGS.root, "trials": ARGS.trials, "epsilon": EPSILON, "delta": DELTA,
              "seconds": seconds,
              "views": {v: {k: x for k, x in d.items() if k not in ("expected", "baselines", "parts")}
                        for v, d in info.items()},
              "queries": rows, "summary": summary}
    out = Path(ARGS.out) if ARGS.out else HERE / "out" / f"people_group_plan_{ARGS.case}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1))
    print(f"case {ARGS.case}, dpsql from {ARGS.root}, {ARGS.trials} trials, {seconds:.0f} s")
    for v, d in info.items():
        print(f"  view {v}: share rho {d['share']:.4g}, {d['operator']}, noise row factor {d['rows_factor']:.4g} "
              f"(max_rows {d['max_rows']})")
    print(f"{'expected':>10} {'noise':>10} {'full':>10}  query")
    for r in rows:
        e = "-" if r["expected"] is None else f"{r['expected']:,.1f}"
        print(f"{e:>10} {r['noise_rmse']:>10,.1f} {r['full_rmse']:>10,.1f}  {' '.join(r['sql'].split())[:90]}")
    print("counts (every row of every COUNT query): expected {expected_count_rmse:,.2f}, observed vs the "
          "truncated views {noise_count_rmse:,.2f}, vs the full tables {full_count_rmse:,.2f}".format(**summary))
    shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
