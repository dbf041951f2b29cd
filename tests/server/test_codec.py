"""Codec round-trips and framing limits (no sockets)."""

import struct

import pytest

from dpsql.server import codec


def test_startup_roundtrip_and_probes():
    packet = codec.encode_startup({"user": "alice", "database": "dpsql", "application_name": "psql"})
    frames = codec.FrameReader()
    frames.feed(packet[:3])
    assert frames.next_startup() is None
    frames.feed(packet[3:])
    decoded = codec.decode_startup(frames.next_startup())
    assert decoded == codec.Startup(3, 0, {"user": "alice", "database": "dpsql", "application_name": "psql"})
    assert codec.decode_startup(struct.pack("!i", codec.SSL_REQUEST)) == "ssl"
    assert codec.decode_startup(struct.pack("!i", codec.GSSENC_REQUEST)) == "gssenc"
    cancel = codec.encode_cancel_request(1234, b"\x01\x02\x03\x04")
    assert codec.decode_startup(cancel[4:]) == codec.CancelKey(1234, b"\x01\x02\x03\x04")


def test_startup_length_limits():
    frames = codec.FrameReader()
    frames.feed(struct.pack("!i", 4))
    with pytest.raises(codec.ProtocolViolation):
        frames.next_startup()
    frames = codec.FrameReader()
    frames.feed(struct.pack("!i", codec.MAX_STARTUP_PACKET + 1))
    with pytest.raises(codec.ProtocolViolation):
        frames.next_startup()


def test_message_size_limit_is_checked_from_the_header():
    frames = codec.FrameReader(max_message=100)
    frames.feed(b"Q" + struct.pack("!i", 101))
    with pytest.raises(codec.ProtocolViolation, match="exceeds"):
        frames.next_message()


def test_extended_messages_roundtrip():
    frames = codec.FrameReader()
    frames.feed(codec.encode_parse("s1", "SELECT $1", [23])
                + codec.encode_bind("p", "s1", [1], [b"\x00\x00\x00\x07", None], [1, 0])
                + codec.encode_describe("P", "p") + codec.encode_execute("p", 5) + codec.encode_close("S", "s1")
                + codec.SYNC)
    kind, body = frames.next_message()
    assert kind == b"P" and codec.decode_parse(body) == codec.Parse("s1", "SELECT $1", (23,))
    kind, body = frames.next_message()
    assert codec.decode_bind(body) == codec.Bind("p", "s1", (1,), (b"\x00\x00\x00\x07", None), (1, 0))
    assert codec.decode_target(frames.next_message()[1]) == ("P", "p")
    assert codec.decode_execute(frames.next_message()[1]) == ("p", 5)
    assert codec.decode_target(frames.next_message()[1]) == ("S", "s1")
    assert frames.next_message() == (b"S", b"")
    assert frames.next_message() is None


def test_malformed_bodies_are_protocol_violations():
    with pytest.raises(codec.ProtocolViolation):
        codec.decode_parse(b"name-without-terminator")
    with pytest.raises(codec.ProtocolViolation):
        codec.decode_bind(codec.cstr("") + codec.cstr("") + struct.pack("!h", 1) + struct.pack("!h", 7)
                          + struct.pack("!h", 0) + struct.pack("!h", 0))
    with pytest.raises(codec.ProtocolViolation):
        codec.decode_execute(codec.cstr("p") + struct.pack("!i", 0) + b"extra")


def test_backend_messages_roundtrip():
    fields = [codec.Field("sex", 25), codec.Field("count", 20, 8, -1, 1)]
    kind_len_body = codec.encode_row_description(fields)
    assert kind_len_body[:1] == b"T"
    assert codec.decode_row_description(kind_len_body[5:]) == fields
    row = codec.encode_data_row([b"Male", None])
    assert codec.decode_data_row(row[5:]) == [b"Male", None]
    err = codec.encode_error("42501", "no", hint="aggregate", position=8)
    assert codec.decode_fields(err[5:]) == {"S": "ERROR", "V": "ERROR", "C": "42501", "M": "no", "H": "aggregate",
                                            "P": "8"}
    assert codec.decode_parameter_description(codec.encode_parameter_description([0, 23])[5:]) == (0, 23)
    nego = codec.encode_negotiate_version(0, ["_pq_.x"])
    assert nego[5:9] == struct.pack("!i", 196608)


@pytest.mark.parametrize("extra", [{}, {"hint": "aggregate"}, {"position": 8}, {"detail": "why"},
                                   {"hint": "h", "position": 3, "detail": "d"}, {"position": 0, "hint": ""}])
def test_error_fields_are_what_goes_on_the_wire_and_what_a_query_error_carries(extra):
    # one set of ErrorResponse fields: the encoder's and QueryError's (server.results)
    from dpsql.server.results import QueryError

    fields = codec.error_fields("42601", "bad statement", **extra)
    want = {"S": "ERROR", "V": "ERROR", "C": "42601", "M": "bad statement"}
    want.update({code: str(extra[key]) for key, code in (("detail", "D"), ("hint", "H"), ("position", "P"))
                 if extra.get(key)})
    assert fields == want
    assert codec.decode_fields(codec.encode_error("42601", "bad statement", **extra)[5:]) == want
    assert QueryError("42601", "bad statement", **extra).fields == want
    assert codec.error_fields("08P01", "x", severity="FATAL")["V"] == "FATAL"
