"""Scale of relaxed Prox-PGM (NeurIPS 2021 Figure 2c and Figure 3a settings).

Part "random": 100 attributes of size 10 and k random 3-way cliques (seeded), for k in
``--ks`` (default 100, 1000, 10000).  Measurements are the cliques' marginals under a
product distribution of N = 10⁶ records (computed in closed form: only timing is
measured here) plus discrete Laplace noise of scale k (ε = 1 split evenly; drawn by
dpsql.privacy.noise from a seeded bit source).  Reported: region-graph size, the
junction-tree size exact inference would need (JT-SIZE from public metadata), setup
time, and the wall and CPU time per Prox-PGM iteration with the saturated region graph
(one warm-started Convex-GBP sweep + loss and gradient), from ``--iters`` iterations.
The paper: exact inference stops near k = 50 random cliques; the region graph keeps
running at k = 10⁴ with time linear in k.

Part "fire": the 15-attribute fire domain (shared/data/fire/fire-domain.json) and
the workload of all 455 three-way marginals.  Strategy: dpsql.plan.optimize (HDMM,
Gaussian noise) on that workload.  Data: synthetic, 300,000 records (the fire
dataset's size) from a random tree-structured Bayesian network over the domain
(random spanning tree, Dirichlet(1) conditional tables; seed 0).  Noise: (ε = 1,
δ = 1e-6), Gaussian σ from dpsql.plan.gaussian_sigma (zCDP calibration) times the
strategy's L2 sensitivity, discrete Gaussian from a seeded bit source.  Fit:
``dpsql.pgm.appgm.fit`` (automatic choice; the junction tree is the full domain), then
all 455 workload marginals answered.  Reported: planning, measuring, fitting and
answering time, peak RSS, workload RMSE per cell next to HDMM's expected RMSE
without reconstruction, and L1/N error.  Target: ≤ 10 minutes and ≤ 4 GB end to end.

    .venv/bin/python bench/relaxed_scale.py [--part random fire] [--ks 100 1000 10000]
        [--iters 5] [--fire-iters 500] [--append bench/RESULTS.md]
Each configuration runs in a fresh process so that peak RSS is its own.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from dpsql.domain import Domain
from dpsql.linalg import Identity, Marginals
from dpsql.pgm import Measurement, model_size
from dpsql.pgm.appgm import fit
from dpsql.pgm.relaxed import estimate_relaxed
from dpsql.privacy import noise

FIRE = Path("/work/shared/data/fire/fire-domain.json")


class SeededBits:
    """A reproducible bit source for dpsql.privacy.noise (benchmarks only)."""

    def __init__(self, seed: int) -> None:
        self._g = np.random.default_rng(seed)

    def random_bytes(self, n: int) -> bytes:
        return self._g.bytes(n)


def _rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20


def run_random(k: int, iters: int) -> dict:
    d, size, records = 100, 10, 1_000_000
    dom = Domain([f"a{i:03d}" for i in range(d)], [size] * d)
    rng = np.random.default_rng(k)
    seen, cliques = set(), []
    while len(cliques) < k:
        c = tuple(sorted(rng.choice(d, 3, replace=False)))
        if c not in seen:
            seen.add(c)
            cliques.append(tuple(dom.attributes[i] for i in c))
    ones = {a: rng.dirichlet(np.ones(size)) for a in dom.attributes}
    bits = SeededBits(k)
    ms = []
    for c in cliques:
        truth = records * np.einsum("i,j,k->ijk", *(ones[a] for a in c)).ravel()
        y = np.round(truth) + noise.discrete_laplace(k, truth.size, rng=bits)
        ms.append(Measurement(c, Identity(truth.size), y.astype(float), k * np.sqrt(2.0)))
    t0 = time.perf_counter()
    jt = model_size(dom, cliques)
    t_jt = time.perf_counter() - t0
    stamps = []

    def tick(progress):
        stamps.append((time.perf_counter(), time.process_time()))

    t0, c0 = time.perf_counter(), time.process_time()
    res = estimate_relaxed(dom, ms, iters=iters, polish=0, final_sweeps=1, callback=tick)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    per_wall = (stamps[-1][0] - stamps[0][0]) / (len(stamps) - 1)
    per_cpu = (stamps[-1][1] - stamps[0][1]) / (len(stamps) - 1)
    setup = stamps[0][0] - t0 - per_wall  # everything before the first iteration
    return {"part": "random", "k": k, "regions": len(res.graph.regions), "edges": len(res.graph.edges),
            "cells": res.graph.size, "jt_cells": jt, "jt_s": t_jt, "setup_s": setup,
            "iter_wall_s": per_wall, "iter_cpu_s": per_cpu, "total_s": wall, "cpu_s": cpu,
            "rss_gb": _rss_gb(), "iters": iters}


def tree_data(dom: Domain, records: int, seed: int) -> np.ndarray:
    """Ancestral sampling from a random tree Bayesian network with Dirichlet(1) tables."""
    rng = np.random.default_rng(seed)
    d = len(dom.attributes)
    order = rng.permutation(d)
    data = np.zeros((records, d), dtype=np.int64)
    root = order[0]
    data[:, root] = rng.choice(dom.shape[root], records, p=rng.dirichlet(np.ones(dom.shape[root])))
    for k in range(1, d):
        child, parent = order[k], order[rng.integers(0, k)]
        table = rng.dirichlet(np.ones(dom.shape[child]), size=dom.shape[parent])
        cdf = np.cumsum(table, axis=1)
        u = rng.random(records)[:, None]
        data[:, child] = np.minimum((u > cdf[data[:, parent]]).sum(axis=1), dom.shape[child] - 1)
    return data


def counts(dom: Domain, data: np.ndarray, clique) -> np.ndarray:
    cols = [dom.attributes.index(a) for a in clique]
    shape = [dom[a] for a in clique]
    if not cols:
        return np.array([float(data.shape[0])])
    flat = np.ravel_multi_index(tuple(data[:, c] for c in cols), shape)
    return np.bincount(flat, minlength=int(np.prod(shape))).astype(float)


def run_fire(iters: int) -> dict:
    from dpsql.plan import Workload, gaussian_sigma, optimize, rmse
    t_start = time.perf_counter()
    sizes = json.loads(FIRE.read_text())
    dom = Domain(list(sizes), list(sizes.values()))
    records = 300_000
    data = tree_data(dom, records, 0)
    triples = list(itertools.combinations(dom.attributes, 3))
    W = Marginals(dict(zip(dom.attributes, dom.shape)), triples)
    t0 = time.perf_counter()
    strategy = optimize(Workload(dom, W), noise="gaussian")
    t_plan = time.perf_counter() - t0
    epsilon, delta = 1.0, 1e-6
    sens = float(strategy.sensitivity(2))
    sigma = float(gaussian_sigma(epsilon, delta, "zcdp")) * sens
    hdmm_rmse = float(rmse(W, strategy.matrix, "gaussian", epsilon, delta, calibration="zcdp"))
    t0 = time.perf_counter()
    bits = SeededBits(0)
    ms = []
    for block in strategy.blocks:
        marg = counts(dom, data, block.clique)
        q = block.query
        exact = np.asarray(q.matvec(marg), dtype=float)
        # The released rows are weight·query·μ + N(0, σ²); in query units that is
        # query·μ + noise/weight with standard deviation σ/weight.
        y = exact + noise.discrete_gaussian(sigma * sigma, exact.size, rng=bits) / block.weight
        ms.append(Measurement(tuple(block.clique), q, y, sigma / block.weight))
    t_measure = time.perf_counter() - t0
    t0, c0 = time.perf_counter(), time.process_time()
    # the library's defaults when these figures were measured (bench/RESULTS.md): mirror
    # descent for a fixed number of iterations
    model = fit(dom, ms, iters=iters, exact_method="md", gap=None, stop=None)
    t_fit, c_fit = time.perf_counter() - t0, time.process_time() - c0
    t0 = time.perf_counter()
    sq = cells = 0.0
    l1 = []
    for c in triples:
        est = model.marginal(c).values.ravel()
        truth = counts(dom, data, c)
        sq += float(np.sum((est - truth) ** 2))
        cells += truth.size
        l1.append(np.abs(est - truth).sum() / records)
    t_answer = time.perf_counter() - t0
    return {"part": "fire", "operator": strategy.operator, "blocks": len(strategy.blocks),
            "strategy_cliques": len({tuple(b.clique) for b in strategy.blocks}),
            "sigma": sigma, "plan_s": t_plan, "fit_cpu_s": c_fit, "cpu_s": time.process_time(),
            "load": os.getloadavg()[0], "measure_s": t_measure, "fit_s": t_fit,
            "answer_s": t_answer, "total_s": time.perf_counter() - t_start, "rss_gb": _rss_gb(),
            "rmse": float(np.sqrt(sq / cells)), "hdmm_rmse": hdmm_rmse, "l1_mean": float(np.mean(l1)),
            "summary": model.summary(), "iters": iters}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", nargs="+", default=["random", "fire"])
    ap.add_argument("--ks", type=int, nargs="+", default=[100, 1000, 10000])
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--fire-iters", type=int, default=500)
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--append", default=None)
    args = ap.parse_args()
    if args.child:
        kind, arg = args.child.split(":")
        out = run_random(int(arg), args.iters) if kind == "random" else run_fire(int(arg))
        print(json.dumps(out))
        return
    jobs = ([f"random:{k}" for k in args.ks] if "random" in args.part else []) + \
           ([f"fire:{args.fire_iters}"] if "fire" in args.part else [])
    results = []
    for job in jobs:
        out = subprocess.run([sys.executable, __file__, "--child", job, "--iters", str(args.iters)],
                             check=True, capture_output=True, text=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        results.append(r)
        print(json.dumps({k: v for k, v in r.items() if k != "summary"}), flush=True)
    lines = []
    rand = [r for r in results if r["part"] == "random"]
    if rand:
        lines += ["| k random triples | regions / edges | region cells | JT cells (exact) | setup s "
                  "| s / iteration (wall) | s / iteration (CPU) | per-iteration CPU / k (ms) | peak RSS GB |",
                  "|" + "---|" * 9]
        for r in rand:
            lines.append(f"| {r['k']:,} | {r['regions']:,} / {r['edges']:,} | {r['cells']:,} | "
                         f"{r['jt_cells']:.3g} | {r['setup_s']:.1f} | {r['iter_wall_s']:.3f} | "
                         f"{r['iter_cpu_s']:.3f} | {1000 * r['iter_cpu_s'] / r['k']:.3f} | "
                         f"{r['rss_gb']:.2f} |")
    for r in results:
        if r["part"] == "fire":
            lines += ["", "| fire, 455 three-way marginals | strategy | plan s | measure s "
                      "| fit s wall (CPU) | answer 455 s | total s wall (CPU) | load | peak RSS GB "
                      "| RMSE/cell (ours) | HDMM expected RMSE "
                      "(no reconstruction) | L1/N mean |", "|" + "---|" * 12,
                      f"| {r['iters']} iterations | {r['operator']}, {r['blocks']} blocks "
                      f"({r['strategy_cliques']} cliques) | {r['plan_s']:.1f} | {r['measure_s']:.1f} | "
                      f"{r['fit_s']:.1f} ({r['fit_cpu_s']:.1f}) | {r['answer_s']:.1f} | "
                      f"{r['total_s']:.1f} ({r['cpu_s']:.1f}) | {r['load']:.1f} | {r['rss_gb']:.2f} | "
                      f"{r['rmse']:.2f} | {r['hdmm_rmse']:.2f} | {r['l1_mean']:.4f} |"]
            print(r["summary"])
    text = "\n".join(lines)
    print(text)
    if args.append:
        with open(args.append, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
