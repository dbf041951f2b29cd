"""The asyncio driver: sockets, TLS, startup and authentication, cancel, limits.

One task per client connection; protocol logic lives in the sans-IO modules (``codec``,
``startup``, ``protocol``) and statement work in ``backend.Dispatcher``.  Engine calls run
on one bounded ``ThreadPoolExecutor`` shared by all connections, each connection with its
own engine session (``backend.DpsqlLink``).  Limits: ``max_connections`` (53300), message
size (08P01), a startup timeout covering everything up to ReadyForQuery, a delay before
reporting a failed authentication, and backpressure through ``drain()``.

``Server`` is the coroutine API; ``ServerThread`` runs one on its own event loop in a
thread (tests, benchmarks); ``run`` blocks (``dpsql serve``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import hmac
import logging
import os
import secrets
import ssl
import threading
from dataclasses import dataclass
from pathlib import Path

from dpsql.server import codec, scram
from dpsql.server.backend import Dispatcher, DpsqlLink
from dpsql.server.gucs import Settings
from dpsql.server.protocol import FatalError, QueryProtocol
from dpsql.server.results import QueryError
from dpsql.server.shadow import ShadowCluster, ShadowPool, ShadowUnavailable
from dpsql.server.startup import Authenticator, Fatal, check_startup

log = logging.getLogger("dpsql.server")
_FLUSH_AT = 64 * 1024


class _Closed(Exception):
    """The peer went away."""


@dataclass
class ServerOptions:
    host: str = "127.0.0.1"
    port: int = 5432
    database: str = "dpsql"
    max_connections: int = 100
    max_message: int = codec.DEFAULT_MAX_MESSAGE
    startup_timeout: float = 10.0
    auth_failure_delay: float = 0.2          # doubled per recent failure from the same address, up to 5 s
    auth_method: str = "scram-sha-256"      # or "password" (cleartext; TLS only)
    workers: int | None = None
    ssl_context: ssl.SSLContext | None = None
    shadow: bool = True                      # start the schema-only catalog PostgreSQL
    shadow_pool: int = 4
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
                 catalog=None, options: ServerOptions | None = None, shadow_cluster: ShadowCluster | None = None) -> None:
        """``shadow_cluster``: an already started shadow to share (the caller stops it)."""
        self.config = config
        self.options = options or ServerOptions()
        if self.options.auth_method not in ("scram-sha-256", "password"):
            raise ValueError("auth_method must be 'scram-sha-256' or 'password'")
        if self.options.auth_method == "password" and self.options.ssl_context is None:
            raise ValueError("cleartext password authentication needs TLS (ssl_context)")
        self.users_file = Path(users_file) if users_file else scram.users_path(config)
        self.overrides = dict(overrides or {})
        self.link_factory = link_factory or (lambda user: DpsqlLink(self.config, user, self.overrides))
        self._catalog = catalog
        self.executor = concurrent.futures.ThreadPoolExecutor(
            max_workers=self.options.workers or os.cpu_count() or 2, thread_name_prefix="dpsql-query")
        self.shadow_cluster: ShadowCluster | None = None      # started and owned by this server
        self._shared_cluster = shadow_cluster
        self.shadow: ShadowPool | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: dict[int, _Conn] = {}
        self._active = 0
        self._failures: dict[str, list[float]] = {}   # peer address -> recent failure times
        self._tasks: set[asyncio.Task] = set()
        self.server_version = self.options.server_version or "15.0"

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.sockets[0].getsockname()[1]

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._catalog is None:
            probe = await loop.run_in_executor(self.executor, self.link_factory, None)
            try:
                self._catalog = dict(probe.catalog)
            finally:
                probe.close()
        cluster = self._shared_cluster
        if cluster is None and self.options.shadow:
            cluster = ShadowCluster(self._catalog, self.options.database)
            try:
                await loop.run_in_executor(self.executor, cluster.start)
            except ShadowUnavailable as exc:
                await loop.run_in_executor(self.executor, cluster.stop)
                log.warning("catalog queries disabled: %s", exc)
                cluster = None
            else:
                self.shadow_cluster = cluster
        if cluster is not None:
            self.shadow = ShadowPool(cluster.socket_path, cluster.database, self.options.shadow_pool)
            client = await self.shadow.acquire()
            self.shadow.release(client)
            if not self.options.server_version:
                self.server_version = self.shadow.server_version.split()[0]
        self._server = await asyncio.start_server(self._client, self.options.host, self.options.port,
                                                  limit=2 ** 16)
        log.info("dpsql serving on %s:%s", self.options.host, self.port)

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
        if self.shadow_cluster is not None:
            await asyncio.get_running_loop().run_in_executor(None, self.shadow_cluster.stop)
        self.executor.shutdown(wait=False, cancel_futures=True)

    # -- connection lifecycle ---------------------------------------------------------------
    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        self._tasks.add(task)
        frames = codec.FrameReader(self.options.max_message)
        conn: _Conn | None = None
        link = None
        counted = False
        try:
            try:
                async with asyncio.timeout(self.options.startup_timeout):
                    result = await self._startup(reader, writer, frames)
                    if result is None:
                        return  # a cancel request: no reply, just close
                    user, conn, params = result
                    counted = True
                    link = await asyncio.get_running_loop().run_in_executor(self.executor, self.link_factory, user)
                    settings = Settings(self.server_version, user, params)
                    conn.user = user
                    dispatcher = Dispatcher(link, self.shadow, settings, pid=conn.pid, database=self.options.database,
                                            executor=self.executor, dpsql_version=_version(),
                                            signal=lambda pid, user=user: self._signal(pid, user))
                    conn.dispatcher = dispatcher
                    writer.write(b"".join(settings.initial_status())
                                 + codec.encode_backend_key(conn.pid, conn.secret) + codec.encode_ready("I"))
                    await writer.drain()
            except TimeoutError:
                await self._send_fatal(writer, Fatal("08P01", "startup timed out"))
                return
            await self._serve(reader, writer, frames, QueryProtocol(dispatcher))
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
            pass  # server shutdown: end the connection quietly
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
            if link is not None:
                try:
                    await asyncio.get_running_loop().run_in_executor(self.executor, link.close)
                except (asyncio.CancelledError, RuntimeError):
                    link.close()  # server shutting down: close inline rather than leak the session
            try:
                writer.close()
            except Exception:  # noqa: BLE001
                pass
            self._tasks.discard(task)

    async def _read(self, reader, frames: codec.FrameReader, typed: bool):
        while True:
            msg = frames.next_message() if typed else frames.next_startup()
            if msg is not None:
                return msg
            data = await reader.read(65536)
            if not data:
                raise _Closed()
            frames.feed(data)

    async def _send_raw(self, writer, data: bytes) -> None:
        try:
            writer.write(data)
            await asyncio.wait_for(writer.drain(), 2)
        except Exception:  # noqa: BLE001 - the peer may be gone already
            pass

    async def _send_fatal(self, writer, fatal: Fatal) -> None:
        await self._send_raw(writer, fatal.encode())

    async def _startup(self, reader, writer, frames):
        tls = False
        while True:
            packet = codec.decode_startup(await self._read(reader, frames, typed=False))
            if packet == "ssl":
                if self.options.ssl_context is None or tls:
                    writer.write(b"N")
                    await writer.drain()
                    continue
                if frames.buffered:
                    raise Fatal("08P01", "received unencrypted data after SSL request")
                writer.write(b"S")
                await writer.drain()
                await writer.start_tls(self.options.ssl_context)
                tls = True
                continue
            if packet == "gssenc":
                writer.write(b"N")
                await writer.drain()
                continue
            if isinstance(packet, codec.CancelKey):
                await self._cancel(packet)
                return None
            break
        user, negotiate = check_startup(packet, database=self.options.database)
        if negotiate is not None:
            writer.write(negotiate)
        if self._active >= self.options.max_connections:
            raise Fatal("53300", "sorry, too many clients already")
        self._active += 1
        if self.options.ssl_context is not None and not tls and self.options.host not in ("127.0.0.1", "::1", "localhost"):
            self._active -= 1
            raise Fatal("28000", "TLS is required on this server", hint="connect with sslmode=require")
        try:
            await self._authenticate(reader, writer, frames, user, tls)
        except BaseException:
            self._active -= 1
            raise
        conn = self._register()
        return user, conn, packet.params

    async def _authenticate(self, reader, writer, frames, user: str, tls: bool) -> None:
        users = scram.load_users(self.users_file)
        auth = Authenticator(user, users.get(user), method=self.options.auth_method, tls=tls)
        writer.write(auth.begin())
        await writer.drain()
        while True:
            kind, body = await self._read(reader, frames, typed=True)
            if kind != b"p":
                raise Fatal("08P01", f"expected a password message, got {kind!r}")
            try:
                reply, done = auth.step(body)
            except (scram.AuthFailure, codec.ProtocolViolation):
                await asyncio.sleep(self._failure_delay(writer))
                raise Fatal("28P01", f'password authentication failed for user "{user}"') from None
            writer.write(reply)
            await writer.drain()
            if done:
                return

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
            kind, body = await self._read(reader, frames, typed=True)
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
                await self.server.close()
                return
            self._ready.set()
            await self._stop.wait()
            await self.server.close()
        asyncio.run(main())

    def start(self, timeout: float = 120) -> "ServerThread":
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


def run(config, *, overrides: dict | None = None, users_file=None, **options) -> None:
    """Serve until interrupted (``dpsql serve``)."""
    server = Server(config, users_file=users_file, overrides=overrides, options=ServerOptions(**options))

    async def main():
        await server.start()
        print(f"dpsql: serving {server.options.database!r} on {server.options.host}:{server.port} "
              f"(catalog: {'schema-only PostgreSQL' if server.shadow else 'unavailable'})", flush=True)
        try:
            await asyncio.Event().wait()
        finally:
            await server.close()
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
