"""Fine numeric columns (issue 35 item 4): CDFs, ranges and quantiles over 10⁴–10⁶ cells.

Part 1, planning: for the CDF (every prefix), all ranges, and a mixed workload (CDF, three
BETWEENs, the count), the plan's unit-noise total squared error next to the SVD bound (a floor
for every strategy, computable here in closed form), the best weighted tree (the other
candidate), the identity strategy (every cell measured) and the per-query baseline, with
``optimize()`` time.

Part 2, end to end over a 100,000-cell column (the domain's cell limit) of 1,000,000 rows in a
CSV: plan, DuckDB count + exact strategy product + noise, fit, answers (every prefix, 100
ranges, three quantiles with 95% intervals), against DuckDB's exact answers to the same
questions, timed side by side; accuracy at ε = 1, δ = 10⁻⁶.

Part 3, the SQL path as a user calls it: `dpsql plan`, `dpsql measure`, `dpsql query` (a new
process per statement) and a warm `cursor.execute` over a 10⁵- and a 10⁶-cell column, each
answer's reported standard error beside the plan's expected one and the SVD bound, and
DuckDB's exact answer and time.

    .venv/bin/python bench/fine.py [--sizes 10000,100000,1000000] [--rows 1000000]
                                   [--sql 100000,1000000] [--parts plan,library,sql]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dpsql.domain import Domain, IntegerRange, TableSchema  # noqa: E402
from dpsql.linalg import AllRange, Indicator, Prefix, Total  # noqa: E402
from dpsql.plan import QuerySpec, Workload, optimize, query_errors, svd_bound  # noqa: E402
from dpsql.plan.ordered import (_tree_weights, candidate_trees, level_traces,  # noqa: E402
                                tree_error)


def _timed(fn, *a, **kw):
    w, c = time.perf_counter(), time.process_time()
    out = fn(*a, **kw)
    return out, time.perf_counter() - w, time.process_time() - c


def _best_tree(terms):
    best = math.inf
    for tree in candidate_trees(terms.shape[0]):
        tau = level_traces(tree, terms, 0)
        w = _tree_weights(tree, tau, "gaussian")
        best = min(best, float(tree_error(tree, tau, w, "gaussian").sum()))
    return best


def workloads(n):
    return {
        "CDF (n prefixes)": [QuerySpec("cdf", Prefix(n))],
        "all ranges": [QuerySpec("ranges", AllRange(n))],
        "CDF + 3 BETWEEN + count": [
            QuerySpec("cdf", Prefix(n)), QuerySpec("b1", Indicator(n, range(n // 10, n // 5))),
            QuerySpec("b2", Indicator(n, range(n // 2, n))),
            QuerySpec("b3", Indicator(n, range(0, n // 100))), QuerySpec("count", Total(n))],
    }


def planning(sizes):
    print("| n | workload | operator | plan error | SVD bound | ratio | best tree | identity "
          "| per-query baseline | optimize() wall s | CPU s |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in sizes:
        for name, queries in workloads(n).items():
            W = Workload.of_queries(Domain(["x"], [n]), queries, objective="absolute")
            s, wall, cpu = _timed(optimize, W)
            bound = svd_bound(W)
            tree = _best_tree(W.terms)
            ident = sum(t.weight ** 2 * t.grams[0].trace() for t in W.terms.terms)
            base = sum(b for _, b, _ in query_errors(s))
            ratio = f"{s.expected_error / bound:.3f}" if bound else "–"
            print(f"| {n:,} | {name} | {s.operator} | {s.expected_error:.4g} | "
                  f"{bound:.4g} | {ratio} | {tree:.4g} ({tree / bound:.2f}x) | {ident:.3g} | "
                  f"{base:.3g} | {wall:.2f} | {cpu:.2f} |" if bound else
                  f"| {n:,} | {name} | {s.operator} | {s.expected_error:.4g} | – | – | "
                  f"{tree:.4g} | {ident:.3g} | {base:.3g} | {wall:.2f} | {cpu:.2f} |", flush=True)


def end_to_end(rows, seed=1):
    import duckdb

    from dpsql.measure.backend import DuckDBBackend
    from dpsql.measure.ordered import OrderedEstimate, measure_ordered
    from dpsql.measure.source import Source
    from dpsql.privacy.accountant import epsilon_delta_to_rho

    n = 100_000
    rng = np.random.default_rng(seed)
    x = np.clip(rng.lognormal(10.3, 0.7, rows).astype(np.int64), 0, n - 1)
    tmp = Path(tempfile.mkdtemp(prefix="fine-"))
    path = tmp / "incomes.csv"
    path.write_text("income\n" + "\n".join(map(str, x)) + "\n")
    schema = TableSchema("t", (IntegerRange("income", 0, n - 1),))
    rho = Fraction(epsilon_delta_to_rho(1.0, 1e-6))
    qs = (0.5, 0.9, 0.99)
    lo = np.sort(rng.integers(0, n, 100))
    hi = np.minimum(lo + rng.integers(100, 20_000, 100), n - 1)
    queries = [QuerySpec("cdf", Prefix(n)), QuerySpec("ranges", AllRange(n))]
    print(f"\n{rows:,} rows, income in [0, {n - 1:,}] (one cell per dollar), ε = 1, δ = 1e-6 "
          f"(ρ = {float(rho):.4f}), Gaussian noise\n")
    print("| step | dpsql wall s | dpsql CPU s | DuckDB exact wall s |")
    print("|---|---:|---:|---:|")
    con = duckdb.connect()
    con.execute("SET threads = 1")
    t0 = time.perf_counter()
    exact_hist = np.zeros(n, dtype=np.int64)
    for v, c in con.execute(f"SELECT income, COUNT(*) FROM read_csv('{path}') GROUP BY 1").fetchall():
        exact_hist[v] = c
    duck_cdf = time.perf_counter() - t0
    t0 = time.perf_counter()
    exact_q = [con.execute(f"SELECT quantile_disc(income, {q}) FROM read_csv('{path}')").fetchone()[0]
               for q in qs]
    duck_q = time.perf_counter() - t0
    t0 = time.perf_counter()
    exact_r = [con.execute(f"SELECT COUNT(*) FROM read_csv('{path}') WHERE income BETWEEN {a} AND {b}"
                           ).fetchone()[0] for a, b in zip(lo, hi)]
    duck_r = time.perf_counter() - t0
    backend = DuckDBBackend({"t": Source("csv", path)}, threads=1)
    W = Workload.of_queries(schema.domain, queries)
    s, w1, c1 = _timed(optimize, W)
    release, w2, c2 = _timed(measure_ordered, backend, schema, s, rho, charge=lambda plan: None, rows=rows)
    est, w3, c3 = _timed(OrderedEstimate, release)
    (cdf, var), w4, c4 = _timed(est.cdf)
    quant, w5, c5 = _timed(lambda: [est.quantile(q) for q in qs])
    (rng_vals, rng_var), w6, c6 = _timed(est.ranges, lo, hi)
    print(f"| plan (`optimize`: {s.operator}) | {w1:.2f} | {c1:.2f} | – |")
    print(f"| measure (DuckDB count, exact product, noise) | {w2:.2f} | {c2:.2f} | – |")
    print(f"| fit (closed-form least squares) | {w3:.2f} | {c3:.2f} | – |")
    print(f"| every prefix (CDF) + standard errors | {w4:.3f} | {c4:.3f} | {duck_cdf:.2f} (GROUP BY) |")
    print(f"| 3 quantiles + 95% intervals | {w5:.3f} | {c5:.3f} | {duck_q:.2f} |")
    print(f"| 100 ranges + standard errors | {w6:.3f} | {c6:.3f} | {duck_r:.2f} |")
    total = w1 + w2 + w3 + w4 + w5 + w6
    print(f"| **total** | **{total:.2f}** | | **{duck_cdf + duck_q + duck_r:.2f}** |")
    err = cdf - np.cumsum(exact_hist)
    print(f"\nCDF: RMSE {math.sqrt(np.mean(err ** 2)):.2f} rows over {n:,} prefixes; reported "
          f"standard error RMS {math.sqrt(np.mean(var)):.2f}; |error| ≤ 1.96·se for "
          f"{np.mean(np.abs(err) <= 1.96 * np.sqrt(var)):.1%} of prefixes.  ρ spent "
          f"{float(release.rho):.6f} of {float(rho):.6f}.")
    rerr = rng_vals - np.array(exact_r)
    print(f"Ranges: RMSE {math.sqrt(np.mean(rerr ** 2)):.2f}, reported se RMS "
          f"{math.sqrt(np.mean(rng_var)):.2f}.")
    for q, (point, (a, b)), e in zip(qs, quant, exact_q):
        print(f"Quantile {q}: {point:.0f} (95% interval [{a:.0f}, {b:.0f}]), exact {e}")
    backend.close()


SQL_QUERIES = [
    "SELECT percentile_disc(0.5) WITHIN GROUP (ORDER BY income) FROM t",
    "SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY income) FROM t",
    "SELECT percentile_disc(0.99) WITHIN GROUP (ORDER BY income) FROM t",
    "SELECT COUNT(*) FROM t WHERE income <= {a}",
    "SELECT COUNT(*) FROM t WHERE income BETWEEN {a} AND {b}",
    "SELECT COUNT(*) FROM t WHERE income > {b}",
]


def _cli(*args, cwd):
    import subprocess

    root = Path(__file__).resolve().parent.parent
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "dpsql.cli", *args], cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(root)}, timeout=3600)
    wall = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"dpsql {args[0]} failed: {r.stderr}")
    return r.stdout, wall


def _child_cpu():
    ru = __import__("resource").getrusage(__import__("resource").RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def sql_path(n, rows, seed=2):
    """Part 3: the SQL path as a user calls it (issue 35 item 4): `dpsql plan`, `dpsql
    measure`, `dpsql query` (a new process per statement) and a warm `cursor.execute`, over an
    n-cell integer column, beside DuckDB's exact answers and time, with each answer's
    reported standard error next to the plan's expected one and the SVD bound."""
    import duckdb

    import dpsql

    rng = np.random.default_rng(seed)
    x = np.clip(rng.lognormal(math.log(n) - 1.2, 0.7, rows).astype(np.int64), 0, n - 1)
    tmp = Path(tempfile.mkdtemp(prefix="fine-sql-"))
    (tmp / "t.csv").write_text("income\n" + "\n".join(map(str, x)) + "\n")
    (tmp / "d.toml").write_text(f"[tables.t.columns.income]\ntype = \"integer\"\nlo = 0\nhi = {n - 1}\n")
    a, b = n // 4, n // 2
    queries = [q.format(a=a, b=b) for q in SQL_QUERIES]
    (tmp / "dpsql.toml").write_text(
        "[dpsql]\nledger = \"t.ledger\"\ncache_dir = \"cache\"\n[budget]\nepsilon = 1.0\ndelta = 1e-6\n"
        f"[tables.t]\ndomain = \"d.toml\"\nsource = {{ csv = \"t.csv\" }}\nrows = {rows}\n"
        "[workload]\nqueries = [\n" + "".join(f'  "{q}",\n' for q in queries) + "]\n")
    config = str(tmp / "dpsql.toml")
    print(f"\n### The SQL path: {rows:,} rows, income in [0, {n - 1:,}] ({n:,} cells), ε = 1, δ = 1e-6\n")
    c0 = _child_cpu()
    _, plan_wall = _cli("plan", "--config", config, cwd=tmp)
    c1 = _child_cpu()
    _, measure_wall = _cli("measure", "--config", config, "--yes", cwd=tmp)
    c2 = _child_cpu()
    print("| step | wall s | CPU s |")
    print("|---|---:|---:|")
    print(f"| `dpsql plan` | {plan_wall:.2f} | {c1 - c0:.2f} |")
    print(f"| `dpsql measure --yes` | {measure_wall:.2f} | {c2 - c1:.2f} |")
    con = dpsql.connect(config, user="bench")
    report = con.session.plan()
    expected = {q.sql: (q.stderr, q.floor) for q in report.per_query}
    duck = duckdb.connect()
    duck.execute("SET threads = 1")
    src = f"read_csv('{tmp / 't.csv'}')"
    # the mixed workload's SVD bound is not computable (module docstring); the CDF's alone is,
    # in closed form: the floor of its RMSE per prefix with the whole budget
    cdf_w = Workload.of_queries(Domain(["income"], [n]), [QuerySpec("cdf", Prefix(n))], objective="absolute")
    floor = math.sqrt(svd_bound(cdf_w) / (2.0 * report.rho) / n)
    print(f"\nStrategy: {report.strategy.operator}; plan RMSE {report.rmse:.2f} (workload SVD bound "
          + (f"{report.bound_rmse:.2f}" if report.bound_rmse else "not computable: mixed structures")
          + f"), per-query baseline RMSE {report.baseline_rmse:.2f}; the CDF alone: SVD bound "
          f"{floor:.2f} per prefix with the whole budget, "
          f"{report.per_query[0].stderr / floor:.3f}x of it in this plan (which shares ρ with the counts)\n")
    # a quantile's workload query is the column's CDF: its expected se and SVD floor are the
    # RMS over the n prefixes; a count's are its own
    print("| statement | `dpsql query` wall s | CPU s | warm `cursor.execute` wall s | CPU s | answer "
          "± 1.96·se | plan's expected se | SVD bound se (query alone) | exact (DuckDB) | DuckDB wall s |")
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|---:|")
    cur = con.cursor()
    cur.execute(queries[0])          # the estimate is built once per release
    for sql in queries:
        c0 = _child_cpu()
        out, qwall = _cli("query", "--config", config, sql, cwd=tmp)
        qcpu = _child_cpu() - c0
        w, c = time.perf_counter(), time.process_time()
        cur.execute(sql)
        got, se = cur.fetchone()[0], cur.result.stderr[0][0]
        w, c = time.perf_counter() - w, time.process_time() - c
        t0 = time.perf_counter()
        exact = duck.execute(sql.replace("FROM t", f"FROM {src}")).fetchone()[0]
        dw = time.perf_counter() - t0
        exp_se, floor = expected.get(sql, (None, None))
        print(f"| `{sql}` | {qwall:.2f} | {qcpu:.2f} | {w:.3f} | {c:.3f} | {got:,.1f} ± {1.96 * se:,.1f} | "
              + (f"{exp_se:.2f}" if exp_se is not None else "–")
              + (f"{' (CDF)' if 'COUNT' not in sql else ''} | {floor:.2f}" if floor is not None else " | –")
              + f" | {exact:,} | {dw:.2f} |")
    con.close()


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--sql", default="100000,1000000",
                    help="column sizes of part 3 (the SQL path); empty to skip")
    ap.add_argument("--parts", default="plan,library,sql")
    args = ap.parse_args(argv)
    print(f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores; Python {platform.python_version()}; load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}\n")
    parts = args.parts.split(",")
    if "plan" in parts:
        planning([int(s) for s in args.sizes.split(",")])
    if "library" in parts:
        end_to_end(args.rows)
    if "sql" in parts and args.sql:
        for n in (int(s) for s in args.sql.split(",")):
            sql_path(n, args.rows)


if __name__ == "__main__":
    main()
