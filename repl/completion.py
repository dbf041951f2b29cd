"""Tab completion: keywords, tables, columns, meta-commands and category labels.

Everything offered comes from public metadata: the declared domains in the engine's
catalog.  In particular the labels offered inside a string literal or an ``IN`` list
(``WHERE sex = '`` → ``Female``, ``Male``) are the *declared* categories of the column
being compared, never values read from the rows, so completing them reveals nothing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

from prompt_toolkit.completion import Completer, Completion, PathCompleter
from prompt_toolkit.document import Document

from repl.lexer import FUNCTIONS, KEYWORDS
from repl.render import ERROR_MODES
from repl.statements import scan, string_start

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*$")
_TABLE_REF = re.compile(r'\b(?:FROM|JOIN)\s+"?([A-Za-z_][A-Za-z0-9_]*)"?', re.I)
_COLUMN = r'(?:"?([A-Za-z_][A-Za-z0-9_]*)"?\s*\.\s*)?"?([A-Za-z_][A-Za-z0-9_]*)"?'
_COMPARISON = re.compile(_COLUMN + r"\s*(?:=|<>|!=|<=|>=|<|>|\bNOT\s+I?LIKE\b|\bI?LIKE\b)\s*$", re.I)
_IN_HEAD = re.compile(_COLUMN + r"\s+(?:NOT\s+)?IN\s*$", re.I)
_IN_BODY = re.compile(r"^(?:\s*'(?:[^']|'')*'\s*,)*\s*$")
_LAST_KEYWORD = re.compile(r"\b(FROM|JOIN|WHERE|SELECT|BY|AND|OR|ON|HAVING|INTO|TABLE)\b", re.I)


def _quote_label(label: str) -> str:
    return label.replace("'", "''")


class SqlCompleter(Completer):
    """Completes SQL and meta-commands against ``catalog()`` (name → TableSchema).

    ``meta_commands`` maps each command name (without the backslash) to the kind of
    argument it takes: ``"table"``, ``"file"``, ``"sql"``, ``"errors"``, ``"set"`` or
    ``None``."""

    def __init__(self, catalog: Callable[[], Mapping], meta_commands: Mapping[str, str | None]) -> None:
        self.catalog = catalog
        self.meta_commands = dict(meta_commands)
        self._paths = PathCompleter(expanduser=True)

    # -- entry point ---------------------------------------------------------------------
    def get_completions(self, document: Document, complete_event) -> Iterable[Completion]:
        text = document.text_before_cursor
        items, before, _ = scan(text)
        if items and items[-1].kind == "meta" and "\n" not in text[items[-1].offset:]:
            # the cursor is still on the meta-command's line
            yield from self._meta(text[items[-1].offset:], document, complete_event)
            return
        after = document.text_after_cursor.split(";", 1)[0]
        yield from self._sql(before, before + after)

    # -- SQL -----------------------------------------------------------------------------
    def _sql(self, before: str, statement: str) -> Iterable[Completion]:
        catalog = self.catalog()
        # every table's column names: the private tables' and the public tables' (public metadata)
        names = {t: list(s.column_names) for t, s in catalog.items()}
        names.update({t: [c.name for c in p.columns] for t, p in getattr(catalog, "public", {}).items()
                      if t not in names})
        mentioned = [t for t in _TABLE_REF.findall(statement) if t in catalog]
        named = [t for t in _TABLE_REF.findall(statement) if t in names]
        start = string_start(before)
        if start is not None:
            yield from self._labels_in_string(before, start, catalog, mentioned)
            return
        m = _WORD.search(before)
        partial = m.group() if m else ""
        head = before[:len(before) - len(partial)]
        if head.endswith(".") and not partial.startswith("."):
            qualifier = _WORD.search(head[:-1].rstrip('"'))
            table = qualifier.group() if qualifier else None
            if table in names:
                yield from self._names(partial, names[table], "column")
            return
        column = self._compared_column(head, catalog, mentioned)
        if column is not None and not partial:
            # a value is expected: offer the quoted labels themselves
            for label in self._labels(column):
                text = f"'{_quote_label(label)}'"
                yield Completion(text, 0, display=text, display_meta="label")
            return
        last = _LAST_KEYWORD.findall(head)
        if last and last[-1].upper() in ("FROM", "JOIN", "INTO", "TABLE") and _after_last_keyword_is_blank(head):
            yield from self._names(partial, sorted(names), "table")
            return
        columns: list[str] = []
        for t in (named or sorted(names)):
            for c in names[t]:
                if c not in columns:
                    columns.append(c)
        yield from self._names(partial, columns, "column")
        yield from self._words(partial, FUNCTIONS, "function", suffix="(")
        yield from self._words(partial, KEYWORDS, "keyword")
        yield from self._names(partial, sorted(names), "table")

    def _labels_in_string(self, before: str, start: int, catalog, mentioned) -> Iterable[Completion]:
        partial = before[start + 1:].replace("''", "'")
        column = self._compared_column(before[:start], catalog, mentioned)
        if column is None:
            return
        raw_len = len(before) - start - 1
        low = partial.lower()
        for label in self._labels(column):
            if label.lower().startswith(low):
                yield Completion(_quote_label(label) + "'", -raw_len, display=label,
                                 display_meta="label")

    def _compared_column(self, head: str, catalog, mentioned):
        """The (table, column) a value at the end of ``head`` is compared with, if any."""
        m = _COMPARISON.search(head)
        if m is None:
            paren = _open_paren(head)
            if paren is None or not _IN_BODY.match(head[paren + 1:]):
                return None
            m = _IN_HEAD.search(head[:paren])
            if m is None:
                return None
        qualifier, name = m.group(1), m.group(2)
        tables = [qualifier] if qualifier in catalog else (mentioned or sorted(catalog))
        for t in tables:
            if name in catalog[t].column_names:
                return catalog[t].attribute(name)
        return None

    @staticmethod
    def _labels(attribute) -> list[str]:
        """Declared labels of a categorical attribute, without its NULL and other cells."""
        if attribute.kind != "categorical":
            return []
        skip = {attribute.null_index, attribute.other_index}
        return [str(lab) for i, lab in enumerate(attribute.labels()) if i not in skip and lab is not None]

    @staticmethod
    def _names(partial: str, names: Sequence[str], meta: str) -> Iterable[Completion]:
        low = partial.lower()
        for name in names:
            if name.lower().startswith(low) and name != partial:
                yield Completion(name, -len(partial), display_meta=meta)

    @staticmethod
    def _words(partial: str, words: Sequence[str], meta: str, suffix: str = "") -> Iterable[Completion]:
        if not partial:
            return
        lower = partial.islower()
        up = partial.upper()
        for w in words:
            if w.startswith(up):
                text = w.lower() if lower else w
                yield Completion(text + suffix, -len(partial), display=text, display_meta=meta)

    # -- meta-commands -------------------------------------------------------------------
    def _meta(self, text: str, document: Document, complete_event) -> Iterable[Completion]:
        m = re.match(r"\\(\S*)(\s+)?(.*)$", text, re.S)
        if m is None:   # not a meta-command
            return
        name, space, arg = m.group(1), m.group(2), m.group(3)
        if not space:
            for cmd in sorted(self.meta_commands):
                if cmd.startswith(name):
                    yield Completion("\\" + cmd, -len(name) - 1, display_meta="command")
            return
        kind = self.meta_commands.get(name)
        if kind == "table":
            yield from self._names(arg, sorted(self.catalog()), "table")
        elif kind == "file":
            sub = Document(arg, len(arg))
            yield from self._paths.get_completions(sub, complete_event)
        elif kind == "errors":
            yield from self._names(arg, ERROR_MODES, "errors")
        elif kind == "set":
            parts = arg.split()
            if len(parts) <= 1 and not arg.endswith(" "):
                yield from self._names(arg, ["vi", "timing", "expanded", "errors", "pager"], "setting")
            elif parts[0] == "errors":
                yield from self._names(parts[1] if len(parts) > 1 else "", ERROR_MODES, "value")
            else:
                yield from self._names(parts[1] if len(parts) > 1 else "", ["on", "off"], "value")
        elif kind == "sql":
            yield from self._sql(arg, arg)


def _open_paren(text: str) -> int | None:
    """Index of the innermost ``(`` left open at the end of ``text`` (strings skipped)."""
    stack: list[int] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c == "'":
            j = text.find("'", i + 1)
            while j >= 0 and text.startswith("''", j):
                j = text.find("'", j + 2)
            if j < 0:
                return None
            i = j + 1
            continue
        if c == "(":
            stack.append(i)
        elif c == ")" and stack:
            stack.pop()
        i += 1
    return stack[-1] if stack else None


def _after_last_keyword_is_blank(head: str) -> bool:
    """After ``FROM`` only the table name may be completed, not after ``FROM t WHERE``."""
    m = list(_LAST_KEYWORD.finditer(head))
    return not head[m[-1].end():].strip() if m else False


__all__ = ["SqlCompleter"]
