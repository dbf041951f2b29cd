"""Planning time with a 1,459-label categorical (issue 35 item 2), this checkout vs a base commit.

    python bench/plan_speed.py [--base REV] [--rounds 1] [--workdir /tmp/dpsql-plan-speed]

The 12-query dashboard is ``bench/flights.py``'s workload plus two queries grouped by
``dest`` (the FAA list: 1,459 cells): its AVG delay and the origin × dest counts.  Each
round runs, for each commit in turn (alternating which goes first), in a new process:

* ``dpsql plan`` with an empty strategy cache (a cache hit would skip the planner): its CPU
  (the child's user + system time) and wall time, and its printed expected errors, which
  must agree between the commits (the closed forms replace eigendecompositions, not the
  optimum);
* ``dpsql measure`` answered "n" at its prompt (the data check, then planning, then the
  cost): CPU, wall, and when its first line reached stderr (progress), with stderr a pipe.

The base commit's ``dpsql/`` is exported with ``git archive`` to a temporary directory.
Prints a table with the machine's load; no assertion.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import flights  # noqa: E402  (bench/flights.py: the table, its domain and workload)

DASHBOARD = flights.WORKLOAD + [
    "SELECT dest, AVG(arr_delay) FROM flights GROUP BY dest",
    "SELECT origin, dest, COUNT(*) FROM flights GROUP BY origin, dest",
]

CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import dpsql
assert dpsql.__file__.startswith(sys.argv[1]), dpsql.__file__
from dpsql.cli import main
sys.exit(main(sys.argv[2:]))
"""


def export(rev: str, into: Path) -> str:
    """``dpsql/`` of ``rev`` under ``into``; the full commit id."""
    sha = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], check=True,
                         capture_output=True, text=True).stdout.strip()
    data = subprocess.run(["git", "-C", str(ROOT), "archive", sha, "dpsql"], check=True,
                          capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        tar.extractall(into, filter="data")
    return sha


def fresh_config(workdir: Path, name: str) -> Path:
    """A configuration of the 12-query dashboard with its own empty cache and ledger."""
    run = workdir / name
    shutil.rmtree(run, ignore_errors=True)
    run.mkdir(parents=True)
    saved = flights.WORKLOAD
    flights.WORKLOAD = DASHBOARD
    try:
        text = flights.config_toml(1.0, ledger=run / "flights.ledger", base=workdir)
    finally:
        flights.WORKLOAD = saved
    text = re.sub(r"^cache_dir = .*$", f'cache_dir = "{run / "cache"}"', text, flags=re.M)
    (run / "dpsql.toml").write_text(text)
    return run / "dpsql.toml"


def run(root: Path, args: list[str], stdin: str = "") -> dict:
    """Run the CLI of ``root`` in a new process: wall, CPU, stdout, first stderr line time."""
    c0, t0 = os.times(), time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(root), *args], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out: list[str] = []
    reader = threading.Thread(target=lambda: out.append(p.stdout.read()))
    reader.start()
    p.stdin.write(stdin)
    p.stdin.close()
    first, err = None, []
    for line in p.stderr:
        if first is None:
            first = time.perf_counter() - t0
        err.append(line)
    p.wait()
    reader.join()
    c1 = os.times()
    return {"wall": time.perf_counter() - t0, "first_stderr": first, "stderr": "".join(err),
            "cpu": (c1.children_user - c0.children_user) + (c1.children_system - c0.children_system),
            "stdout": out[0] if out else "", "rc": p.returncode}


def errors_of(plan_output: str) -> dict[str, float]:
    """The per-query standard errors of ``dpsql plan``'s table, keyed by the row's text."""
    out = {}
    for line in plan_output.splitlines():
        m = re.match(r"\s+([\d,]+\.\d+)\s+([\d,]+\.\d+)\s+[\d.]+\s+\S+\s+\d+\s+(.*)$", line)
        if m:
            key = m.group(3).replace("  ABOVE BASELINE", "")
            while key in out:
                key += "'"
            out[key] = float(m.group(1).replace(",", ""))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="HEAD~1", help="the commit to compare with")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--workdir", default="/tmp/dpsql-plan-speed")
    args = ap.parse_args()
    workdir = Path(args.workdir)
    flights.prepare(workdir)
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "dpsql"],
                                capture_output=True, text=True).stdout.strip())
    res: dict[str, dict[str, list]] = {k: {"plan": [], "measure": []} for k in ("base", "this")}
    with tempfile.TemporaryDirectory() as tmp:
        base_sha = export(args.base, Path(tmp))
        roots = {"base": Path(tmp), "this": ROOT}
        load0 = os.getloadavg()
        for r in range(args.rounds):
            for name in (["base", "this"] if r % 2 == 0 else ["this", "base"]):
                cfg = fresh_config(workdir, f"{name}-{r}-plan")
                res[name]["plan"].append(run(roots[name], ["plan", "--config", str(cfg)]))
                cfg = fresh_config(workdir, f"{name}-{r}-measure")
                res[name]["measure"].append(run(roots[name], ["measure", "--config", str(cfg)], "n\n"))
                print(f"round {r + 1}/{args.rounds}: {name} done", file=sys.stderr)
        load1 = os.getloadavg()
    (workdir / "results.json").write_text(json.dumps(res))     # the raw runs, kept
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; this {head[:7]}"
          f"{' + uncommitted dpsql/' if dirty else ''} vs base {base_sha[:7]}; "
          f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}; "
          f"load {load0[0]:.1f} → {load1[0]:.1f}; {args.rounds} round(s), alternated")
    print(f"{'':52} {'base':>10} {'this':>10}")

    def line(label, key):
        vals = []
        for name in ("base", "this"):
            xs = [key(x) for x in res[name][label.split(":")[0].split()[0]]]
            xs = [x for x in xs if x is not None]
            vals.append(statistics.median(xs) if xs else float("nan"))
        print(f"{label:52} {vals[0]:>10.2f} {vals[1]:>10.2f}")
    line("plan: CPU s (median)", lambda d: d["cpu"])
    line("plan: wall s (median)", lambda d: d["wall"])
    line("measure (answered n): CPU s (median)", lambda d: d["cpu"])
    line("measure (answered n): wall s (median)", lambda d: d["wall"])
    line("measure (answered n): first stderr line at s", lambda d: d["first_stderr"])
    base, this = errors_of(res["base"]["plan"][0]["stdout"]), errors_of(res["this"]["plan"][0]["stdout"])
    common = sorted(set(base) & set(this))
    diffs = [abs(this[k] / base[k] - 1.0) for k in common if base[k] > 0]
    print(f"per-query expected standard errors compared: {len(common)} of {len(base)} rows; "
          f"largest relative difference {max(diffs, default=float('nan')):.2e}")
    for name in ("base", "this"):
        out = res[name]["plan"][0]["stdout"].splitlines()
        print(f"{name}: " + " | ".join(x for x in out if x.startswith(("strategy ", "  counts:"))))
    print("this: measure's stderr (a pipe):")
    for x in res["this"]["measure"][0]["stderr"].splitlines():
        print(f"    {x}")


if __name__ == "__main__":
    main()
