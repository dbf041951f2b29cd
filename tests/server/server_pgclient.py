"""A minimal raw PostgreSQL client for protocol-conformance tests (SCRAM included), so the
tests control every byte sent and see every message received."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import socket

from dpsql.server import codec


class RawClient:
    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.frames = codec.FrameReader()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_byte(self) -> bytes:
        return self.sock.recv(1)

    def read(self):
        """Next backend message as (kind, body), or None when the server closed."""
        while True:
            msg = self.frames.next_message()
            if msg is not None:
                return msg
            data = self.sock.recv(65536)
            if not data:
                return None
            self.frames.feed(data)

    def until(self, kind: bytes = b"Z"):
        """Messages up to and including the first of ``kind`` (or until close)."""
        out = []
        while True:
            msg = self.read()
            if msg is None:
                return out
            out.append(msg)
            if msg[0] == kind:
                return out

    def startup(self, user: str, password: str | None, database: str = "dpsql", extra=None):
        params = {"user": user, "database": database, **(extra or {})}
        self.send(codec.encode_startup(params))
        msgs = []
        while True:
            msg = self.read()
            if msg is None:
                return msgs
            msgs.append(msg)
            kind, body = msg
            if kind == b"R":
                code, data = codec.decode_auth(body)
                if code == 10:
                    self._nonce = base64.b64encode(secrets.token_bytes(18)).decode()
                    self._first_bare = f"n=,r={self._nonce}"
                    first = ("n,," + self._first_bare).encode()
                    self.send(codec.message(b"p", codec.cstr("SCRAM-SHA-256") + len(first).to_bytes(4, "big") + first))
                elif code == 11:
                    self.send(codec.message(b"p", self._final(data.decode(), password or "")))
                elif code == 3:
                    self.send(codec.message(b"p", codec.cstr(password or "")))
            elif kind in (b"E", b"Z"):
                return msgs

    def _final(self, server_first: str, password: str) -> bytes:
        attrs = dict(part.split("=", 1) for part in server_first.split(","))
        salted = hashlib.pbkdf2_hmac("sha256", password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"]))
        client_key = hmac.new(salted, b"Client Key", hashlib.sha256).digest()
        stored = hashlib.sha256(client_key).digest()
        without_proof = f"c=biws,r={attrs['r']}"
        auth_message = f"{self._first_bare},{server_first},{without_proof}".encode()
        sig = hmac.new(stored, auth_message, hashlib.sha256).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, sig))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def error_fields(msgs) -> dict:
    for kind, body in msgs:
        if kind == b"E":
            return codec.decode_fields(body)
    return {}
