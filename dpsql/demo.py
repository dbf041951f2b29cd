"""``dpsql demo``: the adult example end to end.

Plans the 30-query dashboard of ``examples/adult`` with HDMM, measures it once (spending
the demo budget), fits the graphical model and answers every query with a 95% interval.
Because the adult data is public, the demo also prints the exact answer beside each
private one; a production deployment never computes or shows those.
"""

from __future__ import annotations

from fractions import Fraction

import math
import shutil
import tempfile
import time
from pathlib import Path

from dpsql.display import Z95, format_value
from dpsql.privacy.accountant import format_rho

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "adult"



def _spent(spent, total) -> str:
    """A spend rounded up, except the whole budget: rounded up it would print above the total
    (rounded down) on the next line, which reads as an overspend ("spent 0.024356 … of
    0.024355"); exactly equal, it is written as the total with the words to say so."""
    if Fraction(spent) == Fraction(total):
        return f"{format_rho(total, 'down', 5)}, the whole budget"
    return format_rho(spent, "up", 5)

def _rule(title: str) -> None:
    print()
    print(f"== {title} " + "=" * max(0, 76 - len(title)))


def run_demo(args) -> int:
    import dpsql
    from dpsql.measure.exact import ExactOracle
    from dpsql.privacy.accountant import rho_to_epsilon
    from dpsql.sql.split import split_statements

    config = EXAMPLE / "dpsql.toml"
    if not config.exists():
        print(f"the adult example is not available at {EXAMPLE} (run from a source checkout)")
        return 1
    workdir = Path(args.workdir) if args.workdir else Path(tempfile.mkdtemp(prefix="dpsql-demo-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ledger = workdir / "adult.ledger"
    epsilon, delta = float(args.epsilon), 1e-6
    print("dpsql demo: a 30-query dashboard over the UCI Adult table (48,842 people)")
    print(f"budget: epsilon = {epsilon:g}, delta = {delta:g}; ledger: {ledger}")

    con = dpsql.connect(config, user="demo", ledger=str(ledger), cache_dir=str(workdir / "cache"),
                        budget={"epsilon": epsilon, "delta": delta,
                                "per_user": {"epsilon": epsilon, "delta": delta}})
    session = con.session
    queries = split_statements((EXAMPLE / "dashboard.sql").read_text())

    _rule("1. plan (public: uses only the SQL and the declared domain)")
    report = session.plan("adult")
    s = report.strategy
    print(f"{report.queries} queries -> {report.rows} linear query rows; HDMM chose {s.operator} "
          f"with {len(s.blocks)} measurement blocks in {report.seconds:.1f} s")
    if s.explanation:
        print(s.explanation)
    print(f"expected RMSE per answer: {report.rmse:,.1f}   "
          f"(per-query Gaussian mechanism with the budget split {report.queries} ways: "
          f"{report.baseline_rmse:,.1f}, {report.baseline_rmse / report.rmse:.1f}x worse)")
    if report.bound_rmse is not None:
        print(f"floor for any strategy with unbiased answers (SVD bound"
              f"{'' if report.bound_exact else ', marginal queries only'}): {report.bound_rmse:,.1f}")

    _rule("2. measure (spends the budget; written to the ledger before release)")
    t0 = time.perf_counter()
    m = session.measure("adult")
    spent = m.rho
    print(f"counted {m.blocks} marginals ({m.cells:,} cells) in one scan and added discrete Gaussian "
          f"noise: spent rho = {_spent(spent, session.engine.config.budget.rho)} "
          f"(epsilon = {rho_to_epsilon(spent, delta):.4g} at delta = {delta:g}) "
          f"in {time.perf_counter() - t0:.1f} s")

    _rule("3. answers (from one consistent graphical model; no further budget)")
    oracle = ExactOracle(session.engine.catalog, session.engine.config.sources)
    cur = con.cursor()
    sq_err, n_cells = 0.0, 0
    for sql in queries:
        t0 = time.perf_counter()
        cur.execute(sql)
        elapsed = time.perf_counter() - t0
        rows, errs = cur.fetchall(), cur.stderr
        exact = {tuple(r[:-1]): r[-1] for r in oracle.query(sql)}
        shown_sql = " ".join(line for line in sql.splitlines() if not line.lstrip().startswith("--"))
        print(f"\n{shown_sql}    [{elapsed * 1000:.0f} ms]")
        shown = rows if len(rows) <= 8 else rows[:8]
        for row, err in zip(shown, errs):
            key, value = tuple(row[:-1]), row[-1]
            truth = exact.get(key, 0)
            label = ", ".join("NULL" if k is None else str(k) for k in key) or "(all)"
            print(f"  {label:<28} {format_value(value, err[-1]):>22}    exact {truth:>9,}")
        if len(rows) > len(shown):
            print(f"  … {len(rows) - len(shown)} more groups")
        for row in rows:
            truth = exact.get(tuple(row[:-1]), 0)
            sq_err += (row[-1] - truth) ** 2
            n_cells += 1
    rmse = math.sqrt(sq_err / max(n_cells, 1))
    _rule("summary")
    print(f"{len(queries)} queries, {n_cells} answers: observed RMSE {rmse:,.1f} "
          f"(expected {report.rmse:,.1f}; per-query baseline {report.baseline_rmse:,.1f})")
    print("every answer came from one model: groups add up to totals and nothing is negative.")
    print(f"intervals are ±{Z95:.2f} standard errors (95%).")
    b = session.budget()
    print(f"budget left: rho = {format_rho(b['total_remaining_rho'], 'down', 5)} of "
          f"{format_rho(session.engine.config.budget.rho, 'down', 5)}")
    oracle.close()
    con.close()
    if not args.workdir:
        shutil.rmtree(workdir, ignore_errors=True)
    return 0
