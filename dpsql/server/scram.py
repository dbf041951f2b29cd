"""SCRAM-SHA-256 authentication (RFC 5802, RFC 7677) and the users file.

Verifiers use PostgreSQL's ``pg_authid`` format
``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` (base64 fields), so the
password itself is never stored and a stolen users file cannot be replayed as a password.
``ScramExchange`` is the server side of one exchange as a sans-IO object.  For a user that
does not exist it runs a *mock* exchange with a salt derived from the server secret and the
name, so the client sees the same message flow (and the same salt every time, across
restarts too, as for a real user) for known and unknown names and cannot enumerate users;
the exchange simply fails at the proof check.

The users file sits next to the config (``<config stem>.users.json``), mode 0600, and is
managed by ``dpsql user add/remove``.  The server secret (32 random bytes, created on first
use, mode 0600) sits beside it (``<config stem>.users.secret``): it keys the mock salts and
the names of the analysts' catalog roles.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import secrets
from pathlib import Path

from dpsql.files import atomic_write

MECHANISM = "SCRAM-SHA-256"
DEFAULT_ITERATIONS = 4096
SALT_BYTES = 16


class AuthFailure(Exception):
    """Authentication failed; the client is told only "password authentication failed"."""


def _hmac(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.sha256).digest()


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise AuthFailure("malformed base64 in SCRAM message") from None


def _salted_password(password: str, salt: bytes, iterations: int) -> bytes:
    # RFC 7677 asks for SASLprep; PostgreSQL falls back to the raw bytes when SASLprep fails,
    # and ASCII passwords are unchanged by it, so NFKC normalisation is the close fit here.
    import unicodedata
    data = unicodedata.normalize("NFKC", password).encode("utf-8")
    return hashlib.pbkdf2_hmac("sha256", data, salt, iterations)


def mock_salt(key: bytes, user: str) -> bytes:
    """The salt shown for a user that does not exist: stable for a given server secret."""
    return _hmac(key, b"scram-mock-salt\0" + user.encode("utf-8"))[:SALT_BYTES]


def make_verifier(password: str, *, salt: bytes | None = None, iterations: int = DEFAULT_ITERATIONS) -> str:
    salt = salt if salt is not None else secrets.token_bytes(SALT_BYTES)
    salted = _salted_password(password, salt, iterations)
    stored_key = hashlib.sha256(_hmac(salted, b"Client Key")).digest()
    server_key = _hmac(salted, b"Server Key")
    return f"{MECHANISM}${iterations}:{_b64(salt)}${_b64(stored_key)}:{_b64(server_key)}"


def parse_verifier(verifier: str) -> tuple[int, bytes, bytes, bytes]:
    """``(iterations, salt, stored_key, server_key)``; ValueError when malformed."""
    try:
        mech, params, keys = verifier.split("$")
        iterations, salt = params.split(":")
        stored, server = keys.split(":")
        if mech != MECHANISM:
            raise ValueError(mech)
        return int(iterations), base64.b64decode(salt), base64.b64decode(stored), base64.b64decode(server)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"malformed SCRAM verifier: {exc}") from None


def check_password(password: str, verifier: str) -> bool:
    """Cleartext check (only ever used over TLS) against a stored verifier."""
    iterations, salt, stored_key, _ = parse_verifier(verifier)
    salted = _salted_password(password, salt, iterations)
    return hmac.compare_digest(hashlib.sha256(_hmac(salted, b"Client Key")).digest(), stored_key)


def _attributes(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        if len(part) < 2 or part[1] != "=":
            raise AuthFailure("malformed SCRAM attribute")
        out.setdefault(part[0], part[2:])
    return out


class ScramExchange:
    """Server side of one SCRAM-SHA-256 exchange (no channel binding)."""

    def __init__(self, user: str, verifier: str | None, *, mock_key: bytes, nonce: str | None = None) -> None:
        """``mock_key``: the server secret (``load_secret``) that keys unknown users' salts."""
        self.user = user
        if verifier is not None:
            self._iterations, self._salt, self._stored_key, self._server_key = parse_verifier(verifier)
            self._known = True
        else:
            self._iterations = DEFAULT_ITERATIONS
            self._salt = mock_salt(mock_key, user)
            self._stored_key = self._server_key = secrets.token_bytes(32)
            self._known = False
        self._server_nonce = nonce if nonce is not None else _b64(secrets.token_bytes(18))
        self._state = "first"

    def first(self, client_first: bytes) -> bytes:
        """client-first-message → server-first-message."""
        if self._state != "first":
            raise AuthFailure("unexpected SCRAM message")
        text = client_first.decode("utf-8", "replace")
        parts = text.split(",", 2)
        if len(parts) != 3:
            raise AuthFailure("malformed client-first-message")
        cbind, authzid, bare = parts
        if cbind.startswith("p="):
            raise AuthFailure("channel binding is not supported; use SCRAM-SHA-256")
        if cbind not in ("n", "y") or authzid:
            raise AuthFailure("malformed GS2 header")
        attrs = _attributes(bare)
        if "r" not in attrs or not attrs["r"]:
            raise AuthFailure("client nonce missing")
        self._gs2_header = f"{cbind},{authzid},"
        self._client_first_bare = bare
        self._nonce = attrs["r"] + self._server_nonce
        self._server_first = f"r={self._nonce},s={_b64(self._salt)},i={self._iterations}"
        self._state = "final"
        return self._server_first.encode("utf-8")

    def final(self, client_final: bytes) -> bytes:
        """client-final-message → server-final-message; AuthFailure when the proof is wrong."""
        if self._state != "final":
            raise AuthFailure("unexpected SCRAM message")
        self._state = "done"
        text = client_final.decode("utf-8", "replace")
        without_proof, sep, proof_text = text.rpartition(",p=")
        if not sep:
            raise AuthFailure("client proof missing")
        attrs = _attributes(without_proof)
        if attrs.get("c") != _b64(self._gs2_header.encode("utf-8")):
            raise AuthFailure("channel binding data mismatch")
        if not hmac.compare_digest(attrs.get("r", "").encode(), self._nonce.encode()):
            raise AuthFailure("nonce mismatch")
        proof = _unb64(proof_text)
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = _hmac(self._stored_key, auth_message)
        if len(proof) != len(signature):
            raise AuthFailure("bad proof length")
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        ok = hmac.compare_digest(hashlib.sha256(client_key).digest(), self._stored_key)
        if not (ok and self._known):
            raise AuthFailure("password authentication failed")
        return f"v={_b64(_hmac(self._server_key, auth_message))}".encode()


# -- the users file ---------------------------------------------------------------------------

def users_path(config_path: str | os.PathLike) -> Path:
    path = Path(config_path)
    return path.with_name(f"{path.stem}.users.json")


def secret_path(users_file: str | os.PathLike) -> Path:
    """``<stem>.users.json`` → ``<stem>.users.secret``."""
    path = Path(users_file)
    return path.with_name(f"{path.stem}.secret")


def load_secret(users_file: str | os.PathLike) -> bytes:
    """The server secret beside the users file, created (0600, exclusively) on first use."""
    path = secret_path(users_file)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:   # another process created it first: use theirs
            data = path.read_bytes()
        else:
            data = secrets.token_bytes(32)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                fh.flush()
                os.fsync(fh.fileno())
    if len(data) < 32:
        raise ValueError(f"server secret {path} is shorter than 32 bytes; delete it to have a new one made")
    return data


def load_users(path: str | os.PathLike) -> dict[str, str]:
    path = Path(path)
    if not path.exists():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    users = data.get("users", {}) if isinstance(data, dict) else {}
    for verifier in users.values():
        parse_verifier(verifier)
    return dict(users)


def save_users(path: str | os.PathLike, users: dict[str, str]) -> None:
    """Atomic replace; the file is created 0600 so verifiers are readable by the owner only."""
    def write(fh):
        json.dump({"users": dict(sorted(users.items()))}, fh, indent=2)
        fh.write("\n")
    atomic_write(path, write, text=True, prefix=f".{Path(path).name}.", mode=0o600)


def add_user(path, name: str, password: str) -> None:
    if not name or "\0" in name:
        raise ValueError("user name must be non-empty")
    if not password:
        raise ValueError("password must be non-empty")
    users = load_users(path)
    users[name] = make_verifier(password)
    save_users(path, users)


def remove_user(path, name: str) -> bool:
    users = load_users(path)
    if name not in users:
        return False
    del users[name]
    save_users(path, users)
    return True
