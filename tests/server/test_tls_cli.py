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

from conftest import PASSWORD
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
