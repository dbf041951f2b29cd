"""SQL text → one sqlglot AST, with parameters bound and positions kept.

The first stage of the front end (sqlglot's layering: parse → bind → lower).  It turns
sqlglot's parse errors into :class:`dpsql.errors.SyntaxError` with a 1-based character
position, peels off a leading ``EXPLAIN``, binds qmark (``?``) parameters as literal nodes
of the AST (never by splicing text, so a parameter can never change the statement's
shape), and refuses anything that is not a single query (DDL, DML, several statements).
"""

from __future__ import annotations

import datetime
import decimal
import re
from dataclasses import dataclass
from typing import Any, Sequence

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dpsql.errors import InterfaceError, PrivacyViolationError, SyntaxError, UnsupportedQueryError

__all__ = ["Statement", "parse_statement", "position_of", "DIALECTS"]

DIALECTS = ("postgres", "duckdb")

# Leading comments are allowed before EXPLAIN (BI tools prepend them).
_EXPLAIN = re.compile(r"^(?:\s+|--[^\n]*(?:\n|$)|/\*.*?\*/)*explain(\s+analyze)?(\s+verbose)?\s+",
                      re.IGNORECASE | re.DOTALL)

# Statements that write or change the schema.  dpsql only ever reads the private table.
_WRITE_WORDS = {"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT", "REVOKE",
                "COPY", "MERGE", "VACUUM", "REINDEX", "CLUSTER", "COMMENT"}
_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Merge,
           exp.TruncateTable, exp.Copy)


@dataclass(frozen=True)
class Statement:
    """A parsed query: ``tree`` is a fresh AST owned by the caller; ``offset`` maps its
    character positions back into the original SQL text (non-zero after ``EXPLAIN``)."""

    sql: str
    tree: exp.Expression
    offset: int
    explain: bool

    def pos(self, node: exp.Expression | None, name: str | None = None) -> int | None:
        return position_of(node, self.sql[self.offset:], self.offset, name)


def _line_col_to_position(text: str, line: int, col: int, width: int) -> int:
    """1-based offset of the token ending at (line, col), as sqlglot reports it."""
    lines = text.split("\n")
    line = max(1, min(line, len(lines)))
    start = sum(len(s) + 1 for s in lines[: line - 1])
    return max(1, start + col - max(width, 1) + 1)


def _syntax_error(err: ParseError | TokenError, text: str, offset: int) -> SyntaxError:
    info = err.errors[0] if isinstance(err, ParseError) and err.errors else {}
    desc = info.get("description") or str(err).split("\n")[0]
    pos = None
    if info.get("line") is not None and info.get("col") is not None:
        pos = offset + _line_col_to_position(text, info["line"], info["col"], len(info.get("highlight") or ""))
    near = info.get("highlight")
    message = f"syntax error at or near \"{near}\"" if near else "syntax error"
    return SyntaxError(message, position=pos, detail=desc,
                       hint="check the SQL near the reported position")


def _literal_for(value: Any, index: int) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float, decimal.Decimal)):
        if isinstance(value, float) and value != value:
            raise InterfaceError(f"parameter {index + 1} is NaN", hint="pass a finite number")
        if value < 0:
            # sqlglot spells negative numbers as unary minus; keep that shape for binding.
            return exp.Neg(this=_literal_for(-value, index))
        return exp.Literal.number(repr(value) if isinstance(value, float) else str(value))
    if isinstance(value, str):
        return exp.Literal.string(value)
    if isinstance(value, (datetime.date, datetime.datetime)):
        return exp.Literal.string(value.isoformat())
    raise InterfaceError(f"parameter {index + 1} has unsupported type {type(value).__name__}",
                         hint="pass None, bool, int, float, Decimal or str")


def _bind_params(tree: exp.Expression, params: Sequence[Any] | None) -> exp.Expression:
    if isinstance(params, (str, bytes)):
        raise InterfaceError("parameters must be a sequence, not a string", hint="wrap it: (value,)")
    given = list(params) if params is not None else []
    # Pre-order DFS visits a SELECT's clauses in the order they are written, which is the
    # order of the ``?`` marks in the text.
    holes = [n for n in tree.walk() if isinstance(n, exp.Placeholder) and not n.this]
    numbered = [n for n in tree.walk() if isinstance(n, exp.Parameter)
                and isinstance(n.this, exp.Literal) and not n.this.is_string]
    if holes and numbered:
        raise InterfaceError("the statement mixes '?' and '$n' parameter markers", hint="use one style")
    if numbered:
        # PostgreSQL's $1, $2 … (the wire protocol's extended query form) name their value.
        top = max(int(n.this.this) for n in numbered)
        if top != len(given):
            raise InterfaceError(f"the statement uses parameters up to ${top} but {len(given)} were given",
                                 hint="pass one value per distinct $n")
        for n in numbered:
            k = int(n.this.this) - 1
            n.replace(_literal_for(given[k], k))
        return tree
    if len(holes) != len(given):
        raise InterfaceError(f"the statement has {len(holes)} parameter marker(s) but "
                             f"{len(given)} parameter(s) were given",
                             hint="pass one value per '?' in the SQL")
    for i, (hole, value) in enumerate(zip(holes, given)):
        hole.replace(_literal_for(value, i))
    return tree


def parse_statement(sql: str, params: Sequence[Any] | None = None, dialect: str = "postgres") -> Statement:
    """Parse exactly one query; raise dpsql errors for anything else."""
    if dialect not in DIALECTS:
        raise InterfaceError(f"unknown SQL dialect {dialect!r}", hint=f"use one of {', '.join(DIALECTS)}")
    if not isinstance(sql, str) or not sql.strip():
        raise SyntaxError("empty query", position=1, hint="write a SELECT statement")
    text, offset, explain = sql, 0, False
    m = _EXPLAIN.match(sql)
    if m:
        text, offset, explain = sql[m.end():], m.end(), True
    try:
        trees = [t for t in sqlglot.parse(text, read=dialect) if t is not None]
    except (ParseError, TokenError) as err:
        raise _syntax_error(err, text, offset) from None
    if not trees:
        raise SyntaxError("empty query", position=1, hint="write a SELECT statement")
    if len(trees) > 1:
        raise UnsupportedQueryError("only one statement can be compiled at a time",
                                    hint="send the statements separately")
    tree = trees[0]
    if isinstance(tree, _WRITES):
        raise PrivacyViolationError(f"{tree.key.upper()} statements are not allowed: the private table is "
                                    "read-only and its schema is declared, not defined in SQL",
                                    position=offset + 1, hint="only aggregate SELECT queries can be run")
    if isinstance(tree, exp.Command):
        word = str(tree.this).upper()
        if word in _WRITE_WORDS:
            raise PrivacyViolationError(f"{word} statements are not allowed: the private table is read-only",
                                        position=offset + 1, hint="only aggregate SELECT queries can be run")
        raise UnsupportedQueryError(f"{word} statements are not supported", position=offset + 1,
                                    hint="only aggregate SELECT queries (and EXPLAIN of them) can be run")
    if isinstance(tree, (exp.Union, exp.Intersect, exp.Except)):
        raise UnsupportedQueryError("set operations (UNION, INTERSECT, EXCEPT) are not supported",
                                    position=position_of(tree, text, offset),
                                    hint="run each SELECT separately")
    if not isinstance(tree, exp.Select):
        raise UnsupportedQueryError(f"{type(tree).__name__.upper()} statements are not supported",
                                    position=offset + 1, hint="only aggregate SELECT queries can be run")
    _bind_params(tree, params)
    return Statement(sql=sql, tree=tree, offset=offset, explain=explain)


def position_of(node: exp.Expression | None, text: str, offset: int = 0,
                name: str | None = None) -> int | None:
    """Best 1-based position of ``node`` in the original SQL.

    sqlglot records token offsets on identifiers, literals and function nodes; a node
    without them takes the earliest position found below it, and as a last resort the
    first occurrence of ``name`` (or the node's SQL) in the text.
    """
    best = None
    if node is not None:
        for n in node.walk():
            meta = getattr(n, "_meta", None) or {}
            start = meta.get("start")
            if start is not None and (best is None or start < best):
                best = start
    if best is not None:
        return offset + best + 1
    needle = name if name is not None else (node.sql() if node is not None else None)
    if needle:
        i = text.lower().find(needle.lower())
        if i >= 0:
            return offset + i + 1
    return None
