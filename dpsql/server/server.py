"""The asyncio driver: sockets, TLS, startup and authentication, cancel, limits, lifecycle.

One task per client connection; protocol logic lives in the sans-IO modules (``codec``,
``startup``, ``protocol``) and statement work in ``backend.Dispatcher``.  Nothing CPU-bound
runs on the event loop: parsing goes to a parse pool (one user: at most half its threads),
compiling, answering and encoding the reply to an engine pool, opening engine sessions to a
session pool, all bounded, each connection with its own engine session (``backend.DpsqlLink``).

Limits (``ServerOptions``):

* a login must finish within ``auth_timeout`` of accept, the whole handshake (PostgreSQL's
  ``authentication_timeout``); connections still authenticating never count against
  ``max_connections`` and have their own budget (``max_unauthenticated``): each is read from
  accept, and when the budget is full a newcomer displaces the one stalled longest on a
  handshake message, where bytes that do not complete a message are no progress
  (``gate.py``), so slowloris sockets cannot keep anyone from logging in;
* frontend messages longer than ``max_statement`` are answered 54000 and discarded as they
  arrive, never buffered or parsed; beyond ``max_message`` the connection is broken (08P01);
  reading what is discarded still costs the server, so one user's connections together may
  have ``discard_rate`` bytes per second discarded (a second's worth at once); beyond it
  their reading pauses (TCP pushes back on the sender);
* each user holds at most ``max_user_connections`` of the ``max_connections`` authenticated
  connections (default half; a per-user ``connection_limit`` overrides it), PostgreSQL's
  per-role CONNECTION LIMIT, so one analyst cannot take every slot (53300 for them only);
* one connection holds at most ``max_session_memory`` bytes of prepared statements, portals
  and the reply being built (engine rows, a catalog reply, checked before a catalog message's
  body is read); 53200 beyond (``protocol.py``);
* each user runs at most ``max_user_statements`` statements at once; more wait their turn;
* a delay before reporting a failed authentication, doubling per recent failure from the
  same address; backpressure through ``drain()``.

Lifecycle: the listening socket is bound before anything else starts (a port in use fails
at once), the catalog PostgreSQL is stopped and its directory removed on every way out
(``catalogdb``), ``run`` handles SIGTERM, SIGINT and SIGHUP, writes ``--pidfile`` and prints
one readiness line on stdout.  Non-loopback addresses need TLS unless ``insecure``.

``Server`` is the coroutine API; ``ServerThread`` runs one on its own event loop in a
thread (tests, benchmarks); ``run`` blocks (``dpsql serve``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import ipaddress
import logging
import os
import secrets
import signal
import ssl
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

from dpsql import errors
from dpsql.public import StarCatalog
from dpsql.server import codec, scram
from dpsql.server.backend import Dispatcher, DpsqlLink
from dpsql.server.config import DEFAULT_MAX_STATEMENT, SERVER_DEFAULTS
from dpsql.server.gate import Gate, Pending
from dpsql.server.gucs import Settings
from dpsql.server.protocol import FatalError, QueryProtocol
from dpsql.server.querylog import QueryLog
from dpsql.server.results import QueryError
from dpsql.server.shadow import ShadowCluster, ShadowPool, ShadowUnavailable
from dpsql.server.startup import Authenticator, Fatal, check_startup

log = logging.getLogger("dpsql.server")
_FLUSH_AT = 64 * 1024
_AUTH_MESSAGE_LIMIT = 64 * 1024     # SASL messages are a few hundred bytes


class _Closed(Exception):
    """The peer went away."""


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 5432
    database: str = "dpsql"
    max_connections: int = 100               # authenticated connections
    max_user_connections: int | None = None  # of them one user's (default: half of max_connections)
    user_connection_limits: dict = field(default_factory=dict)   # user -> their own limit (overrides)
    max_unauthenticated: int = 256           # connections still authenticating (see the module doc)
    auth_stall: float = 1.0                  # stalled this long on one handshake message: dropped first
    auth_timeout: float = 5.0                # accept → authenticated (the whole handshake)
    startup_timeout: float = 30.0            # authenticated → ReadyForQuery (opens the engine session)
    max_message: int = codec.DEFAULT_MAX_MESSAGE
    max_statement: int = DEFAULT_MAX_STATEMENT
    max_session_memory: int = 64 * 1024 * 1024   # one connection's statements, portals and reply; 53200
    discard_rate: int = 1024 * 1024          # bytes/s of over-long statements one user may have dropped
    max_user_statements: int = 2             # below ``workers``: one analyst cannot take every engine thread
    auth_failure_delay: float = 0.2          # doubled per recent failure from the same address, up to 5 s
    auth_method: str = "scram-sha-256"      # or "password" (cleartext; TLS only)
    workers: int | None = None               # engine threads (default: 2 x CPU count, at least 4)
    parse_workers: int | None = None         # parsing threads (default: CPU count, at least 2)
    ssl_context: ssl.SSLContext | None = None
    insecure: bool = False                   # allow a non-loopback address without TLS
    shadow: bool = True                      # start the schema-only catalog PostgreSQL
    shadow_pool: int = 16                    # catalog connections in all
    catalog_timeout: float = 10.0            # statement timeout of catalog queries (per role)
    query_log: object = None                 # a path, "-" (stderr) or a text stream
    query_log_max_bytes: int = 64 * 1024 * 1024   # a path is rotated beyond this size
    query_log_files: int = 4                 # rotated files kept (PATH.1 … PATH.4)
    # every analyst's session defaults ([server] error_columns …), then their own ([server.users.NAME])
    settings: dict = field(default_factory=lambda: dict(SERVER_DEFAULTS))
    user_settings: dict = field(default_factory=dict)   # user -> {"dpsql.error_columns": "ci95", …}
    server_version: str = ""                 # default: the shadow's version (psql picks \d SQL by it)


class _Conn:
    """Per-connection state the cancel path needs."""

    def __init__(self, pid: int, secret: bytes) -> None:
        self.pid = pid
        self.secret = secret
        self.dispatcher: Dispatcher | None = None
        self.user = ""


class Server:
    def __init__(self, config, *, users_file=None, overrides: dict | None = None, link_factory=None,
                 catalog=None, options: ServerOptions | None = None,
                 shadow_cluster: ShadowCluster | None = None) -> None:
        """``shadow_cluster``: an already started shadow to share (the caller stops it)."""
        self.config = config
        self.options = options or ServerOptions()
        opts = self.options
        if opts.auth_method not in ("scram-sha-256", "password"):
            raise ValueError("auth_method must be 'scram-sha-256' or 'password'")
        if opts.auth_method == "password" and opts.ssl_context is None:
            raise ValueError("cleartext password authentication needs TLS (ssl_context)")
        if opts.ssl_context is None and not opts.insecure and not is_loopback(opts.host):
            raise ValueError(f"serving on {opts.host!r}, a non-loopback address, needs TLS: give a certificate "
                             "(--tls-cert/--tls-key), or --insecure to send results unencrypted")
        self.users_file = Path(users_file) if users_file else scram.users_path(config)
        self.secret = scram.load_secret(self.users_file)
        self.overrides = dict(overrides or {})
        self.link_factory = link_factory or (lambda user: DpsqlLink(self.config, user, self.overrides))
        self._catalog = catalog
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=opts.workers or max(4, 2 * (os.cpu_count() or 1)), thread_name_prefix="dpsql-query")
        # opening and closing engine sessions (logins) has threads of its own: analysts' statements
        # filling the engine pool must not keep anyone from logging in (issue 34 item 7)
        self.session_executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=max(2, os.cpu_count() or 1), thread_name_prefix="dpsql-session")
        self._parse_threads = opts.parse_workers or max(2, os.cpu_count() or 1)
        self.parse_executor = concurrent.futures.ThreadPoolExecutor(max_workers=self._parse_threads,
                                                                    thread_name_prefix="dpsql-parse")
        self.shadow_cluster: ShadowCluster | None = None      # started and owned by this server
        self._shared_cluster = shadow_cluster
        self._starting: asyncio.Future | None = None
        self._keepalive: DpsqlLink | None = None
        self.shadow: ShadowPool | None = None
        self.query_log = QueryLog(opts.query_log, max_bytes=opts.query_log_max_bytes, keep=opts.query_log_files) \
            if opts.query_log is not None else None
        self._server: asyncio.base_events.Server | None = None
        self._conns: dict[int, _Conn] = {}
        self._active = 0
        self._per_user: dict[str, int] = {}           # user -> authenticated connections
        self._gate: Gate[asyncio.Task] = Gate(self.options.max_unauthenticated, self.options.auth_stall)
        self._writers: dict[asyncio.Task, asyncio.StreamWriter] = {}    # of the connections in the gate
        self._delaying = 0                            # failed logins waiting out their delay outside it
        self._limiters: dict[str, asyncio.Semaphore] = {}
        self._parse_limiters: dict[str, asyncio.Semaphore] = {}
        self._discards: dict[str, tuple[float, float]] = {}   # user -> (bytes they may still have discarded, at)
        self.throttled: dict[str, float] = {}                 # user -> seconds their reading was paused
        self._failures: dict[str, list[float]] = {}   # peer address -> recent failure times
        self._tasks: set[asyncio.Task] = set()
        self.server_version = opts.server_version or "15.0"

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        """Bind, start the catalog, then accept; on any failure nothing is left running."""
        try:
            await self._start()
        except BaseException:
            await self.close()
            raise

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        opts = self.options
        # bound first: a port in use fails before initdb, and no client is accepted before ready
        self._server = await asyncio.start_server(self._client, opts.host, opts.port, limit=2 ** 16,
                                                  start_serving=False, backlog=256)
        # held until close(): engines are shared per ledger only while a connection to them is open,
        # so without it every client connection would rebuild the engine and refit its models
        keepalive: DpsqlLink = await loop.run_in_executor(self.executor, self.link_factory, None)
        self._keepalive = keepalive
        if self._catalog is None:
            # a copy: the private tables, with the public ones and their keys beside them
            found = keepalive.catalog
            self._catalog = StarCatalog(found, getattr(found, "public", None), getattr(found, "references", ()))
        cluster = self._shared_cluster
        if cluster is None and opts.shadow:
            cluster = ShadowCluster(self._catalog, opts.database, statement_timeout=opts.catalog_timeout)
            self.shadow_cluster = cluster
            self._starting = loop.run_in_executor(None, cluster.start)
            try:
                await self._starting
            except ShadowUnavailable as exc:
                log.warning("catalog queries disabled: %s", exc)
                self.shadow_cluster = cluster = None
        if cluster is not None:
            self.shadow = ShadowPool(cluster.socket_path, cluster.database, opts.shadow_pool, key=self.secret,
                                     per_role=opts.max_user_statements,
                                     statement_timeout_ms=int(opts.catalog_timeout * 1000))
            await self.shadow.start()
            if not opts.server_version:
                self.server_version = self.shadow.server_version.split()[0]
        await self._server.start_serving()
        log.info("dpsql serving on %s:%s", opts.host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(list(self._tasks), timeout=5)
        if self.shadow is not None:
            await self.shadow.close()
            self.shadow = None
        if self._starting is not None:
            # a cancelled start: the thread still runs cluster.start; let it finish, then stop
            await asyncio.wait([self._starting])
        if self.shadow_cluster is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.shadow_cluster.stop)
            self.shadow_cluster = None
        if self.query_log is not None:
            self.query_log.close()
        if self._keepalive is not None:
            self._keepalive.close()
            self._keepalive = None
        self.executor.shutdown(wait=False, cancel_futures=True)
        self.parse_executor.shutdown(wait=False, cancel_futures=True)
        self.session_executor.shutdown(wait=False, cancel_futures=True)

    # -- connection lifecycle ---------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None     # start_server runs each client callback as a task
        self._tasks.add(task)
        frames = codec.FrameReader(_AUTH_MESSAGE_LIMIT)
        conn: _Conn | None = None
        link = None
        counted = False
        loop = asyncio.get_running_loop()
        try:
            if not self._admit(task, writer):
                return     # every place is busy on the server's side: close at once
            try:
                async with asyncio.timeout(self.options.auth_timeout):
                    result = await self._startup(reader, writer, frames, self._gate.pending[task])
            except TimeoutError:
                await self._send_fatal(writer, Fatal("08P01", "authentication timed out"))
                return
            finally:
                self._gate.leave(task)
                self._writers.pop(task, None)
            if result is None:
                return  # a cancel request: no reply, just close
            user, params = result
            if self._active >= self.options.max_connections:
                raise Fatal("53300", "sorry, too many clients already")
            if self._per_user.get(user, 0) >= self.user_connection_limit(user):
                raise Fatal("53300", f'too many connections for role "{user}"',
                            hint="close some of this user's connections, or raise max_user_connections")
            self._active += 1
            self._per_user[user] = self._per_user.get(user, 0) + 1
            counted = True
            conn = self._register()
            conn.user = user
            try:
                async with asyncio.timeout(self.options.startup_timeout):
                    settings = Settings(self.server_version, user, params)
                    link = await loop.run_in_executor(self.session_executor, self.link_factory, user)
                    await self._apply_settings(link, user, settings.engine_settings)
                    dispatcher = Dispatcher(link, self.shadow, settings, pid=conn.pid, database=self.options.database,
                                            executor=self.executor, parse_executor=self.parse_executor,
                                            limiter=self._limiter(user), parse_limiter=self._parse_limiter(user),
                                            query_log=self.query_log,
                                            max_reply=self.options.max_session_memory,
                                            dpsql_version=_version(),
                                            signal=lambda pid, user=user: self._signal(pid, user))
                    conn.dispatcher = dispatcher
                    writer.write(b"".join(settings.initial_status())
                                 + codec.encode_backend_key(conn.pid, conn.secret) + codec.encode_ready("I"))
                    await writer.drain()
            except TimeoutError:
                await self._send_fatal(writer, Fatal("08P01", "startup timed out"))
                return
            frames.max_message = self.options.max_message
            frames.max_statement = min(self.options.max_statement, self.options.max_message)
            await self._serve(reader, writer, frames, QueryProtocol(dispatcher, self.options.max_session_memory))
        except Fatal as exc:
            await self._send_fatal(writer, exc)
        except codec.ProtocolViolation as exc:
            await self._send_fatal(writer, Fatal("08P01", str(exc)))
        except FatalError as exc:
            await self._send_fatal(writer, Fatal(exc.sqlstate, exc.message))
        except QueryError as exc:  # engine refused the session itself (e.g. unknown principal)
            fields = dict(exc.fields, S="FATAL", V="FATAL")
            await self._send_raw(writer, codec.encode_notice_fields(b"E", fields))
        except asyncio.CancelledError:
            # server shutdown
            await self._send_fatal(writer, Fatal("57P01", "terminating connection due to administrator command"))
        except Exception as exc:  # noqa: BLE001 - a connection must never take the server down
            if hasattr(exc, "sqlstate") and hasattr(exc, "message"):
                await self._send_fatal(writer, Fatal(exc.sqlstate, exc.message))
            elif not isinstance(exc, (_Closed, ConnectionError, asyncio.IncompleteReadError)):
                log.exception("connection failed")
        finally:
            if conn is not None:
                self._conns.pop(conn.pid, None)
            if counted:
                self._active -= 1
                left = self._per_user.pop(user) - 1     # counted only once ``user`` is known
                if left:
                    self._per_user[user] = left
            if link is not None:
                pending = conn.dispatcher._pending if conn is not None and conn.dispatcher is not None else None
                if pending is not None and not pending.done():
                    # a cancelled engine call may still use the session: close it after that
                    try:
                        await asyncio.wait([pending])
                    except asyncio.CancelledError:
                        pass
                try:
                    await loop.run_in_executor(self.session_executor, link.close)
                except (asyncio.CancelledError, RuntimeError):
                    link.close()  # server shutting down: close inline rather than leak the session
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass
            self._tasks.discard(task)

    def _admit(self, task, writer) -> bool:
        """Enter the gate of connections still authenticating, displacing one if it is full."""
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else "?"
        admitted, victim = self._gate.admit(task, host, asyncio.get_running_loop().time())
        if victim is not None:
            self._writers.pop(victim).transport.abort()
        if admitted:
            self._writers[task] = writer
        return admitted

    def user_connection_limit(self, user: str) -> int:
        """PostgreSQL's per-role CONNECTION LIMIT: the user's own, else ``max_user_connections``,
        else half of ``max_connections`` (so one analyst never holds every slot)."""
        opts = self.options
        limit = opts.user_connection_limits.get(user, opts.max_user_connections)
        return max(1, opts.max_connections // 2) if limit is None else limit

    def _parse_limiter(self, user: str) -> asyncio.Semaphore:
        """A user's share of the parse pool: half of its threads (at least one)."""
        limiter = self._parse_limiters.get(user)
        if limiter is None:
            limiter = self._parse_limiters[user] = asyncio.Semaphore(max(1, self._parse_threads // 2))
        return limiter

    def _limiter(self, user: str) -> asyncio.Semaphore:
        limiter = self._limiters.get(user)
        if limiter is None:
            limiter = self._limiters[user] = asyncio.Semaphore(self.options.max_user_statements)
        return limiter

    async def _apply_settings(self, link, user: str, from_startup: dict[str, str]) -> None:
        """The server's defaults, the user's own, then the connection's startup options (``-c dpsql.x=y``)."""
        wanted = {**self.options.settings, **self.options.user_settings.get(user, {}), **from_startup}
        loop = asyncio.get_running_loop()
        for name, value in wanted.items():
            sql = f"SET {name} = '" + value.replace("'", "''") + "'"
            try:
                await loop.run_in_executor(self.session_executor, link.execute, sql, None)
            except errors.Error as exc:
                raise Fatal("22023", f'invalid value for parameter "{name}": "{value}"', hint=exc.hint) from None

    async def _read(self, reader, frames: codec.FrameReader, typed: bool, progress: Pending | None = None,
                    user: str | None = None):
        while True:
            msg = frames.next_message() if typed else frames.next_startup()
            if user is not None and frames.discarded:
                await self._throttle(user, frames.discarded)
                frames.discarded = 0
            if msg is not None:
                if progress is not None:
                    progress.progressed()
                return msg
            if progress is not None:
                progress.waiting(asyncio.get_running_loop().time())
            data = await reader.read(65536)
            if not data:
                raise _Closed()
            frames.feed(data)

    async def _throttle(self, user: str, nbytes: int) -> None:
        """Charge ``nbytes`` of discarded over-long statements to ``user``'s token bucket
        (``discard_rate`` per second, a second's worth of burst); pause when it runs dry."""
        rate = float(self.options.discard_rate)
        now = asyncio.get_running_loop().time()
        tokens, last = self._discards.get(user, (rate, now))
        tokens = min(rate, tokens + (now - last) * rate) - nbytes
        self._discards[user] = (tokens, now)
        if tokens < 0:
            pause = -tokens / rate
            self.throttled[user] = self.throttled.get(user, 0.0) + pause
            await asyncio.sleep(pause)

    async def _send_raw(self, writer, data: bytes) -> None:
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), 2)
        except BaseException:  # noqa: BLE001 - the peer may be gone already
            pass

    async def _send_fatal(self, writer, fatal: Fatal) -> None:
        await self._send_raw(writer, fatal.encode())

    async def _startup(self, reader, writer, frames, progress):
        tls = False
        negotiated: set[str] = set()
        while True:
            packet = codec.decode_startup(await self._read(reader, frames, False, progress))
            if isinstance(packet, codec.Startup):
                break
            if isinstance(packet, codec.CancelKey):
                await self._cancel(packet)
                return None
            if packet in ("ssl", "gssenc"):
                # one of each, as PostgreSQL: otherwise a stream of them would be endless progress
                if packet in negotiated:
                    raise Fatal("08P01", f"duplicate {'SSL' if packet == 'ssl' else 'GSSAPI'} negotiation request")
                negotiated.add(packet)
            if packet == "ssl":
                if self.options.ssl_context is None or tls:
                    writer.write(b"N")
                    await writer.drain()
                    continue
                if frames.buffered:
                    raise Fatal("08P01", "received unencrypted data after SSL request")
                writer.write(b"S")
                await writer.drain()
                progress.waiting(asyncio.get_running_loop().time())    # the TLS handshake is the client's move
                await writer.start_tls(self.options.ssl_context)
                tls = True
                continue
            if packet == "gssenc":
                writer.write(b"N")
                await writer.drain()
        user, negotiate = check_startup(packet, database=self.options.database)
        if negotiate is not None:
            writer.write(negotiate)
        if self.options.ssl_context is not None and not tls and not is_loopback(self.options.host):
            raise Fatal("28000", "TLS is required on this server", hint="connect with sslmode=require")
        await self._authenticate(reader, writer, frames, user, tls, progress)
        return user, packet.params

    async def _authenticate(self, reader, writer, frames, user: str, tls: bool, progress) -> None:
        users = scram.load_users(self.users_file)
        auth = Authenticator(user, users.get(user), mock_key=self.secret, method=self.options.auth_method, tls=tls)
        writer.write(auth.begin())
        await writer.drain()
        while True:
            kind, body = await self._read(reader, frames, True, progress)
            if kind != b"p":
                raise Fatal("08P01", f"expected a password message, got {kind!r}")
            try:
                reply, done = auth.step(body)
            except (scram.AuthFailure, codec.ProtocolViolation):
                await self._delay_failure(writer)
                raise Fatal("28P01", f'password authentication failed for user "{user}"') from None
            writer.write(reply)
            await writer.drain()
            if done:
                return

    async def _delay_failure(self, writer) -> None:
        """Wait out the failure delay outside the gate (the login has failed: its place goes to
        others, so failing logins cannot hold every place), for at most ``max_unauthenticated``
        connections at once; beyond that the delay is spent in the gate, as a busy place."""
        delay = self._failure_delay(writer)
        task = asyncio.current_task()
        assert task is not None     # called from _client's task
        if self._delaying < self.options.max_unauthenticated:
            self._gate.leave(task)
            self._writers.pop(task, None)
            self._delaying += 1
            try:
                await asyncio.sleep(delay)
            finally:
                self._delaying -= 1
        else:
            await asyncio.sleep(delay)

    def _failure_delay(self, writer) -> float:
        """Escalating delay per peer address, so password guessing slows down exponentially."""
        peer = writer.get_extra_info("peername")
        host = peer[0] if isinstance(peer, tuple) and peer else "?"
        now = asyncio.get_running_loop().time()
        recent = [t for t in self._failures.get(host, []) if now - t < 60.0]
        recent.append(now)
        self._failures[host] = recent
        if len(self._failures) > 10_000:  # bound the table under an address-spraying attack
            self._failures = {h: ts for h, ts in self._failures.items() if now - ts[-1] < 60.0}
        return min(5.0, self.options.auth_failure_delay * 2 ** (len(recent) - 1))

    def _register(self) -> _Conn:
        while True:
            pid = secrets.randbelow(2 ** 31 - 2) + 1
            if pid not in self._conns:
                break
        conn = _Conn(pid, secrets.token_bytes(4))
        self._conns[pid] = conn
        return conn

    def _signal(self, pid: int, user: str) -> bool:
        """``pg_cancel_backend``/``pg_terminate_backend``: only the caller's own sessions.

        Both cancel the running statement (Superset uses terminate to stop a query)."""
        conn = self._conns.get(pid)
        if conn is None or conn.dispatcher is None or conn.user != user:
            return False
        asyncio.ensure_future(conn.dispatcher.cancel())
        return True

    async def _cancel(self, key: codec.CancelKey) -> None:
        conn = self._conns.get(key.pid)
        if conn is None or conn.dispatcher is None or not hmac.compare_digest(conn.secret, key.secret):
            return
        await conn.dispatcher.cancel()

    async def _serve(self, reader, writer, frames, protocol: QueryProtocol) -> None:
        while True:
            kind, body = await self._read(reader, frames, typed=True, user=protocol.dispatcher.settings.user)
            try:
                keep_going = await protocol.handle(kind, body)
            except codec.ProtocolViolation as exc:
                raise Fatal("08P01", str(exc)) from None
            pending = sum(len(p) for p in protocol.out)
            if pending and (kind in (b"S", b"H", b"Q") or pending >= _FLUSH_AT or not frames.buffered):
                writer.write(protocol.take())
                await writer.drain()
            if not keep_going:
                return


def _version() -> str:
    try:
        from importlib.metadata import version
        return version("dpsql")
    except Exception:  # noqa: BLE001 - running from a source tree
        return "dev"


class ServerThread:
    """A ``Server`` on its own event loop in a daemon thread (tests and benchmarks)."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="dpsql-server", daemon=True)

    def _main(self) -> None:
        async def main():
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            try:
                await self.server.start()
            except BaseException as exc:
                self._error = exc
                self._ready.set()
                return
            self._ready.set()
            await self._stop.wait()
            await self.server.close()
        asyncio.run(main())

    def start(self, timeout: float = 120) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(timeout):
            raise TimeoutError("server did not start")
        if self._error is not None:
            raise self._error
        return self

    @property
    def port(self) -> int:
        return self.server.port

    def stop(self, timeout: float = 30) -> None:
        if self._loop is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout)


def serve(config, *, overrides: dict | None = None, users_file=None, host: str = "127.0.0.1", port: int = 0,
          **options) -> ServerThread:
    """Start a server in a background thread and return it once it listens."""
    opts = ServerOptions(host=host, port=port, **options)
    return ServerThread(Server(config, users_file=users_file, overrides=overrides, options=opts)).start()


# -- dpsql serve --------------------------------------------------------------------------------

def _claim_pidfile(path: Path) -> None:
    """Write our pid atomically; refuse when the file names a live process."""
    try:
        other = int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        other = None
    if other is not None and other != os.getpid():
        try:
            os.kill(other, 0)
        except ProcessLookupError:
            pass
        except PermissionError:
            raise errors.OperationalError(f"pid file {path} names a running process ({other})",
                                          hint="stop that server, or choose another --pidfile") from None
        else:
            raise errors.OperationalError(f"pid file {path} names a running process ({other})",
                                          hint="stop that server, or choose another --pidfile")
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    tmp.write_text(f"{os.getpid()}\n")
    os.replace(tmp, path)


def _release_pidfile(path: Path) -> None:
    try:
        if int(path.read_text().split()[0]) == os.getpid():
            path.unlink()
    except (OSError, ValueError, IndexError):
        pass


def run(config, *, overrides: dict | None = None, users_file=None, pidfile=None, out=None, **options) -> int:
    """Serve until SIGTERM, SIGINT or SIGHUP (``dpsql serve``); returns the exit status.

    Prints one line on ``out`` (stdout) once clients can connect:
    ``dpsql: ready on HOST:PORT (database "dpsql", catalog: …, pid N)``."""
    out = out or sys.stdout
    server = Server(config, users_file=users_file, overrides=overrides, options=ServerOptions(**options))
    pid_path = Path(pidfile) if pidfile else None

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(sig, stop.set)
        starting = asyncio.ensure_future(server.start())
        stopping = asyncio.ensure_future(stop.wait())
        try:
            await asyncio.wait([starting, stopping], return_when=asyncio.FIRST_COMPLETED)
            if not starting.done():       # a signal during startup: abandon it, clean up below
                starting.cancel()
                await asyncio.wait([starting])
                return
            starting.result()             # a failed start raises here (start() cleaned up)
            if pid_path is not None:
                _claim_pidfile(pid_path)
            catalog = f"PostgreSQL {server.server_version}" if server.shadow else "unavailable"
            print(f"dpsql: ready on {server.options.host}:{server.port} (database {server.options.database!r}, "
                  f"catalog: {catalog}, pid {os.getpid()})", file=out, flush=True)
            await stopping
        finally:
            stopping.cancel()
            await server.close()
            if pid_path is not None:
                _release_pidfile(pid_path)

    asyncio.run(main())
    return 0
