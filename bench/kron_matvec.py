"""Benchmark: Kronecker matrix-vector products on a 10^8-cell domain (thesis §3.9).

The issue's target: thesis Algorithm 1 "finishes in seconds and uses memory near
the vector's own size" (a 40^5 = 1.024e8-cell float64 vector is 819 MB).  Each case
runs in a fresh subprocess so that the peak RSS (resource.getrusage ru_maxrss) is
its own; we print the wall time, the peak RSS, and the peak minus the RSS with the
input vector already allocated, next to the vector size.  Two entries of every
result are checked against an independent contraction (np.einsum over the 5-way
tensor) so a fast wrong answer cannot pass.

Usage: .venv/bin/python bench/kron_matvec.py            (all cases)
       .venv/bin/python bench/kron_matvec.py --case explicit
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

from dpsql.linalg import Explicit, Identity, Kron, Marginals, Prefix

SIZES = [40] * 5
CASES = ["explicit", "explicit_rmatvec", "prefix_identity", "marginals_2way"]


def _rss_mb() -> float:
    with open("/proc/self/statm") as fh:
        pages = int(fh.read().split()[1])
    return pages * resource.getpagesize() / 2**20


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _build(case: str, rng):
    if case.startswith("explicit"):
        return Kron([Explicit(rng.standard_normal((n, n))) for n in SIZES])
    if case == "prefix_identity":
        return Kron([Prefix(40), Identity(40), Prefix(40), Identity(40), Prefix(40)])
    if case == "marginals_2way":
        names = [f"a{i}" for i in range(5)]
        cliques = [(a, b) for i, a in enumerate(names) for b in names[i + 1:]]
        return Marginals(list(zip(names, SIZES)), cliques)
    raise SystemExit(f"unknown case {case}")


def _check_entries(K, x, y, transpose: bool, rng) -> float:
    """Max relative error of two output entries against np.einsum on the tensor."""
    if not isinstance(K, Kron):
        return float("nan")
    tensor = x.reshape(SIZES)
    worst = 0.0
    for _ in range(2):
        z = int(rng.integers(0, y.size))
        idx = np.unravel_index(z, SIZES)
        dense = [f.dense() for f in K.factors]
        rows = [(d[:, i] if transpose else d[i, :]) for d, i in zip(dense, idx)]
        want = np.einsum("a,b,c,d,e,abcde->", *rows, tensor, optimize=True)
        worst = max(worst, abs(y[z] - want) / max(1.0, abs(want)))
    return worst


def run_case(case: str) -> dict:
    rng = np.random.default_rng(0)
    K = _build(case, rng)
    transpose = case.endswith("rmatvec")
    n = K.shape[0] if transpose else K.shape[1]
    x = rng.random(n)
    rss_with_x = _rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    y = K.rmatvec(x) if transpose else K.matvec(x)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak = _peak_mb()
    return {"case": case, "cells": n, "seconds": seconds, "cpu_seconds": cpu, "peak_mb": peak,
            "rss_with_x_mb": rss_with_x, "vector_mb": x.nbytes / 2**20,
            "output_mb": y.nbytes / 2**20,
            "check_rel_err": _check_entries(K, x, y, transpose, rng)}


def warm_up() -> None:
    """Touch and free ~2.5 GB once, in a throwaway process.

    On this VM the first touch of guest memory that was never used is several
    times slower than later touches (the hypervisor backs pages lazily), which
    would otherwise dominate the first case's time and measure the host, not the
    algorithm.  Doing it in another process keeps each case's peak RSS its own.
    """
    a = np.ones(3 * 10**8 + 2 * 10**7)
    del a


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=CASES + ["warm_up"])
    args = ap.parse_args()
    if args.case == "warm_up":
        warm_up()
        return
    if args.case:
        print(json.dumps(run_case(args.case)))
        return
    subprocess.run([sys.executable, __file__, "--case", "warm_up"], check=True)
    print(f"BLAS threads: OPENBLAS_NUM_THREADS={os.environ.get('OPENBLAS_NUM_THREADS', 'unset')}")
    print(f"Kron matvec on a {'x'.join(map(str, SIZES))} = {np.prod(SIZES):.3g}-cell domain")
    print(f"{'case':18} {'wall s':>7} {'CPU s':>6} {'peak MB':>8} {'peak-(RSS with x)':>18} "
          f"{'vector MB':>9} {'output MB':>9} {'check':>8}")
    bad = []
    for case in CASES:
        out = subprocess.run([sys.executable, __file__, "--case", case], check=True,
                             capture_output=True, text=True).stdout
        r = json.loads(out.strip().splitlines()[-1])
        print(f"{r['case']:18} {r['seconds']:7.2f} {r['cpu_seconds']:6.2f} {r['peak_mb']:8.0f} "
              f"{r['peak_mb'] - r['rss_with_x_mb']:18.0f} {r['vector_mb']:9.0f} "
              f"{r['output_mb']:9.1f} {r['check_rel_err']:8.1e}")
        if r["check_rel_err"] > 1e-10:  # nan (no check) compares False
            bad.append(r["case"])
    print("reference: target 'seconds' and memory near the vector's own size "
          "(input + output are unavoidable: 2 vectors for square factors)")
    if bad:
        raise SystemExit(f"wrong results in {bad}")


if __name__ == "__main__":
    main()
