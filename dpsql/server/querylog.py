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


class QueryLog:
    def __init__(self, target) -> None:
        """``target``: a path, ``"-"`` (stderr) or a writable text stream."""
        self._own = False
        if target == "-":
            self._out = sys.stderr
        elif isinstance(target, (str, os.PathLike)):
            fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            self._out = os.fdopen(fd, "a", buffering=1, encoding="utf-8")
            self._own = True
        else:
            self._out = target

    def write(self, *, user: str, pid: int, route: str, fingerprint: str, statement: str, cost: float,
              seconds: float, error=None) -> None:
        now = time.time()
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1000):03d}Z",
                 "user": user, "pid": pid, "route": route, "fingerprint": fingerprint, "statement": statement,
                 "cost_rho": float(cost), "seconds": round(seconds, 6), "outcome": "ok" if error is None else "error"}
        if error is not None:
            entry["sqlstate"] = error.sqlstate
            entry["message"] = error.fields.get("M", "")
        try:
            self._out.write(json.dumps(entry, ensure_ascii=False) + "\n")
            self._out.flush()
        except (OSError, ValueError):
            pass  # a full disk or a closed stderr must not fail the statement

    def close(self) -> None:
        if self._own:
            self._out.close()
