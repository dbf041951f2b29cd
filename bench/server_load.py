"""Load on the PostgreSQL wire server: N concurrent psycopg connections × M mixed queries.

    python bench/server_load.py [--connections 50] [--queries 20] [--link engine|fake] [--hostile]

Each client authenticates with SCRAM, then runs a fixed mix in round robin: private
aggregates (simple and extended protocol, some parameterised, many repeated), catalog
queries (schema-only shadow PostgreSQL), session commands and functions, and a row-level
query the engine must refuse (42501, counted as *expected*).  Reports p50/p95 latency per
query, throughput and errors.  With ``--link engine`` (the default) it serves the adult
example with a temp ledger and a large budget, measures once, and checks afterwards that
the ledger grew by exactly the sum of the distinct queries' charges (repeats cost nothing).
``--link fake`` serves the deterministic test double from tests/server (protocol cost only).

``--hostile`` runs the load twice per round, side by side on the same server: clean, and
with hostile clients running the whole time — one authenticated analyst ("mallory")
sending 1 MB statements back to back; one holding ``--held`` sockets that never
authenticate (each sends a startup packet and stalls; reopened as soon as the server drops
it); a slowloris of ``--slowloris`` sockets sending one byte of a startup packet every
0.5–0.9 s (reopened when dropped; issue 34 item 6); and a cancel flood: a second "mallory"
connection sending an engine query and cancelling it at once, back to back (issue 34 item 7);
and a refit under load: a third "mallory" connection making paid on-demand queries (three-way
GROUP BYs the workload does not support), each a new release and a refit (issue 34 item 8).
It reports p95 with and without them (pooled over ``--rounds`` rounds, alternating) and
passes when the other clients see 0 failures (logins included) and the hostile p95 is within
2x of the clean one.
"""

from __future__ import annotations

import argparse
import socket
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
    scram.add_user(users, "mallory", PASSWORD)
    # per-query measurements are allowed (and every analyst has a cap) so that --hostile can make
    # paid on-demand queries, each a new release and a refit; the load's own mix never spends
    overrides = {"ledger": str(workdir / "load.ledger"),
                 "budget": {"epsilon": 1e6, "delta": 1e-6, "per_user": {"epsilon": 1e4}},
                 "policy": {"unsupported": "measure", "epsilon": 0.01},
                 # a reserve for those queries: the workload spends exactly its share (issue 28
                 # item 5), so with the whole total as its share nothing would be left to pay them
                 "workload": {"files": [str(config.parent / "dashboard.sql")], "epsilon": 1e5}}
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


class Hostile:
    """Hostile clients in threads until ``stop()``: 1 MB statements, held sockets, a slowloris and
    a cancel flood."""

    def __init__(self, port: int, statement_bytes: int = 1_000_000, held: int = 64, slowloris: int = 170) -> None:
        sys.path.insert(0, str(ROOT / "tests" / "server"))
        from server_hostile import Slowloris
        self.port = port
        self.statement = "SELECT 1 -- " + "x" * (statement_bytes - 12)
        self.held = held
        self.sent = self.answers = self.opened = self.dropped = 0
        self.cancels = 0
        self.refits = 0
        self.refit_codes: dict[str, int] = {}
        self.cancel_codes: dict[str, int] = {}
        self.codes: dict[str, int] = {}
        self.slowloris = Slowloris(port, sockets=slowloris) if slowloris else None
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._big, daemon=True),
                         threading.Thread(target=self._hold, daemon=True),
                         threading.Thread(target=self._cancel_flood, daemon=True),
                         threading.Thread(target=self._refit, daemon=True)]

    def __enter__(self):
        for t in self._threads:
            t.start()
        if self.slowloris is not None:
            self.slowloris.__enter__()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self.slowloris is not None:
            self.slowloris.stop()
        for t in self._threads:
            t.join(30)

    def _refit(self) -> None:
        """Paid on-demand queries back to back: each measures a new marginal, so the model is refitted."""
        import itertools
        from server_pgclient import RawClient, error_fields
        from dpsql.server import codec
        columns = ["workclass", "education", "marital_status", "occupation", "relationship", "race", "sex",
                   "native_country", "income"]
        combos = itertools.combinations(columns, 3)
        try:
            c = RawClient(self.port, timeout=300)
            if c.startup("mallory", PASSWORD)[-1][0] != b"Z":
                return
            for sql in ("SET dpsql.policy = 'measure'", "SET dpsql.allow_spend = 'on'"):
                c.send(codec.encode_query(sql))
                c.until(b"Z")
            for combo in combos:
                if self._stop.is_set():
                    break
                cols = ", ".join(combo)
                c.send(codec.encode_query(f"SELECT {cols}, COUNT(*) FROM adult GROUP BY {cols}"))
                msgs = c.until(b"Z")
                if not msgs:
                    break
                code = error_fields(msgs).get("C", "ok")
                self.refit_codes[code] = self.refit_codes.get(code, 0) + 1
                self.refits += 1
            c.close()
        except OSError:
            pass

    def _cancel_flood(self) -> None:
        """An engine query, cancelled as soon as it is sent, back to back on one connection."""
        import struct
        from server_pgclient import RawClient, error_fields
        from dpsql.server import codec
        n = 0
        while not self._stop.is_set():
            try:
                c = RawClient(self.port, timeout=60)
                msgs = c.startup("mallory", PASSWORD)
                if not msgs or msgs[-1][0] != b"Z":
                    c.close()
                    time.sleep(0.05)
                    continue
                key = next(body for kind, body in msgs if kind == b"K")
                pid = struct.unpack("!i", key[:4])[0]
                while not self._stop.is_set():
                    n += 1              # a new query each time: nothing is answered from the cache
                    c.send(codec.encode_query(f"SELECT sex, COUNT(*) FROM adult WHERE age > {n % 90} GROUP BY sex"))
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=10)
                    s.sendall(codec.encode_cancel_request(pid, key[4:]))
                    s.close()
                    msgs = c.until(b"Z")
                    if not msgs:
                        break
                    code = error_fields(msgs).get("C", "ok")
                    self.cancel_codes[code] = self.cancel_codes.get(code, 0) + 1
                    self.cancels += 1
                c.close()
            except OSError:
                time.sleep(0.05)

    def _big(self) -> None:
        sys.path.insert(0, str(ROOT / "tests" / "server"))
        from server_pgclient import RawClient, error_fields
        from dpsql.server import codec
        while not self._stop.is_set():
            try:
                c = RawClient(self.port, timeout=60)
                if c.startup("mallory", PASSWORD)[-1][0] != b"Z":
                    c.close()
                    continue
                while not self._stop.is_set():
                    c.send(codec.encode_query(self.statement))
                    self.sent += 1
                    msgs = c.until(b"Z")
                    if not msgs:
                        break
                    code = error_fields(msgs).get("C", "ok")
                    self.codes[code] = self.codes.get(code, 0) + 1
                    self.answers += 1
                c.close()
            except OSError:
                time.sleep(0.05)

    def _hold(self) -> None:
        from dpsql.server import codec
        socks: list[socket.socket] = []
        packet = codec.encode_startup({"user": "load", "database": "dpsql"})
        while not self._stop.is_set():
            while len(socks) < self.held and not self._stop.is_set():
                try:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                    s.sendall(packet)            # then never answer the SASL request
                    s.setblocking(False)
                    socks.append(s)
                    self.opened += 1
                except OSError:
                    time.sleep(0.05)
            time.sleep(0.05)
            for s in list(socks):                # reopen whatever the server dropped
                try:
                    while True:
                        data = s.recv(65536)
                        if not data:
                            raise ConnectionResetError
                except BlockingIOError:
                    continue
                except OSError:
                    socks.remove(s)
                    s.close()
                    self.dropped += 1
        for s in socks:
            s.close()


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
            "qps": len(lat) / wall if wall else 0.0, "alive": sum(t.is_alive() for t in threads),
            "latencies": lat}


def pooled(results: list[dict]) -> dict:
    lat = sorted(x for r in results for x in r["latencies"])
    wall = sum(r["wall"] for r in results)
    return {"completed": len(lat), "failures": [f for r in results for f in r["failures"]], "wall": wall,
            "qps": len(lat) / wall if wall else 0.0, "p50": statistics.median(lat) if lat else float("nan"),
            "p95": lat[int(0.95 * (len(lat) - 1))] if lat else float("nan")}


def _hostile_child(port: int, held: int, slowloris: int, stop, results) -> None:
    """The hostile clients in a process of their own (a real attacker's CPU is not the server's:
    in the server's process they would compete with it for the GIL)."""
    from types import SimpleNamespace
    with Hostile(port, held=held, slowloris=slowloris) as h:
        stop.wait(3600)
    loris = None if h.slowloris is None else SimpleNamespace(
        opened=h.slowloris.opened, bytes=h.slowloris.bytes, dropped=h.slowloris.dropped)
    results.put(SimpleNamespace(sent=h.sent, codes=h.codes, opened=h.opened, dropped=h.dropped, cancels=h.cancels,
                                cancel_codes=h.cancel_codes, refits=h.refits, refit_codes=h.refit_codes,
                                slowloris=loris))


def run_hostile(port: int, connections: int, queries: int, rounds: int, held: int, slowloris: int = 170) -> dict:
    import multiprocessing
    ctx = multiprocessing.get_context("spawn")     # not fork: the server's threads are running
    clean, hostile, probes = [], [], []
    for _ in range(rounds):
        clean.append(run_load(port, connections, queries))
        stop, results = ctx.Event(), ctx.Queue()
        child = ctx.Process(target=_hostile_child, args=(port, held, slowloris, stop, results), daemon=True)
        child.start()
        time.sleep(3.0)              # let the hostile clients get going first (the child imports dpsql)
        hostile.append(run_load(port, connections, queries))
        stop.set()
        probes.append(results.get(timeout=120))
        child.join(60)
    return {"clean": pooled(clean), "hostile": pooled(hostile), "probes": probes, "rounds": rounds, "held": held,
            "slowloris": slowloris}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--queries", type=int, default=20)
    ap.add_argument("--link", choices=["engine", "fake"], default="engine")
    ap.add_argument("--hostile", action="store_true",
                    help="compare against the same load with a 1 MB-statement client and held unauthenticated sockets")
    ap.add_argument("--rounds", type=int, default=2, help="clean/hostile rounds with --hostile (alternating)")
    ap.add_argument("--held", type=int, default=64, help="unauthenticated sockets the second hostile client holds")
    ap.add_argument("--slowloris", type=int, default=170, help="sockets trickling a startup packet (0: none)")
    ap.add_argument("--record", action="store_true", help="append a section to bench/RESULTS.md")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="dpsql-load-") as tmp:
        thread, admin = start(args.link, Path(tmp))
        try:
            if args.hostile:
                return hostile_main(args, thread)
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


def hostile_main(args, thread) -> int:
    out = run_hostile(thread.port, args.connections, args.queries, args.rounds, args.held, args.slowloris)
    clean, hostile = out["clean"], out["hostile"]
    ratio = hostile["p95"] / clean["p95"]
    ok = not clean["failures"] and not hostile["failures"] and ratio <= 2.0 \
        and hostile["completed"] == clean["completed"] == args.rounds * args.connections * args.queries
    for name, r in (("clean", clean), ("hostile", hostile)):
        print(f"{name:8s}: {r['completed']} queries, {len(r['failures'])} failures, {r['qps']:.0f} q/s, "
              f"p50 {r['p50'] * 1000:.1f} ms, p95 {r['p95'] * 1000:.1f} ms")
    sent = sum(h.sent for h in out["probes"])
    codes: dict[str, int] = {}
    for h in out["probes"]:
        for k, v in h.codes.items():
            codes[k] = codes.get(k, 0) + v
    opened = sum(h.opened for h in out["probes"])
    dropped = sum(h.dropped for h in out["probes"])
    print(f"hostile: {sent} statements of 1 MB sent, answers by SQLSTATE {codes}; {opened} unauthenticated sockets "
          f"opened (holding {args.held}), {dropped} dropped by the server")
    extra = hostile_extra(out)
    print(f"hostile: {extra}")
    print(f"p95 with hostile clients / without: {ratio:.2f} (target <= 2.0): {'PASS' if ok else 'FAIL'}")
    for f in (clean["failures"] + hostile["failures"])[:10]:
        print("  failure:", f)
    if args.record:
        record_hostile(args, out, ratio, ok, sent, codes, opened, dropped)
    return 0 if ok else 1


def hostile_extra(out) -> str:
    """What the slowloris and the cancel flood did, summed over the rounds."""
    cancels = sum(h.cancels for h in out["probes"])
    cancel_codes: dict[str, int] = {}
    for h in out["probes"]:
        for k, v in h.cancel_codes.items():
            cancel_codes[k] = cancel_codes.get(k, 0) + v
    loris = [h.slowloris for h in out["probes"] if h.slowloris is not None]
    return (f"slowloris: {out['slowloris']} sockets, {sum(x.opened for x in loris)} opened, "
            f"{sum(x.bytes for x in loris)} bytes trickled, {sum(x.dropped for x in loris)} dropped by the server; "
            f"cancel flood: {cancels} queries cancelled at once, answers by SQLSTATE {cancel_codes}; "
            f"refit under load: {sum(h.refits for h in out['probes'])} paid on-demand queries, answers by SQLSTATE "
            f"{_merged(h.refit_codes for h in out['probes'])}")


def _merged(dicts) -> dict:
    out: dict = {}
    for d in dicts:
        for k, v in d.items():
            out[k] = out.get(k, 0) + v
    return out


def record_hostile(args, out, ratio, ok, sent, codes, opened, dropped) -> None:
    import subprocess
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    path = ROOT / "bench" / "RESULTS.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    rows = "".join(f"| {name} | {r['completed']} | {len(r['failures'])} | {r['qps']:.0f} | {r['p50'] * 1000:.1f} | "
                   f"{r['p95'] * 1000:.1f} |\n" for name, r in (("clean", out["clean"]), ("hostile", out["hostile"])))
    text += (f"\n## Wire server under hostile clients (`bench/server_load.py --link {args.link} --hostile`)\n\n"
             f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; commit {commit}; machine: 2-core AMD EPYC VM, "
             f"24 GB; Python {sys.version.split()[0]}; `uptime`: {uptime}\n\n"
             f"{args.connections} psycopg connections x {args.queries} mixed queries (as above), {out['rounds']} "
             "rounds alternating clean and hostile on the same server, latencies pooled per condition; the hostile "
             "clients run in a process of their own. Hostile: "
             "an authenticated analyst sending 1 MB statements back to back (over the 256 KiB default "
             f"`max_statement_bytes`), and a client holding {out['held']} sockets that send a startup packet and "
             "never answer SASL (reopened when dropped); server defaults (`max_unauthenticated` 256, "
             "`max_user_connections` 50, "
             "`auth_timeout` 5 s, `max_user_statements` 2). Also (issue 34): a slowloris of "
             f"{out['slowloris']} sockets trickling one byte of a startup packet every 0.5-0.9 s, and a cancel flood "
             "(an engine query cancelled as soon as sent, back to back), and a refit under load (paid on-demand "
             "three-way GROUP BYs back to back, each a new release and a refit).\n\n"
             "| run | queries | failures | queries/s | p50 ms | p95 ms |\n|---|---:|---:|---:|---:|---:|\n" + rows +
             f"\np95 hostile / clean = **{ratio:.2f}** (target <= 2): {'PASS' if ok else 'FAIL'}. The hostile "
             f"analyst sent {sent} statements of 1 MB, answered by SQLSTATE {codes}; the holder opened {opened} "
             f"unauthenticated sockets, {dropped} of which the server dropped; {hostile_extra(out)}. Link: "
             f"{'the DP engine' if args.link == 'engine' else 'the deterministic test double'}.\n")
    path.write_text(text)


def record(args, result, before, after) -> None:
    import subprocess
    uptime = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    path = ROOT / "bench" / "RESULTS.md"
    text = path.read_text() if path.exists() else "# Benchmark results\n"
    ledger = "" if before is None else (f" Ledger: rho {before:.6g} before the load and {after:.6g} after "
                                        "(the mix is answered from released measurements; repeats cost nothing).")
    double = "the deterministic test double (protocol and catalog cost only, no DP engine)"
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
             + (f"Link: {'the DP engine' if args.link == 'engine' else double}."
                f"{ledger}\n"))
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
