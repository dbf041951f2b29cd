"""Splitting shell input into SQL statements and backslash meta-commands.

A SQL statement ends at a ``;`` that is not inside a string literal, a quoted identifier
or a comment; a meta-command (a line starting with ``\\`` where a statement would begin)
ends at the end of its line.  The same scanner decides when Enter submits the buffer
(``is_complete``) and how ``-f`` scripts and ``\\workload`` files are read, so the shell
and its scripts can never disagree about where a statement stops.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    """One unit of work: ``kind`` is ``"sql"`` or ``"meta"``; ``offset`` is where
    ``text`` starts in the scanned input (for error positions in scripts)."""

    kind: str
    text: str
    offset: int


@dataclass(frozen=True)
class Meta:
    """A parsed meta-command: ``\\d adult`` is ``Meta("d", "adult")``."""

    name: str
    arg: str


_META = re.compile(r"\\([A-Za-z?]+!?)\s*(.*)", re.S)


def parse_meta(line: str) -> Meta:
    m = _META.match(line.strip())
    if m is None:
        # a lone backslash or one followed by punctuation: still a command, just unknown
        return Meta(line.strip().lstrip("\\"), "")
    return Meta(m.group(1), m.group(2).strip())


def scan(text: str) -> tuple[list[Item], str, int]:
    """Items completed in ``text``, the unfinished remainder and where it starts.

    The remainder is whatever follows the last complete item; it is "blank" when it only
    holds whitespace and comments (see ``is_blank``)."""
    items: list[Item] = []
    i, n = 0, len(text)
    start = 0
    first = 0  # where the current statement's first token starts (after comments)
    blank_so_far = True  # only whitespace/comments since ``start``
    while i < n:
        c = text[i]
        if c == "\\" and blank_so_far:
            end = text.find("\n", i)
            end = n if end < 0 else end
            items.append(Item("meta", text[i:end].rstrip(), i))
            i = start = end + 1 if end < n else n
            continue
        if c == "-" and text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
            continue
        if c == "/" and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            if end < 0:
                blank_so_far = False  # an unterminated comment keeps the statement open
            continue
        if c in "'\"":
            if blank_so_far:
                first = i
            blank_so_far = False
            j = _skip_quoted(text, i)
            i = n if j < 0 else j
            continue
        if c == ";":
            if not blank_so_far:
                items.append(Item("sql", text[first:i].rstrip(), first))
            i += 1
            start = i
            blank_so_far = True
            continue
        if not c.isspace():
            if blank_so_far:
                first = i
            blank_so_far = False
        i += 1
    return items, text[start:], start


def _skip_quoted(text: str, i: int) -> int:
    """Index after the quoted token starting at ``i`` (-1 if it is not closed); a doubled
    quote is an escaped quote, not a close."""
    q = text[i]
    j = i + 1
    while True:
        k = text.find(q, j)
        if k < 0:
            return -1
        if text.startswith(q * 2, k):
            j = k + 2
            continue
        return k + 1


def is_blank(text: str) -> bool:
    """True when ``text`` holds nothing but whitespace and complete comments."""
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = n if end < 0 else end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return False
            i = end + 2
        else:
            return False
    return True


def is_complete(text: str) -> bool:
    """Whether Enter should submit ``text``: every statement in it is terminated."""
    _, rest, _ = scan(text)
    return is_blank(rest)


def split_script(text: str) -> list[Item]:
    """All items of a script; a final statement without ``;`` still counts (as psql does)."""
    items, rest, start = scan(text)
    if not is_blank(rest):
        lead = _blank_prefix(rest)
        items.append(Item("sql", rest[lead:].rstrip(), start + lead))
    return items


def _blank_prefix(text: str) -> int:
    """Length of the whitespace and complete comments ``text`` starts with."""
    i, n = 0, len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("--", i) and "\n" in text[i:]:
            i = text.index("\n", i) + 1
        elif text.startswith("/*", i) and "*/" in text[i + 2:]:
            i = text.index("*/", i + 2) + 2
        else:
            break
    return i


def string_start(text: str) -> int | None:
    """Index of the quote opening a single-quoted literal left open at the end of
    ``text``, or None when the end of ``text`` is not inside one."""
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("--", i):
            end = text.find("\n", i)
            if end < 0:
                return None
            i = end + 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            if end < 0:
                return None
            i = end + 2
        elif c in "'\"":
            j = _skip_quoted(text, i)
            if j < 0:
                return i if c == "'" else None
            i = j
        else:
            i += 1
    return None


def in_string(text: str) -> bool:
    """Whether the end of ``text`` lies inside an open single-quoted literal."""
    return string_start(text) is not None


def current_statement(text: str) -> str:
    """The statement the cursor is in: text after the last complete item."""
    _, rest, _ = scan(text)
    return rest


__all__ = ["Item", "Meta", "parse_meta", "scan", "is_blank", "is_complete", "split_script",
           "in_string", "string_start", "current_statement"]
