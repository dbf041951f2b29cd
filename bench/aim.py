"""AIM benchmark (thesis §5.6): workload error, time and memory of dpsql's AIM, dpsql's
HDMM plan on the same workload, and the authors' reference AIM, side by side.

    python bench/aim.py                              # quick grid: titanic, nltcs at ε 0.1, 1, 10
    python bench/aim.py --full                       # adult, salary too, ε 0.1, 0.3, 1, 3, 10
    python bench/aim.py --datasets titanic --eps 1 --systems dpsql,hdmm
    python bench/aim.py --reference-src DIR          # also the reference AIM (own venv)
    python bench/aim.py --report out/aim/*.json      # markdown table of results files

Systems: ``dpsql`` (AIM), ``hdmm`` (dpsql's HDMM plan measured, then Private-PGM: the error
SQL answers have), ``hdmm-plan`` (HDMM's plan only: its expected error from the plan's RMSE,
spends nothing; cheap where a measured HDMM run takes many minutes), ``reference``.
The thesis's FIRE and MSNBC tables have only their domain files in shared/data (the CSVs are
missing from the hd-datasets snapshot), so they cannot run here.

Workloads are the thesis's: ALL-3WAY (every 3-way marginal) and TARGET (every 3-way
marginal containing the target attribute), weight 1 each, over the discretized tables in
shared/data (the thesis's Table 5.2 versions: adult = adult-hd, 15 attributes).  Error is
the thesis's Def. 26, (1/k) Σ_r ‖M_r(D) − M_r(D̂)‖₁/|D| over the k workload marginals,
for the model's marginals ("model") and for synthetic rows drawn from it ("synth", |D|
rows).  δ = 10⁻⁹ as in §5.6.1.

Every run is a fresh process (its peak RSS is the memory figure) with a timeout.  dpsql
runs go through the engine exactly as an operator would (``Session.measure(mode="aim")``
on a config over the CSV, then the model fit and ``Session.synthetic``), so the time
includes DuckDB counting, the ledger's fsyncs and compiling the workload SQL.

The reference is ``mechanisms/aim.py`` of github.com/ryan112358/mbi (Apache-2.0; read at
commit a92f266) on mbi 2.0.0 from PyPI, in bench/peers/.venv-mbi (created here from
bench/peers/requirements-mbi.txt).  Its sources are not part of dpsql: pass a checkout of
that ``mechanisms/`` folder with --reference-src.  Both run with the same model capacity
(--max-model-mb, the thesis's MAX-SIZE) and the reference with its default 1000 mirror
descent iterations per round.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from datetime import datetime, UTC
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = ROOT / "bench" / "out" / "aim"
PEERS = HERE / "peers"
VENV = PEERS / ".venv-mbi"
DELTA = 1e-9
DATASETS = {  # name: (directory, csv, domain json, target attribute for TARGET)
    "titanic": ("titanic", "titanic.csv", "titanic-domain.json", "Survived"),
    "nltcs": ("nltcs", "nltcs.csv", "nltcs-domain.json", None),
    "adult": ("adult-hd", "adult.csv", "adult-domain.json", "income>50K"),
    "salary": ("salary", "salary.csv", "salary-domain.json", None),
}
DEFAULT_EPS = (0.1, 0.3, 1.0, 3.0, 10.0)
# Every system runs on one thread (BLAS, OpenMP, XLA), as the thesis's runs did (§5.6.1: "a
# single core"): the comparison is then per core, and one run does not take a shared
# machine's other core.
SINGLE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                 "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}


def _data_dir(arg: str | None) -> Path:
    for cand in ([Path(arg)] if arg else []) + [ROOT.parent / "shared" / "data",
                                                ROOT.parent.parent / "shared" / "data"]:
        if cand.exists():
            return cand
    raise SystemExit("shared/data not found; pass --data-dir")


def _snake(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def prepare(name: str, data_dir: Path) -> dict:
    """Renamed CSV, domain JSON (reference) and domain TOML + config (dpsql) for one table."""
    folder, csv_name, dom_name, target = DATASETS[name]
    src = data_dir / folder
    domain = json.loads((src / dom_name).read_text())
    out = OUT / "data"
    out.mkdir(parents=True, exist_ok=True)
    with open(src / csv_name, newline="") as f:
        header = next(csv.reader(f))
    cols = [c for c in header if c in domain]
    rename = {c: _snake(c) for c in cols}
    dst = out / f"{name}.csv"
    if not dst.exists():
        with open(src / csv_name, newline="") as f, open(dst, "w", newline="") as g:
            rows = csv.reader(f)
            next(rows)
            w = csv.writer(g)
            w.writerow([rename[c] for c in cols])
            idx = [header.index(c) for c in cols]
            for r in rows:
                w.writerow([r[i] for i in idx])
    (out / f"{name}-domain.json").write_text(json.dumps({rename[c]: domain[c] for c in cols}))
    toml = [f"# generated by bench/aim.py from {src / dom_name}: codes 0..k-1", f"[tables.{name}]", ""]
    for c in cols:
        toml += [f"[tables.{name}.columns.{rename[c]}]", 'type = "integer"', "lo = 0",
                 f"hi = {int(domain[c]) - 1}", ""]
    (out / f"{name}.domain.toml").write_text("\n".join(toml))
    return {"name": name, "csv": str(dst), "domain_json": str(out / f"{name}-domain.json"),
            "domain_toml": str(out / f"{name}.domain.toml"),
            "attributes": [rename[c] for c in cols], "sizes": [int(domain[c]) for c in cols],
            "target": rename.get(target) if target else None}


def workload(table: dict, kind: str, seed: int = 0) -> list[tuple[str, ...]]:
    attrs = table["attributes"]
    triples = list(itertools.combinations(attrs, 3))
    if kind == "all3way":
        return triples
    if kind == "all3way-1m":
        # ALL-3WAY without the marginals over dpsql's GROUP BY limit (10⁶ groups): on salary
        # the 5 triples first-name × organization-name × one of the 33-bin amounts (1.26M cells)
        # cannot be written as a dpsql query; every system then runs the same 79 marginals.
        from dpsql.sql.grouping import MAX_GROUPS
        sizes = dict(zip(attrs, table["sizes"]))
        return [t for t in triples if math.prod(sizes[a] for a in t) <= MAX_GROUPS]
    if kind == "all2way":  # a smaller case than the thesis's, where the reference must finish
        return list(itertools.combinations(attrs, 2))
    if kind == "target":
        target = table["target"]
        if target is None:  # thesis: "chosen uniformly at random" for the other tables
            import random
            target = random.Random(seed).choice(attrs)
        return [t for t in triples if target in t]
    raise SystemExit(f"unknown workload {kind}")


def _sql(table: str, clique) -> str:
    cols = ", ".join(clique)
    return f"SELECT {cols}, COUNT(*) FROM {table} GROUP BY {cols}"


# -- one run in a fresh process -----------------------------------------------------------------
def dpsql_job(job: dict) -> dict:
    import numpy as np

    import dpsql
    from dpsql.privacy.accountant import epsilon_delta_to_rho

    from dpsql.testing import write_config

    tmp = Path(tempfile.mkdtemp(prefix="aim-bench-"))
    cells = int(job["max_model_mb"] * 2**20 / 8)
    cfg = write_config(tmp, ledger="bench.ledger", cache_dir="cache", dpsql={"fit_iters": job["fit_iters"]},
                       rho=float(epsilon_delta_to_rho(job["epsilon"], DELTA)), delta=DELTA,
                       table=job["name"], domain=job["domain_toml"], source={"csv": job["csv"]},
                       planner={"mode": "aim" if job["mode"] == "aim" else "hdmm",
                                "aim_max_model_cells": cells, "max_model_cells": max(20_000_000, cells)})
    cliques = [tuple(c) for c in job["workload"]]
    t0 = time.perf_counter()
    con = dpsql.connect(cfg, user="bench", workload=[_sql(job["name"], c) for c in cliques])
    s = con.session
    plan = s.plan() if job["mode"] != "aim" else None
    if job["mode"] == "hdmm-plan":
        # HDMM's plan alone: public, spends nothing.  Its answers are unbiased with per-cell
        # RMSE plan.rmse, so the expected Def. 26 error of the workload answered by least
        # squares is √(2/π)·RMSE·(mean cells per marginal)/N (an upper bound by Jensen when the
        # cells' variances differ).  HDMM + Private-PGM only lowers it (the projection onto
        # the marginal polytope), and never above 2: this is an expectation, not a run.
        n = sum(1 for _ in open(job["csv"])) - 1
        sizes = dict(zip(job["attributes"], job["sizes"]))
        cells = sum(math.prod(sizes[a] for a in c) for c in cliques) / len(cliques)
        out = {"seconds": time.perf_counter() - t0, "plan_s": plan.seconds, "plan_rmse": plan.rmse,
               "strategy": plan.strategy.operator,
               "expected_error": math.sqrt(2 / math.pi) * plan.rmse * cells / n,
               "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}
        con.close()
        return out
    report = s.measure()
    t1 = time.perf_counter()
    model, _, _ = s.engine.model(job["name"])
    t2 = time.perf_counter()
    try:
        synth = s.synthetic(rows=job["rows"], seed=job["seed"])
    except dpsql.NotSupportedError:  # HDMM's many cliques can need the relaxed model: no sampler
        synth = None
    t3 = time.perf_counter()
    # truth (the benchmark may look at the data; dpsql never does outside measurement)
    data = np.loadtxt(job["csv"], delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    attrs, sizes = job["attributes"], job["sizes"]
    synth_cells = np.array([[int(v) for v in r] for r in synth.rows], dtype=np.int64) \
        if synth is not None and synth.rows else np.zeros((0, len(attrs)), dtype=np.int64)
    n = data.shape[0]
    model_err, synth_err = [], []
    for c in cliques:
        idx = [attrs.index(a) for a in c]
        shp = [sizes[i] for i in idx]
        x = np.bincount(np.ravel_multi_index(tuple(data[:, i] for i in idx), shp), minlength=math.prod(shp))
        z = model.marginal(c).values.reshape(-1)
        model_err.append(np.abs(x - z / z.sum() * n).sum() / n)
        if synth is not None:
            y = np.bincount(np.ravel_multi_index(tuple(synth_cells[:, i] for i in idx), shp),
                            minlength=math.prod(shp))
            synth_err.append(np.abs(x - y / max(y.sum(), 1) * n).sum() / n)
    out = {"seconds": t3 - t0, "measure_s": t1 - t0, "fit_s": t2 - t1, "synth_s": t3 - t2,
           "model_error": float(np.mean(model_err)),
           "synth_error": float(np.mean(synth_err)) if synth_err else None,
           "model": type(model).__name__,
           "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
           "rho": float(report.rho)}
    if job["mode"] == "aim":
        out.update(rounds=report.rounds, rho_select=report.rho_select, selected=len(report.selected))
    else:
        out.update(blocks=report.blocks, strategy=plan.strategy.operator, plan_rmse=plan.rmse,
                   plan_s=plan.seconds)
    con.close()
    return out


def _run(cmd: list[str], job: dict, timeout: float) -> dict:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, input=json.dumps(job), text=True, capture_output=True, timeout=timeout,
                              env=dict(os.environ, PYTHONPATH=str(ROOT), **SINGLE_THREAD))
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s", "seconds": time.perf_counter() - t0}
    if proc.returncode != 0:
        return {"error": (proc.stderr or proc.stdout)[-1500:], "seconds": time.perf_counter() - t0}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def ensure_reference_venv() -> Path:
    py = VENV / "bin" / "python"
    stamp = VENV / ".requirements"
    req = (PEERS / "requirements-mbi.txt").read_text()
    if not py.exists() or not stamp.exists() or stamp.read_text() != req:
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "-q", "-r", str(PEERS / "requirements-mbi.txt")],
                       check=True)
        stamp.write_text(req)
    return py


def environment() -> dict:
    def git(*a):
        try:
            return subprocess.run(["git", *a], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": git("rev-parse", "--short", "HEAD"),
            "machine": f"{platform.machine()} {os.cpu_count()} cpu, {platform.python_version()}",
            "load": os.getloadavg()[0]}


def report(paths: list[str], data_dir: Path) -> str:
    """Markdown table of one or more results files (mean over trials)."""
    from dpsql.plan.aim import AIM_NOISE_SHARE
    runs = [r for p in paths for r in json.loads(Path(p).read_text())["runs"]]
    keys = sorted({(r["dataset"], r["workload"], r["epsilon"], r.get("max_model_mb", 80.0)) for r in runs},
                  key=lambda k: (list(DATASETS).index(k[0]), k[1], -k[3], k[2]))
    lines = ["| dataset | workload | MAX-SIZE | ε | AIM (dpsql): model / synth error | time | peak RSS | rounds "
             "| HDMM (dpsql) + PGM: model error | time | HDMM expected error (plan) | advice "
             "| reference AIM: model / synth error | time | peak RSS | reference time / dpsql time "
             "| lower error |",
             "|" + "---|" * 17]

    def pick(k, system):
        mine = [r for r in runs if (r["dataset"], r["workload"], r["epsilon"], r.get("max_model_mb", 80.0)) == k
                and r["system"] == system]
        got = [r for r in mine if "error" not in r]
        if not got:
            return None, (mine[-1]["error"].splitlines()[-1][:40] if mine else None)
        fields = [f for f in ("model_error", "synth_error", "seconds", "peak_rss_mb", "expected_error")
                  if all(r.get(f) is not None for r in got)]
        avg = {f: sum(r[f] for r in got) / len(got) for f in fields}
        avg["rounds"] = got[0].get("rounds")
        if len(got) > 1 and "model_error" in avg:
            avg["sd"] = math.sqrt(sum((r["model_error"] - avg["model_error"]) ** 2 for r in got) / (len(got) - 1))
        avg["n"] = len(got)
        return avg, None

    fmt = lambda v, f: "–" if v is None else format(v, f)  # noqa: E731
    for k in keys:
        name, wl, eps, mb = k
        a, a_err = pick(k, "dpsql")
        h, h_err = pick(k, "hdmm")
        p, p_err = pick(k, "hdmm-plan")
        r, r_err = pick(k, "reference")
        e = p.get("expected_error") if p else None
        advice = "–" if e is None else ("AIM" if e > AIM_NOISE_SHARE else "HDMM")
        # lower error among measured runs; HDMM's expectation stands in for an unrun HDMM only
        # where it is below AIM's error (the PGM projection only lowers it)
        cands = [(v["model_error"], s) for v, s in ((a, "AIM"), (h, "HDMM"), (r, "reference")) if v]
        if h is None and e is not None and a and e < a["model_error"]:
            cands.append((e, "HDMM (expected)"))
        best = min(cands, default=(None, "–"))[1]
        if best == "AIM" and h is None and e is not None:
            best = "AIM (vs HDMM expected)"
        if a and r and a["n"] > 1 and r["n"] > 1 and \
                abs(a["model_error"] - r["model_error"]) < max(a["sd"], r["sd"]):
            best = "tie (AIM, reference)"  # within one trial's sd of each other
        trials = lambda v: "" if not v or v["n"] == 1 else (  # noqa: E731
            f" (mean ± sd of {v['n']}: ± {v['sd']:.4f})" if v.get("sd") is not None else f" (mean of {v['n']})")
        lines.append(" | ".join([
            f"| {name}", wl, f"{mb:g} MB", f"{eps:g}",
            (f"{fmt(a['model_error'], '.4f')} / {fmt(a.get('synth_error'), '.4f')}{trials(a)}" if a
             else (a_err or "–")),
            f"{a['seconds']:.1f} s" if a else "–", f"{a['peak_rss_mb']:.0f} MB" if a else "–",
            str(a["rounds"]) if a else "–",
            fmt(h["model_error"], ".4f") + trials(h) if h else (h_err or "not run"),
            f"{h['seconds']:.0f} s" if h else "–",
            fmt(e, ".3g") if p else (p_err or "–"), advice,
            (f"{fmt(r['model_error'], '.4f')} / {fmt(r.get('synth_error'), '.4f')}{trials(r)}" if r
             else (r_err or "not run")),
            f"{r['seconds']:.0f} s" if r else "–", f"{r['peak_rss_mb']:.0f} MB" if r else "–",
            f"{r['seconds'] / a['seconds']:.1f}×" if a and r else "–", best]) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--full", action="store_true", help="all datasets at all five ε")
    ap.add_argument("--datasets", default="titanic,nltcs")
    ap.add_argument("--workloads", default="all3way")
    ap.add_argument("--eps", default="0.1,1,10")
    ap.add_argument("--systems", default="dpsql,hdmm,reference")
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--first-trial", type=int, default=0, help="number (and seed) of the first trial, to add trials")
    ap.add_argument("--max-model-mb", type=float, default=80.0, help="MAX-SIZE for both AIMs (thesis: 80)")
    ap.add_argument("--fit-iters", type=int, default=1000, help="dpsql's final fit (rounds use 200)")
    ap.add_argument("--ref-iters", type=int, default=1000, help="reference: mirror descent iterations per round")
    ap.add_argument("--ref-rounds", type=int, help="reference: its T (default 16·d, as dpsql's)")
    ap.add_argument("--timeout", type=float, default=3600.0)
    ap.add_argument("--reference-src", default=os.environ.get("DPSQL_AIM_REFERENCE"),
                    help="checkout of ryan112358/mbi's mechanisms/ folder (or $DPSQL_AIM_REFERENCE)")
    ap.add_argument("--data-dir")
    ap.add_argument("--out", default=str(OUT / "results.json"))
    ap.add_argument("--report", nargs="+", metavar="JSON", help="print the markdown table of results files")
    args = ap.parse_args(argv)
    if args.report:
        print(report(args.report, _data_dir(args.data_dir)))
        return 0
    if args.job:
        print(json.dumps(dpsql_job(json.loads(sys.stdin.read()))))
        return 0
    if args.full:
        args.datasets = ",".join(DATASETS)
        args.eps = ",".join(str(e) for e in DEFAULT_EPS)
    data_dir = _data_dir(args.data_dir)
    systems = args.systems.split(",")
    if "reference" in systems and not args.reference_src:
        print("reference AIM skipped: no --reference-src (a checkout of ryan112358/mbi mechanisms/)")
        systems.remove("reference")
    ref_py = ensure_reference_venv() if "reference" in systems else None
    results_path = Path(args.out)
    results = json.loads(results_path.read_text()) if results_path.exists() else {"runs": []}
    env = environment()
    print(f"# {env}")
    for name in args.datasets.split(","):
        table = prepare(name, data_dir)
        for wl in args.workloads.split(","):
            cliques = workload(table, wl)
            for eps in (float(e) for e in args.eps.split(",")):
                for trial in range(args.first_trial, args.first_trial + args.trials):
                    for system in systems:
                        job = dict(table, workload=[list(c) for c in cliques], epsilon=eps, seed=1000 * trial + 7,
                                   rows=sum(1 for _ in open(table["csv"])) - 1, max_model_mb=args.max_model_mb,
                                   fit_iters=args.fit_iters)
                        if system == "reference":
                            job.update(reference_src=args.reference_src, delta=DELTA, max_model_size=args.max_model_mb,
                                       max_iters=args.ref_iters, synth_rows=job["rows"], rounds=args.ref_rounds)
                            res = _run([str(ref_py), str(PEERS / "mbi_aim_runner.py")], job, args.timeout)
                        else:
                            job["mode"] = {"dpsql": "aim", "hdmm": "hdmm", "hdmm-plan": "hdmm-plan"}[system]
                            res = _run([sys.executable, str(Path(__file__)), "--job"], job, args.timeout)
                        row = {"dataset": name, "workload": wl, "marginals": len(cliques), "epsilon": eps,
                               "trial": trial, "system": system, "max_model_mb": args.max_model_mb,
                               "ref_iters": args.ref_iters if system == "reference" else None,
                               **env, **res}
                        results["runs"].append(row)
                        results_path.parent.mkdir(parents=True, exist_ok=True)
                        results_path.write_text(json.dumps(results, indent=1))
                        err = res.get("error")
                        print(f"{name:8s} {wl:8s} eps={eps:<5g} {system:9s} " + (
                            f"ERROR {err.splitlines()[-1][:120] if err else ''}" if err else
                            f"expected error {res['expected_error']:.4g} (plan {res['plan_s']:.1f} s)"
                            if system == "hdmm-plan" else
                            f"model {res['model_error']:.4f} synth "
                            + ("  -   " if res.get("synth_error") is None else f"{res['synth_error']:.4f}")
                            + " "
                            f"{res['seconds']:8.1f} s {res['peak_rss_mb']:7.0f} MB"
                            + (f" rounds {res.get('rounds')}" if res.get("rounds") else "")), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
