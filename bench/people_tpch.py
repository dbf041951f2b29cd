"""People across tables on TPC-H: dpsql vs Tumult Analytics' ``join_private`` at the same bound and ρ (issue 32).

    python bench/people_tpch.py [--workload dashboard|templates] [--scale 0.1] [--trials 3]
                                [--epsilon 1] [--delta 1e-6] [--orders-bound 32] [--lineitem-bound 128]
                                [--no-tumult | --tumult-save FILE | --tumult-load FILE ...]

Two workloads.  ``dashboard`` (the default, ``DASHBOARD`` below) and ``templates``: 73
instances of the TPC-H query templates Q1, Q3, Q4, Q5, Q6, Q10 and Q12 with their substitution
parameters, dates as DATE columns by month (``bench/_tpch_templates.py`` says which
template and which parameter values each query comes from, and how each was adapted).
Tumult's side can run on its own (``--tumult-save FILE``: only Tumult, its report to FILE;
start it early, it is the slow part) and be read back by the comparison (``--tumult-load``,
several reports' trials pooled).

The data is TPC-H generated offline by ``tpchgen-cli`` (PyPI, the bench extra; seeded by the
spec, so every run reads the same rows) at scale factor 0.1 by default: 15,000 customers,
150,000 orders, 600,572 line items.  SF 0.1 because Tumult evaluates every query as its own
Spark job over the join (24 queries × trials on 2 shared cores); dpsql's error does not
depend on the scale (the noise is set by the bounds and ρ, not the row count), Tumult's
neither, so their ratio is the same at SF 1, only relative errors shrink ×10.

The person is the customer: customers → orders → line items, declared as dpsql's ``[people]``
schema (``docs/config.md``).  The dashboard (``DASHBOARD``) is 24 COUNT and SUM queries grouped
by columns of all three tables, TPC-H's own questions among them (Q1's flags, Q3's segment
revenue, Q4's priorities, Q5's nations, Q12's ship modes × priorities).  Every system gets the
same total ρ (ε = 1 at δ = 1e-6 by default) and the same per-person bounds (a customer
contributes at most 1 customer row, 32 orders, 128 line items: the TPC-H generator draws the
same orders-per-customer distribution at every scale, and these bounds keep 99.97% of orders
and 99.93% of line items):

* **dpsql**: the 24 queries are its workload; the budget is split across the three views
  (ρ_v ∝ k_v·√E_v) and every view measured once (HDMM), every query answered from the model.
* **Tumult Analytics 0.21.0**: one ``Session`` with the whole ρ and the three tables in one ID
  space (``AddRowsWithID``; line items carry their order's customer, as Tumult requires),
  orders and line items joined to their ancestors by ``join_private`` along the keys (cached
  session views, as dpsql reads each view once), each query at ρ/24:
  ``enforce(MaxRowsPerID(bound))``, a Gaussian count or sum over the public key set
  (``bench/peers/tumult_people_runner.py``, in its own venv: ``bench/peers/tumult.py``).
* **per-query baseline**: each query measured on its own with ρ/24 by the Gaussian mechanism
  at its view's bound (the noise Tumult's mechanism adds, in theory).

Errors are against the exact answers on the full, untruncated tables (DuckDB over the same
files): the truncation bias both systems share is in them.  Per query the RMSE over its groups
(the public key set) and trials; the summary is the RMSE over every row of every query
(dominated by the SUMs of prices) and, scale-free, the mean over queries of the per-query
ratio.  Whole-table totals (TPC-H Q1-style: COUNT(*), SUM(l_quantity), SUM(l_extendedprice))
are reported as relative errors beside R2T's published figures (SIGMOD 2022, TPC-H SF 1,
ε = 0.8: 0.02–0.6% on Q3/Q12/Q18/Q20; a reference, not the same run nor the same queries).
Writes bench/out/people_tpch.json and prints the tables bench/RESULTS.md quotes.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import duckdb  # noqa: E402

import dpsql  # noqa: E402
import _tpch_templates as templates  # noqa: E402

OUT = HERE / "out"
TABLES = ("customers", "orders", "lineitem")
ALIAS = {"customers": "c", "orders": "o", "lineitem": "l"}
# the public key sets (the TPC-H specification's value lists; o_year: order dates 1992-01-01..1998-08-02)
LABELS = {
    **templates.LABELS,      # segments, priorities, return flags, line statuses, ship modes
    "c_nationkey": list(range(25)),
    "o_orderstatus": ["F", "O", "P"],
    "o_year": list(range(1992, 1999)),
}
OWNER = {c: t for t, cols in (("customers", ("c_mktsegment", "c_nationkey")),
                             ("orders", ("o_orderstatus", "o_orderpriority", "o_year")),
                             ("lineitem", ("l_returnflag", "l_linestatus", "l_shipmode", "l_quantity",
                                           "l_extendedprice"))) for c in cols}
# SUM clamping ranges (public, from the specification): l_quantity 1..50; l_extendedprice =
# quantity × retail price ≤ 50 × 2,099 (whole dollars here: integer sums, Gaussian on both sides)
SUM_RANGE = {"l_quantity": (1, 50), "l_extendedprice": (0, 104950)}
# the template workload's columns (the shared ones have the same table and range)
OWNER = {**OWNER, **templates.OWNER}
SUM_RANGE = {**SUM_RANGE, **templates.SUM_RANGE}
# (name, group columns, aggregate: "count" or the summed column[, conditions: see _tpch_templates])
DASHBOARD = [
    ("segment", ["c_mktsegment"], "count"),
    ("nation", ["c_nationkey"], "count"),
    ("segment x nation", ["c_mktsegment", "c_nationkey"], "count"),
    ("order status", ["o_orderstatus"], "count"),
    ("Q4 priority", ["o_orderpriority"], "count"),
    ("order year", ["o_year"], "count"),
    ("segment x priority", ["c_mktsegment", "o_orderpriority"], "count"),
    ("nation x status", ["c_nationkey", "o_orderstatus"], "count"),
    ("year x priority", ["o_year", "o_orderpriority"], "count"),
    ("Q1 count", ["l_returnflag", "l_linestatus"], "count"),
    ("Q1 sum_qty", ["l_returnflag", "l_linestatus"], "l_quantity"),
    ("Q1 sum_base_price", ["l_returnflag", "l_linestatus"], "l_extendedprice"),
    ("ship mode", ["l_shipmode"], "count"),
    ("Q12 mode x priority", ["l_shipmode", "o_orderpriority"], "count"),
    ("segment x mode", ["c_mktsegment", "l_shipmode"], "count"),
    ("Q3 segment revenue", ["c_mktsegment"], "l_extendedprice"),
    ("Q5 nation revenue", ["c_nationkey"], "l_extendedprice"),
    ("order x line status", ["o_orderstatus", "l_linestatus"], "count"),
    ("year x return flag", ["o_year", "l_returnflag"], "count"),
    ("mode quantity", ["l_shipmode"], "l_quantity"),
    ("status quantity", ["o_orderstatus"], "l_quantity"),
    ("total line items", [], "count"),
    ("total quantity", [], "l_quantity"),
    ("total base price", [], "l_extendedprice"),
]
DASHBOARD = [(*q, []) for q in DASHBOARD]
TOTALS = ("total line items", "total quantity", "total base price")
WORKLOADS = {"dashboard": DASHBOARD, "templates": templates.workload()}
PREFIX = {"dashboard": "", "templates": "templates_"}  # the prepared files each workload reads
# R2T (Dong, Fang, Yi, Tao, Machanavajjhala, SIGMOD 2022), TPC-H SF 1 at ε = 0.8, relative errors of
# its published results (their repository's result files): a reference for scale, not a same-run peer
R2T_PUBLISHED = "0.02%-0.6% (TPC-H SF 1, eps = 0.8, Q3/Q12/Q18/Q20)"

# the columns the dashboard reads: public domains from the TPC-H specification's value lists
# and ranges (declared as the template workload's are, ``_tpch_templates.domain_toml``)
DOMAIN = templates.domain_toml(
    "# TPC-H (generated by tpchgen-cli), the columns the bench's dashboard reads.  Public domains from\n"
    "# the TPC-H specification's value lists and ranges; keys only link the tables ([people]).", OWNER,
    {"c_mktsegment": templates.categorical(LABELS["c_mktsegment"]),
     "c_nationkey": templates.integer(0, 24),
     "o_orderstatus": templates.categorical(LABELS["o_orderstatus"]),
     "o_orderpriority": templates.categorical(LABELS["o_orderpriority"]),
     "o_year": templates.integer(1992, 1998),
     "l_returnflag": templates.categorical(LABELS["l_returnflag"]),
     "l_linestatus": templates.categorical(LABELS["l_linestatus"]),
     "l_shipmode": templates.categorical(LABELS["l_shipmode"]),
     "l_quantity": templates.integer(1, 50),
     "l_extendedprice": templates.integer(0, 104950, "whole dollars, bins of 5,000 (a SUM adds the rows' "
                                          "offsets from their bin's middle)", bin_width=5000)})

CONFIG = """\
[dpsql]
ledger = "tpch.ledger"
cache_dir = ".dpsql-cache"
policy = "informed"

[budget]
epsilon = 1.0
delta = 1e-6

[tables.customers]
domain = "tpch.toml"
source = {{ parquet = "customers.parquet" }}

[tables.orders]
domain = "tpch.toml"
source = {{ parquet = "orders.parquet" }}

[tables.lineitem]
domain = "tpch.toml"
source = {{ parquet = "lineitem.parquet" }}

[people]
person = "customers"
key = "c_custkey"

[people.tables.orders]
parent = "customers"
foreign_key = "o_custkey"
primary_key = "o_orderkey"
max_rows = {orders_bound}

[people.tables.lineitem]
parent = "orders"
foreign_key = "l_orderkey"
max_rows = {lineitem_bound}
"""


def generate(scale: float) -> Path:
    """TPC-H at ``scale`` under bench/out/tpch-sf<scale>/ (generated once), with the prepared
    files both systems read.  The dashboard's: its columns, o_year = the order date's year,
    quantities and prices as whole numbers, and (for Tumult, whose tables in an ID space must
    carry the id) the line items with their order's customer; the templates' (prefix
    ``templates_``): ``_tpch_templates.prepare``."""
    data = OUT / f"tpch-sf{scale:g}"
    raw = data / "raw"
    if not (raw / "supplier.parquet").exists():
        raw.mkdir(parents=True, exist_ok=True)
        exe = shutil.which("tpchgen-cli") or str(Path(sys.executable).parent / "tpchgen-cli")
        subprocess.run([exe, "parquet", "-s", f"{scale:g}", "--tables=customer,orders,lineitem,supplier",
                        "-o", str(raw), "--overwrite"], check=True)
    r = {t: f"'{raw / (t + '.parquet')}'" for t in ("customer", "orders", "lineitem", "supplier")}
    con = duckdb.connect()
    if not (data / "lineitem_people.parquet").exists():
        con.execute(f"COPY (SELECT c_custkey, c_mktsegment, CAST(c_nationkey AS INTEGER) AS c_nationkey "
                    f"FROM {r['customer']}) TO '{data / 'customers.parquet'}' (FORMAT parquet)")
        con.execute(f"COPY (SELECT o_orderkey, o_custkey, o_orderstatus, o_orderpriority, "
                    f"CAST(year(o_orderdate) AS INTEGER) AS o_year FROM {r['orders']}) "
                    f"TO '{data / 'orders.parquet'}' (FORMAT parquet)")
        line = (f"SELECT l_orderkey, l_returnflag, l_linestatus, l_shipmode, "
                f"CAST(l_quantity AS INTEGER) AS l_quantity, "
                f"CAST(round(l_extendedprice) AS INTEGER) AS l_extendedprice FROM {r['lineitem']}")
        con.execute(f"COPY ({line}) TO '{data / 'lineitem.parquet'}' (FORMAT parquet)")
        con.execute(f"COPY (SELECT o.o_custkey AS custkey, l.l_orderkey AS o_orderkey, l.* EXCLUDE (l_orderkey) "
                    f"FROM '{data / 'lineitem.parquet'}' l JOIN '{data / 'orders.parquet'}' o "
                    f"ON l.l_orderkey = o.o_orderkey) TO '{data / 'lineitem_people.parquet'}' (FORMAT parquet)")
    if not (data / "templates_lineitem_people.parquet").exists():
        templates.prepare(con, r, data)
    con.close()
    return data


def write_config(data: Path, orders_bound: int, lineitem_bound: int, workdir: Path,
                 workload: str = "dashboard") -> Path:
    (workdir / "tpch.toml").write_text(templates.DOMAIN if workload == "templates" else DOMAIN)
    prefix = PREFIX[workload]
    for t in TABLES:
        target = workdir / f"{t}.parquet"
        if not target.exists():
            target.symlink_to(data / f"{prefix}{t}.parquet")
    path = workdir / "dpsql.toml"
    path.write_text(CONFIG.format(orders_bound=orders_bound, lineitem_bound=lineitem_bound))
    return path


def _columns(group: list[str], agg: str, conds: list) -> list[str]:
    return group + ([] if agg == "count" else [agg]) + [c[0] for c in conds]


def deepest(group: list[str], agg: str, conds: list = ()) -> str:
    cols = _columns(group, agg, list(conds))
    return max((OWNER[c] for c in cols), key=TABLES.index) if cols else "lineitem"


def _literal(column: str, value) -> str:
    if column in templates.DATE_COLUMNS:
        return f"DATE '{value}'"
    return f"'{value}'" if isinstance(value, str) else str(int(value))


def where_sql(conds: list, alias: bool = True) -> str:
    """The conditions as SQL (dpsql, DuckDB and Spark alike), ANDed; columns prefixed by their
    table's alias (``alias``) or bare (Tumult's joined views)."""
    parts = []
    for column, op, value in conds:
        col = f"{ALIAS[OWNER[column]]}.{column}" if alias else column
        if op == "between":
            parts.append(f"{col} BETWEEN {_literal(column, value[0])} AND {_literal(column, value[1])}")
        elif op == "in":
            parts.append(f"{col} IN ({', '.join(_literal(column, v) for v in value)})")
        else:
            parts.append(f"{col} {op} {_literal(column, value)}")
    return " AND ".join(parts)


def to_sql(group: list[str], agg: str, conds: list = ()) -> str:
    """The query as an analyst writes it: the private tables it reads joined along the keys."""
    cols = _columns(group, agg, list(conds))
    used = {OWNER[c] for c in cols} or {"lineitem"}
    first, last = min(used, key=TABLES.index), max(used, key=TABLES.index)
    path = TABLES[TABLES.index(first):TABLES.index(last) + 1]
    src = f"{path[0]} {ALIAS[path[0]]}"
    for parent, child in zip(path, path[1:]):
        fk, pk = ("o_custkey", "c_custkey") if child == "orders" else ("l_orderkey", "o_orderkey")
        src += f" JOIN {child} {ALIAS[child]} ON {ALIAS[child]}.{fk} = {ALIAS[parent]}.{pk}"
    value = "COUNT(*)" if agg == "count" else f"SUM({ALIAS[OWNER[agg]]}.{agg})"
    select = ", ".join([f"{ALIAS[OWNER[c]]}.{c}" for c in group] + [value])
    where = f" WHERE {where_sql(list(conds))}" if conds else ""
    tail = f" GROUP BY {', '.join(str(i + 1) for i in range(len(group)))}" if group else ""
    return f"SELECT {select} FROM {src}{where}{tail}"


def key_set(group: list[str]) -> list[tuple]:
    from itertools import product
    return [tuple(k) for k in product(*[LABELS[c] for c in group])] if group else [()]


def exact_answers(data: Path, sqls: list[str], prefix: str = "") -> list[dict]:
    con = duckdb.connect()
    for t in TABLES:
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM '{data / (prefix + t + '.parquet')}'")
    out = [{tuple(r[:-1]): float(r[-1]) for r in con.execute(sql).fetchall()} for sql in sqls]
    con.close()
    return out


def run_dpsql(config: Path, rho: float, trials: int, workdir: Path, sqls: list[str]) -> dict:
    """Per trial, per query {group: answer}; per query the per-query baseline (the plan's
    baseline of its view, rescaled to one of len(sqls) queries at ρ/len(sqls)); the views'
    shares; the seconds spent measuring and answering."""
    answers, baselines, expected, bounds, shares, seconds = [], {}, {}, {}, {}, 0.0
    for t in range(trials):
        con = dpsql.connect(config, user="bench", ledger=str(workdir / f"t{t}.ledger"),
                            cache_dir=str(workdir / "cache"), budget={"rho": rho}, workload=sqls)
        engine = con.session.engine
        views = engine.view_shares(engine.workload_rho())
        if t == 0:
            for view, share in views.items():
                report = con.session.plan(view)
                shares[view] = float(share)
                bounds[view] = {"rmse": report.rmse, "svd_bound": report.bound_rmse, "exact": report.bound_exact,
                                "baseline": report.baseline_rmse, "queries": report.queries}
                n = len(report.per_query)
                for q in report.per_query:
                    # plan baseline: one of n view queries at ρ_v/n; rescaled to one of Q at ρ/Q
                    baselines[q.sql] = q.baseline * math.sqrt(len(sqls) * float(share) / (n * rho))
                    expected[q.sql] = q.stderr
        t0 = time.perf_counter()
        for view in views:
            con.session.measure(view)
        cur = con.cursor()
        trial = []
        for sql in sqls:
            cur.execute(sql)
            trial.append({tuple(r[:-1]): float(r[-1]) for r in cur.fetchall()})
        seconds += time.perf_counter() - t0
        answers.append(trial)
        con.close()
    return {"answers": answers, "baselines": baselines, "expected": expected, "view_bounds": bounds,
            "shares": shares, "seconds": seconds}


def tumult_job(data: Path, rho: float, trials: int, bounds: dict[str, int], queries: list,
               prefix: str = "") -> dict:
    tables = {"customers": {"parquet": str(data / f"{prefix}customers.parquet"), "rename": {"c_custkey": "custkey"}},
              "orders": {"parquet": str(data / f"{prefix}orders.parquet"), "rename": {"o_custkey": "custkey"}},
              "lineitem": {"parquet": str(data / f"{prefix}lineitem_people.parquet")}}
    # each table joined with its ancestors up to the person (what dpsql's view of it holds); a
    # query reads the view of its deepest table, as dpsql's does
    views = {"orders_path": {"from": "orders", "joins": [["customers", ["custkey"]]]},
             "lineitem_path": {"from": "lineitem", "joins": [["orders", ["custkey", "o_orderkey"]],
                                                             ["customers", ["custkey"]]]}}
    jobs = []
    for name, group, agg, conds in queries:
        base = deepest(group, agg, conds)
        jobs.append({"name": name, "from": base if base == "customers" else f"{base}_path",
                     "bound": bounds[base], "groupby": group, "keys": [list(k) for k in key_set(group)],
                     "agg": ["count"] if agg == "count" else ["sum", agg, *SUM_RANGE[agg]],
                     **({"filter": where_sql(conds, alias=False)} if conds else {})})
    return {"tables": tables, "id_column": "custkey", "rho": rho, "trials": trials, "views": views,
            "queries": jobs}


def rmse(values: list[float]) -> float:
    return math.sqrt(sum(v * v for v in values) / len(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scale", type=float, default=0.1)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--tumult-trials", type=int, default=None,
                        help="Tumult's trials (default: --trials; each is ~15 min of Spark on a loaded 2-core VM)")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--delta", type=float, default=1e-6)
    parser.add_argument("--orders-bound", type=int, default=32)
    parser.add_argument("--lineitem-bound", type=int, default=128)
    parser.add_argument("--no-tumult", action="store_true", help="dpsql and the baseline only")
    parser.add_argument("--workload", choices=sorted(WORKLOADS), default="dashboard")
    parser.add_argument("--tumult-save", metavar="FILE",
                        help="run only Tumult's side and write its report to FILE (start it early: it is slow)")
    parser.add_argument("--tumult-load", metavar="FILE", nargs="+",
                        help="read Tumult's side from reports --tumult-save wrote (their trials pooled)")
    args = parser.parse_args()
    from dpsql.privacy.accountant import epsilon_delta_to_rho
    rho = float(epsilon_delta_to_rho(args.epsilon, args.delta))
    bounds = {"customers": 1, "orders": args.orders_bound, "lineitem": args.lineitem_bound}
    queries = WORKLOADS[args.workload]
    # what a saved Tumult report must have been run with to be compared with this run
    setting = {"workload": args.workload, "scale": args.scale, "rho": rho, "bounds": bounds,
               "queries": [q[0] for q in queries]}
    data = generate(args.scale)
    if args.tumult_save:
        from peers import tumult
        report = tumult.run(tumult_job(data, rho, args.tumult_trials or args.trials, bounds, queries,
                                       PREFIX[args.workload]),
                            timeout=6 * 3600, runner=HERE / "peers" / "tumult_people_runner.py")
        Path(args.tumult_save).write_text(json.dumps({**report, "setting": setting}, default=str))
        return
    sqls = [to_sql(g, a, c) for _, g, a, c in queries]
    keys = [key_set(g) for _, g, _, _ in queries]
    exact = exact_answers(data, sqls, PREFIX[args.workload])
    with tempfile.TemporaryDirectory() as tmp:
        config = write_config(data, args.orders_bound, args.lineitem_bound, Path(tmp), args.workload)
        ours = run_dpsql(config, rho, args.trials, Path(tmp), sqls)
    OUT.mkdir(exist_ok=True)
    suffix = "" if args.workload == "dashboard" else f"_{args.workload}"
    dp_raw = [[[list(k) + [v] for k, v in q.items()] for q in t] for t in ours["answers"]]
    # dpsql's answers are kept before Tumult's side is read or run (a report still missing
    # must not lose them); rewritten with Tumult's below
    (OUT / f"people_tpch{suffix}_raw.json").write_text(json.dumps({"dpsql": dp_raw, "tumult": None}, default=str))
    theirs = None
    if args.tumult_load:
        theirs = {"results": {q[0]: [] for q in queries}, "seconds": 0.0}
        for file in args.tumult_load:
            report = json.loads(Path(file).read_text())
            if report["setting"] != json.loads(json.dumps(setting)):
                raise SystemExit(f"{file} was run with {report['setting']}, not {setting}")
            for name, trials in report["results"].items():
                theirs["results"][name] += trials
            theirs["seconds"] += report["seconds"]
            theirs["version"] = report["version"]
    elif not args.no_tumult:
        from peers import tumult
        theirs = tumult.run(tumult_job(data, rho, args.tumult_trials or args.trials, bounds, queries,
                                       PREFIX[args.workload]),
                            timeout=4 * 3600, runner=HERE / "peers" / "tumult_people_runner.py")
    tm_trials = len(theirs["results"][queries[0][0]]) if theirs else 0
    # the raw answers of this run, before any summary is computed from them
    (OUT / f"people_tpch{suffix}_raw.json").write_text(json.dumps({"dpsql": dp_raw, "tumult": theirs}, default=str))
    rows, all_dp, all_tm, all_base = [], [], [], []
    for i, (name, group, agg, conds) in enumerate(queries):
        dp_err, tm_err = [], []
        for t in range(args.trials):
            for k in keys[i]:
                dp_err.append(ours["answers"][t][i].get(k, 0.0) - exact[i].get(k, 0.0))
        for t in range(tm_trials if theirs else 0):
            tm = {tuple(k): v for k, v in theirs["results"][name][t]}
            for k in keys[i]:
                tm_err.append(tm.get(k, 0.0) - exact[i].get(k, 0.0))
        base = ours["baselines"][sqls[i]]
        all_dp += dp_err
        all_tm += tm_err
        all_base += [base] * len(keys[i])
        total = abs(sum(exact[i].values())) or 1.0
        rows.append({"query": name, "view": deepest(group, agg, conds), "groups": len(keys[i]), "sql": sqls[i],
                     "dpsql": rmse(dp_err), "dpsql_expected": ours["expected"][sqls[i]],
                     "tumult": rmse(tm_err) if theirs else None, "baseline": base,
                     "truth_total": total})
    ratios = [r["dpsql"] / r["tumult"] for r in rows if r["tumult"]]
    summary = {"workload": args.workload, "scale": args.scale, "rho": rho, "epsilon": args.epsilon,
               "delta": args.delta, "trials": args.trials,
               "tumult_trials": tm_trials if theirs else 0, "view_plans": ours["view_bounds"],
               "bounds": bounds, "shares": ours["shares"], "dpsql": rmse(all_dp),
               "tumult": rmse(all_tm) if theirs else None, "baseline": rmse(all_base),
               "mean_ratio": sum(ratios) / len(ratios) if ratios else None,
               "dpsql_vs_baseline": sum(r["dpsql"] / r["baseline"] for r in rows) / len(rows),
               "expected_vs_baseline": sum(r["dpsql_expected"] / r["baseline"] for r in rows) / len(rows),
               "tumult_vs_baseline": (sum(r["tumult"] / r["baseline"] for r in rows) / len(rows)) if theirs else None,
               "dpsql_seconds": ours["seconds"], "tumult_seconds": theirs["seconds"] if theirs else None,
               "tumult_version": theirs["version"] if theirs else None, "queries": rows,
               "r2t_published": R2T_PUBLISHED}
    OUT.mkdir(exist_ok=True)
    (OUT / f"people_tpch{suffix}.json").write_text(json.dumps(summary, indent=2))
    print("| query | view | groups | dpsql RMSE | dpsql expected (plan) | Tumult join_private RMSE | "
          "per-query baseline | dpsql / Tumult |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        tm = f"{r['tumult']:,.0f}" if r["tumult"] is not None else "-"
        ratio = f"{r['dpsql'] / r['tumult']:.2f}" if r["tumult"] else "-"
        print(f"| {r['query']} | {r['view']} | {r['groups']} | {r['dpsql']:,.0f} | {r['dpsql_expected']:,.0f} | "
              f"{tm} | "
              f"{r['baseline']:,.0f} | {ratio} |")
    tm = f"**{summary['tumult']:,.0f}**" if theirs else "-"
    ratio = f"**{summary['dpsql'] / summary['tumult']:.2f}**" if theirs else "-"
    print(f"| **all rows** | | {len(all_dp) // args.trials} | **{summary['dpsql']:,.0f}** | | {tm} | "
          f"{summary['baseline']:,.0f} | {ratio} |")
    if ratios:
        print(f"mean of the per-query ratios dpsql / Tumult: {summary['mean_ratio']:.2f}; "
              f"{sum(x <= 0.5 for x in ratios)} of {len(ratios)} queries at or below 0.5")
    print(f"mean of the per-query ratios to the baseline: dpsql {summary['dpsql_vs_baseline']:.2f} (the plan "
          f"expects {summary['expected_vs_baseline']:.2f})" +
          (f", Tumult {summary['tumult_vs_baseline']:.2f}" if theirs else ""))
    for view, p in ours["view_bounds"].items():
        bound = f"{p['svd_bound']:,.4g}" if p["svd_bound"] is not None else "-"
        # all three per row of the view's queries at the view's share of rho: their ratios are
        # what a strategy over this view can gain on answering each query on its own
        # a bound of the marginal queries alone is no multiple of the whole view's baseline
        vs = f" = {p['svd_bound'] / p['baseline']:.2f}x" if p["svd_bound"] is not None and p["exact"] else ""
        print(f"view {view} ({p['queries']} queries): planned RMSE per row {p['rmse']:,.4g} = "
              f"{p['rmse'] / p['baseline']:.2f}x its per-query baseline {p['baseline']:,.4g}; SVD lower bound "
              f"{bound}{vs}" + ("" if p["exact"] else " (of its marginal queries only)"))
    if args.workload == "templates":
        # the planner's SVD bound needs a marginal workload or <= 4,096 cells: these views have
        # range filters over 10^5..10^9 cells, so each template family is bounded on its own cells
        print("\nSVD bound of each template family measured on its own, as a multiple of its per-query "
              "baseline (public: no data):")
        print("| family | queries | rows | SVD bound / per-query baseline |")
        print("|---|---:|---:|---:|")
        for family, n, m, ratio in templates.family_bounds(queries):
            print(f"| {family} | {n} | {m} | {ratio:.2f} |")
    print("\nwhole-table totals (relative error, RMSE over trials / exact total):")
    print("| total | exact | dpsql | Tumult |")
    print("|---|---:|---:|---:|")
    for r in rows:
        if r["query"] in TOTALS:
            tm = f"{r['tumult'] / r['truth_total']:.3%}" if r["tumult"] is not None else "-"
            print(f"| {r['query']} | {r['truth_total']:,.0f} | {r['dpsql'] / r['truth_total']:.3%} | {tm} |")
    print(f"R2T, published: {R2T_PUBLISHED}")
    shares = ", ".join(f"{v} {s / rho:.1%}" for v, s in ours["shares"].items())
    print(f"TPC-H SF {args.scale:g}; rho = {rho:.6g} (epsilon {args.epsilon} at delta {args.delta}), {args.trials} "
          f"trials (Tumult {tm_trials if theirs else 0}); bounds {bounds}; dpsql's view shares: {shares}; "
          "dpsql measure+fit+answer "
          f"{ours['seconds']:.0f} s" + (f", Tumult {theirs['seconds']:.0f} s" if theirs else ""))


if __name__ == "__main__":
    main()
