"""SQL syntax highlighting for the shell's input buffer.

pygments is not a dependency of dpsql (prompt-toolkit does not pull it in), so the shell
carries its own small lexer on prompt-toolkit's ``Lexer`` API.  It tokenises the whole
buffer at once, because strings and block comments may span lines, then hands each line
its slice of the tokens.  The keyword list is the dialect dpsql accepts plus common SQL
words, and is shared with completion.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from prompt_toolkit.document import Document
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.lexers import Lexer
from prompt_toolkit.styles import Style

KEYWORDS = (
    "SELECT", "FROM", "WHERE", "GROUP", "BY", "HAVING", "ORDER", "LIMIT", "OFFSET", "AS", "AND",
    "OR", "NOT", "IN", "IS", "NULL", "BETWEEN", "LIKE", "ILIKE", "CASE", "WHEN", "THEN", "ELSE",
    "END", "DISTINCT", "ASC", "DESC", "TRUE", "FALSE", "CAST", "WITH", "EXPLAIN", "SET", "SHOW",
    "RESET", "BEGIN", "COMMIT", "ROLLBACK", "ALL", "ROLLUP", "CUBE", "GROUPING", "SETS", "NULLS",
    "FIRST", "LAST", "FILTER", "OVER", "PARTITION", "INTEGER", "DOUBLE", "TEXT", "TO",
)
FUNCTIONS = (
    "COUNT", "SUM", "AVG", "MIN", "MAX", "MEDIAN", "QUANTILE", "PERCENTILE_CONT", "STDDEV",
    "VARIANCE", "COALESCE", "ROUND", "ABS",
)

_KEYWORD_SET = frozenset(KEYWORDS)
_FUNCTION_SET = frozenset(FUNCTIONS)

_TOKEN = re.compile(r"""
    (?P<comment>--[^\n]*|/\*.*?(?:\*/|\Z))
  | (?P<string>'(?:[^']|'')*(?:'|\Z))
  | (?P<ident>"(?:[^"]|"")*(?:"|\Z))
  | (?P<number>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?)
  | (?P<word>[A-Za-z_][A-Za-z0-9_$]*)
  | (?P<param>\?)
  | (?P<op><>|!=|<=|>=|\|\||::|[-+*/%=<>(),.;])
  | (?P<space>\s+)
  | (?P<other>.)
""", re.S | re.X)

STYLE = Style.from_dict({
    "sql.keyword": "bold ansiblue",
    "sql.function": "ansicyan",
    "sql.string": "ansigreen",
    "sql.number": "ansimagenta",
    "sql.comment": "italic ansibrightblack",
    "sql.identifier": "",
    "sql.param": "ansiyellow",
    "sql.operator": "",
    "sql.meta": "bold ansiyellow",
    "bottom-toolbar": "noreverse bg:ansibrightblack fg:ansiwhite",
    "bottom-toolbar.key": "bold",
    "bottom-toolbar.warn": "bold fg:ansired",
    "prompt": "bold",
})


def tokens(text: str) -> list[tuple[str, str]]:
    """``(style, text)`` for the whole text; meta-command lines are one token each."""
    out: list[tuple[str, str]] = []
    pos = 0
    at_start = True  # a backslash starts a meta-command only where a statement could start
    for m in _TOKEN.finditer(text):
        kind = m.lastgroup
        value = m.group()
        if m.start() < pos:
            continue
        if kind == "other" and value == "\\" and at_start:
            end = text.find("\n", m.start())
            end = len(text) if end < 0 else end
            out.append(("class:sql.meta", text[m.start():end]))
            pos = end
            continue
        pos = m.end()
        if kind == "word":
            upper = value.upper()
            if upper in _KEYWORD_SET:
                style = "class:sql.keyword"
            elif upper in _FUNCTION_SET:
                style = "class:sql.function"
            else:
                style = "class:sql.identifier"
        else:
            style = {"comment": "class:sql.comment", "string": "class:sql.string",
                     "ident": "class:sql.identifier", "number": "class:sql.number",
                     "param": "class:sql.param", "op": "class:sql.operator"}.get(kind or "", "")
        out.append((style, value))
        if kind == "op" and value == ";":
            at_start = True
        elif kind not in ("space", "comment"):
            at_start = False
    return out


def _split_lines(toks: list[tuple[str, str]]) -> list[StyleAndTextTuples]:
    lines: list[StyleAndTextTuples] = [[]]
    for style, value in toks:
        parts = value.split("\n")
        for k, part in enumerate(parts):
            if k:
                lines.append([])
            if part:
                lines[-1].append((style, part))
    return lines


class SqlLexer(Lexer):
    """Highlights SQL keywords, functions, literals, comments and meta-commands."""

    def lex_document(self, document: Document) -> Callable[[int], StyleAndTextTuples]:
        lines = _split_lines(tokens(document.text))

        def get_line(lineno: int) -> StyleAndTextTuples:
            return lines[lineno] if 0 <= lineno < len(lines) else []

        return get_line


__all__ = ["SqlLexer", "tokens", "KEYWORDS", "FUNCTIONS", "STYLE"]
