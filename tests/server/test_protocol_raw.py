"""Protocol conformance over raw sockets against a server with the deterministic fake link
(no shadow catalog): startup, negotiation, authentication, simple and extended query,
skip-until-Sync, paging, limits."""

import socket
import struct
import time

import pytest

from dpsql.server import codec
from server_fakes import FakeLink
from server_pgclient import RawClient, error_fields

from server_fakes import PASSWORD


@pytest.fixture
def client(fake_server):
    c = RawClient(fake_server.port)
    yield c
    c.close()


def login(client, user="alice", **kw):
    msgs = client.startup(user, PASSWORD, **kw)
    assert msgs[-1][0] == b"Z", error_fields(msgs)
    return msgs


def test_startup_reports_parameters_and_key(client):
    msgs = login(client)
    kinds = [k for k, _ in msgs]
    assert b"K" in kinds
    params = {}
    for kind, body in msgs:
        if kind == b"S":
            r = codec.BodyReader(body)
            name = r.cstring()
            params[name] = r.cstring()
    assert params["client_encoding"] == "UTF8"
    assert params["DateStyle"].startswith("ISO")
    assert params["standard_conforming_strings"] == "on"
    assert params["integer_datetimes"] == "on"
    assert "server_version" in params and "TimeZone" in params


def test_ssl_and_gssenc_refused_without_tls_then_plain_startup(client):
    client.send(struct.pack("!ii", 8, codec.SSL_REQUEST))
    assert client.recv_byte() == b"N"
    client.send(struct.pack("!ii", 8, codec.GSSENC_REQUEST))
    assert client.recv_byte() == b"N"
    login(client)



def test_protocol_minor_and_pq_options_get_negotiation(fake_server):
    c = RawClient(fake_server.port)
    params = ("user", "alice", "database", "dpsql", "_pq_.frob", "1")
    body = struct.pack("!i", (3 << 16) | 2) + b"".join(codec.cstr(x) for x in params) + b"\0"
    c.send(struct.pack("!i", len(body) + 4) + body)
    kind, msg = c.read()
    assert kind == b"v"
    r = codec.BodyReader(msg)
    assert r.int32() == 196608 and r.int32() == 1 and r.cstring() == "_pq_.frob"
    c.close()


def test_wrong_password_and_unknown_user_look_the_same(fake_server):
    for user in ("alice", "nobody"):
        c = RawClient(fake_server.port)
        msgs = c.startup(user, "wrong")
        fields = error_fields(msgs)
        assert fields["C"] == "28P01" and fields["S"] == "FATAL"
        assert fields["M"] == f'password authentication failed for user "{user}"'
        assert [k for k, _ in msgs].count(b"R") == 2  # SASL, SASLContinue: same flow for both
        c.close()


def test_unknown_database_refused(fake_server):
    c = RawClient(fake_server.port)
    fields = error_fields(c.startup("alice", PASSWORD, database="postgres"))
    assert fields["C"] == "3D000"
    c.close()


@pytest.mark.slow
def test_startup_timeout_closes_silent_sockets(fake_server):
    s = socket.create_connection(("127.0.0.1", fake_server.port), timeout=10)
    s.sendall(struct.pack("!i", 100))  # a length, then nothing
    data = b""
    while chunk := s.recv(4096):
        data += chunk
    assert codec.decode_fields(data[5:])["C"] == "08P01"
    s.close()


def test_simple_query_aggregate_and_refusal(client):
    login(client)
    client.send(codec.encode_query("SELECT sex, COUNT(*) FROM adult GROUP BY sex; SELECT * FROM adult; SELECT 1"))
    msgs = client.until(b"Z")
    kinds = [k for k, _ in msgs]
    assert kinds[0] == b"T"
    fields = codec.decode_row_description(msgs[0][1])
    assert [(f.name, f.type_oid) for f in fields] == [("sex", 25), ("count", 20)]
    assert kinds.count(b"D") == 2 and codec.decode_data_row(msgs[1][1])[0] == b"Female"
    err = error_fields(msgs)
    assert err["C"] == "42501" and err["H"].startswith("aggregate") and err["P"] == "8"
    assert kinds[-1] == b"Z" and kinds.count(b"C") == 1   # the batch stops at the first error


def test_session_commands_and_local_functions(client):
    login(client)
    client.send(codec.encode_query("SET application_name = 'probe'; SHOW application_name; "
                                   "SELECT pg_backend_pid(), current_user, current_database()"))
    msgs = client.until(b"Z")
    status = [codec.BodyReader(b).cstring() for k, b in msgs if k == b"S"]
    assert status == ["application_name"]
    rows = [codec.decode_data_row(b) for k, b in msgs if k == b"D"]
    assert rows[0] == [b"probe"]
    assert rows[1][1:] == [b"alice", b"dpsql"] and int(rows[1][0]) > 0


def test_transaction_status_and_aborted_block(client):
    login(client)
    client.send(codec.encode_query("BEGIN"))
    assert client.until()[-1] == (b"Z", b"T")
    client.send(codec.encode_query("SELECT * FROM nowhere"))
    msgs = client.until()
    assert error_fields(msgs)["C"] == "42P01" and msgs[-1] == (b"Z", b"E")
    client.send(codec.encode_query("SELECT sex, COUNT(*) FROM adult GROUP BY sex"))
    msgs = client.until()
    assert error_fields(msgs)["C"] == "25P02"
    client.send(codec.encode_query("ROLLBACK"))
    assert client.until()[-1] == (b"Z", b"I")


def test_extended_query_skip_until_sync_and_recovery(client):
    login(client)
    client.send(codec.encode_parse("", "SELECT * FROM adult") + codec.encode_bind("", "", [], [], [])
                + codec.encode_execute("") + codec.SYNC)
    msgs = client.until()
    assert [k for k, _ in msgs] == [b"1", b"2", b"E", b"Z"]  # refused by the engine at Execute
    client.send(codec.encode_parse("s", "SELECT sex, COUNT(*) FROM adult WHERE age > $1 GROUP BY sex", [23])
                + codec.encode_bind("", "s", [1], [struct.pack("!i", 30)], [1])
                + codec.encode_describe("P", "") + codec.encode_execute("") + codec.SYNC)
    msgs = client.until()
    assert [k for k, _ in msgs][:3] == [b"1", b"2", b"T"]
    fields = codec.decode_row_description(msgs[2][1])
    assert [f.format for f in fields] == [1, 1]
    row = codec.decode_data_row(msgs[3][1])
    assert row[0] == b"Female" and len(row[1]) == 8   # binary int8
    assert codec.BodyReader(msgs[-2][1]).cstring() == "SELECT 2"


def test_describe_never_executes(client):
    login(client)
    FakeLink.log.clear()
    sql = "SELECT race, COUNT(*) FROM adult WHERE age = $1 GROUP BY race"
    client.send(codec.encode_parse("d", sql, [20]) + codec.encode_describe("S", "d")
                + codec.encode_bind("p", "d", [], [b"40"], []) + codec.encode_describe("P", "p") + codec.SYNC)
    msgs = client.until()
    kinds = [k for k, _ in msgs]
    assert kinds == [b"1", b"t", b"T", b"2", b"T", b"Z"]
    assert codec.decode_parameter_description(msgs[1][1]) == (20,)
    assert not [e for e in FakeLink.log if e[0] == "execute"]


def test_max_rows_pages_one_release(client):
    login(client)
    FakeLink.log.clear()
    client.send(codec.encode_query("BEGIN"))
    client.until()
    client.send(codec.encode_parse("", "SELECT race, COUNT(*) FROM adult GROUP BY race")
                + codec.encode_bind("c", "", [], [], []) + codec.encode_execute("c", 2) + codec.SYNC)
    msgs = client.until()
    assert [k for k, _ in msgs] == [b"1", b"2", b"D", b"D", b"s", b"Z"]
    client.send(codec.encode_execute("c", 2) + codec.encode_execute("c", 0) + codec.SYNC)
    msgs = client.until()
    kinds = [k for k, _ in msgs]
    assert kinds[:3] == [b"D", b"D", b"s"] and kinds[-2:] == [b"C", b"Z"]
    assert len([e for e in FakeLink.log if e[0] == "execute"]) == 1


def test_statement_errors(client):
    login(client)
    client.send(codec.encode_parse("x", "SELECT current_user") + codec.SYNC)
    client.until()
    client.send(codec.encode_parse("x", "SELECT session_user") + codec.SYNC)
    assert error_fields(client.until())["C"] == "42P05"
    client.send(codec.encode_bind("", "missing", [], [], []) + codec.SYNC)
    assert error_fields(client.until())["C"] == "26000"
    client.send(codec.encode_parse("", "SELECT current_user; SELECT 2") + codec.SYNC)
    assert error_fields(client.until())["C"] == "42601"
    client.send(codec.encode_close("S", "never-made") + codec.SYNC)
    assert [k for k, _ in client.until()] == [b"3", b"Z"]
    client.send(codec.encode_query("DELETE FROM adult"))
    assert error_fields(client.until())["C"] == "25006"


def test_oversized_message_is_fatal(client):
    login(client)
    client.send(b"Q" + struct.pack("!i", (1 << 20) + 10) + b"x" * 100)
    msgs = client.until(b"E")
    fields = error_fields(msgs)
    assert fields["C"] == "08P01" and fields["S"] == "FATAL"
    assert client.read() is None


def test_empty_query_and_terminate(client):
    login(client)
    client.send(codec.encode_query(";"))
    assert [k for k, _ in client.until()] == [b"I", b"Z"]
    client.send(codec.TERMINATE)
    assert client.read() is None


def test_max_connections(fake_server):
    clients = []
    try:
        while True:
            c = RawClient(fake_server.port)
            clients.append(c)
            msgs = c.startup("bob", PASSWORD)
            if msgs[-1][0] != b"Z":
                assert error_fields(msgs)["C"] == "53300"
                break
            assert len(clients) <= 20
    finally:
        for c in clients:
            c.close()
    time.sleep(0.2)  # let the server reap the closed sockets before other tests connect


def test_cancel_request_with_wrong_secret_is_ignored(fake_server):
    c = RawClient(fake_server.port)
    msgs = c.startup("alice", PASSWORD)
    key = next(body for kind, body in msgs if kind == b"K")
    pid = struct.unpack("!i", key[:4])[0]
    other = RawClient(fake_server.port)
    other.send(codec.encode_cancel_request(pid, bytes(b ^ 0xFF for b in key[4:])))
    assert other.read() is None   # no reply; the connection is just closed
    other.close()
    c.send(codec.encode_query("SELECT sex, COUNT(*) FROM adult GROUP BY sex"))
    assert not error_fields(c.until())
    c.close()
