"""The structured query log: one JSON line per statement the server answered or refused.

Fields: ``time`` (UTC, ISO 8601), ``user``, ``pid`` (the connection's backend pid, as in
BackendKeyData), ``route`` (engine, catalog, local, session, error), ``fingerprint`` (a hash
of the statement with its literals replaced, so the same query with other constants groups
together), ``statement`` (the text the analyst sent), ``cost_rho`` (privacy spent by this
statement; 0 for repeats and everything that is not an engine query), ``seconds``,
``outcome`` (``ok`` or ``error``) and, for errors, ``sqlstate`` and ``message``.  Never
values: no result rows and no row counts go in.  The statement text is the analyst's own
input; engine error messages carry public information only (docs/privacy.md).

Written from the event loop, one short ``write`` per line on a line-buffered file (or
stderr), so lines from concurrent connections never interleave.

Bounded on disk (issue 34 item 11: one connection sending 256 KiB statements grew it by
73 MiB per 10 s): a statement longer than ``STATEMENT_CHARS`` is logged cut to that length
with its full length in ``statement_chars``, and a file log is rotated by size, as
PostgreSQL's ``log_rotation_size``: once the next line would take it past ``max_bytes`` it
is renamed ``PATH.1`` (``PATH.1`` to ``PATH.2`` …, the oldest of ``keep`` dropped) and a new
``PATH`` begun.  So the log never holds more than ``(keep + 1) x max_bytes``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
import time


def fingerprint(tokens, sql: str) -> str:
    """16 hex digits identifying the statement's shape (literals and parameters replaced)."""
    if tokens is None:
        shape = " ".join(sql.split()).lower()
    else:
        parts = []
        for tok in tokens:
            name = tok.token_type.name
            if name in ("STRING", "NUMBER", "NATIONAL_STRING", "BIT_STRING", "HEX_STRING", "BYTE_STRING",
                        "RAW_STRING", "HEREDOC_STRING", "UNICODE_STRING", "NATIONAL_RAW_STRING", "PARAMETER",
                        "PLACEHOLDER"):
                parts.append("?")
            elif name in ("VAR", "IDENTIFIER"):
                parts.append(tok.text.lower())
            else:
                parts.append(tok.text.upper())
        shape = " ".join(parts)
    return hashlib.sha256(shape.encode("utf-8")).hexdigest()[:16]


STATEMENT_CHARS = 16 * 1024
DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_KEEP = 4


class QueryLog:
    def __init__(self, target, *, max_bytes: int = DEFAULT_MAX_BYTES, keep: int = DEFAULT_KEEP) -> None:
        """``target``: a path (rotated by size), ``"-"`` (stderr) or a writable text stream."""
        self._own = False
        self.path: str | None = None
        self.max_bytes = max_bytes
        self.keep = keep
        self._size = 0
        if target == "-":
            self._out = sys.stderr
        elif isinstance(target, (str, os.PathLike)):
            self.path = os.fspath(target)
            self._open()
        else:
            self._out = target

    def _open(self) -> None:
        assert self.path is not None   # only a log written to a file is (re)opened
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._size = os.fstat(fd).st_size
        self._out = os.fdopen(fd, "a", buffering=1, encoding="utf-8")
        self._own = True

    def _rotate(self) -> None:
        assert self.path is not None   # only a log written to a file rotates
        self._out.close()
        for n in range(self.keep, 0, -1):          # PATH.keep is overwritten: the oldest goes
            older = f"{self.path}.{n - 1}" if n > 1 else self.path
            if os.path.exists(older):
                os.replace(older, f"{self.path}.{n}")
        self._open()

    def write(self, *, user: str, pid: int, route: str, fingerprint: str, statement: str, cost: float,
              seconds: float, error=None) -> None:
        now = time.time()
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
                 "user": user, "pid": pid, "route": route, "fingerprint": fingerprint,
                 "statement": statement[:STATEMENT_CHARS],
                 "cost_rho": float(cost), "seconds": round(seconds, 6), "outcome": "ok" if error is None else "error"}
        if len(statement) > STATEMENT_CHARS:
            entry["statement_chars"] = len(statement)
        if error is not None:
            entry["sqlstate"] = error.sqlstate
            entry["message"] = error.fields.get("M", "")[:STATEMENT_CHARS]
        line = json.dumps(entry, ensure_ascii=False) + "\n"
        try:
            if self.path is not None:
                size = len(line.encode("utf-8"))
                if self._size and self._size + size > self.max_bytes:
                    self._rotate()
                self._size += size
            self._out.write(line)
            self._out.flush()
        except (OSError, ValueError):
            pass  # a full disk or a closed stderr must not fail the statement

    def close(self) -> None:
        if self._own:
            self._out.close()
