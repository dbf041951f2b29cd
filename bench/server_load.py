"""Load on the PostgreSQL wire server: N concurrent psycopg connections × M mixed queries.

    python bench/server_load.py [--connections 50] [--queries 20] [--link engine|fake]

Each client authenticates with SCRAM, then runs a fixed mix in round robin: private
aggregates (simple and extended protocol, some parameterised, many repeated), catalog
queries (schema-only shadow PostgreSQL), session commands and functions, and a row-level
query the engine must refuse (42501, counted as *expected*).  Reports p50/p95 latency per
query, throughput and errors.  With ``--link engine`` (the default) it serves the adult
example with a temp ledger and a large budget, measures once, and checks afterwards that
the ledger grew by exactly the sum of the distinct queries' charges (repeats cost nothing).
``--link fake`` serves the deterministic test double from tests/server (protocol cost only).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PASSWORD = "load-pw"
MIX = [
    ("engine", "SELECT sex, COUNT(*) FROM adult GROUP BY sex", None),
    ("engine", "SELECT race, COUNT(*) FROM adult GROUP BY race", None),
    ("engine", "SELECT income, COUNT(*) FROM adult WHERE age >= %s GROUP BY income", (60,)),
    ("catalog", "SELECT c.relname FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n "
                "ON n.oid = c.relnamespace WHERE n.nspname = 'public'", None),
    ("engine", "SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income", None),
    ("session", "SHOW transaction isolation level", None),
    ("engine", "SELECT COUNT(*) FROM adult WHERE age BETWEEN %s AND %s", (30, 40)),
    ("refused", "SELECT * FROM adult", None),
    ("catalog", "SELECT column_name FROM information_schema.columns WHERE table_name = %s", ("adult",)),
    ("local", "SELECT pg_backend_pid(), current_user", None),
]


def start(link: str, workdir: Path):
    from dpsql.server import scram
    from dpsql.server.server import Server, ServerOptions, ServerThread
    config = ROOT / "examples" / "adult" / "dpsql.toml"
    users = workdir / "users.json"
    scram.add_user(users, "load", PASSWORD)
    overrides = {"ledger": str(workdir / "load.ledger"), "budget": {"epsilon": 1e6, "delta": 1e-6}}
    if link == "fake":
        sys.path.insert(0, str(ROOT / "tests" / "server"))
        from server_fakes import FakeLink
        server = Server(config, users_file=users, link_factory=FakeLink, catalog=FakeLink.catalog,
                        options=ServerOptions(port=0))
        return ServerThread(server).start(), None
    import dpsql
    admin = dpsql.connect(config, user="load", **overrides)
    admin.session.measure()
    server = Server(config, users_file=users, overrides=overrides, options=ServerOptions(port=0))
    return ServerThread(server).start(), admin


def client(port: int, queries: int, offset: int, latencies: list, failures: list, barrier,
           user: str = "load", password: str = PASSWORD) -> None:
    import psycopg
    try:
        conn = psycopg.connect(host="127.0.0.1", port=port, user=user, password=password, dbname="dpsql",
                               connect_timeout=30, autocommit=True, sslmode="disable")
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        failures.append(("connect", repr(exc)))
        barrier.wait()
        return
    barrier.wait()
    with conn:
        for i in range(queries):
            kind, sql, params = MIX[(offset + i) % len(MIX)]
            t0 = time.perf_counter()
            try:
                cur = conn.execute(sql, params)
                cur.fetchall()
                if kind == "refused":
                    failures.append((sql, "row-level query was answered"))
            except psycopg.errors.InsufficientPrivilege:
                if kind != "refused":
                    failures.append((sql, "unexpected 42501"))
            except Exception as exc:  # noqa: BLE001
                failures.append((sql, repr(exc)))
            latencies.append(time.perf_counter() - t0)


def run_load(port: int, connections: int, queries: int, user: str = "load", password: str = PASSWORD) -> dict:
    latencies: list[float] = []
    failures: list = []
    barrier = threading.Barrier(connections)
    threads = [threading.Thread(target=client, args=(port, queries, n, latencies, failures, barrier, user, password),
                                daemon=True)
               for n in range(connections)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    wall = time.perf_counter() - t0
    lat = sorted(latencies)
    return {"connections": connections, "queries": queries, "completed": len(lat), "failures": failures,
            "wall": wall, "p50": statistics.median(lat) if lat else float("nan"),
            "p95": lat[int(0.95 * (len(lat) - 1))] if lat else float("nan"),
            "qps": len(lat) / wall if wall else 0.0, "alive": sum(t.is_alive() for t in threads)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--link", choices=["engine", "fake"], default="engine")
    ap.add_argument("--record", action="store_true", help="append a section to bench/RESULTS.md")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dpsql-load-") as tmp:
        thread, admin = start(args.link, Path(tmp))
        try:
            spent_before = admin.session.budget()["total_spent_rho"] if admin else None
            result = run_load(thread.port, args.connections, args.queries)
            spent_after = admin.session.budget()["total_spent_rho"] if admin else None
        finally:
            thread.stop()
    print(f"{result['connections']} connections x {result['queries']} queries: {result['completed']} done in "
          f"{result['wall']:.2f} s ({result['qps']:.0f} q/s); latency p50 {result['p50'] * 1000:.1f} ms, "
          f"p95 {result['p95'] * 1000:.1f} ms; failures {len(result['failures'])}")
    if spent_before is not None:
        # every query in the mix is supported by the measured workload, so none may charge
        print(f"ledger: rho spent before load {spent_before:.6g}, after {spent_after:.6g} "
              f"(distinct queries' charges: {spent_after - spent_before:.6g})")
    for f in result["failures"][:10]:
        print("  failure:", f)
    if args.record:
        record(args, result, spent_before, spent_after)
    return 0 if not result["failures"] and result["completed"] == args.connections * args.queries else 1


def record(args, result, before, after) -> None:
    import subprocess
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    path = ROOT / "bench" / "RESULTS.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    ledger = "" if before is None else (f" Ledger: rho {before:.6g} before the load and {after:.6g} after "
                                        "(the mix is answered from released measurements; repeats cost nothing).")
    text += (f"\n## Wire server load (`bench/server_load.py --link {args.link}`)\n\n"
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; machine: 2-core AMD EPYC VM, 24 GB; "
             f"Python {sys.version.split()[0]}; `uptime`: {uptime}\n\n"
             f"{result['connections']} concurrent psycopg connections (SCRAM, autocommit) x {result['queries']} "
             "queries each, round robin over a mix of private aggregates (simple and extended protocol), catalog "
             "queries on the schema-only shadow, session commands and a refused row-level query; server, shadow "
             "PostgreSQL and clients share the 2 cores.\n\n"
             "| queries | failures | wall s | queries/s | p50 ms | p95 ms |\n|---:|---:|---:|---:|---:|---:|\n"
             f"| {result['completed']} | {len(result['failures'])} | {result['wall']:.2f} | {result['qps']:.0f} | "
             f"{result['p50'] * 1000:.1f} | {result['p95'] * 1000:.1f} |\n\n"
             + (f"Link: {'the DP engine' if args.link == 'engine' else 'the deterministic test double (protocol and catalog cost only, no DP engine)'}."
                f"{ledger}\n"))
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
