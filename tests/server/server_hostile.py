"""Hostile clients for the bounded loopback load tests and ``bench/server_load.py --hostile``.

``Slowloris``: sockets that never finish authenticating, each sending one byte of a startup
packet every 0.5–0.9 s (the packet claims 9 999 bytes, so it never completes), reopened as
soon as the server drops them — the pre-authentication attack of issue 34 item 6.  All of it
runs in one thread over non-blocking sockets, bounded in count (``sockets``) and in time (until
``stop()``)."""

from __future__ import annotations

import random
import selectors
import socket
import struct
import threading
import time


class Slowloris:
    def __init__(self, port: int, sockets: int = 170, interval=(0.5, 0.9), source: str = "127.0.0.1",
                 seed: int = 34) -> None:
        self.port = port
        self.sockets = sockets
        self.interval = interval
        self.source = source
        self.opened = self.dropped = self.bytes = 0
        self._rng = random.Random(seed)
        self._packet = struct.pack("!ii", 9999, 196608) + b"user\x00mallory\x00database\x00dpsql\x00" + b"x" * 9000
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="slowloris", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(30)

    def _open(self, sel, now):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        try:
            s.bind((self.source, 0))
            s.connect_ex(("127.0.0.1", self.port))
        except OSError:
            s.close()
            return
        self.opened += 1
        sel.register(s, selectors.EVENT_READ, [0, now + self._rng.uniform(*self.interval)])

    def _run(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                while len(sel.get_map()) < self.sockets and not self._stop.is_set():
                    self._open(sel, now)
                for key, _ in sel.select(timeout=0.05):    # the server's reply or its close
                    try:
                        data = key.fileobj.recv(65536)
                    except BlockingIOError:
                        continue
                    except OSError:
                        data = b""
                    if not data:
                        self._drop(sel, key.fileobj)
                now = time.monotonic()
                for key in list(sel.get_map().values()):
                    state = key.data
                    if now < state[1]:
                        continue
                    try:
                        sent = key.fileobj.send(self._packet[state[0]:state[0] + 1])
                    except BlockingIOError:
                        sent = 0
                    except OSError:
                        self._drop(sel, key.fileobj)
                        continue
                    self.bytes += sent
                    state[0] = (state[0] + sent) % len(self._packet)
                    state[1] = now + self._rng.uniform(*self.interval)
        finally:
            for key in list(sel.get_map().values()):
                sel.unregister(key.fileobj)
                key.fileobj.close()
            sel.close()

    def _drop(self, sel, s) -> None:
        sel.unregister(s)
        s.close()
        self.dropped += 1
