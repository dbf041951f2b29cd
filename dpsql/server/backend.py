"""Statement dispatch for one client connection: engine, shadow catalog, or local.

``Dispatcher`` implements the coroutines ``protocol.QueryProtocol`` calls.  It keeps the
privacy rules of the wire protocol:

* Describe never runs a private query: row types come from compiling the statement
  (``dpsql.sql.compile``), which reads public metadata only; schema probes (``LIMIT 0``,
  ``WHERE false``) go to the engine, which answers them with no release.
* One release per Execute: the outcome is materialised in the portal (``protocol.py``).
* Identical queries get identical answers: the engine session caches them.
* The budget principal is the authenticated user (the ``EngineLink`` is opened for them).
* Engine errors are already scrubbed; their SQLSTATE, message, hint and position pass
  through unchanged.  Anything unexpected becomes XX000 naming only the exception type.

Fairness: nothing CPU-bound runs on the event loop.  Splitting and routing (sqlglot) run on
the server's parse pool, compiling and answering on its engine pool, one at a time per
connection (a cancelled call is awaited before the next one starts, because a session is
not shared between threads).  Each statement holds one of its user's statement slots
(``limiter``: ``max_user_statements``) while it works, so one analyst cannot take every
thread.  A cancel answers 57014 at once, also while waiting for a slot; an engine call
finishes in the background (the engine has no point at which to stop it safely), and any
release it made is cached, so repeating the query costs nothing.  Until that call ends it
keeps its user's slot (issue 34 item 7: cancelling freed the slot while the work ran on, so
one analyst could fill every engine thread by cancelling and asking again).

With error columns on (``dpsql.error_columns``), engine answers also carry a boolean
``inferred`` column: true where a value came from the model without a supporting
measurement (its error column is then NULL); with ``bounds``, c_lower/c_upper carry an
inferred value's range (``dpsql.engine.results.error_column_names``); a statement with an
aggregate over wide bins also carries a boolean ``binned`` column: true where a value's
interval holds a binning bound (``Result.bias``), not the noise alone.  Every answered or refused statement goes to
the query log when one is configured (``querylog.py``).  An answer's public remarks
(``Result.notes``: the rows a people view's bound drops, as released with noise) go before
its rows as NOTICEs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from dpsql import errors
from dpsql.display import bounded_columns, rounded_rows
from dpsql.server import codec, pgtypes, router
from dpsql.server.gucs import Settings, local_values, parse_command, text_description
from dpsql.server.results import Outcome, Portal, Prepared, QueryError, out_of_memory
from dpsql.server.shadow import ShadowError, ShadowReplyTooLarge, ShadowUnavailable
from dpsql.sql.split import split_statements

INFERRED = "inferred"
BINNED = "binned"

log = logging.getLogger("dpsql.server")


class DpsqlLink:
    """The engine side of one client connection: a ``dpsql`` Connection for its user."""

    def __init__(self, config, user: str, overrides: dict | None = None) -> None:
        import dpsql
        self.connection = dpsql.connect(config, user=user, **(overrides or {}))
        # an analyst: hints say what to ask the operator for, not commands they cannot run
        self.connection.session.role = "analyst"

    @property
    def catalog(self) -> dict:
        return self.connection.session.engine.catalog

    def compile(self, sql: str, params):
        """Compile for Describe: output columns as Execute will return them."""
        # the session's compile: a people schema's ad hoc flag gets its table first
        compiled = self.connection.session.compile(sql, params)
        mode = self.connection.session.settings.get("dpsql.error_columns", "off")
        if mode == "off" or compiled.is_explain:
            return compiled
        # the session appends one error column per noisy value column (results.with_error_columns)
        from dpsql.engine.results import error_column_names
        values = [c.name for c in compiled.columns if c.is_aggregate]
        extra = [(name, "double") for name in error_column_names(values, mode)]
        extra.append((INFERRED, "boolean"))
        if compiled.may_be_binned():
            extra.append((BINNED, "boolean"))
        return _Described([(c.name, c.type) for c in compiled.columns] + extra, compiled.is_schema_probe)

    def execute(self, sql: str, params):
        return self.connection.session.execute(sql, params)

    def error_mode(self) -> str:
        return self.connection.session.settings.get("dpsql.error_columns", "off")

    def close(self) -> None:
        self.connection.close()


class _Described:
    def __init__(self, columns, is_schema_probe) -> None:
        self.columns = columns
        self.is_schema_probe = is_schema_probe


def _column(col) -> tuple[str, str]:
    if isinstance(col, tuple):
        return col[0], col[1]
    return col.name, col.type


def _format(formats, i: int) -> int:
    if not formats:
        return 0
    return formats[0] if len(formats) == 1 else formats[i]


def _row_description(columns, formats) -> bytes:
    """RowDescription for ``(name, oid)`` pairs, each in its requested result format."""
    fields = [codec.Field(name, oid, pgtypes.type_size(oid), -1, _format(formats, i))
              for i, (name, oid) in enumerate(columns)]
    return codec.encode_row_description(fields)


def _data_rows(rows, oids, formats, limit: int | None = None) -> list[bytes]:
    """DataRow messages: value j of each row encoded as ``oids[j]`` in its result format; 53200
    once they pass ``limit`` bytes (a reply is built whole before it is sent)."""
    out, size = [], 0
    for row in rows:
        out.append(codec.encode_data_row([pgtypes.encode_value(v, oids[i], _format(formats, i))
                                          for i, v in enumerate(row)]))
        size += len(out[-1])
        if limit is not None and size > limit:
            raise out_of_memory(size, limit, "this reply")
    return out


def _shadow_outcome(res) -> Outcome:
    """A catalog (shadow PostgreSQL) reply, passed through as it came."""
    if res.empty:
        return Outcome(empty=True)
    return Outcome(description=res.description, rows=res.rows, tag=res.tag)


def _notices(result) -> list[bytes]:
    """NoticeResponses for the answer's public remarks (``Result.notes``: a people view's
    truncation figure as released with noise, beside the error columns; never a count in the
    clear), sent before its rows as PostgreSQL sends a NOTICE (psql prints them)."""
    return [codec.encode_notice_fields(b"N", {"S": "NOTICE", "V": "NOTICE", "C": "00000", "M": note})
            for note in getattr(result, "notes", ()) or ()]


def from_engine_error(exc: errors.Error, *, keep_position: bool = True) -> QueryError:
    return QueryError(exc.sqlstate, exc.message, hint=exc.hint, detail=exc.detail,
                      position=exc.position if keep_position else None)


class Dispatcher:
    def __init__(self, link, shadow, settings: Settings, *, pid: int, database: str, executor,
                 dpsql_version: str = "", signal=None, parse_executor=None, limiter=None, parse_limiter=None,
                 query_log=None, max_reply: int | None = None) -> None:
        self.link = link
        self.shadow = shadow
        self.settings = settings
        self.pid = pid
        self.database = database
        self.executor = executor
        self.parse_executor = parse_executor or executor
        self.limiter = limiter          # the user's statement slots (asyncio.Semaphore) or None
        self.parse_limiter = parse_limiter   # the user's share of the parse pool (asyncio.Semaphore) or None
        self.query_log = query_log
        self.max_reply = max_reply      # bytes of one reply (engine rows or a catalog reply); 53200 beyond
        self.dpsql_version = dpsql_version
        self.signal = signal            # cancels another session of the same user by pid
        # statements naming private or public tables go to the engine (public ones are answered
        # there exactly, and joined with the private table on declared keys)
        self._tables = tuple(link.catalog) + tuple(getattr(link.catalog, "public", {}))
        self._pending: asyncio.Future | None = None
        self._cancel = asyncio.Event()
        self._running: Any = None
        self._held = 0
        self._orphan: asyncio.Future | None = None    # a cancelled engine call still running
        self._cost = 0.0
        self.tx_status = "I"   # kept current by the protocol; BEGIN/COMMIT depend on it
        self._keep_position = True

    # -- statement slots ----------------------------------------------------------------------
    async def _until_cancelled(self, awaitable):
        """Await ``awaitable`` unless this connection's statement is cancelled first (57014)."""
        fut = asyncio.ensure_future(awaitable)
        waiter = asyncio.ensure_future(self._cancel.wait())
        try:
            await asyncio.wait([fut, waiter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
        if fut.done():
            return fut.result()
        return fut

    @contextlib.asynccontextmanager
    async def _slot(self):
        """One of the user's statement slots for the duration of a statement (re-entrant)."""
        if self._held == 0:
            self._cancel.clear()
        if self.limiter is None or self._held:
            self._held += 1
            try:
                yield
            finally:
                self._held -= 1
            return
        self._running = "queued"
        try:
            pending = await self._until_cancelled(self.limiter.acquire())
        finally:
            self._running = None
        if isinstance(pending, asyncio.Future):   # cancelled while waiting
            pending.cancel()
            pending.add_done_callback(lambda f: None if f.cancelled() else self.limiter.release())
            raise QueryError("57014", "canceling statement due to user request")
        self._held += 1
        try:
            yield
        finally:
            self._held -= 1
            orphan, self._orphan = self._orphan, None
            if orphan is not None and not orphan.done():
                # the statement was cancelled but its engine call runs on: the slot is its until then
                orphan.add_done_callback(lambda f: self.limiter.release())
            else:
                self.limiter.release()

    # -- routing (off the event loop: sqlglot costs ~40 µs per byte) ---------------------------
    async def _parse_call(self, fn, *args):
        async with self._slot():
            loop = asyncio.get_running_loop()
            if self.parse_limiter is None:
                return await loop.run_in_executor(self.parse_executor, fn, *args)
            # a user's parses take at most their share of the parse pool (issue 34 item 10: two
            # statements near 256 KiB took both threads for ~10 s, and every other analyst waited)
            async with self.parse_limiter:
                return await loop.run_in_executor(self.parse_executor, fn, *args)

    async def split(self, sql: str) -> list[str]:
        return await self._parse_call(split_statements, sql)

    async def route(self, sql: str):
        return await self._parse_call(router.route, sql, self._tables)

    # -- engine calls -------------------------------------------------------------------------
    async def _engine(self, fn, *args):
        async with self._slot():
            return await self._engine_call(fn, *args)

    async def _engine_call(self, fn, *args):
        if self._pending is not None and not self._pending.done():
            await asyncio.wait([self._pending])
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.executor, fn, *args)
        self._pending = fut
        self._running = "engine"
        waiter = asyncio.ensure_future(self._cancel.wait())
        try:
            await asyncio.wait([fut, waiter], return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            self._running = None
        if not fut.done():
            # the abandoned call's outcome is dropped; fetching its exception keeps asyncio from
            # logging it as "never retrieved"
            fut.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._orphan = fut
            raise QueryError("57014", "canceling statement due to user request")
        try:
            return fut.result()
        except errors.Error as exc:
            raise from_engine_error(exc, keep_position=self._keep_position) from None
        except Exception as exc:  # never echo internals: they could carry values
            log.exception("engine failure")
            raise QueryError("XX000", f"internal error ({type(exc).__name__})") from None

    async def cancel(self) -> None:
        """Cancel what this connection is running now (called from the cancel connection)."""
        running = self._running
        if running in ("engine", "queued"):
            self._cancel.set()
        elif running is not None and self.shadow is not None:
            await self.shadow.cancel(running)

    # -- shadow calls -------------------------------------------------------------------------
    def _need_shadow(self) -> None:
        if self.shadow is None:
            raise QueryError("0A000", "catalog queries are not available: the schema-only catalog "
                             "(PostgreSQL) is not running", hint="start `dpsql serve` with PostgreSQL installed")

    async def _shadow_call(self, method: str, *args):
        self._need_shadow()
        async with self._slot():
            self._running = "queued"
            try:
                client = await self._until_cancelled(self.shadow.acquire(self.settings.user))
            except ShadowError as exc:
                raise QueryError.relayed(exc.fields) from None
            except (ShadowUnavailable, OSError) as exc:
                raise QueryError("58000", f"catalog backend unavailable: {exc}") from None
            finally:
                self._running = None
            if isinstance(client, asyncio.Future):   # cancelled while waiting for a connection
                client.add_done_callback(lambda f: f.cancelled() or f.exception() or self.shadow.release(f.result()))
                client.cancel()
                raise QueryError("57014", "canceling statement due to user request")
            self._running = client
            try:
                if method == "execute":
                    return await client.execute(*args, max_bytes=self.max_reply)
                return await getattr(client, method)(*args)
            except ShadowError as exc:
                raise QueryError.relayed(exc.fields) from None
            except ShadowReplyTooLarge as exc:     # the client is broken: the pool closes it
                raise out_of_memory(exc.size, exc.limit, "this catalog reply") from None
            except (ShadowUnavailable, OSError) as exc:
                client.broken = True
                raise QueryError("58000", f"catalog backend unavailable: {exc}") from None
            finally:
                self._running = None
                self.shadow.release(client)

    # -- statements ---------------------------------------------------------------------------
    async def _catalog_sql(self, route, sql: str) -> str:
        """What the shadow runs for a catalog statement: the client's text, or for one reading
        ``dpsql_budget`` the statement with this connection's budget rows in its place, read
        now (each Execute sees the ledger as it is then)."""
        if not route.budget:
            return sql
        self._need_shadow()
        rows = await self._engine(self._budget_rows)
        return await self._parse_call(router.budget_sql, route.tree, rows)

    def _budget_rows(self) -> list[tuple]:
        """On an engine thread: ``SHOW dpsql.budget_remaining`` as numbers (rounded as ``dpsql
        budget`` prints them: remainders down, costs up; ledger amounts are public metadata)."""
        from dpsql.engine.session import BUDGET_SETTING
        rows = self.link.execute(f"SHOW {BUDGET_SETTING}", None).rows
        if not rows:
            raise QueryError("55000", "the budget is not available on this connection")
        return [(name, *(None if v is None else float(v) for v in numbers)) for name, *numbers in rows]

    def _engine_sql(self, route, sql: str, params: tuple) -> tuple[str, list | None]:
        """SQL and parameters for the compiler, unchanged: it binds ``$n`` by number (issue 21:
        rewriting to ``?`` relied on the AST walk order, and the compiler now binds ``?`` in
        text order; keeping the client's text also keeps error positions)."""
        return sql, list(params) if params else None

    @staticmethod
    def _param_count(route) -> int:
        if route.tree is None:
            return 0
        from dpsql.sql.syntax import exp
        numbers = [int(n.this.name) for n in route.tree.find_all(exp.Parameter)
                   if getattr(n.this, "name", "").isdigit()]
        return max(numbers, default=0)

    async def prepare(self, sql: str, route, param_oids) -> Prepared:
        if route.kind == "error":
            raise QueryError(route.sqlstate, route.message, hint=route.hint)
        if route.kind == "catalog":
            oids, description = await self._shadow_call("describe", await self._catalog_sql(route, sql),
                                                        tuple(param_oids))
            return Prepared(sql, route, oids, description, described=True)
        count = max(len(param_oids), await self._parse_call(self._param_count, route) if route.tree is not None else 0)
        oids = tuple(param_oids) + (0,) * (count - len(param_oids))
        if route.kind == "engine":
            oids = tuple(o if o else pgtypes.TEXT for o in oids)
        return Prepared(sql, route, oids)

    async def describe_statement(self, stmt: Prepared) -> None:
        route = stmt.route
        if route.kind == "engine":
            nulls = (None,) * len(stmt.param_oids)
            compiled = await self._engine(self._compile, route, stmt.sql, nulls)
            stmt.description = self._engine_description(compiled.columns, ())
        elif route.kind == "session":
            cmd = parse_command(route)
            show = cmd.kind == "show" and not cmd.name.startswith("dpsql.")
            stmt.description = text_description([cmd.name]) if show else None
        elif route.kind == "local":
            stmt.description = self._local_description(route, ())
        stmt.described = True

    async def describe_portal(self, portal: Portal) -> bytes | None:
        if portal.outcome is not None:
            return portal.outcome.description
        route = portal.statement.route
        if route.kind == "engine":
            compiled = await self._engine(self._compile, route, portal.statement.sql, self._decode_params(portal))
            portal.row_types = [_column(c)[1] for c in compiled.columns]
            return self._engine_description(compiled.columns, portal.result_formats)
        portal.outcome = await self.execute(portal)
        return portal.outcome.description

    def _decode_params(self, portal: Portal) -> tuple:
        oids = portal.statement.param_oids
        try:
            return tuple(pgtypes.decode_param(v, oids[i] if i < len(oids) else 0, _format(portal.param_formats, i))
                         for i, v in enumerate(portal.params))
        except pgtypes.ParameterError as exc:
            raise QueryError("22P02", str(exc)) from None

    def _compile(self, route, sql: str, params: tuple):
        """On an engine thread: ``$n`` → ``?`` (AST) and compile for Describe."""
        text, qparams = self._engine_sql(route, sql, params)
        self._keep_position = text == sql
        return self.link.compile(text, qparams)

    def _answer(self, route, sql: str, params: tuple):
        """On an engine thread: ``$n`` → ``?`` (AST) and run the query; returns the result, the
        error-column mode and the ρ it spent."""
        text, qparams = self._engine_sql(route, sql, params)
        self._keep_position = text == sql
        result = self.link.execute(text, qparams)
        cost = float(getattr(result, "cost", 0.0) or 0.0)   # the link may be a deterministic double
        mode = self.link.error_mode() if hasattr(self.link, "error_mode") else "off"
        return result, mode, cost

    # -- statements, logged --------------------------------------------------------------------
    async def execute(self, portal: Portal) -> Outcome:
        return await self._logged(portal.statement.sql, portal.statement.route, self._execute(portal))

    async def run_simple(self, sql: str, route, formats=()) -> Outcome:
        return await self._logged(sql, route, self._run_simple(sql, route, formats))

    async def _logged(self, sql: str, route, work) -> Outcome:
        if self.query_log is None or route.kind == "empty":
            return await work
        self._cost = 0.0
        t0 = time.perf_counter()
        error = None
        try:
            return await work
        except QueryError as exc:
            error = exc
            raise
        finally:
            self.query_log.write(user=self.settings.user, pid=self.pid, route=route.kind,
                                 fingerprint=route.fingerprint, statement=sql, cost=self._cost,
                                 seconds=time.perf_counter() - t0, error=error)

    async def _execute(self, portal: Portal) -> Outcome:
        route = portal.statement.route
        if route.kind == "catalog":
            oids = portal.statement.param_oids
            sql = await self._catalog_sql(route, portal.statement.sql)
            return _shadow_outcome(await self._shadow_call("execute", sql, oids,
                                                           portal.param_formats, portal.params,
                                                           portal.result_formats))
        if route.kind == "engine":
            return await self._run_engine(route, portal.statement.sql, self._decode_params(portal),
                                          portal.result_formats, portal.row_types)
        return await self._run_simple(portal.statement.sql, route, portal.result_formats)

    async def _run_engine(self, route, sql: str, params: tuple, formats, described=None) -> Outcome:
        outcome, self._cost = await self._engine(self._answer_outcome, route, sql, params, formats, described)
        return outcome

    def _answer_outcome(self, route, sql: str, params: tuple, formats, described) -> tuple[Outcome, float]:
        """On an engine thread: answer, then encode the reply there too (issue 34 item 10: encoding
        a large answer on the event loop stalled every connection for seconds); the statement
        keeps its user's slot meanwhile, so the work stays bounded per user."""
        result, mode, cost = self._answer(route, sql, params)
        columns = [_column(c) for c in result.columns]
        notices = _notices(result)
        if not columns:
            return Outcome(tag=result.message or "SELECT", before=notices), cost
        # values at their error's precision, as every front end shows them (dpsql.display):
        # a parseable number, never float noise such as 58640.60093598821 or 2.2e-308
        rows = rounded_rows(result)
        if mode != "off" and route.tag == "SELECT" and not getattr(result, "message", None) \
                and INFERRED not in (name for name, _ in columns):
            flags = list(getattr(result, "inferred", []) or [])
            columns = columns + [(INFERRED, "boolean")]
            rows = [tuple(row) + (bool(flags[i]) if i < len(flags) else False,) for i, row in enumerate(rows)]
            if getattr(result, "binnable", False):
                # true where a value's interval holds a binning bound, not the noise alone
                columns = columns + [(BINNED, "boolean")]
                rows = [tuple(row) + (bool(bounded_columns(result, i)),) for i, row in enumerate(rows)]
        if described is not None and len(described) == len(columns):
            # the client decodes with the types it was given at Describe; keep to them
            columns = [(name, t) for (name, _), t in zip(columns, described)]
        oids = [pgtypes.oid_for(t) for _, t in columns]
        tag = "SELECT" if route.tag == "SELECT" else route.tag
        return Outcome(description=self._engine_description(columns, formats),
                       rows=_data_rows(rows, oids, formats, self.max_reply), tag=tag, before=notices), cost

    @staticmethod
    def _engine_description(columns, formats) -> bytes:
        return _row_description([(name, pgtypes.oid_for(t)) for name, t in map(_column, columns)], formats)

    def _local(self, route):
        return local_values(route.items, pid=self.pid, user=self.settings.user, database=self.database,
                            server_version=self.settings.values.get("server_version", ""),
                            dpsql_version=self.dpsql_version, signal=self.signal)

    def _local_description(self, route, formats) -> bytes:
        return _row_description([(name, oid) for name, oid, _ in self._local(route)], formats)

    async def _run_simple(self, sql: str, route, formats=()) -> Outcome:
        if route.kind == "empty":
            return Outcome(empty=True)
        if route.kind == "error":
            raise QueryError(route.sqlstate, route.message, hint=route.hint)
        if route.kind == "engine":
            return await self._run_engine(route, sql, (), formats)
        if route.kind == "catalog":
            sql = await self._catalog_sql(route, sql)
            return _shadow_outcome(await self._shadow_call("execute", sql, (), (), (), tuple(formats)))
        if route.kind == "local":
            values = self._local(route)
            rows = _data_rows([[v for _, _, v in values]], [oid for _, oid, _ in values], formats)
            return Outcome(description=self._local_description(route, formats), rows=rows, tag="SELECT")
        cmd = parse_command(route)
        if cmd.name.startswith("dpsql."):
            self._keep_position = True
            result = await self._engine(self.link.execute, sql, None)
            columns = [_column(c) for c in result.columns]
            if not columns:
                return Outcome(tag=result.message or cmd.kind.upper())
            rows = _data_rows(result.rows, [pgtypes.TEXT] * len(columns), formats)
            return Outcome(description=text_description([n for n, _ in columns], formats), rows=rows, tag="SHOW")
        return self.settings.apply(cmd, self.tx_status)
