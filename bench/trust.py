"""Issue 17 timings: answers at once from a new process, a new wire connection, and the fit.

    python bench/trust.py [--old CHECKOUT] [--parts query,wire,fit,blas] [--repeat 3]

* ``query``: a new process answers one query on a measured 55-marginal adult workload (all
  one- and two-way marginals of ten attributes), ``dpsql query`` wall time.  Before issue 17
  the first process after the measurement fitted the model and later processes refitted;
  then they loaded the model the first one saved; now ``dpsql measure`` fits and saves it,
  so the first process loads it too.  Target: ≤ 1 s.
* ``wire``: a running ``dpsql serve`` (adult dashboard, measured): a new psycopg connection
  (SCRAM) and its first answer.  Target ≤ 200 ms.
* ``fit``: the model fit of a 40-query adult dashboard at ε = 1 (its strategy measures 32
  cliques: the "27-clique" workload of the issue, a few queries larger), the engine's own fit
  of one release made by this checkout.  Target ≤ 1 s.
* ``blas``: the fit on one OpenBLAS thread against the default (this checkout only): does
  it gain from the limit the planner and the answer path run under?

``--old CHECKOUT`` runs the same measurements with the code of another checkout (e.g. the
commit before issue 17) side by side, in the same run, so the ratio holds on a noisy
machine: its ``dpsql`` is started with that checkout on PYTHONPATH.  Measurements (the
noisy releases) are made once by the new code and read from its ledger by both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ADULT = ROOT / "examples" / "adult"
TEN = ["sex", "race", "income", "age", "workclass", "education", "marital_status", "occupation",
       "relationship", "hours_per_week"]
QUERY = "SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income"
JOINT_QUERY = "SELECT age, sex, COUNT(*) FROM adult GROUP BY age, sex"


def marginals55() -> list[str]:
    out = [f"SELECT {a}, COUNT(*) FROM adult GROUP BY {a}" for a in TEN]
    out += [f"SELECT {a}, {b}, COUNT(*) FROM adult GROUP BY {a}, {b}"
            for i, a in enumerate(TEN) for b in TEN[i + 1:]]
    return out


def dashboard40() -> list[str]:
    from dpsql.sql.split import split_statements
    base = split_statements((ADULT / "dashboard.sql").read_text())
    return base + [
        "SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race",
        "SELECT age, sex, COUNT(*) FROM adult GROUP BY age, sex",
        "SELECT hours_per_week, income, COUNT(*) FROM adult GROUP BY hours_per_week, income",
        "SELECT education, sex, COUNT(*) FROM adult GROUP BY education, sex",
        "SELECT occupation, sex, COUNT(*) FROM adult GROUP BY occupation, sex",
        "SELECT relationship, income, COUNT(*) FROM adult GROUP BY relationship, income",
        "SELECT marital_status, sex, COUNT(*) FROM adult GROUP BY marital_status, sex",
        "SELECT race, COUNT(*) FROM adult WHERE age BETWEEN 25 AND 54 GROUP BY race",
        "SELECT workclass, COUNT(*) FROM adult WHERE hours_per_week > 40 GROUP BY workclass",
        "SELECT COUNT(*) FROM adult WHERE capital_loss > 0"]


def write_config(workdir: Path, queries: list[str], epsilon: float) -> Path:
    from dpsql.testing import write_config as write
    return write(workdir, queries=queries, epsilon=epsilon, ledger=workdir / "bench.ledger")


def _env(checkout: Path) -> dict:
    """That checkout first on the path; bytecode written and re-used as after a pip install
    (this machine sets PYTHONDONTWRITEBYTECODE, which makes every process compile all of
    dpsql again: ~1-2 s that no installed copy pays)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(checkout)
    return env


def run_cli(checkout: Path, *args, timeout=3600) -> tuple[float, subprocess.CompletedProcess]:
    env = _env(checkout)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "dpsql.cli", *args], env=env, cwd=checkout,
                       capture_output=True, text=True, timeout=timeout)
    return time.perf_counter() - t0, r


def part_query(checkouts: dict[str, Path], repeat: int) -> None:
    print("\n## query: a new process answers on the measured 55-marginal workload (ε = 1)")
    print(f"`{QUERY}` (one measured block supports it) and `{JOINT_QUERY}` (only residual and marginal "
          "blocks together do: joint standard errors).  `measure` is `dpsql measure --yes`, which since "
          "issue 17 also fits and saves the model; the first process after it loads the model where "
          "measure saved it and fits it otherwise.")
    print("| code | measure (s) | first process (s) | later processes, median (s) | joint-support query, "
          "median (s) | target |")
    print("|---|---:|---:|---:|---:|---|")
    for name, checkout in checkouts.items():
        work = Path(tempfile.mkdtemp(prefix=f"trust-{name.split()[0]}-"))
        cfg = write_config(work, marginals55(), 1.0)
        measure, r = run_cli(checkout, "measure", "--config", str(cfg), "--yes")
        assert r.returncode == 0, r.stderr
        first, r = run_cli(checkout, "query", "--config", str(cfg), QUERY)
        assert r.returncode == 0, r.stderr
        later, joint = [], []
        for _ in range(repeat):     # alternated, so both see the same load
            t, r = run_cli(checkout, "query", "--config", str(cfg), QUERY)
            assert r.returncode == 0, r.stderr
            later.append(t)
            t, r = run_cli(checkout, "query", "--config", str(cfg), JOINT_QUERY)
            assert r.returncode == 0, r.stderr
            joint.append(t)
        print(f"| {name} | {measure:.1f} | {first:.2f} | {statistics.median(later):.2f} | "
              f"{statistics.median(joint):.2f} | ≤ 1 s |", flush=True)


def part_wire(checkouts: dict[str, Path], repeat: int) -> None:
    import psycopg  # noqa: F401 - fail early when the client is missing
    print("\n## wire: a new connection's first answer (adult dashboard measured, server running)")
    print("| code | first connection + answer (ms) | new connection + first answer, median (ms) | target |")
    print("|---|---:|---:|---|")
    for name, checkout in checkouts.items():
        work = Path(tempfile.mkdtemp(prefix=f"wire-{name}-"))
        from dpsql.sql.split import split_statements
        cfg = write_config(work, split_statements((ADULT / "dashboard.sql").read_text()), 1.0)
        _, r = run_cli(checkout, "measure", "--config", str(cfg), "--yes")
        assert r.returncode == 0, r.stderr
        env = _env(checkout)
        users = work / "users.json"
        subprocess.run([sys.executable, "-m", "dpsql.cli", "user", "add", "bench", "--password", "pw",
                        "--config", str(cfg), "--users", str(users)], env=env, check=True,
                       capture_output=True, cwd=checkout)
        import socket
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = subprocess.Popen([sys.executable, "-m", "dpsql.cli", "serve", "--config", str(cfg),
                                   "--users", str(users), "--port", str(port), "--no-catalog"],
                                  env=env, cwd=checkout, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            times = [_connect_and_query(port) for _ in range(repeat + 1)]
        finally:
            server.terminate()
            server.wait(timeout=30)
        print(f"| {name} | {times[0] * 1000:.0f} | {statistics.median(times[1:]) * 1000:.0f} | ≤ 200 ms |",
              flush=True)


def _connect_and_query(port: int) -> float:
    import psycopg
    deadline = time.time() + 600
    while True:
        try:
            t0 = time.perf_counter()
            with psycopg.connect(host="127.0.0.1", port=port, user="bench", password="pw", dbname="dpsql",
                                 autocommit=True, sslmode="disable", connect_timeout=600) as con:
                con.execute(QUERY).fetchall()
            return time.perf_counter() - t0
        except psycopg.OperationalError:
            if time.time() > deadline:
                raise
            time.sleep(0.5)


FIT_SNIPPET = """
import json, sys, time
from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
cfg = load_config(sys.argv[1], **({"fit_iters": int(sys.argv[2])} if sys.argv[2] != "-" else {}))
engine = Engine(cfg)
measurements = engine.released_measurements("adult")
domain = engine.tables["adult"].schema.domain
before = set(sys.modules)
t0, c0 = time.perf_counter(), time.process_time()
model = engine.models._fit(domain, measurements, None, "adult")
print(json.dumps({"seconds": time.perf_counter() - t0, "cpu": time.process_time() - c0,
                  "iterations": len(model.loss) - 1, "kind": type(model).__name__,
                  "imported": sorted(m for m in ("scipy", "networkx") if m in set(sys.modules) - before)}))
"""


def _measured_config(queries: list[str], prefix: str) -> Path:
    """A fresh config with ``queries`` measured at ε = 1 by this checkout, model not fitted."""
    cfg = write_config(Path(tempfile.mkdtemp(prefix=prefix)), queries, 1.0)
    _, r = run_cli(ROOT, "measure", "--config", str(cfg), "--yes", "--no-fit")
    assert r.returncode == 0, r.stderr
    return cfg


def _alternated_fits(cfg: Path, iters: str, variants: dict[str, tuple[dict, Path]],
                     repeat: int) -> dict[str, list[dict]]:
    """The engine's fit of ``cfg``'s release in fresh processes, one per variant (its
    environment and working directory) in turn, ``repeat`` rounds ("-": to convergence)."""
    runs: dict[str, list] = {name: [] for name in variants}
    for _ in range(repeat):
        for name, (env, cwd) in variants.items():
            r = subprocess.run([sys.executable, "-c", FIT_SNIPPET, str(cfg), iters], env=env,
                               capture_output=True, text=True, timeout=3600, cwd=cwd)
            assert r.returncode == 0, r.stderr
            runs[name].append(json.loads(r.stdout.strip().splitlines()[-1]))
    return runs


def part_fit(checkouts: dict[str, Path], repeat: int) -> None:
    """The engine's own fit of one release, timed in fresh processes with each checkout's code
    (alternated).  The release is made once by this checkout and read back from its ledger by
    each checkout: the dashboard's strategy now holds a 7,326-cell block whose dense query
    matrix (430 MB) cannot be handed over as plain arrays."""
    print("\n## fit: the 40-query dashboard's model at ε = 1 (exact junction tree)")
    cfg = _measured_config(dashboard40(), "fit-")
    print("| code | fit (s), median | CPU (s), median | iterations | model | imported by the fit |")
    print("|---|---:|---:|---:|---|---|")
    runs = _alternated_fits(cfg, "-", {name: (_env(c), c) for name, c in checkouts.items()}, repeat)
    for name, out in runs.items():
        print(f"| {name} | {statistics.median(o['seconds'] for o in out):.2f} | "
              f"{statistics.median(o.get('cpu', float('nan')) for o in out):.2f} | {out[0]['iterations']} | "
              f"{out[0]['kind']} | {', '.join(out[0].get('imported', [])) or '–'} |", flush=True)


def part_blas(checkouts: dict[str, Path], repeat: int) -> None:
    """Whether the fit gains from one BLAS thread as the planner does (OPENBLAS_NUM_THREADS=1
    against the library's default, alternated in fresh processes, this checkout only, the
    engine's own fit of its releases): the 40-query dashboard's exact fit to convergence, and
    300 iterations of the 55-marginal workload's relaxed fit (its full fit runs for minutes)."""
    print("\n## blas: the fit on one OpenBLAS thread vs the default (this checkout)")
    print("| fit | BLAS threads | fit (s), median | iterations |")
    print("|---|---|---:|---:|")
    base = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    base["PYTHONPATH"] = str(ROOT)
    variants = {"1": (dict(base, OPENBLAS_NUM_THREADS="1"), ROOT), "default": (base, ROOT)}
    for label, queries, iters in (("40-query dashboard, exact, to convergence", dashboard40(), "-"),
                                  ("55 marginals, relaxed, 300 iterations", marginals55(), "300")):
        runs = _alternated_fits(_measured_config(queries, "blas-"), iters, variants, repeat)
        for threads, out in runs.items():
            print(f"| {label} ({out[0]['kind']}) | {threads} | "
                  f"{statistics.median(o['seconds'] for o in out):.2f} | {out[0]['iterations']} |", flush=True)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", type=Path, help="another checkout to time side by side")
    parser.add_argument("--parts", default="query,wire,fit")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    checkouts = {"this commit": ROOT}
    if args.old:
        checkouts[f"old ({args.old.name})"] = args.old.resolve()
    now = time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())
    print(f"# bench/trust.py  load average {os.getloadavg()[0]:.2f}  ({now})")
    parts = {"query": part_query, "wire": part_wire, "fit": part_fit, "blas": part_blas}
    for p in args.parts.split(","):
        parts[p](checkouts, args.repeat)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
