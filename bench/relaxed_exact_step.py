"""The relaxed fit's exact step (``dpsql.pgm.relaxed_polish``): peak memory and time by size.

Each configuration runs the relaxed fit as the engine calls it (``dpsql.pgm.auto.fit`` with
the engine's arguments, ``method="relaxed"``, one BLAS thread) in a fresh process and
reports, for the exact step alone (``dpsql.pgm.relaxed._exact_step``: building the loss
matrix, the constraints, the Hessian and the active-set rounds with their KKT
factorisations): wall time, the process's peak resident memory during the step above its
resident memory when the step began (``/proc/self/clear_refs`` resets the high-water mark,
``VmHWM`` reads it: numpy's and SuperLU's allocations alike), the largest LU factor
(non-zeros of L + U), and what the size limits look at (region cells, the Hessian's
non-zeros), next to the first-order iterations' time.

Configurations:

* ``ident:NAME:K`` — the same marginals, each two-way marginal measured directly (identity
  queries, σ from ε split evenly over the pairs): a diagonal Hessian, so the size is the cells.
* ``replay:DIR`` — a release kept by ``bench/suite.py --keep`` (adult/marginals: 121 one- and
  two-way marginals), its measurements weighted as the engine weights them
  (``Engine.fit_measurements``).
* ``pairs:NAME:K`` — every one- and two-way marginal of the first K attributes of
  /work/shared/data/NAME/NAME-domain.json, planned by ``dpsql.plan.optimize`` (Gaussian
  noise, the engine's default caps), measured on synthetic data (a random tree Bayesian
  network, ``relaxed_scale.tree_data``; 10⁵ records) at ε = ``--eps`` (δ = 10⁻⁶, zCDP
  calibration), discrete Gaussian noise from a seeded bit source.

    .venv/bin/python bench/relaxed_exact_step.py replay:/tmp/keep/adult-marginals/eps10-trial0 \\
        pairs:fire:15 pairs:accidents:20 --eps 1
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

DATA = Path("/work/shared/data")


def _status(key: str) -> int:
    """A /proc/self/status field in bytes."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")   # resets VmHWM to the current RSS (Linux ≥ 4.0)


def replay(path: str):
    """(domain, measurements) of a kept release, as the engine fits them."""
    import dpsql
    import suite

    queries = suite.read_sql(suite.workload_file("adult", "marginals"))
    eps = float(Path(path).name.split("-")[0][3:])
    con = dpsql.connect(str(suite.TABLES["adult"]["config"]), ledger=str(Path(path) / "eval.ledger"),
                        budget={"epsilon": eps, "delta": suite.DELTA}, workload=queries,
                        cache_dir=str(suite.OUT / "cache"), policy="infer")
    engine = con.session.engine
    with engine._lock:
        state = engine._sync("adult")
        released = list(state.released)
    dom = state.schema.domain
    return dom, engine.fit_measurements(released), {"source": path, "eps": eps}


def pairs(name: str, k: int, eps: float, records: int = 100_000, identity: bool = False):
    """(domain, measurements): all 1- and 2-way marginals of K attributes, planned and measured
    (``identity``: each pair's marginal measured directly instead, σ from the same ε split
    evenly; the Hessian is then diagonal and the region cells alone set the step's size)."""
    from dpsql.domain import Domain
    from dpsql.linalg import Marginals
    from dpsql.plan import Workload, gaussian_sigma, optimize
    from dpsql.privacy import noise
    from relaxed_scale import SeededBits, counts, tree_data

    raw = json.loads((DATA / name / f"{name}-domain.json").read_text())
    sizes = {a: int(v["size"] if isinstance(v, dict) else v) for a, v in list(raw.items())[:k]}
    dom = Domain(list(sizes), list(sizes.values()))
    data = tree_data(dom, records, 0)
    cliques = [()] + [(a,) for a in dom.attributes] + list(itertools.combinations(dom.attributes, 2))
    if identity:
        from dpsql.linalg import Identity
        from dpsql.pgm import Measurement
        pairs_ = cliques[1 + k:]
        sigma = float(gaussian_sigma(eps, 1e-6, "zcdp")) * np.sqrt(len(pairs_))
        bits = SeededBits(0)
        ms = []
        for c in pairs_:
            exact = counts(dom, data, c)
            ms.append(Measurement(c, Identity(exact.size),
                                  exact + noise.discrete_gaussian(sigma * sigma, exact.size, rng=bits), sigma))
        return dom, ms, {"source": f"{name}[:{k}] identity", "eps": eps, "blocks": len(ms)}
    t0 = time.perf_counter()
    strategy = optimize(Workload(dom, Marginals(sizes, cliques)), noise="gaussian")
    plan_s = time.perf_counter() - t0
    sigma = float(gaussian_sigma(eps, 1e-6, "zcdp")) * float(strategy.sensitivity(2))
    bits = SeededBits(0)
    from dpsql.pgm import Measurement
    ms = []
    for block in strategy.blocks:
        exact = np.asarray(block.query.matvec(counts(dom, data, block.clique)), dtype=float)
        y = exact + noise.discrete_gaussian(sigma * sigma, exact.size, rng=bits) / block.weight
        ms.append(Measurement(tuple(block.clique), block.query, y, sigma / block.weight))
    return dom, ms, {"source": f"{name}[:{k}]", "eps": eps, "plan_s": plan_s,
                     "operator": strategy.operator, "blocks": len(strategy.blocks)}


def run(spec: str, eps: float) -> dict:
    import scipy.sparse.linalg as spla

    from dpsql.linalg.threads import one_blas_thread
    from dpsql.pgm import relaxed, relaxed_polish
    from dpsql.pgm.auto import fit
    from dpsql.pgm.limits import FitLimits

    kind, _, arg = spec.partition(":")
    if kind == "replay":
        dom, ms, info = replay(arg)
    else:
        name, k = arg.split(":")
        dom, ms, info = pairs(name, int(k), eps, identity=kind == "ident")
    step = {}
    inner = relaxed._exact_step
    real_splu = spla.splu

    def splu(A, *a, **kw):
        lu = real_splu(A, *a, **kw)
        step["lu_nnz"] = max(step.get("lu_nnz", 0), int(lu.L.nnz + lu.U.nnz))
        step["kkt_nnz"] = max(step.get("kkt_nnz", 0), int(A.nnz))
        return lu

    # The limits the step tests are FitLimits.relaxed_step_* (memory, Hessian non-zeros); they are
    # lifted here to see what a larger step costs, and the estimate is reported.
    limits = FitLimits(relaxed_step_max_nnz=10 ** 10)

    def measured(graph, measurements, tables, total, max_bytes, fit_limits):
        before = _status("VmRSS")
        _reset_peak()
        t0, c0 = time.perf_counter(), time.process_time()
        built = relaxed_polish.loss_matrix(graph, measurements, fit_limits.relaxed_step_max_nnz)
        rows = relaxed_polish.local_constraints(graph, total)[0].shape[0]
        step["constraint_rows"] = rows
        if built is not None:
            P, w, _ = built
            step["hessian_nnz"] = int((P.T @ P).nnz)
            step["estimate_mb"] = relaxed_polish.step_bytes(step["hessian_nnz"] + graph.size, rows) / 2 ** 20
            step["limit_mb"] = relaxed_polish.memory_limit() / 2 ** 20
        out = inner(graph, measurements, tables, total, 1 << 60, fit_limits)
        step.update({"seconds": time.perf_counter() - t0, "cpu_s": time.process_time() - c0,
                     "peak_mb": (_status("VmHWM") - before) / 2 ** 20, "rss_before_mb": before / 2 ** 20,
                     "cells": graph.size, "regions": len(graph.regions),
                     "result": out[1] if isinstance(out[1], str) else list(out[1])})
        return out

    relaxed._exact_step = measured
    spla.splu = splu
    stamps = []
    t0 = time.perf_counter()
    with one_blas_thread():
        model = fit(dom, ms, method="relaxed", iters=20000, exact_method="adaptive",
                    stop="discrepancy", gap=limits.gap, limits=limits,
                    callback=lambda p: stamps.append(time.perf_counter()))
    total_s = time.perf_counter() - t0
    per_iter = (stamps[-1] - stamps[0]) / max(len(stamps) - 1, 1) if stamps else float("nan")
    return {**info, **step, "fit_s": total_s, "iterations": len(stamps), "iter_s": per_iter,
            "load": os.getloadavg()[0], "peak_process_mb": _status("VmHWM") / 2 ** 20,
            "measurements": len(ms), "summary": model.summary()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("configs", nargs="+", help="replay:DIR, pairs:NAME:K or ident:NAME:K")
    ap.add_argument("--eps", type=float, default=1.0, help="ε of the pairs:… configurations")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run(args.configs[0], args.eps)))
        return 0
    with open("/proc/meminfo") as fh:
        total_gb = int(next(line for line in fh if line.startswith("MemTotal")).split()[1]) / 2 ** 20
    print(f"# {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, MemTotal {total_gb:.1f} GB, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    for spec in args.configs:
        proc = subprocess.run([sys.executable, __file__, spec, "--eps", str(args.eps), "--child"],
                              capture_output=True, text=True)
        if proc.returncode:
            print(f"{spec}: FAILED\n{proc.stderr[-2000:]}", flush=True)
            continue
        r = json.loads(proc.stdout.strip().splitlines()[-1])
        print(json.dumps({k: v for k, v in r.items() if k != "summary"}), flush=True)
        print("   " + r["summary"].replace("\n", "\n   "), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
