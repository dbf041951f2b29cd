"""Answer time with a 1,459-label categorical (issue 35 item 1), this checkout vs a base commit.

    python bench/variance_speed.py [--base REV] [--rounds 5] [--workdir /tmp/dpsql-flights-speed]

The workload is ``bench/flights.py``'s (``dest`` over the FAA airport list: 1,459 cells); the
table is measured once in ``--workdir`` (by this checkout, if it has no ledger yet) and both
commits answer from the same ledger.  The base commit's ``dpsql/`` is exported with
``git archive`` to a temporary directory.  Each round starts, for each commit in turn
(alternating which goes first), two fresh processes:

* *warm*: ``Session.execute`` on queries touching ``dest`` and a few that do not, each with
  new parameters per repetition (a repeated statement is answered from the session's cache);
  the first statement of the process is reported apart (it prepares the model's factors);
* *new process*: ``dpsql query "SELECT dest, COUNT(*) FROM flights GROUP BY dest"``, timed
  from outside (interpreter start to exit).

Prints the medians and the warm p95 per commit, with the machine's load; no assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import io
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import flights  # noqa: E402  (bench/flights.py: the table, its domain and workload)

CODES = ["LAX", "SFO", "ORD", "ATL", "BOS", "MIA", "DEN", "SEA", "DFW", "MCO", "IAH", "PHX"]

# (sql, parameters of repetition i); every statement touches dest unless it says otherwise
WARM = [
    ("SELECT COUNT(*) FROM flights WHERE dest = ?", lambda i: (CODES[i % len(CODES)],)),
    ("SELECT dest, COUNT(*) FROM flights WHERE dest IN (?, ?, ?) GROUP BY dest",
     lambda i: tuple(CODES[(i + j) % len(CODES)] for j in range(3))),
    ("SELECT dest, COUNT(*) FROM flights WHERE dest <> ? GROUP BY dest",
     lambda i: (CODES[i % len(CODES)],)),
    ("SELECT origin, COUNT(*) FROM flights WHERE origin <> ? GROUP BY origin",
     lambda i: (["EWR", "JFK", "LGA"][i % 3],)),
    ("SELECT carrier, COUNT(*) FROM flights WHERE carrier <> ? GROUP BY carrier",
     lambda i: (["AA", "UA", "DL", "B6"][i % 4],)),
]
NEW_PROCESS_SQL = "SELECT dest, COUNT(*) FROM flights GROUP BY dest"

WARM_CHILD = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
import dpsql
assert dpsql.__file__.startswith(sys.argv[1]), dpsql.__file__
con = dpsql.connect(sys.argv[2], user="alice")
s = con.session
queries, reps = json.loads(sys.argv[3]), int(sys.argv[4])
t = time.perf_counter(); s.execute(queries[0][0], queries[0][1][0]); first = time.perf_counter() - t
out = {"first": first, "warm": {q: [] for q, _ in queries}, "cpu": {q: [] for q, _ in queries}}
for i in range(1, reps + 1):
    for sql, params in queries:
        t, c = time.perf_counter(), time.process_time()
        s.execute(sql, params[i])
        out["warm"][sql].append(time.perf_counter() - t)
        out["cpu"][sql].append(time.process_time() - c)
print(json.dumps(out))
"""

CLI_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
import dpsql
assert dpsql.__file__.startswith(sys.argv[1]), dpsql.__file__
from dpsql.cli import main
sys.exit(main(["query", "--config", sys.argv[2], "--user", "alice", sys.argv[3]]))
"""

MEASURE_CHILD = r"""
import sys
sys.path.insert(0, sys.argv[1])
from dpsql.cli import main
sys.exit(main(["measure", "--config", sys.argv[2], "--yes"]))
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


def measured(workdir: Path) -> Path:
    """The flights configuration in ``workdir``, measured (once) by this checkout."""
    config = flights.prepare(workdir)
    if not (workdir / "flights.ledger").exists():
        subprocess.run([sys.executable, "-c", MEASURE_CHILD, str(ROOT), str(config)],
                       check=True, cwd=workdir, stdout=subprocess.DEVNULL)
    return config


def run_warm(root: Path, config: Path, reps: int) -> dict:
    queries = [(sql, [list(p(i)) for i in range(reps + 1)]) for sql, p in WARM]
    out = subprocess.run([sys.executable, "-c", WARM_CHILD, str(root), str(config),
                          json.dumps(queries), str(reps)],
                         check=True, capture_output=True, text=True, cwd=config.parent)
    return json.loads(out.stdout)


def run_cli(root: Path, config: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of a new process answering ``NEW_PROCESS_SQL``."""
    t, c = time.perf_counter(), os.times()
    subprocess.run([sys.executable, "-c", CLI_CHILD, str(root), str(config), NEW_PROCESS_SQL],
                   check=True, capture_output=True, cwd=config.parent)
    c1 = os.times()
    return time.perf_counter() - t, (c1.children_user - c.children_user) + (c1.children_system - c.children_system)


def p95(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(0.95 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", default="HEAD~1", help="the commit to compare with")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=8, help="warm repetitions of each statement")
    ap.add_argument("--workdir", default="/tmp/dpsql-flights-speed")
    args = ap.parse_args()
    config = measured(Path(args.workdir))
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "dpsql"],
                                capture_output=True, text=True).stdout.strip())
    with tempfile.TemporaryDirectory() as tmp:
        base_sha = export(args.base, Path(tmp))
        roots = {"base": Path(tmp), "this": ROOT}
        res: dict[str, dict] = {k: {"first": [], "warm": {}, "cpu": {}, "cli": [], "cli_cpu": []}
                                for k in roots}
        load0 = os.getloadavg()
        for r in range(args.rounds):
            order = ["base", "this"] if r % 2 == 0 else ["this", "base"]
            for name in order:
                w = run_warm(roots[name], config, args.reps)
                res[name]["first"].append(w["first"])
                for sql, ts in w["warm"].items():
                    res[name]["warm"].setdefault(sql, []).extend(ts)
                    res[name]["cpu"].setdefault(sql, []).extend(w["cpu"][sql])
                wall, cpu = run_cli(roots[name], config)
                res[name]["cli"].append(wall)
                res[name]["cli_cpu"].append(cpu)
            print(f"round {r + 1}/{args.rounds} done", file=sys.stderr)
        load1 = os.getloadavg()
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; this {head[:7]}"
          f"{' + uncommitted dpsql/' if dirty else ''} vs base {base_sha[:7]}; "
          f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}; "
          f"load {load0[0]:.1f} → {load1[0]:.1f}; {args.rounds} rounds × {args.reps} reps, alternated")
    print(f"{'':58} {'base':>10} {'this':>10}")

    def line(label, key):
        print(f"{label:58} {key(res['base']):>10.3f} {key(res['this']):>10.3f}")
    line("new process `dpsql query` GROUP BY dest, median wall s", lambda d: statistics.median(d["cli"]))
    line("new process `dpsql query` GROUP BY dest, median CPU s",
         lambda d: statistics.median(d["cli_cpu"]))
    line("first execute in a process (prepares factors), median s",
         lambda d: statistics.median(d["first"]))
    for sql, _ in WARM:
        line(f"warm p95 s: {sql[:45]}", lambda d, s=sql: p95(d["warm"][s]))
    line("warm p95 s, all statements", lambda d: p95([t for ts in d["warm"].values() for t in ts]))
    line("warm p95 CPU s, all statements", lambda d: p95([t for ts in d["cpu"].values() for t in ts]))
    for sql, _ in WARM[:3]:
        line(f"warm p95 CPU s: {sql[:41]}", lambda d, s=sql: p95(d["cpu"][s]))
    line("warm median s, all statements",
         lambda d: statistics.median([t for ts in d["warm"].values() for t in ts]))


if __name__ == "__main__":
    main()
