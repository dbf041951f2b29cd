"""The query-phase state machine of the PostgreSQL protocol (simple and extended query).

Sans-IO: ``QueryProtocol.handle(kind, body)`` consumes one frontend message and appends
backend messages to ``out``; the asyncio driver (``server.py``) owns the socket and decides
when to flush.  Statement work is delegated to a dispatcher (``backend.Dispatcher`` or a
test double) with coroutines: ``split`` and ``route`` (parsing, which the dispatcher runs off
the event loop), ``prepare``, ``describe_statement``, ``describe_portal`` and ``execute``,
plus ``run_simple`` for the simple protocol.  A message longer than the statement limit
arrives as ``codec.Oversize`` and is answered 54000 without being parsed.

Protocol rules implemented here (PostgreSQL docs 55.2): after an error in the extended
protocol every message up to Sync is discarded; Sync ends the implicit transaction and
destroys portals outside a transaction block; a Query message destroys the unnamed
statement and portal; ``max_rows`` pages a portal with PortalSuspended.  For differential
privacy the portal keeps its materialised result, so paging never re-runs (and never
re-releases) a query: one release per Execute of a fresh portal.

Memory (issue 34 item 11: one connection held 3.4 GB in suspended portals): the bytes of
every prepared statement and portal (SQL, parameters, the materialised reply) count against
``max_memory``; a Parse, Bind or Execute that would exceed it is refused with 53200 and what
it added is dropped (a refused Execute's query was answered: repeating it costs no budget,
the engine caches its answer).
"""

from __future__ import annotations

from dpsql.server import codec
from dpsql.server.results import Held, Outcome, Portal, Prepared, QueryError, out_of_memory

_TX_END = ("COMMIT", "END", "ROLLBACK", "ABORT")


class FatalError(Exception):
    """Terminates the connection after sending the ErrorResponse (e.g. 08P01)."""

    def __init__(self, sqlstate: str, message: str) -> None:
        super().__init__(message)
        self.sqlstate = sqlstate
        self.message = message


class QueryProtocol:
    def __init__(self, dispatcher, max_memory: int | None = None) -> None:
        self.dispatcher = dispatcher
        self.max_memory = max_memory
        self.out: list[bytes] = []
        self.status = "I"                   # I idle, T in a transaction block, E failed block
        self.statements: Held = Held()      # name -> Prepared
        self.portals: Held = Held()         # name -> Portal
        self._skipping = False

    # -- helpers -------------------------------------------------------------------------------
    def take(self) -> bytes:
        data = b"".join(self.out)
        self.out.clear()
        return data

    def ready(self) -> None:
        self.out.append(codec.encode_ready(self.status))

    def _fail(self, err: QueryError) -> None:
        self.out.append(err.encode())
        if self.status == "T":
            self.status = "E"

    def _check_aborted(self, route) -> None:
        if self.status == "E" and not (route.kind == "session" and route.words
                                       and route.words[0] in _TX_END):
            raise QueryError("25P02", "current transaction is aborted, commands ignored until end of "
                             "transaction block", hint="send ROLLBACK")

    @property
    def held(self) -> int:
        """Bytes held by this connection's prepared statements and portals."""
        return self.statements.total + self.portals.total

    def _within_memory(self, table: Held, name: str) -> None:
        """Refuse (53200) and drop ``table[name]`` when it took the connection past its limit."""
        if self.max_memory is not None and self.held > self.max_memory:
            needed = self.held
            table.pop(name, None)
            raise out_of_memory(needed, self.max_memory, "its prepared statements and portals")

    def _hold(self, name: str, portal: Portal) -> None:
        """Account a portal's materialised reply."""
        assert portal.outcome is not None   # called once the portal has run
        size = sum(len(p) for p in portal.params if p is not None) + portal.outcome.nbytes
        if self.portals.get(name) is portal and size != portal.nbytes:
            self.portals.resize(name, size)
            self._within_memory(self.portals, name)

    def _apply(self, outcome: Outcome) -> None:
        self.out.extend(outcome.before)
        if outcome.status is not None:
            self.status = outcome.status

    # -- dispatch -----------------------------------------------------------------------------
    async def handle(self, kind: bytes, body: bytes) -> bool:
        """Process one message; False when the client sent Terminate."""
        if kind == b"X":
            return False
        if isinstance(body, codec.Oversize):
            return self._oversize(kind, body)
        if kind == b"Q":
            await self._query(codec.decode_query(body))
            return True
        if kind == b"S":
            self._skipping = False
            if self.status == "I":
                self.portals.clear()
            self.ready()
            return True
        if kind == b"H":
            return True
        handler = {b"P": self._parse, b"B": self._bind, b"D": self._describe,
                   b"E": self._execute, b"C": self._close}.get(kind)
        if handler is None:
            raise FatalError("08P01", f"invalid frontend message type {kind!r}")
        if self._skipping:
            return True
        try:
            await handler(body)
        except QueryError as err:
            self._fail(err)
            self._skipping = True
        return True

    def _oversize(self, kind: bytes, body: codec.Oversize) -> bool:
        if kind not in (b"Q", b"P", b"B", b"D", b"E", b"C"):
            raise FatalError("08P01", f"invalid {kind!r} message of {body.size} bytes")
        err = QueryError("54000", f"statement of {body.size} bytes exceeds the limit of {body.limit} bytes",
                         hint="send a shorter statement; the operator sets the limit with [server] "
                              "max_statement_bytes")
        if kind == b"Q":
            self._fail(err)
            self.ready()
        elif not self._skipping:
            self._fail(err)
            self._skipping = True
        return True

    # -- simple query -------------------------------------------------------------------------
    async def _query(self, sql: str) -> None:
        self.statements.pop("", None)
        self.portals.pop("", None)
        try:
            statements = await self.dispatcher.split(sql)
        except QueryError as err:
            self._fail(err)
            self.ready()
            return
        if not statements:
            self.out.append(codec.EMPTY_QUERY)
            self.ready()
            return
        for text in statements:
            try:
                route = await self.dispatcher.route(text)
                self._check_aborted(route)
                self.dispatcher.tx_status = self.status
                outcome = await self.dispatcher.run_simple(text, route)
            except QueryError as err:
                self._fail(err)
                break
            self._apply(outcome)
            if outcome.empty:
                self.out.append(codec.EMPTY_QUERY)
                continue
            if outcome.description is not None:
                self.out.append(outcome.description)
            self.out.extend(outcome.rows)
            self.out.append(codec.encode_command_complete(self._tag(outcome, len(outcome.rows))))
        self.ready()

    @staticmethod
    def _tag(outcome: Outcome, count: int) -> str:
        if outcome.tag in ("SELECT", ""):
            return f"SELECT {count}"
        return outcome.tag

    # -- extended query -----------------------------------------------------------------------
    async def _parse(self, body: bytes) -> None:
        msg = codec.decode_parse(body)
        if msg.name and msg.name in self.statements:
            raise QueryError("42P05", f'prepared statement "{msg.name}" already exists')
        if len(await self.dispatcher.split(msg.query)) > 1:
            raise QueryError("42601", "cannot insert multiple commands into a prepared statement")
        route = await self.dispatcher.route(msg.query)
        self._check_aborted(route)
        prepared = await self.dispatcher.prepare(msg.query, route, msg.param_oids)
        self.statements[msg.name] = prepared
        self._within_memory(self.statements, msg.name)
        self.out.append(codec.PARSE_COMPLETE)

    def _statement(self, name: str) -> Prepared:
        try:
            return self.statements[name]
        except KeyError:
            raise QueryError("26000", f'prepared statement "{name}" does not exist') from None

    def _portal(self, name: str) -> Portal:
        try:
            return self.portals[name]
        except KeyError:
            raise QueryError("34000", f'portal "{name}" does not exist') from None

    async def _bind(self, body: bytes) -> None:
        msg = codec.decode_bind(body)
        stmt = self._statement(msg.statement)
        self._check_aborted(stmt.route)
        if msg.portal and msg.portal in self.portals:
            raise QueryError("42P03", f'cursor "{msg.portal}" already exists')
        expected = len(stmt.param_oids)
        if len(msg.params) != expected:
            raise QueryError("08P01", f"bind message supplies {len(msg.params)} parameters, but prepared "
                             f"statement \"{msg.statement}\" requires {expected}")
        if len(msg.param_formats) not in (0, 1, len(msg.params)):
            raise QueryError("08P01", "bind message has an invalid number of parameter formats")
        self.portals[msg.portal] = Portal(stmt, msg.params, msg.param_formats, msg.result_formats)
        self._within_memory(self.portals, msg.portal)
        self.out.append(codec.BIND_COMPLETE)

    async def _describe(self, body: bytes) -> None:
        kind, name = codec.decode_target(body)
        if kind == "S":
            stmt = self._statement(name)
            if not stmt.described:
                await self.dispatcher.describe_statement(stmt)
            self.out.append(codec.encode_parameter_description(stmt.param_oids))
            self.out.append(stmt.description if stmt.description is not None else codec.NO_DATA)
            return
        portal = self._portal(name)
        self.dispatcher.tx_status = self.status
        description = await self.dispatcher.describe_portal(portal)
        if portal.outcome is not None:
            self._hold(name, portal)
        self.out.append(description if description is not None else codec.NO_DATA)

    async def _execute(self, body: bytes) -> None:
        name, max_rows = codec.decode_execute(body)
        portal = self._portal(name)
        self._check_aborted(portal.statement.route)
        if portal.outcome is None:
            self.dispatcher.tx_status = self.status
            portal.outcome = await self.dispatcher.execute(portal)
            self._apply(portal.outcome)
            self._hold(name, portal)
        outcome = portal.outcome
        if outcome.empty:
            self.out.append(codec.EMPTY_QUERY)
            return
        remaining = outcome.rows[portal.sent:]
        if max_rows > 0 and len(remaining) > max_rows:
            self.out.extend(remaining[:max_rows])
            portal.sent += max_rows
            self.out.append(codec.PORTAL_SUSPENDED)
            return
        self.out.extend(remaining)
        portal.sent += len(remaining)
        self.out.append(codec.encode_command_complete(self._tag(outcome, len(remaining))))

    async def _close(self, body: bytes) -> None:
        kind, name = codec.decode_target(body)
        if kind == "S":
            stmt = self.statements.pop(name, None)
            if stmt is not None:
                for key in [k for k, p in self.portals.items() if p.statement is stmt]:
                    del self.portals[key]
        else:
            self.portals.pop(name, None)
        self.out.append(codec.CLOSE_COMPLETE)
