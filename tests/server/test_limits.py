"""Server limits in PostgreSQL's manner (issue 34, server items), each a bounded loopback test.

6. Slowloris before authentication: sockets sending one byte every 0.5-0.9 s cannot keep anyone
   from logging in (the whole handshake has ``auth_timeout``; bytes that complete no message are
   no progress, and such sockets give their place to newcomers: ``gate.py``).
9. Per-user connection limits: one analyst cannot take every connection slot (53300 for them,
   not for everyone else); ``max_user_connections`` defaults to half of ``max_connections``, and
   ``[server.users.NAME] connection_limit`` overrides it per user.
"""

from __future__ import annotations

import struct
import time

import pytest

from dpsql.errors import ConfigError
from dpsql.server import codec
from dpsql.server.config import load_server_config
from dpsql.server.gate import Gate
from dpsql.server.server import Server, ServerOptions, ServerThread

from server_fakes import ADULT_CONFIG, PASSWORD, FakeLink
from server_hostile import Slowloris
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


# -- 6. slowloris before authentication ----------------------------------------------------------

def test_gate_drops_the_connection_that_deserves_its_place_least():
    gate = Gate(3, grace=1.0)
    assert gate.admit("trickler", "10.0.0.9", 0.0) == (True, None)
    assert gate.admit("client", "10.0.0.1", 0.0) == (True, None)
    gate.pending["client"].progressed()                   # sent its startup packet
    gate.pending["client"].waiting(0.01)                  # the server answered; its move
    assert gate.admit("other", "10.0.0.2", 0.0) == (True, None)
    gate.pending["other"].progressed()                    # busy on the server's side: never taken
    # full: the socket that completed no message goes first, though others stalled as long
    assert gate.admit("n1", "10.0.0.3", 0.3) == (True, "trickler")
    # stalled past the grace beats everything (the client held still after its startup packet)
    assert gate.admit("n2", "10.0.0.4", 1.2) == (True, "client")
    # among equals, the peer address holding the most places gives one up
    gate = Gate(3, grace=1.0)
    for key, host in (("a1", "A"), ("a2", "A"), ("b1", "B")):
        gate.admit(key, host, 0.0)
    assert gate.admit("c1", "C", 0.1)[1] in ("a1", "a2")
    # a place busy on the server's side is never taken; a full gate of them closes the newcomer
    gate = Gate(1, grace=1.0)
    gate.admit("busy", "A", 0.0)
    gate.pending["busy"].progressed()
    assert gate.admit("late", "B", 9.0) == (False, None)


def _logins_during(server, attack, count=8):
    """``count`` logins one after the other while ``attack`` runs; their outcomes."""
    outcomes = []
    with attack:
        time.sleep(2.5)                                   # every attacking socket is open and trickling
        for _ in range(count):
            try:
                c, msgs = login(server.port, "alice")
                outcomes.append("ok" if msgs and msgs[-1][0] == b"Z" else error_fields(msgs) or "closed")
                c.close()
            except OSError as exc:
                outcomes.append(repr(exc))
    return outcomes


def test_slowloris_does_not_lock_out_logins(users_file):
    """The issue's attack on the default limits: ~170 sockets, one byte every 0.5-0.9 s each,
    reopened when dropped."""
    server = start(users_file)
    try:
        attack = Slowloris(server.port, sockets=170)
        assert _logins_during(server, attack) == ["ok"] * 8
        assert attack.bytes > 0
    finally:
        server.stop()


def test_slowloris_beyond_the_gate_gives_way_to_other_hosts(users_file):
    """More trickling sockets than places (170 > 32), from another address: they churn among
    themselves, and every login from elsewhere gets in."""
    server = start(users_file, max_unauthenticated=32)
    try:
        attack = Slowloris(server.port, sockets=170, source="127.0.0.2")
        assert _logins_during(server, attack) == ["ok"] * 8
        assert attack.dropped > 0                         # the gate was full: tricklers gave way
    finally:
        server.stop()


def test_negotiation_requests_are_not_endless_progress(users_file):
    server = start(users_file)
    try:
        c = RawClient(server.port)
        c.send(struct.pack("!ii", 8, codec.SSL_REQUEST))
        assert c.sock.recv(1) == b"N"
        c.send(struct.pack("!ii", 8, codec.SSL_REQUEST))
        fields = error_fields(c.until(b"E"))
        assert fields["C"] == "08P01" and "duplicate SSL" in fields["M"]
        c.close()
    finally:
        server.stop()
