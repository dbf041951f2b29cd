"""Ledger size on the flights table (issue 35): this checkout against a base commit.

    python bench/ledger_size.py [--base REV] [--workdir /tmp/dpsql-ledger-size]

``bench/flights.py``'s table and workload (``dest`` over the FAA airport list: 1,459 cells) is
measured once by each commit (``dpsql measure --yes`` in a fresh process, its own fresh ledger
in ``WORKDIR/<commit>``); the base commit's ``dpsql/`` is exported with ``git archive``.  Prints
per commit the ledger file's size, the release payloads' total size, and the CPU time of a new
process opening the ledger and unpacking its releases (``Ledger`` verifies every payload's
hash when it opens), and the memory the unpacked releases hold and peak at (tracemalloc:
a dense 1,459-label identity is 17 MB).  Then each commit's code reads the *other* commit's
ledger, as a check that the old format still loads (a base from before ledger format 2
refuses the new one when it opens it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import flights  # noqa: E402  (bench/flights.py: the table, its domain and workload)
from variance_speed import MEASURE_CHILD, export  # noqa: E402

READ_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from dpsql.privacy.ledger import Ledger
from dpsql.measure import release as rel
spec = json.loads(sys.argv[3])   # the ledger's own configuration record, so that it opens
users = spec["per_user"]
per_user = {"none": None, "uniform": users.get("limit")}.get(users["kind"], users.get("limits"))
import tracemalloc
c = time.process_time()
ledger = Ledger(sys.argv[2], total_rho=spec["total_rho"], per_user_rho=per_user)
blocks, kept = 0, []
tracemalloc.start()
for e in ledger.entries():
    if e.kind == "release":
        kept.append(rel.unpack_all(ledger.release(e.key)))    # held, as the engine holds them
        blocks += len(kept[-1])
held, peak = tracemalloc.get_traced_memory()
print(json.dumps({"cpu": time.process_time() - c, "blocks": blocks, "unpacked_bytes_held": held,
                  "unpack_peak_bytes": peak}))
"""


def sizes(ledger: Path) -> dict:
    with sqlite3.connect(ledger) as con:
        payloads = [len(r[0]) for r in con.execute("SELECT payload FROM entries WHERE kind = 'release'")]
        config = con.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()[0]
    return {"file": ledger.stat().st_size, "payloads": sum(payloads), "releases": len(payloads),
            "config": config}


def read(root: Path, ledger: Path, config: str) -> dict | str:
    out = subprocess.run([sys.executable, "-c", READ_CHILD, str(root), str(ledger), config],
                         capture_output=True, text=True)
    if out.returncode == 0:
        return json.loads(out.stdout)
    lines = out.stderr.strip().splitlines()      # the exception's line (its HINT follows it)
    return next((line for line in reversed(lines) if "Error" in line), lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="main")
    ap.add_argument("--workdir", default="/tmp/dpsql-ledger-size")
    args = ap.parse_args()
    work = Path(args.workdir)
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"load {os.getloadavg()[0]:.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        base_sha = export(args.base, Path(tmp))
        roots = {"base " + base_sha[:7]: Path(tmp), "this": ROOT}
        ledgers = {}
        for name, root in roots.items():
            d = work / name.split()[-1]
            config = flights.prepare(d)
            if not (d / "flights.ledger").exists():
                subprocess.run([sys.executable, "-c", MEASURE_CHILD, str(root), str(config)],
                               check=True, cwd=d, stdout=subprocess.DEVNULL)
            ledgers[name] = d / "flights.ledger"
        for name, ledger in ledgers.items():
            s = sizes(ledger)
            print(f"{name}: ledger {s['file']:,} bytes, {s['releases']} releases, payloads {s['payloads']:,} bytes")
            for reader, root in roots.items():
                print(f"  read by {reader}: {read(root, ledger, s['config'])}")


if __name__ == "__main__":
    main()
