"""Model vs least squares on the same releases: the paired per-trial comparison.

    python bench/paired.py --table adult --workload marginals [--eps 10,100]

Reads the raw answers ``bench/suite.py`` wrote (bench/out/eval/raw/dpsql-<table>-<workload>.json:
in every trial the model (``dpsql``) and least squares (``dpsql_ls``) answer the *same*
release) and prints, per ε, over the cells both answer:

* RMSE pooled over trials (√ of the mean per-trial MSE) for the model and least squares, and
  the model's RMSE over all the cells it answers;
* wins: trials where the model's MSE is below least squares';
* paired diff: mean over trials of MSE(model) − MSE(LS) ± its standard error (and in SEs);
* the same split by the order of the query (number of GROUP BY attributes: 0, 1, 2, ...);
* fit time (``engine.model`` after ``measure``) median and max.

Truth is ``suite.truth_for`` (exact answers on the binned table), as in the suite's metrics.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import suite  # noqa: E402  (bench/suite.py: truth, the answers' alignment)


def paired(truth: list[dict], trials: list[dict], table: str) -> dict:
    """Per-trial squared errors of both estimators on the cells both answer, by query order."""
    rows = []
    for t in trials:
        model = suite.vectorise(table, truth, t["pgm"], missing_is_zero=False)
        ls = suite.vectorise(table, truth, t["least_squares"], missing_is_zero=False)
        per = {}   # order -> [sq model, sq LS, cells]
        all_sq, all_n = 0.0, 0
        for q, m, ls_q in zip(truth, model, ls):
            if m is None:
                continue
            tr = np.asarray(q["truth"])
            all_sq += float(np.sum((m - tr) ** 2))
            all_n += len(tr)
            if ls_q is None:
                continue
            acc = per.setdefault(len(q["attrs"]), [0.0, 0.0, 0])
            acc[0] += float(np.sum((m - tr) ** 2))
            acc[1] += float(np.sum((ls_q - tr) ** 2))
            acc[2] += len(tr)
        rows.append({"per": per, "all": all_sq / max(all_n, 1), "fit_s": t["fit_s"]})
    return rows


def summarise(rows: list[dict], orders=None) -> dict:
    """Pooled RMSEs, wins and the paired difference over ``orders`` (None: all)."""
    mm, ml = [], []
    for r in rows:
        keys = [k for k in r["per"] if orders is None or k in orders]
        n = sum(r["per"][k][2] for k in keys)
        mm.append(sum(r["per"][k][0] for k in keys) / n)
        ml.append(sum(r["per"][k][1] for k in keys) / n)
    mm, ml = np.array(mm), np.array(ml)
    d = mm - ml
    se = float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else float("nan")
    return {"model": math.sqrt(mm.mean()), "ls": math.sqrt(ml.mean()), "wins": int((d < 0).sum()),
            "trials": len(d), "diff": float(d.mean()), "se": se,
            "cells": sum(rows[0]["per"][k][2] for k in rows[0]["per"] if orders is None or k in orders)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--table", default="adult")
    ap.add_argument("--workload", default="marginals")
    ap.add_argument("--eps", help="comma-separated ε (default: every ε in the raw answers)")
    ap.add_argument("--raw", help="raw answers (default bench/out/eval/raw/dpsql-<table>-<workload>.json)")
    args = ap.parse_args(argv)
    raw = Path(args.raw) if args.raw else suite.OUT / "raw" / f"dpsql-{args.table}-{args.workload}.json"
    res = json.loads(raw.read_text())
    truth = suite.truth_for(args.table, suite.read_sql(suite.workload_file(args.table, args.workload)))
    wanted = {float(e) for e in args.eps.split(",")} if args.eps else None
    for run in res["runs"]:
        eps = float(run["epsilon"])
        if wanted is not None and eps not in wanted:
            continue
        trials = [t for t in run["trials"] if "error" not in t]
        if len(trials) < len(run["trials"]):
            print(f"eps={eps:g}: {len(run['trials']) - len(trials)} trial(s) failed")
        rows = paired(truth, trials, args.table)
        s = summarise(rows)
        fits = sorted(r["fit_s"] for r in rows)
        allcells = math.sqrt(float(np.mean([r["all"] for r in rows])))
        print(f"{args.table}/{args.workload} eps={eps:g} trials={s['trials']}: RMSE model {s['model']:.4f}"
              f" vs LS {s['ls']:.4f} on LS's {s['cells']:,} cells; model wins {s['wins']}/{s['trials']};"
              f" paired diff {s['diff']:+.4g} ± {s['se']:.2g} ({s['diff'] / s['se']:+.1f} SE);"
              f" model all cells {allcells:.4f}; fit s median {float(np.median(fits)):.1f} (max {fits[-1]:.1f})")
        for order in sorted(rows[0]["per"]):
            o = summarise(rows, {order})
            se = o["se"] if o["se"] > 0 else float("nan")
            print(f"   {order}-way ({o['cells']:,} cells): model {o['model']:.4f} vs LS {o['ls']:.4f};"
                  f" wins {o['wins']}/{o['trials']}; paired diff {o['diff']:+.4g} ± {o['se']:.2g}"
                  f" ({o['diff'] / se:+.1f} SE)")
        print("   per trial (MSE model, MSE LS): "
              + ", ".join(f"({sum(r['per'][k][0] for k in r['per']) / sum(r['per'][k][2] for k in r['per']):.3f},"
                          f" {sum(r['per'][k][1] for k in r['per']) / sum(r['per'][k][2] for k in r['per']):.3f})"
                          for r in rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
