"""Server limits in PostgreSQL's manner (issue 34, server items), each a bounded loopback test.

9. Per-user connection limits: one analyst cannot take every connection slot (53300 for them,
   not for everyone else); ``max_user_connections`` defaults to half of ``max_connections``, and
   ``[server.users.NAME] connection_limit`` overrides it per user.
"""

from __future__ import annotations

import time

import pytest

from dpsql.errors import ConfigError
from dpsql.server.config import load_server_config
from dpsql.server.server import Server, ServerOptions, ServerThread

from server_fakes import ADULT_CONFIG, PASSWORD, FakeLink
from server_pgclient import RawClient, error_fields


def start(users_file, **options):
    opts = ServerOptions(port=0, auth_failure_delay=0.05, shadow=False, **options)
    return ServerThread(Server(ADULT_CONFIG, users_file=users_file, link_factory=FakeLink, catalog=FakeLink.catalog,
                               options=opts)).start()


def login(port, user):
    """A raw client and the messages up to ReadyForQuery (or the FATAL error)."""
    c = RawClient(port, timeout=20)
    return c, c.startup(user, PASSWORD)


def wait_until(predicate, seconds=10.0):
    deadline = time.monotonic() + seconds
    while not predicate() and time.monotonic() < deadline:
        time.sleep(0.02)
    return predicate()


# -- 9. per-user connection limits ----------------------------------------------------------------

@pytest.mark.parametrize("options, alice_limit, bob_limit", [
    ({"max_connections": 6}, 3, 3),                                            # default: half of the slots
    ({"max_connections": 10, "max_user_connections": 2, "user_connection_limits": {"bob": 4}}, 2, 4),
])
def test_one_analyst_cannot_take_every_connection_slot(users_file, options, alice_limit, bob_limit):
    server = start(users_file, **options)
    clients = []
    try:
        for _ in range(alice_limit):
            c, msgs = login(server.port, "alice")
            clients.append(c)
            assert msgs[-1][0] == b"Z"
        c, msgs = login(server.port, "alice")           # one more than her limit
        clients.append(c)
        fields = error_fields(msgs)
        assert fields["C"] == "53300" and fields["M"] == 'too many connections for role "alice"'
        for _ in range(bob_limit):                       # everyone else still gets in
            c, msgs = login(server.port, "bob")
            clients.append(c)
            assert msgs[-1][0] == b"Z", error_fields(msgs)
        c, msgs = login(server.port, "bob")
        clients.append(c)
        assert error_fields(msgs)["C"] == "53300"
        clients.pop(0).close()                           # alice's slot comes back when she closes one
        assert wait_until(lambda: server.server._per_user.get("alice") == alice_limit - 1)
        c, msgs = login(server.port, "alice")
        clients.append(c)
        assert msgs[-1][0] == b"Z"
    finally:
        for c in clients:
            c.close()
        server.stop()


def test_connection_limits_in_the_config(tmp_path):
    config = tmp_path / "dpsql.toml"
    config.write_text("[server]\nmax_connections = 40\nmax_user_connections = 8\n"
                      "[server.users.alice]\nconnection_limit = 30\nerror_columns = \"ci95\"\n"
                      "[server.users.bob]\nconnection_limit = 2\n")
    cfg = load_server_config(config)
    assert cfg.max_user_connections == 8 and cfg.user_connection_limits == {"alice": 30, "bob": 2}
    assert cfg.user_settings == {"alice": {"dpsql.error_columns": "ci95"}}
    assert load_server_config({}).max_user_connections is None
    for bad in ("[server.users.alice]\nconnection_limit = 0\n", "[server.users.alice]\nconnection_limit = \"9\"\n",
                "[server]\nmax_user_connections = -1\n"):
        config.write_text(bad)
        with pytest.raises(ConfigError):
            load_server_config(config)
