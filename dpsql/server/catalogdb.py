"""The schema-only catalog PostgreSQL: lifecycle, hardening and per-analyst roles.

``CatalogCluster.start`` runs ``initdb`` in a fresh 0700 temp directory, starts ``postgres``
itself (not through ``pg_ctl``, which detaches it with ``setsid``) so it stays in the
server's process group, loads the public DDL with zero rows, and hardens the database.
Nothing may outlive the server:

* a clean stop (``stop``: SIGTERM/SIGINT/SIGHUP handlers and ``finally`` blocks in
  ``server.run``) shuts PostgreSQL down and removes the directory;
* a failed start removes what it made before re-raising;
* a crash of the server process (even SIGKILL) is covered by a *reaper*: a tiny process in
  its own session (``python -m dpsql.server.reaper``) holding the read end of a pipe whose
  write end only the server has; when the pipe reaches EOF the reaper stops the postmaster
  (identified by pid *and* its ``-D`` path) and removes the directory;
* and a startup sweep removes directories of earlier servers of this user whose owner
  process is gone (``owner.json`` records its pid and start time), in case even the reaper
  was killed (e.g. ``kill -9`` of the whole session).

Isolation (``harden_sql``, ``role_sql``) is decided by allow-list, inside PostgreSQL where a
client statement cannot undo it:

* each analyst's catalog statements run as their own role (``role_name``: an HMAC of the
  dpsql user, so role names do not enumerate analysts), a member of ``dpsql_readers``; so
  ``pg_stat_activity`` hides other analysts' statements and nobody may signal another's
  backend;
* ``EXECUTE`` is revoked from PUBLIC on every function in ``pg_catalog`` and
  ``information_schema`` and granted back to ``dpsql_readers`` only for functions that were
  public and are declared IMMUTABLE or STABLE (no side effects, by PostgreSQL's own
  declaration), plus a short list of harmless VOLATILE ones that BI tools call (relation
  sizes, clocks); so ``set_config``, ``pg_sleep``, ``lo_*``, advisory locks, ``pg_notify``,
  ``pg_terminate_backend``, ``nextval`` … are refused with 42501;
* per role (``ALTER ROLE … SET``, which only a superuser or the role itself could change,
  and the role never gets to send ALTER or SET: the router forwards only SELECT-shaped
  statements): read-only transactions, a statement timeout, an idle-in-transaction
  timeout, a temp-file limit and a connection limit;
* no CREATE or TEMPORARY anywhere, no CONNECT to other databases, SELECT only on the empty
  tables.
"""

from __future__ import annotations

import asyncio
import glob
import hashlib
import hmac
import json
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from dpsql.server.pgclient import ShadowClient, ShadowUnavailable

SHADOW_ROLE = "dpsql_owner"       # superuser that builds the schema; never runs client SQL
READERS = "dpsql_readers"         # group role: what every analyst's catalog role may do
DIR_PREFIX = "dpsql-shadow-"
OWNER_FILE = "owner.json"

# VOLATILE functions that only read (sizes of the empty relations, clocks, partition trees)
# and that psql/DBeaver/pgAdmin call; everything else VOLATILE stays refused.
VOLATILE_ALLOWED = ("pg_relation_size", "pg_total_relation_size", "pg_table_size", "pg_indexes_size",
                    "pg_database_size", "pg_tablespace_size", "pg_is_in_recovery", "pg_jit_available",
                    "pg_partition_tree", "pg_partition_ancestors", "pg_collation_actual_version",
                    "pg_database_collation_actual_version", "clock_timestamp", "timeofday")
# STABLE functions that nevertheless change state (they assign a transaction id).
STABLE_DENIED = ("txid_current", "pg_current_xact_id")


def find_bindir() -> Path | None:
    """The newest PostgreSQL server bin directory (Debian layout first, then $PATH)."""
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"),
                        key=lambda p: int(Path(p).parent.parent.name) if Path(p).parent.parent.name.isdigit() else 0)
    if candidates:
        return Path(candidates[-1]).parent
    found = shutil.which("initdb")
    if found and shutil.which("postgres"):
        return Path(found).resolve().parent
    return None


def ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def role_name(user: str, key: bytes) -> str:
    """The catalog role of a dpsql user: keyed, so ``pg_roles`` does not list analysts' names."""
    return "dpsql_u_" + hmac.new(key, b"catalog-role\0" + user.encode("utf-8"), hashlib.sha256).hexdigest()[:20]


def harden_sql(database: str, statement_timeout_ms: int) -> list[str]:
    """Superuser statements run once in the catalog database after the DDL (see module doc)."""
    db = ident(database)
    readers = ident(READERS)
    volatile = "ARRAY[" + ", ".join(literal(n) for n in VOLATILE_ALLOWED) + "]::name[]"
    denied = "ARRAY[" + ", ".join(literal(n) for n in STABLE_DENIED) + "]::name[]"
    return [
        f"CREATE ROLE {readers} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION",
        # the allow-list, computed before PUBLIC loses EXECUTE: public and side-effect free
        "DO $$ DECLARE fns text; BEGIN "
        "SELECT string_agg(p.oid::regprocedure::text, ', ') INTO fns FROM pg_proc p "
        "JOIN pg_namespace n ON n.oid = p.pronamespace "
        "WHERE n.nspname IN ('pg_catalog', 'information_schema') AND p.prokind IN ('f', 'a', 'w') "
        f"AND has_function_privilege({literal(READERS)}, p.oid, 'EXECUTE') "
        f"AND (p.provolatile IN ('i', 's') OR p.proname = ANY({volatile})) AND p.proname <> ALL({denied}); "
        f"EXECUTE 'GRANT EXECUTE ON FUNCTION ' || fns || ' TO {READERS}'; END $$",
        "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA pg_catalog FROM PUBLIC",
        "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA information_schema FROM PUBLIC",
        "REVOKE ALL ON SCHEMA public FROM PUBLIC",
        f"GRANT USAGE ON SCHEMA public TO {readers}",
        f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO {readers}",
        f"REVOKE ALL ON DATABASE {db} FROM PUBLIC",
        f"GRANT CONNECT ON DATABASE {db} TO {readers}",
        "REVOKE ALL ON DATABASE postgres FROM PUBLIC",
        "REVOKE ALL ON DATABASE template1 FROM PUBLIC",
        # fallbacks for any role; the per-role settings below take precedence and say the same
        f"ALTER DATABASE {db} SET default_transaction_read_only = on",
        f"ALTER DATABASE {db} SET statement_timeout = {int(statement_timeout_ms)}",
    ]


def role_sql(role: str, statement_timeout_ms: int, connection_limit: int) -> list[str]:
    """Create (if needed) and configure one analyst's catalog role."""
    r = ident(role)
    return [
        f"DO $$ BEGIN CREATE ROLE {r} LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION NOBYPASSRLS "
        f"IN ROLE {ident(READERS)}; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
        f"ALTER ROLE {r} CONNECTION LIMIT {int(connection_limit)}",
        f"ALTER ROLE {r} SET default_transaction_read_only = on",
        f"ALTER ROLE {r} SET statement_timeout = {int(statement_timeout_ms)}",
        f"ALTER ROLE {r} SET idle_in_transaction_session_timeout = {int(statement_timeout_ms)}",
        f"ALTER ROLE {r} SET temp_file_limit = '64MB'",
        f"ALTER ROLE {r} SET work_mem = '4MB'",
    ]


# -- processes ----------------------------------------------------------------------------------

def _proc_start_time(pid: int) -> str | None:
    """The kernel's start time of ``pid`` (field 22 of /proc/pid/stat), to detect pid reuse."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            stat = fh.read().decode("ascii", "replace")
        return stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return [a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a]
    except OSError:
        return []


def postmaster_pid(directory: str) -> int | None:
    """The pid of the postmaster serving ``directory``/data, verified by its command line."""
    data = os.path.join(directory, "data")
    try:
        with open(os.path.join(data, "postmaster.pid")) as fh:
            pid = int(fh.readline().strip())
    except (OSError, ValueError):
        return None
    args = _cmdline(pid)
    if args and Path(args[0]).name.startswith("postgres") and data in args:
        return pid
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child has exited
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def kill_postmaster(pid: int, wait: float = 10.0) -> None:
    """Immediate shutdown (SIGQUIT: no checkpoint, nothing worth keeping), then SIGKILL."""
    for sig, grace in ((signal.SIGQUIT, wait), (signal.SIGKILL, 5.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not _alive(pid):
                return
            time.sleep(0.05)


def remove_directory(directory: str) -> None:
    """Stop a postmaster still serving ``directory`` and delete the directory."""
    pid = postmaster_pid(directory)
    if pid is not None:
        kill_postmaster(pid)
    shutil.rmtree(directory, ignore_errors=True)


def sweep_stale(tmpdir: str | None = None) -> list[str]:
    """Remove catalog directories of this user's earlier servers whose process is gone."""
    removed = []
    for directory in glob.glob(os.path.join(tmpdir or tempfile.gettempdir(), DIR_PREFIX + "*")):
        try:
            with open(os.path.join(directory, OWNER_FILE)) as fh:
                owner = json.load(fh)
            st = os.stat(os.path.join(directory, OWNER_FILE))
        except (OSError, ValueError):
            continue  # not provably ours
        if st.st_uid != os.geteuid() or owner.get("uid") != os.geteuid():
            continue
        pid = owner.get("pid")
        if isinstance(pid, int) and _alive(pid) and _proc_start_time(pid) == owner.get("start"):
            continue  # its server is running
        remove_directory(directory)
        removed.append(directory)
    return removed


class CatalogCluster:
    """Lifecycle of the catalog PostgreSQL: initdb, start, load the public DDL, harden, stop."""

    def __init__(self, ddl: list[str], database: str = "dpsql", *, bindir: Path | None = None,
                 statement_timeout: float = 10.0, reaper: bool = True) -> None:
        self.ddl = list(ddl)
        self.database = database
        self.bindir = bindir or find_bindir()
        self.statement_timeout_ms = max(1, int(statement_timeout * 1000))
        self.dir: str | None = None
        self.port = 5432
        self.proc: subprocess.Popen | None = None
        self.swept: list[str] = []
        self._reaper: subprocess.Popen | None = None
        self._use_reaper = reaper
        self._run_as: dict = {}

    @property
    def socket_path(self) -> str:
        assert self.dir is not None
        return os.path.join(self.dir, f".s.PGSQL.{self.port}")

    def _run(self, args, timeout: float = 60) -> None:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, **self._run_as)
        if proc.returncode != 0:
            raise ShadowUnavailable(f"{Path(args[0]).name} failed: {proc.stderr.strip()[-500:]}")

    def start(self) -> None:
        if self.bindir is None:
            raise ShadowUnavailable("PostgreSQL server binaries (initdb, postgres) not found; "
                                    "install the `postgresql` package")
        self.swept = sweep_stale()
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        self.dir = tempfile.mkdtemp(prefix=DIR_PREFIX)
        with open(os.path.join(self.dir, OWNER_FILE), "w") as fh:
            json.dump({"pid": os.getpid(), "start": _proc_start_time(os.getpid()), "uid": os.geteuid()}, fh)
        if self._use_reaper:
            self._reaper = subprocess.Popen([sys.executable, "-m", "dpsql.server.reaper", self.dir],
                                            stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True)
        if os.geteuid() == 0:
            # PostgreSQL refuses to run as root; run it as the packaged `postgres` account
            try:
                pw = pwd.getpwnam("postgres")
            except KeyError:
                raise ShadowUnavailable("running as root but no `postgres` user exists") from None
            os.chown(self.dir, pw.pw_uid, pw.pw_gid)
            self._run_as = {"user": pw.pw_uid, "group": pw.pw_gid, "extra_groups": []}
        os.chmod(self.dir, 0o700)
        data = os.path.join(self.dir, "data")
        assert self.bindir is not None   # start() checked it
        self._run([str(self.bindir / "initdb"), "-D", data, "-U", SHADOW_ROLE, "--auth=trust",
                   "--encoding=UTF8", "--locale=C", "--no-sync"], timeout=120)
        settings = {"listen_addresses": "", "unix_socket_directories": self.dir, "port": str(self.port),
                    "max_connections": "60", "fsync": "off", "synchronous_commit": "off",
                    "full_page_writes": "off", "shared_buffers": "16MB", "log_min_messages": "fatal",
                    "statement_timeout": str(self.statement_timeout_ms)}
        args = [str(self.bindir / "postgres"), "-D", data]
        for key, value in settings.items():
            args += ["-c", f"{key}={value}"]
        log = open(os.path.join(self.dir, "postgres.log"), "ab")
        try:
            # same process group as the server (no setsid): a signal to the group reaches it too
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                         **self._run_as)
        finally:
            log.close()
        if self._reaper is not None and self._reaper.stdin is not None:
            self._reaper.stdin.write(f"{self.proc.pid}\n".encode())
            self._reaper.stdin.flush()
        self._wait_ready(data, 60.0)
        asyncio.run(self._load())

    def _wait_ready(self, data: str, timeout: float) -> None:
        assert self.proc is not None   # started by _start
        deadline = time.monotonic() + timeout
        pidfile = os.path.join(data, "postmaster.pid")
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ShadowUnavailable(f"postgres exited with status {self.proc.returncode}: {self._log_tail()}")
            try:
                with open(pidfile) as fh:
                    lines = fh.read().splitlines()
                if len(lines) >= 8 and lines[7].strip() == "ready" and os.path.exists(self.socket_path):
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise ShadowUnavailable(f"postgres did not become ready within {timeout:.0f} s: {self._log_tail()}")

    def _log_tail(self) -> str:
        try:
            with open(os.path.join(self.dir or "", "postgres.log"), errors="replace") as fh:
                return fh.read()[-500:].strip()
        except OSError:
            return ""

    async def _load(self) -> None:
        admin = await ShadowClient.connect(self.socket_path, "postgres", SHADOW_ROLE)
        try:
            await admin.simple(f"CREATE DATABASE {ident(self.database)}")
        finally:
            await admin.close()
        db = await ShadowClient.connect(self.socket_path, self.database, SHADOW_ROLE)
        try:
            for stmt in self.ddl + harden_sql(self.database, self.statement_timeout_ms):
                await db.simple(stmt)
        finally:
            await db.close()

    def stop(self) -> None:
        """Stop PostgreSQL and remove the directory; safe to call more than once."""
        proc, directory = self.proc, self.dir
        if proc is not None and proc.poll() is None:
            try:
                proc.send_signal(signal.SIGINT)   # fast shutdown: disconnects clients, exits cleanly
                proc.wait(15)
            except subprocess.TimeoutExpired:
                kill_postmaster(proc.pid)
                proc.wait(10)
            except ProcessLookupError:
                pass
        elif proc is None and directory is not None:
            pid = postmaster_pid(directory)
            if pid is not None:
                kill_postmaster(pid)
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
        self.proc = None
        self.dir = None
        reaper, self._reaper = self._reaper, None
        if reaper is not None:
            try:
                if reaper.stdin is not None:
                    reaper.stdin.close()      # EOF: nothing left to do, it exits
                reaper.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                pass
