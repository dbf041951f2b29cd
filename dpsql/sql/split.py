"""Split SQL text into statements at top-level semicolons.

Used for workload files (one query per statement), ``dpsql shell -f`` and the wire
server's simple-query messages.  Semicolons inside string literals, quoted identifiers,
dollar-quoted strings and comments do not split.
"""

from __future__ import annotations


def split_statements(text: str) -> list[str]:
    """Non-empty statements of ``text`` (without the terminating semicolons, stripped)."""
    out: list[str] = []
    buf: list[str] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch in ("'", '"'):
            j = i + 1
            while j < n:
                if text[j] == ch:
                    if j + 1 < n and text[j + 1] == ch:  # doubled quote escapes itself
                        j += 2
                        continue
                    break
                j += 1
            buf.append(text[i:j + 1])
            i = j + 1
        elif text.startswith("--", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            buf.append(text[i:j])
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            buf.append(text[i:j])
            i = j
        elif ch == "$":
            # $tag$ ... $tag$ (PostgreSQL dollar quoting)
            j = text.find("$", i + 1)
            tag = text[i:j + 1] if j > 0 else ""
            if tag and (tag == "$$" or tag[1:-1].isidentifier()):
                end = text.find(tag, j + 1)
                end = n if end < 0 else end + len(tag)
                buf.append(text[i:end])
                i = end
            else:
                buf.append(ch)
                i += 1
        elif ch == ";":
            out.append("".join(buf))
            buf = []
            i += 1
        else:
            buf.append(ch)
            i += 1
    out.append("".join(buf))
    return [s.strip() for s in out if _has_code(s)]


def _has_code(statement: str) -> bool:
    """True unless the statement is only whitespace and comments."""
    s = statement
    while True:
        s = s.strip()
        if s.startswith("--"):
            nl = s.find("\n")
            s = "" if nl < 0 else s[nl + 1:]
        elif s.startswith("/*"):
            end = s.find("*/")
            s = "" if end < 0 else s[end + 2:]
        else:
            return bool(s)
