"""Thesis tables 3.2-3.5 (HDMM RMSE at ε = 1) reproduced with dpsql.plan, plus timings.

Prints markdown: every RMSE next to the thesis value (Laplace b = 1/ε; Gaussian σ from the
analytic Gaussian mechanism at δ = 1e-6, σ ≈ 4.2247), the Gaussian SVD bound, the RMSE after
rounding the strategy to the measurement grid, and wall/CPU seconds per optimisation next
to the reference implementation's (research/reference_impls.md §4, measured at low load).

Usage:  .venv/bin/python bench/hdmm_tables.py [--threads 1] [--restarts-1024 3] [--quick]

BLAS threads are fixed before numpy loads (default 1): on a shared 2-core VM, two BLAS
threads per process oversubscribe the cores and run several times slower.
"""

from __future__ import annotations

import argparse
import os
import sys

_parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
_parser.add_argument("--threads", default="1")
_parser.add_argument("--restarts", type=int, default=10, help="p-Identity restarts, n <= 256")
_parser.add_argument("--restarts-1024", type=int, default=3, help="p-Identity restarts, n = 1024")
_parser.add_argument("--quick", action="store_true", help="n = 64 and 256 only")
ARGS = _parser.parse_args()
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = ARGS.threads

import json  # noqa: E402
import math  # noqa: E402
import time  # noqa: E402
from itertools import combinations  # noqa: E402
from pathlib import Path  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from dpsql.domain import Domain  # noqa: E402
from dpsql.linalg import AllRange, Identity, Kron, Marginals, Prefix, Total, Union  # noqa: E402
from dpsql.plan import (  # noqa: E402
    Workload, opt_0, opt_kron, opt_marginals, optimize, rmse, round_strategy, svd_bound,
)
from dpsql.plan.calibration import analytic_gaussian_sigma  # noqa: E402
from dpsql.plan.planner import DEFAULT_GRID  # noqa: E402

EPS, DELTA = 1.0, 1e-6
SIGMA = analytic_gaussian_sigma(EPS, DELTA)

THESIS_1D = {  # table 3.2 (Laplace OPT_0), table 3.3 (Gaussian OPT_0, SVDB)
    ("ALL RANGE", 64): (5.55, 9.73, 9.62), ("ALL RANGE", 256): (8.07, 12.26, 12.15),
    ("ALL RANGE", 1024): (11.08, 14.85, 14.75),
    ("PREFIX", 64): (5.32, 8.87, 8.62), ("PREFIX", 256): (7.35, 10.66, 10.44),
    ("PREFIX", 1024): (9.58, 12.49, 12.29),
}
REFERENCE_S = {  # reference code, wall seconds per optimisation (research notes §4.1)
    ("ALL RANGE", 64): (0.005, 0.011), ("ALL RANGE", 256): (0.078, 0.25),
    ("ALL RANGE", 1024): (6.8, 12.8),
    ("PREFIX", 64): (0.004, 0.017), ("PREFIX", 256): (0.12, 0.80),
    ("PREFIX", 1024): (8.0, 65.0),
}


def timed(fn):
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w, time.process_time() - c


def gaussian_rmse(W, A):
    return rmse(W, A, "gaussian", EPS, DELTA, calibration="analytic")


def one_dimensional() -> list[str]:
    rows = ["| workload | n | Laplace OPT_0 (thesis) | restarts | s/restart wall (CPU) [ref] "
            "| Gaussian OPT_0 (thesis) | s wall (CPU) [ref] | SVDB Gaussian (thesis) "
            "| Gaussian / SVDB | rounded L / G |",
            "|---|---:|---|---:|---|---|---|---|---:|---|"]
    sizes = (64, 256) if ARGS.quick else (64, 256, 1024)
    for name, ctor in (("ALL RANGE", AllRange), ("PREFIX", Prefix)):
        for n in sizes:
            W = ctor(n)
            th_l, th_g, th_s = THESIS_1D[(name, n)]
            ref_l, ref_g = REFERENCE_S[(name, n)]
            k = ARGS.restarts_1024 if n >= 1024 else ARGS.restarts
            runs = [timed(lambda s=s: opt_0(W, "laplace", restarts=1, seed=s)) for s in range(k)]
            best = min(runs, key=lambda r: r[0].expected_error)[0]
            lap = rmse(W, best, "laplace", EPS)
            lap_w = sum(r[1] for r in runs) / k
            lap_c = sum(r[2] for r in runs) / k
            g, gw, gc = timed(lambda: opt_0(W, "gaussian"))
            gau = gaussian_rmse(W, g)
            bound = math.sqrt(svd_bound(W) * SIGMA ** 2 / W.shape[0])
            lap_r = rmse(W, round_strategy(best, DEFAULT_GRID), "laplace", EPS)
            gau_r = gaussian_rmse(W, round_strategy(g, DEFAULT_GRID))
            rows.append(
                f"| {name} | {n} | {lap:.3f} ({th_l}) {lap / th_l:.3f}x | {k} "
                f"| {lap_w:.2f} ({lap_c:.2f}) [{ref_l}] | {gau:.3f} ({th_g}) {gau / th_g:.3f}x "
                f"| {gw:.2f} ({gc:.2f}) [{ref_g}] | {bound:.3f} ({th_s}) | {gau / bound:.4f} "
                f"| {lap_r:.3f} / {gau_r:.3f} |")
            print(rows[-1], flush=True)
    return rows


def cps() -> list[str]:
    shape = (100, 50, 7, 4, 2)
    D = Domain([f"a{i}" for i in range(5)], shape)
    W = Workload(D, Kron([Union([Identity(n), Total(n)]) for n in shape]))
    rows = ["| noise | OPT_kron (thesis) | OPT_M (thesis) | HDMM (thesis) | SVDB (thesis) "
            "| optimize() s wall (CPU) | chosen | rounded |",
            "|---|---|---|---|---|---|---|---|"]
    thesis = {"laplace": (4.85, 4.84, 4.84, 2.63), "gaussian": (7.85, 7.86, 7.85, 7.85)}
    for noise in ("laplace", "gaussian"):
        conv = (lambda A: rmse(W, A, "laplace", EPS)) if noise == "laplace" else \
            (lambda A: gaussian_rmse(W, A))
        kron = conv(opt_kron(W, noise, restarts=5, seed=0))
        marg = conv(opt_marginals(W, noise, restarts=5, seed=0))
        best, w, c = timed(lambda: optimize(W, noise, restarts=5, seed=0, grid=None))
        hd = conv(best)
        rounded = conv(round_strategy(best, DEFAULT_GRID))
        scale = math.sqrt((2.0 if noise == "laplace" else SIGMA ** 2) / W.terms.num_queries)
        bound = math.sqrt(svd_bound(W)) * (math.sqrt(SIGMA ** 2 / W.terms.num_queries)
                                           if noise == "gaussian" else scale)
        t = thesis[noise]
        rows.append(f"| {noise} | {kron:.3f} ({t[0]}) | {marg:.3f} ({t[1]}) "
                    f"| {hd:.3f} ({t[2]}) {hd / t[2]:.3f}x | {bound:.3f} ({t[3]}) "
                    f"| {w:.2f} ({c:.2f}) | {best.operator} | {rounded:.3f} |")
        print(rows[-1], flush=True)
    return rows


def adult() -> list[str]:
    path = Path("/work/shared/data/adult-hd/adult-domain.json")
    sizes = json.loads(path.read_text())
    D = Domain.from_sizes(sizes)
    cliques = [c for k in range(4) for c in combinations(D.attributes, k)]
    W = Workload(D, Marginals(D, cliques))
    rows = ["| noise | OPT_M RMSE | OPT_M s wall (CPU) | SVDB | optimize() RMSE | "
            "optimize() s wall (CPU) | chosen | blocks | largest clique cells |",
            "|---|---|---|---|---|---|---|---:|---:|"]
    for noise in ("laplace", "gaussian"):
        conv = (lambda A: rmse(W, A, "laplace", EPS)) if noise == "laplace" else \
            (lambda A: gaussian_rmse(W, A))
        s, w, c = timed(lambda: opt_marginals(W, noise, restarts=1, seed=0))
        b = svd_bound(W)
        var = 2.0 if noise == "laplace" else SIGMA ** 2
        bound = math.sqrt(var * b / W.terms.num_queries)
        best, w2, c2 = timed(lambda: optimize(W, noise, restarts=1, seed=0))
        cells = max(math.prod(D[a] for a in blk.clique) for blk in best.blocks)
        rows.append(f"| {noise} | {conv(s):.3f} | {w:.2f} ({c:.2f}) | {bound:.3f} "
                    f"| {conv(best):.3f} | {w2:.2f} ({c2:.2f}) | {best.operator} "
                    f"| {len(best.blocks)} | {cells:,} |")
        print(rows[-1], flush=True)
    rows.append("")
    rows.append(f"Adult explanation (Gaussian): {best.explanation}")
    return rows


def main() -> None:
    print(f"BLAS threads: {ARGS.threads}; σ(ε=1, δ=1e-6) = {SIGMA:.4f}\n", flush=True)
    print("### One-dimensional OPT_0 (tables 3.2, 3.3)\n", flush=True)
    one = one_dimensional()
    print("\n### CPS, all 32 marginals (tables 3.4, 3.5)\n", flush=True)
    two = cps()
    print("\n### Adult (15 attributes), all <=3-way marginals\n", flush=True)
    three = adult()
    print("\n\n" + "\n".join(["### One-dimensional OPT_0", ""] + one + ["", "### CPS", ""] + two
                              + ["", "### Adult <=3-way", ""] + three))


if __name__ == "__main__":
    main()
