"""The query-phase state machine without sockets: messages in, backend bytes out."""

import asyncio

from dpsql.server import codec
from dpsql.server.protocol import QueryProtocol
from dpsql.server.results import Outcome, Prepared, QueryError
from dpsql.server.router import Route
from dpsql.sql.split import split_statements


class ScriptedDispatcher:
    """Answers every statement with one text row naming it; 'bad' statements fail."""

    tx_status = "I"

    def __init__(self):
        self.executed = []

    async def split(self, sql):
        return split_statements(sql)

    async def route(self, sql):
        return Route("engine")

    async def prepare(self, sql, route, oids):
        return Prepared(sql, route, tuple(oids))

    async def describe_statement(self, stmt):
        stmt.description = codec.encode_row_description([codec.Field("v", 25)])
        stmt.described = True

    async def describe_portal(self, portal):
        return codec.encode_row_description([codec.Field("v", 25)])

    async def execute(self, portal):
        return await self.run_simple(portal.statement.sql, None)

    async def run_simple(self, sql, route, formats=()):
        self.executed.append(sql)
        if "bad" in sql:
            raise QueryError("42601", "bad statement", position=3)
        return Outcome(codec.encode_row_description([codec.Field("v", 25)]),
                       [codec.encode_data_row([sql.encode()])], "SELECT")


def feed(proto, *messages):
    async def go():
        for m in messages:
            await proto.handle(m[:1], m[5:])
    asyncio.run(go())
    out = codec.FrameReader()
    out.feed(proto.take())
    msgs = []
    while (m := out.next_message()) is not None:
        msgs.append(m)
    return msgs


def test_simple_query_batch_stops_at_first_error():
    d = ScriptedDispatcher()
    msgs = feed(QueryProtocol(d), codec.encode_query("SELECT a; bad; SELECT c"))
    assert [k for k, _ in msgs] == [b"T", b"D", b"C", b"E", b"Z"]
    assert d.executed == ["SELECT a", "bad"]
    assert codec.decode_fields(msgs[3][1])["P"] == "3"


def test_error_skips_until_sync_then_recovers():
    d = ScriptedDispatcher()
    proto = QueryProtocol(d)
    msgs = feed(proto, codec.encode_parse("", "bad"), codec.encode_bind("", "", [], [], []), codec.encode_execute(""),
                codec.encode_parse("", "SELECT skipped"), codec.encode_execute(""), codec.SYNC,
                codec.encode_parse("", "SELECT ok"), codec.encode_bind("", "", [], [], []), codec.encode_execute(""),
                codec.SYNC)
    assert [k for k, _ in msgs] == [b"1", b"2", b"E", b"Z", b"1", b"2", b"D", b"C", b"Z"]
    assert d.executed == ["bad", "SELECT ok"]


def test_portal_is_materialised_once():
    d = ScriptedDispatcher()
    proto = QueryProtocol(d)
    msgs = feed(proto, codec.encode_parse("", "SELECT once"), codec.encode_bind("p", "", [], [], []),
                codec.encode_describe("P", "p"), codec.encode_execute("p"), codec.encode_execute("p"), codec.SYNC)
    assert d.executed == ["SELECT once"]
    assert [k for k, _ in msgs] == [b"1", b"2", b"T", b"D", b"C", b"C", b"Z"]


def test_failed_login_delay_escalates_per_address(users_file):
    from dpsql.server.server import Server, ServerOptions
    from server_fakes import ADULT_CONFIG, FakeLink

    server = Server(ADULT_CONFIG, users_file=users_file, link_factory=FakeLink, catalog=FakeLink.catalog,
                    options=ServerOptions(auth_failure_delay=0.1))

    class Peer:
        def __init__(self, host):
            self.host = host

        def get_extra_info(self, key):
            return (self.host, 5432)

    async def delays():
        return ([server._failure_delay(Peer("10.0.0.1")) for _ in range(8)], server._failure_delay(Peer("10.0.0.2")))
    try:
        first, other = asyncio.run(delays())
    finally:
        server.executor.shutdown()
    assert first[:4] == [0.1, 0.2, 0.4, 0.8] and first[-1] == 5.0
    assert other == 0.1
