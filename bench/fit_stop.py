"""Reported errors against realised ones, by where the fit stops (issue 35 item 6).

    python bench/fit_stop.py [--trials 4] [--adult-trials 3] [--scale 0.1] [--workdir DIR]

The reported standard error of a model answer is least squares' for that query (widened where
the model leaves the least-squares interval, capped at the per-query baseline;
docs/engine.md, "Standard errors").  It holds for the model at its optimum; exact models over
``FitLimits.discrepancy_above`` cells used to stop at the discrepancy principle instead
(docs/engine.md, "Where the fit stops").  Each release here is measured once and answered by
three estimators, in the same process on the same noisy values:

* **main**: the fit as before this change, stopped at the discrepancy principle above 10⁶ cells
  (``dpsql.engine.fitting.FIT_STOP = "discrepancy"``, the one value the change moved);
* **this**: the fit to the gap tolerance at every size (``FIT_STOP = None``);
* **LS**: ``SET dpsql.estimator = 'least_squares'`` (unbiased; its se is exact).

Two workloads: TPC-H SF 0.1's template workload (``bench/people_tpch.py --workload templates``,
ε = 1, δ = 10⁻⁶), the line-item view only (its 1,387,346-cell model is over the threshold), and
adult's mixed corpus of ``bench/reported_errors.py`` (26 dashboard counts and 5 SUM/AVG queries,
ε = 1; a model under the threshold, so main and this must agree).  Per family: realised
MSE / reported se² (every row of every release, against DuckDB's exact answers; the reported
se is what users see, binning bound included) and the rows whose reported se net of its binning
bound (``Cursor.bias``/1.96, as ``bench/reported_errors.py``) is above the query's per-query
baseline (the plan report's), counting only queries the plan promises (its own se within the
baseline); AVG rows are in the MSE only.  Also each fit's CPU seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import resource
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import dpsql  # noqa: E402
from dpsql.engine import fitting  # noqa: E402
from dpsql.engine.config import load_config  # noqa: E402
from dpsql.engine.variance import Z95  # noqa: E402
from dpsql.measure.exact import ExactOracle  # noqa: E402
from dpsql.privacy.accountant import epsilon_delta_to_rho  # noqa: E402
from dpsql.testing import write_config  # noqa: E402

VARIANTS = (("main", "discrepancy"), ("this", None), ("LS", None))


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def answer_all(con, table: str, sqls, truths, families, baselines, promised, out, fits) -> None:
    """Answer ``sqls`` under each variant on the connection's current release; append per row
    (variant, family, z², above-baseline flag or None) to ``out`` and fit CPU s to ``fits``."""
    eng = con.session.engine
    for variant, stop in VARIANTS:
        fitting.FIT_STOP = stop
        if variant != "LS":
            state = eng.models._state(table)
            state.model = state.model_last = None      # refit these measurements
            c0 = cpu()
            model = eng.models.model(table)[0]
            fits[variant].append((cpu() - c0, model.report.describe()))
        cur = con.cursor()
        cur.execute("SET dpsql.estimator = '%s'" % ("least_squares" if variant == "LS" else "pgm"))
        for sql, truth, fam in zip(sqls, truths, families):
            cur.execute(sql)
            rows, errs, bias = cur.fetchall(), cur.stderr, cur.bias
            for row, e, b in zip(rows, errs, bias):
                se = e[-1]
                if se is None or not se > 0 or row[-1] is None:
                    continue
                z2 = ((row[-1] - truth.get(tuple(row[:-1]), 0.0)) / se) ** 2
                above = None
                if sql in promised and "AVG(" not in sql:
                    above = se - (b[-1] or 0.0) / Z95 > baselines[sql] * (1 + 1e-9)
                out.append((variant, fam, z2, above, sql))
    fitting.FIT_STOP = None


def tpch(trials: int, scale: float, workdir: Path, out, fits) -> None:
    import people_tpch as P

    rho = float(epsilon_delta_to_rho(1.0, 1e-6))
    queries = P.WORKLOADS["templates"]
    data = P.generate(scale)
    sqls = [P.to_sql(g, a, c) for _, g, a, c in queries]
    exact = P.exact_answers(data, sqls, P.PREFIX["templates"])
    pick = [i for i, q in enumerate(queries) if P.deepest(q[1], q[2], q[3]) == "lineitem"]

    def family(name: str) -> str:
        head = name.split()[0]
        return "TPC-H " + head + (" " + name.split()[-1] if head == "Q1" else "")

    config = P.write_config(data, 32, 128, workdir, "templates")
    for t in range(trials):
        con = dpsql.connect(config, user="bench", ledger=str(workdir / f"tpch{t}.ledger"),
                            cache_dir=str(workdir / "cache"), budget={"rho": rho}, workload=sqls)
        report = con.session.plan("lineitem")
        baselines = {q.sql: q.baseline for q in reversed(report.per_query)}   # first part wins
        promised = {s for s in baselines
                    if all(q.stderr <= q.baseline * (1 + 1e-9) for q in report.per_query if q.sql == s)}
        con.session.measure("lineitem")
        answer_all(con, "lineitem", [sqls[i] for i in pick], [exact[i] for i in pick],
                   [family(queries[i][0]) for i in pick], baselines, promised, out, fits)
        con.close()
        print(f"TPC-H release {t + 1}/{trials} done", file=sys.stderr, flush=True)


def adult(trials: int, workdir: Path, out, fits) -> None:
    from reported_errors import corpora

    sqls = corpora(ROOT)["mixed"]
    (workdir / "adult").mkdir(parents=True, exist_ok=True)
    config = write_config(workdir / "adult", queries=sqls, planner={"restarts": 1, "seed": 0})
    cfg = load_config(config)
    oracle = ExactOracle(cfg.tables, cfg.sources)
    truths = [{tuple(r[:-1]): r[-1] for r in oracle.query(s)} for s in sqls]
    oracle.close()
    kinds = ["adult " + ("AVG" if "AVG(" in s else "SUM" if "SUM(" in s else "COUNT") for s in sqls]
    for t in range(trials):
        con = dpsql.connect(config, user="bench", ledger=str(workdir / f"adult{t}.ledger"))
        report = con.session.plan()
        baselines = {q.sql: q.baseline for q in reversed(report.per_query)}
        promised = {s for s in baselines
                    if all(q.stderr <= q.baseline * (1 + 1e-9) for q in report.per_query if q.sql == s)}
        con.session.measure()
        answer_all(con, "adult", sqls, truths, kinds, baselines, promised, out, fits)
        con.close()
        print(f"adult release {t + 1}/{trials} done", file=sys.stderr, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=4, help="TPC-H releases")
    ap.add_argument("--adult-trials", type=int, default=3)
    ap.add_argument("--scale", type=float, default=0.1)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], check=True,
                          capture_output=True, text=True).stdout.strip()
    dirty = bool(subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "dpsql"],
                                capture_output=True, text=True).stdout.strip())
    work = Path(args.workdir or tempfile.mkdtemp(prefix="dpsql-fit-stop-"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    start = time.strftime("%Y-%m-%d %H:%M", time.gmtime())
    out: list = []
    fits: dict = {"tpch": defaultdict(list), "adult": defaultdict(list)}
    if args.trials:
        tpch(args.trials, args.scale, work, out, fits["tpch"])
    if args.adult_trials:
        adult(args.adult_trials, work, out, fits["adult"])
    print(f"{start}–{time.strftime('%H:%M UTC', time.gmtime())}; commit {head}"
          f"{' + uncommitted dpsql/' if dirty else ''}; {platform.machine()}, {os.cpu_count()} cores, "
          f"python {platform.python_version()}; load {load0:.1f} → {os.getloadavg()[0]:.1f}; "
          f"TPC-H SF {args.scale:g} × {args.trials} releases, adult × {args.adult_trials}; "
          f"main = this checkout with main's old stop (FIT_STOP = 'discrepancy')")
    names = [v for v, _ in VARIANTS]
    print("\n| family | rows | " + " | ".join(f"MSE/se² {v}" for v in names) + " | "
          + " | ".join(f"rows above baseline {v}" for v in names) + " |")
    print("|---|---:|" + "---:|" * (2 * len(names)))
    fams = sorted({r[1] for r in out}, key=lambda f: (not f.startswith("TPC"), f))
    for fam in fams:
        cells, above = [], []
        for v in names:
            rs = [r for r in out if r[0] == v and r[1] == fam]
            cells.append(f"{sum(r[2] for r in rs) / len(rs):.2f}" if rs else "-")
            checked = [r for r in rs if r[3] is not None]
            above.append(f"{sum(r[3] for r in checked)} of {len(checked)}" if checked else "-")
        n = sum(1 for r in out if r[0] == names[0] and r[1] == fam)
        print(f"| {fam} | {n} | " + " | ".join(cells) + " | " + " | ".join(above) + " |")
    for v in names:
        bad = sorted({re.sub(r"\s+", " ", r[4])[:90] for r in out if r[0] == v and r[3]})
        print(f"\n{v}: {len(bad)} queries with a row above its baseline" + "".join(f"\n  {s}" for s in bad))
    for wl, per in fits.items():
        for v, runs in per.items():
            print(f"{wl} fit, {v}: CPU s {', '.join(f'{c:.1f}' for c, _ in runs)}; {runs[0][1] if runs else ''}")


if __name__ == "__main__":
    main()
