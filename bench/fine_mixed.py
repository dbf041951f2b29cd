"""A workload mixing a fine column's quantiles and CDF counts with ordinary GROUP BYs (issue 35
item 4, ``dpsql/engine/mixed.py``): the split plan's two parts against each part planned alone.

For an income column of n cells beside sex (2) and age (100), the workload of two quantiles
and two CDF/range counts over income and three ordinary counts is planned at ε = 1, δ = 10⁻⁶
as a table's workload (``Engine.plan``: the ordered part and the rest, ρ split ∝ √(k²E_v)).
Per part: its share, its expected RMSE per row in the mixed plan, the same statements planned
alone at that share (``Engine.plan(queries=…, rho=share)``: their own objective scales), and
the SVD bound of the part at that share (the ordered part's thin counts beside its CDF have no
closed form: the bound of its CDF rows alone, a looser floor).  Then the total expected error
(the planner's objective) at the chosen split against the even split and against one
strategy for the whole workload (the ordered strategy per (age, sex) group: refused beyond
the group caps), and the plan's time.
Planning reads no data; a 10-row CSV satisfies the source declaration.

    .venv/bin/python bench/fine_mixed.py [--sizes 10000,100000,1000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dpsql.engine.config import load_config  # noqa: E402
from dpsql.engine.engine import Engine  # noqa: E402
from dpsql.engine.planning import gaussian_sigma2_unit  # noqa: E402
from dpsql.testing import income_columns, write_config, write_domain  # noqa: E402


def queries(n: int) -> list[str]:
    return [
        "SELECT quantile_cont(income, 0.5) FROM t",
        "SELECT percentile_disc(0.9) WITHIN GROUP (ORDER BY income) FROM t",
        f"SELECT COUNT(*) FROM t WHERE income <= {n // 5}",
        f"SELECT COUNT(*) FROM t WHERE income BETWEEN {n // 10} AND {n // 2}",
        "SELECT sex, COUNT(*) FROM t GROUP BY sex",
        "SELECT age, sex, COUNT(*) FROM t GROUP BY age, sex",
        "SELECT COUNT(*) FROM t WHERE age >= 65",
    ]


def _engine(tmp: Path, n: int) -> Engine:
    (tmp / "t.csv").write_text("income,sex,age\n" + "\n".join(f"{i * 7 % n},{'FM'[i % 2]},{i * 13 % 100}"
                                                              for i in range(10)) + "\n")
    write_domain(tmp / "d.toml", "t", income_columns(n))
    write_config(tmp, queries=queries(n), ledger=tmp / "t.ledger", table="t", domain=tmp / "d.toml",
                 source={"csv": tmp / "t.csv"}, table_options={"rows": 1_000_000})
    return Engine(load_config(tmp / "dpsql.toml"))


def run(n: int) -> None:
    with tempfile.TemporaryDirectory() as d:
        engine = _engine(Path(d), n)
        w, c = time.perf_counter(), time.process_time()
        report = engine.plan("t")
        wall, cpu = time.perf_counter() - w, time.process_time() - c
        strategy = report.strategy
        assert strategy.operator == "split", strategy.operator
        rho = engine.workload_rho("t")
        assert sum(strategy.shares(rho), Fraction(0)) == rho
        sqls = [q.sql for q in report.per_query]
        for part, shown in zip(strategy.parts, report.parts):
            alone = engine.plan("t", queries=list(dict.fromkeys(sqls[j] for j in part.parts)),
                                rho=part.share(rho))
            bound = "–" if shown.bound_rmse is None else \
                f"{shown.bound_rmse:,.2f}{'' if shown.bound_exact else ' (partial)'}"
            ratio = "–" if shown.bound_rmse is None else f"{shown.rmse / shown.bound_rmse:.3f}"
            print(f"| {n:,} | {shown.name} | {shown.operator} | {shown.fraction:.1%} | {shown.rows:,} | "
                  f"{shown.rmse:,.2f} | {alone.strategy.operator} {alone.rmse:,.2f} | "
                  f"{shown.rmse / alone.rmse:.3f} | {bound} | {ratio} |", flush=True)
        # the planner's objective at the chosen split and at the even split: Σ_v k²E_v/(2ρ_v)
        k2 = [engine.rows_sq("t", p.strategy) for p in strategy.parts]
        chosen = sum(k * p.strategy.expected_error * gaussian_sigma2_unit(float(p.share(rho)))
                     for k, p in zip(k2, strategy.parts))
        even = sum(k * p.strategy.expected_error * gaussian_sigma2_unit(float(rho) / 2)
                   for k, p in zip(k2, strategy.parts))
        # one strategy for the whole workload: the ordered one per (age, sex) group, if it fits
        workload = engine.workload_for("t")[0]
        try:
            whole = engine.planning.optimize_counted(workload, rho, 1, table="t")
            one = f"{engine.rows_sq('t', whole) * whole.expected_error * gaussian_sigma2_unit(float(rho)):.4g}"
        except Exception as exc:        # noqa: BLE001 - the refusal is the row's result
            one = f"refused ({type(exc).__name__})"
        print(f"| {n:,} | total objective | split | {chosen:.4g}; even split {even:.4g} "
              f"({chosen / even:.3f}); one strategy {one} | | | | | | plan {wall:.2f} s wall, {cpu:.2f} s CPU |",
              flush=True)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    args = ap.parse_args(argv)
    print(f"load {os.getloadavg()[0]:.1f}; ε = 1, δ = 1e-6; RMSE per row of the part's rows, in rows")
    print("| n | part | operator | share | rows | mixed plan RMSE | planned alone at its share | ratio "
          "| SVD bound at share | plan / bound |")
    print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(s) for s in args.sizes.split(",")):
        run(n)


if __name__ == "__main__":
    main()
