"""Throughput of the exact discrete samplers in dpsql.privacy.noise (privacy-core issue).

Draws N samples per configuration from the production path (OS CSPRNG) and reports
samples per second, both per wall-clock second and per CPU second of this process (the
machine is shared; CPU time is the fairer single-core figure).  The one-off cost of
building the rigorous exp-bound tables for a new parameter is timed separately.

Target: >= 1,000,000 samples/s for sigma up to 10^4 on one core.  Reference: about
30,000 samples/s for OpenDP's vetted samplers (figure quoted in the issue; OpenDP is not
installed here, so it is not re-measured).

    .venv/bin/python bench/noise.py [--n 2000000] [--append bench/RESULTS.md]
    .venv/bin/python bench/noise.py --against REV [--n 500000] [--repeats 5]

``--against REV`` times this checkout's samplers and those of ``dpsql/privacy/noise.py`` at
git revision REV side by side, alternating runs in one process (same tables, same load), and
prints CPU samples/s of each and their ratio; the common sigma/scale (1 to 10^4) on N samples,
the large ones (2^30, 2^40: the proposal's geometric split) on 2,000.
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
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
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


def _module_at(rev: str):
    """dpsql/privacy/noise.py as it was at git revision ``rev``, as a module."""
    import types
    text = subprocess.run(["git", "show", f"{rev}:dpsql/privacy/noise.py"], capture_output=True, text=True,
                          check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    mod = types.ModuleType(f"noise_at_{rev}")
    exec(compile(text, f"{rev}:dpsql/privacy/noise.py", "exec"), mod.__dict__)
    return mod


def against(rev: str, n: int, repeats: int) -> str:
    old = _module_at(rev)
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    cases = [("discrete Gaussian", f"sigma = {p}", "discrete_gaussian", Fraction(p * p), n)
             for p in (1, 10, 100, 10_000)]
    cases += [("discrete Laplace", f"scale = {p}", "discrete_laplace", Fraction(p), n) for p in (1, 10, 100, 10_000)]
    cases += [("discrete Gaussian", f"sigma = 2^{e}", "discrete_gaussian", Fraction(1 << (2 * e)), 2000)
              for e in (30, 40)]
    cases += [("discrete Laplace", f"scale = 2^{e}", "discrete_laplace", Fraction(1 << e), 2000) for e in (30, 40)]
    lines = ["", f"### Side by side with `{rev}` (`bench/noise.py --against {rev}`)", "",
             f"{datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M UTC}; this checkout {head}; "
             f"machine: 2-core VM, shared; `uptime`: {load}. CPU samples/s of this process, best of {repeats} "
             "alternating runs each (tables built before timing).", "",
             "| sampler | parameter | N | before (CPU/s) | now (CPU/s) | now / before |",
             "|---|---|---:|---:|---:|---:|"]
    for kind, label, fn, arg, size in cases:
        new_fn, old_fn = getattr(noise, fn), getattr(old, fn)
        new_fn(arg, 1), old_fn(arg, 1)
        best = {"old": float("inf"), "new": float("inf")}
        for _ in range(repeats):
            for name, f in (("old", old_fn), ("new", new_fn)):
                c0 = time.process_time()
                f(arg, size)
                best[name] = min(best[name], time.process_time() - c0)
        before, now = size / best["old"], size / best["new"]
        lines.append(f"| {kind} | {label} | {size:,} | {before:,.0f} | {now:,.0f} | {now / before:.2f} |")
        print(lines[-1], flush=True)
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2_000_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--append", type=Path, default=None,
                        help="append a markdown section to this results file")
    parser.add_argument("--against", metavar="REV", default=None,
                        help="time the samplers of git revision REV side by side with this checkout's")
    args = parser.parse_args()
    if args.against:
        text = against(args.against, args.n, args.repeats)
    else:
        text = section(run(args.n, args.repeats), args.n, args.repeats)
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
