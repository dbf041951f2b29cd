"""``dpsql serve`` leaves nothing behind (issue 18, item 6) and wants TLS off loopback (item 8).

Each test runs the real command in a subprocess with the schema-only catalog PostgreSQL and
checks, by the catalog directory's ``owner.json`` and the postmaster's pid, that every way
out stops PostgreSQL and removes its directory: SIGTERM, SIGINT and SIGHUP, a start that
fails (port in use), a crash of the server (SIGKILL: the reaper cleans up), and a crash that
took the reaper too (the next server's startup sweep cleans up).
"""

from __future__ import annotations

import glob
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from dpsql.server import catalogdb, scram
from dpsql.server.server import Server, ServerOptions
from dpsql.testing import copy_adult_example

from server_fakes import PASSWORD

pytestmark = [pytest.mark.slow,   # servers in subprocesses, each with its own PostgreSQL
              pytest.mark.skipif(catalogdb.find_bindir() is None,
                                 reason="PostgreSQL server binaries not installed: apt-get install postgresql")]


@pytest.fixture
def config(tmp_path):
    config = copy_adult_example(tmp_path)
    scram.add_user(tmp_path / "dpsql.users.json", "alice", PASSWORD)
    return config


@pytest.fixture
def private_tmp():
    """A temporary directory of this test's own for the servers' catalog directories.

    The startup sweep removes every catalog directory of this user whose server is gone, in
    the machine's shared temporary directory: a server started by another test run at the same
    time (parallel suites on a shared machine) removes the one a test crashed on purpose before
    the test can look at it.  Here only this test's servers sweep, and what a failed test
    leaves is swept at teardown."""
    private = tempfile.mkdtemp(prefix="dpsql-t-", dir="/tmp")
    os.chmod(private, 0o711)      # PostgreSQL runs as `postgres` when the tests run as root
    try:
        yield private
    finally:
        catalogdb.sweep_stale(private)
        shutil.rmtree(private, ignore_errors=True)


def serve(config, *args, wait_ready=True, tmpdir=None):
    env = None if tmpdir is None else {**os.environ, "TMPDIR": tmpdir}
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.cli", "serve", "--config", str(config), "--port", "0",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    if not wait_ready:
        return proc, None
    ready, _, _ = select.select([proc.stdout], [], [], 120)
    line = proc.stdout.readline() if ready else ""
    match = re.match(r"dpsql: ready on 127\.0\.0\.1:(\d+) \(database 'dpsql', catalog: PostgreSQL [\d.]+, pid (\d+)\)",
                     line)
    if match is None:
        proc.kill()
        proc.wait(10)
        raise AssertionError(f"no readiness line: {line!r} {proc.stderr.read()}")
    assert int(match.group(2)) == proc.pid
    return proc, int(match.group(1))


def catalog_dirs(pid: int, tmpdir: str | None = None) -> list[str]:
    """The catalog directories whose owner is server process ``pid``."""
    out = []
    for d in glob.glob(os.path.join(tmpdir or tempfile.gettempdir(), catalogdb.DIR_PREFIX + "*")):
        try:
            with open(os.path.join(d, catalogdb.OWNER_FILE)) as fh:
                if json.load(fh)["pid"] == pid:
                    out.append(d)
        except (OSError, ValueError, KeyError):
            pass
    return out


def running_catalog(pid: int, tmpdir: str | None = None) -> tuple[str, int]:
    dirs = catalog_dirs(pid, tmpdir)
    assert len(dirs) == 1, dirs
    postmaster = catalogdb.postmaster_pid(dirs[0])
    assert postmaster is not None
    return dirs[0], postmaster


def gone(directory: str, postmaster: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not os.path.exists(directory) and not catalogdb._alive(postmaster):
            return True
        time.sleep(0.1)
    return False


def check_login(port: int) -> None:
    if shutil.which("psql") is None:
        return
    env = dict(os.environ, PGPASSWORD=PASSWORD, PGCONNECT_TIMEOUT="10", PGSSLMODE="disable")
    r = subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", str(port), "-U", "alice", "-d", "dpsql", "-Atc",
                        "SELECT count(*) FROM information_schema.columns WHERE table_name = 'adult'"],
                       capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0 and int(r.stdout) > 0, r.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_signals_stop_the_catalog_and_remove_its_directory(config, tmp_path, sig):
    pidfile = tmp_path / "dpsql.pid"
    proc, port = serve(config, "--pidfile", str(pidfile))
    try:
        directory, postmaster = running_catalog(proc.pid)
        assert pidfile.read_text().strip() == str(proc.pid)
        check_login(port)
    finally:
        proc.send_signal(sig)
        code = proc.wait(60)
    assert code == 0, proc.stderr.read()
    assert gone(directory, postmaster, within=1.0), "catalog PostgreSQL or its directory left behind"
    assert not pidfile.exists()


def test_failed_start_leaves_nothing(config):
    # A private TMPDIR: other servers started at the same time (parallel test runs on a shared
    # machine) must not be mistaken for leftovers of this one.
    private = tempfile.mkdtemp(prefix="dpsql-t-", dir="/tmp")
    env = {**os.environ, "TMPDIR": private}
    try:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            proc = subprocess.run([sys.executable, "-m", "dpsql.cli", "serve", "--config", str(config),
                                   "--port", str(port)], capture_output=True, text=True, timeout=120,
                                  env=env)
        assert proc.returncode == 2 and f"cannot serve on 127.0.0.1:{port}" in proc.stderr, proc.stderr
        assert glob.glob(os.path.join(private, catalogdb.DIR_PREFIX + "*")) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)


def test_crash_is_cleaned_up_by_the_reaper_then_by_the_sweep(config, private_tmp):
    # SIGKILL of the server alone: the reaper sees the pipe close and cleans up
    proc, _ = serve(config, tmpdir=private_tmp)
    directory, postmaster = running_catalog(proc.pid, private_tmp)
    proc.kill()
    proc.wait(10)
    assert gone(directory, postmaster), "the reaper did not stop the catalog PostgreSQL"
    # SIGKILL of the server and its reaper: the next server's startup sweep cleans up
    proc, _ = serve(config, tmpdir=private_tmp)
    directory, postmaster = running_catalog(proc.pid, private_tmp)
    reapers = [p for p in map(int, filter(str.isdigit, os.listdir("/proc")))
               if catalogdb._cmdline(p)[1:] == ["-m", "dpsql.server.reaper", directory]]
    assert len(reapers) == 1
    os.kill(reapers[0], signal.SIGKILL)
    proc.kill()
    proc.wait(10)
    time.sleep(0.5)
    assert os.path.isdir(directory) and catalogdb._alive(postmaster)    # left behind, for now
    second, _ = serve(config, tmpdir=private_tmp)
    try:
        assert gone(directory, postmaster, within=1.0), "the startup sweep did not clean up"
    finally:
        second.send_signal(signal.SIGTERM)
        assert second.wait(60) == 0


def test_non_loopback_address_needs_tls(config, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "dpsql.cli", "serve", "--config", str(config), "--host", "0.0.0.0",
                           "--port", "0", "--no-catalog"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "needs TLS" in proc.stderr and "--insecure" in proc.stderr
    with pytest.raises(ValueError, match="needs TLS"):
        Server(config, users_file=tmp_path / "dpsql.users.json", options=ServerOptions(host="0.0.0.0", port=0))
    # explicitly insecure: it serves (reached here through loopback)
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.cli", "serve", "--config", str(config), "--host", "0.0.0.0",
                             "--port", "0", "--no-catalog", "--insecure"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 120)
        assert ready and proc.stdout.readline().startswith("dpsql: ready on 0.0.0.0:")
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
    assert "without TLS (--insecure)" in proc.stderr.read()
