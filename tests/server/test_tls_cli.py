"""TLS (SSLRequest + start_tls) with SCRAM and with cleartext passwords, which are accepted
only over TLS; and the ``dpsql user`` command."""

from __future__ import annotations

import shutil
import ssl
import subprocess

import pytest

from dpsql.cli import main
from dpsql.server import scram
from dpsql.server.server import Server, ServerOptions, ServerThread
from dpsql.testing import copy_adult_example

from server_fakes import PASSWORD
from server_fakes import ADULT_CONFIG, FakeLink
from test_clients import bounded


@pytest.fixture(scope="module")
def tls_context(tmp_path_factory):
    if shutil.which("openssl") is None:
        pytest.skip("openssl CLI not installed: cannot make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
                    "-keyout", str(d / "key.pem"), "-out", str(d / "cert.pem")], check=True, capture_output=True,
                   timeout=60)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(d / "cert.pem", d / "key.pem")
    return ctx


def _server(users_file, ctx, method):
    opts = ServerOptions(port=0, shadow=False, ssl_context=ctx, auth_method=method, auth_failure_delay=0.05)
    return ServerThread(Server(ADULT_CONFIG, users_file=users_file, link_factory=FakeLink, catalog=FakeLink.catalog,
                               options=opts)).start()


def _connect(port, sslmode, user="alice", password=PASSWORD):
    psycopg = pytest.importorskip("psycopg")
    return bounded(lambda: psycopg.connect(host="127.0.0.1", port=port, user=user, password=password, dbname="dpsql",
                                           sslmode=sslmode, connect_timeout=10, autocommit=True))


def test_scram_over_tls(users_file, tls_context):
    server = _server(users_file, tls_context, "scram-sha-256")
    try:
        conn = _connect(server.port, "require")
        try:
            assert conn.info.pgconn.ssl_in_use
            assert bounded(lambda: conn.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex").fetchall())
        finally:
            conn.close()
    finally:
        server.stop()


def test_cleartext_only_over_tls(users_file, tls_context):
    import psycopg
    server = _server(users_file, tls_context, "password")
    try:
        conn = _connect(server.port, "require")
        try:
            assert bounded(lambda: conn.execute("SELECT current_user").fetchone()) == ("alice",)
        finally:
            conn.close()
        with pytest.raises(psycopg.OperationalError, match="requires TLS"):
            _connect(server.port, "disable")
        with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
            _connect(server.port, "require", password="wrong")
    finally:
        server.stop()


def test_cleartext_without_tls_is_a_configuration_error(users_file):
    with pytest.raises(ValueError, match="TLS"):
        Server(ADULT_CONFIG, users_file=users_file, link_factory=FakeLink, catalog=FakeLink.catalog,
               options=ServerOptions(auth_method="password"))


def test_user_command(tmp_path, capsys):
    config = tmp_path / "site.toml"
    config.write_text("")
    assert main(["user", "add", "dora", "--password", "pw-1", "--config", str(config)]) == 0
    path = tmp_path / "site.users.json"
    users = scram.load_users(path)
    assert scram.check_password("pw-1", users["dora"])
    assert main(["user", "list", "--config", str(config)]) == 0
    assert "dora" in capsys.readouterr().out
    assert main(["user", "remove", "dora", "--config", str(config)]) == 0
    assert main(["user", "remove", "dora", "--config", str(config)]) == 1
    assert scram.load_users(path) == {}


def test_dpsql_serve_command(tmp_path):
    """``dpsql serve`` end to end: a user added with ``dpsql user add`` logs in with psql."""
    import os
    import signal
    import sys

    if shutil.which("psql") is None:
        pytest.skip("psql not installed (apt-get install postgresql-client)")
    config = str(copy_adult_example(tmp_path))
    assert main(["user", "add", "erin", "--password", "pw-erin", "--config", config]) == 0
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.cli", "serve", "--config", config, "--port", "0",
                             "--no-catalog"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        import select
        ready, _, _ = select.select([proc.stdout], [], [], 90)
        assert ready, "dpsql serve printed no banner"
        banner = proc.stdout.readline()
        assert banner.startswith("dpsql: ready on 127.0.0.1:"), (
            banner + proc.stderr.read() if proc.poll() is not None else banner)
        port = banner.split("127.0.0.1:")[1].split()[0]
        env = dict(os.environ, PGPASSWORD="pw-erin", PGCONNECT_TIMEOUT="10", PGSSLMODE="disable")
        r = subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", port, "-U", "erin", "-d", "dpsql", "-At", "-c",
                            "SELECT current_user, current_database()"], capture_output=True, text=True, env=env,
                           timeout=60)
        assert r.returncode == 0 and r.stdout.strip() == "erin|dpsql", r.stderr
        # nothing measured on this fresh ledger: the engine's own error and hint come through
        r = subprocess.run(["psql", "-X", "-h", "127.0.0.1", "-p", port, "-U", "erin", "-d", "dpsql", "-c",
                            "SELECT sex, COUNT(*) FROM adult GROUP BY sex"], capture_output=True, text=True, env=env,
                           timeout=60)
        assert r.returncode != 0 and "nothing has been measured" in r.stderr and "HINT:" in r.stderr
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
