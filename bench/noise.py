"""Throughput of the exact discrete samplers in dpsql.privacy.noise (privacy-core issue).

Draws N samples per configuration from the production path (OS CSPRNG) and reports
samples per second, both per wall-clock second and per CPU second of this process (the
machine is shared; CPU time is the fairer single-core figure).  The one-off cost of
building the rigorous exp-bound tables for a new parameter is timed separately.

Target: >= 1,000,000 samples/s for sigma up to 10^4 on one core.  Reference: about
30,000 samples/s for OpenDP's vetted samplers (figure quoted in the issue; OpenDP is not
installed here, so it is not re-measured).

    .venv/bin/python bench/noise.py [--n 2000000] [--append bench/RESULTS.md]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import time
from fractions import Fraction
from pathlib import Path

from dpsql.privacy import noise

TARGET = 1_000_000
OPENDP_REFERENCE = 30_000


def _time(fn, repeats: int) -> tuple[float, float]:
    best_wall = best_cpu = float("inf")
    for _ in range(repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        fn()
        best_wall = min(best_wall, time.perf_counter() - w0)
        best_cpu = min(best_cpu, time.process_time() - c0)
    return best_wall, best_cpu


def run(n: int, repeats: int) -> list[tuple]:
    rows = []
    for kind, params in (("discrete Gaussian", (1, 10, 100, 10_000)),
                         ("discrete Laplace", (1, 10, 100, 10_000))):
        for p in params:
            if kind == "discrete Gaussian":
                arg = Fraction(p * p)
                fn = noise.discrete_gaussian
                label = f"sigma = {p}"
            else:
                arg = Fraction(p)
                fn = noise.discrete_laplace
                label = f"scale = {p}"
            noise._gaussian_plan.cache_clear()
            noise._geometric_plan.cache_clear()
            t0 = time.perf_counter()
            fn(arg, 1)  # builds and caches the tables for this parameter
            setup = time.perf_counter() - t0
            wall, cpu = _time(lambda: fn(arg, n), repeats)
            rows.append((kind, label, n / wall, n / cpu, setup))
            print(f"{kind:18s} {label:14s} {n / wall:12,.0f}/s wall {n / cpu:12,.0f}/s cpu "
                  f"setup {setup * 1000:7.1f} ms", flush=True)
    return rows


def section(rows, n: int, repeats: int) -> str:
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "",
        "## Exact discrete noise samplers (`bench/noise.py`)",
        "",
        f"{now}; machine: 2-core AMD EPYC VM, 24 GB; Python {platform.python_version()}; "
        f"`uptime`: {load}",
        "",
        f"N = {n:,} samples per run, best of {repeats}; production path (os.urandom). "
        f"Target {TARGET:,}/s on one core; reference {OPENDP_REFERENCE:,}/s (OpenDP's vetted "
        "samplers, quoted, not re-measured). Setup = one-off table build for a new parameter "
        "(cached afterwards).",
        "",
        "| sampler | parameter | samples/s (wall) | samples/s (CPU) | vs target (CPU) | "
        "vs OpenDP (CPU) | setup ms |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for kind, label, wall, cpu, setup in rows:
        lines.append(f"| {kind} | {label} | {wall:,.0f} | {cpu:,.0f} | {cpu / TARGET:.2f}x | "
                     f"{cpu / OPENDP_REFERENCE:.0f}x | {setup * 1000:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--append", type=Path, default=None,
                        help="append a markdown section to this results file")
    args = parser.parse_args()
    rows = run(args.n, args.repeats)
    text = section(rows, args.n, args.repeats)
    print(text)
    if args.append is not None:
        if not args.append.exists():
            args.append.write_text("# Benchmark results\n")
        with open(args.append, "a") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())


if __name__ == "__main__":
    main()
