"""Issue 17, item 2: converged fits.  Answers approach the truth as ε grows.

    python bench/convergence.py [--eps 1e7,100,10] [--old CHECKOUT]

On the 40-query adult dashboard of bench/trust.py (its HDMM strategy measures 32 cliques),
per ε: one fresh ledger, ``session.measure()``, then every query answered from the model
(``dpsql.estimator = 'pgm'``) and from HDMM's least squares on the same release
(``'least_squares'``).  Printed per ε: the largest |answer − truth| over the supported
answers (target at ε = 10⁷: ≤ 0.5), the RMSE of both estimators over all supported cells
(target at ε ∈ {10, 100}: model ≤ least squares), and the fit's iterations and stop note.

``--old CHECKOUT`` runs the same in a subprocess with another checkout's code (e.g. the commit
before issue 17), side by side; its noise is its own (the OS CSPRNG is not seedable).
Truth: DuckDB's exact answers on the binned table (``dpsql.measure.exact.ExactOracle``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))


def run(eps: float) -> dict:
    import dpsql
    from dpsql.engine.config import load_config
    from dpsql.measure.exact import ExactOracle
    from trust import dashboard40, write_config   # bench/trust.py: the same 40 queries

    work = Path(tempfile.mkdtemp(prefix="conv-"))
    cfg_path = write_config(work, dashboard40(), eps)
    con = dpsql.connect(cfg_path, user="bench")
    con.session.measure()
    cfg = load_config(cfg_path)
    oracle = ExactOracle(cfg.tables, cfg.sources)
    t0 = time.perf_counter()
    model, _, _ = con.session.engine.model("adult")
    fit_s = time.perf_counter() - t0
    out = {"eps": eps, "fit_seconds": fit_s, "stopped": getattr(model, "stopped", None),
           "iterations": len(model.loss) - 1 if getattr(model, "loss", None) else None}
    cur = con.cursor()
    cur.execute("SET dpsql.policy = 'infer'")   # answer everything; supported cells are compared
    for est in ("pgm", "least_squares"):
        cur.execute(f"SET dpsql.estimator = '{est}'")
        sq, n, worst, skipped = 0.0, 0, 0.0, 0
        for sql in dashboard40():
            cur.execute(sql)
            rows, errs = cur.fetchall(), cur.stderr
            truth = {tuple(r[:-1]): r[-1] for r in oracle.query(sql)}
            for row, err in zip(rows, errs):
                se = err[-1] if err else None
                if se is None or (isinstance(se, float) and math.isnan(se)):
                    skipped += 1   # inferred (no supporting measurement) or no value
                    continue
                d = float(row[-1]) - float(truth.get(tuple(row[:-1]), 0) or 0)
                sq += d * d
                n += 1
                worst = max(worst, abs(d))
        out[est] = {"rmse": math.sqrt(sq / max(n, 1)), "max_abs": worst, "cells": n, "inferred": skipped}
    oracle.close()
    con.close()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eps", default="1e7,100,10")
    ap.add_argument("--old", type=Path, help="another checkout, run side by side")
    ap.add_argument("--one", type=float, help=argparse.SUPPRESS)   # child: one ε, JSON out
    args = ap.parse_args(argv)
    if args.one is not None:
        print(json.dumps(run(args.one)))
        return 0
    checkouts = {"this commit": ROOT}
    if args.old:
        checkouts[f"old ({args.old.name})"] = args.old.resolve()
    print(f"# bench/convergence.py  load average {os.getloadavg()[0]:.2f}  "
          f"({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})")
    print("40-query adult dashboard; supported cells only; truth = exact answers on the binned table\n")
    print("| code | ε | fit (s) | iterations | max abs error, model | RMSE model | RMSE least squares | "
          "cells | stop |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for eps in (float(e) for e in args.eps.split(",")):
        for name, checkout in checkouts.items():
            env = {**os.environ, "PYTHONPATH": str(checkout)}
            r = subprocess.run([sys.executable, __file__, "--one", repr(eps)], env=env, cwd=checkout,
                               capture_output=True, text=True, timeout=3600)
            if r.returncode != 0:
                print(f"| {name} | {eps:g} | failed: {r.stderr.strip().splitlines()[-1]} |", flush=True)
                continue
            o = json.loads(r.stdout.strip().splitlines()[-1])
            m, ls = o["pgm"], o["least_squares"]
            print(f"| {name} | {eps:g} | {o['fit_seconds']:.1f} | {o['iterations']} | {m['max_abs']:.3g} | "
                  f"{m['rmse']:.4g} | {ls['rmse']:.4g} | {m['cells']} | {o['stopped'] or 'all iterations'} |",
                  flush=True)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
