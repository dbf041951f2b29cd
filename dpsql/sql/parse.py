"""SQL text → one sqlglot AST, with parameters bound and positions kept.

The first stage of the front end (sqlglot's layering: parse → bind → lower).  The lexer
(``lexer.py``) checks and rewrites the text first; this module then parses it with
sqlglot, turns parse errors into :class:`dpsql.errors.SyntaxError` with a 1-based position
in the user's SQL, puts long IN lists back, rebalances long AND/OR chains, refuses trees
deeper than :data:`MAX_DEPTH` (54001), binds parameters as literal nodes of the AST
(never by splicing text, so a parameter can never change the statement's shape), and
refuses anything that is not a single query (DDL, DML, several statements).
"""

from __future__ import annotations

import datetime
import decimal
import math
from dataclasses import dataclass
from collections.abc import Mapping, Sequence
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError, TokenError

from dpsql.errors import (DataError, InterfaceError, PrivacyViolationError, ProgrammingError,
                          StatementTooComplexError, SyntaxError, UnsupportedQueryError)
from dpsql.sql.lexer import Prepared, prepare
from dpsql.sql.syntax import SQLGLOT_QUIET  # noqa: F401  (installs the filter)

__all__ = ["Statement", "parse_statement", "position_of", "written", "call_position", "DIALECTS", "MAX_DEPTH"]

DIALECTS = ("postgres", "duckdb")

# sqlglot logs a warning whenever it falls back to a generic Command node: dropped by the
# filter dpsql.sql.syntax installs (importing it here makes sure it is in place).

#: Deepest AST (after AND/OR chains are balanced) that the compiler walks; its recursive
#: passes use a few frames per level, so this stays far below Python's recursion limit.
MAX_DEPTH = 160
#: AND/OR chains longer than this are rebalanced into a tree of logarithmic depth.
_CHAIN = 8
#: Most distinct values in one IN list (no declared column has nearly this many cells).
MAX_IN_VALUES = 10_000
#: Largest integer a parameter may carry (PostgreSQL's bigint).
_BIGINT = 2 ** 63 - 1

# Statements that write or change the schema.  dpsql only ever reads the private table.
_WRITE_WORDS = {"INSERT", "UPDATE", "DELETE", "CREATE", "DROP", "ALTER", "TRUNCATE", "GRANT", "REVOKE",
                "COPY", "MERGE", "VACUUM", "REINDEX", "CLUSTER", "COMMENT", "UPSERT", "REPLACE",
                "ATTACH", "DETACH", "INSTALL", "LOAD", "IMPORT", "EXPORT", "CALL", "DO", "PRAGMA"}
_WRITES = (exp.Insert, exp.Update, exp.Delete, exp.Create, exp.Drop, exp.Alter, exp.Merge,
           exp.TruncateTable, exp.Copy)
# First words that start a statement (anything else is a syntax error at that word).
_STATEMENT_WORDS = _WRITE_WORDS | {"SELECT", "WITH", "VALUES", "TABLE", "FROM", "EXPLAIN", "SHOW", "SET",
                                   "RESET", "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT",
                                   "DECLARE", "FETCH", "MOVE", "CLOSE", "PREPARE", "EXECUTE",
                                   "DEALLOCATE", "LISTEN", "NOTIFY", "UNLISTEN", "LOCK", "DISCARD",
                                   "SUMMARIZE", "DESCRIBE", "USE", "CHECKPOINT", "SAVEPOINT", "RELEASE",
                                   "ANALYZE", "PIVOT", "UNPIVOT"}


@dataclass(frozen=True)
class Statement:
    """A parsed query: ``tree`` is a fresh AST owned by the caller; ``offset`` is where the
    query starts in the SQL (after ``EXPLAIN``); ``prepared`` maps sqlglot's token offsets
    back to the user's text."""

    sql: str
    tree: exp.Expr
    offset: int
    explain: bool
    prepared: Prepared | None = None

    def pos(self, node: exp.Expr | None, name: str | None = None) -> int | None:
        return position_of(node, self.sql, self.prepared, self.offset, name)


def position_of(node: exp.Expr | None, sql: str, prepared: Prepared | None = None, offset: int = 0,
                name: str | None = None) -> int | None:
    """Best 1-based position of ``node`` in the user's SQL.

    sqlglot records token offsets on identifiers, literals and some function nodes; a node
    without them takes the earliest position found below it, and as a last resort the
    first occurrence of ``name`` (or the node's SQL) after ``offset``.
    """
    best = None
    if node is not None:
        for n in node.walk():
            meta = getattr(n, "_meta", None) or {}
            start = meta.get("start")
            if start is not None and (best is None or start < best):
                best = start
    if best is not None:
        return (prepared.orig(best) if prepared is not None else offset + best) + 1
    needle = name if name is not None else (node.sql() if node is not None else None)
    if needle:
        i = sql.lower().find(needle.lower(), offset)
        if i >= 0:
            return i + 1
    return None


def written(stmt: Statement, node: exp.Expr) -> str:
    """The name of a function call as the user wrote it (``string_agg``, not sqlglot's
    GROUP_CONCAT), read back from the SQL text at the call's position."""
    if isinstance(node, exp.Anonymous):
        return str(node.this)
    at = call_position(stmt, node)
    if at is not None:
        word = _word_at(stmt.sql, at - 1)
        if word:
            return word
    return node.sql_name().lower() if isinstance(node, exp.Func) else type(node).__name__.lower()


def call_position(stmt: Statement, node: exp.Expr) -> int | None:
    """1-based position of a function call's name (sqlglot may record only its arguments)."""
    pos = stmt.pos(node)
    if pos is None:
        return None
    sql, i = stmt.sql, pos - 1
    if not _is_argument_start(node, sql, i):
        return pos
    j = sql.rfind("(", stmt.offset, i + 1)
    k = j
    while k > 0 and sql[k - 1].isspace():
        k -= 1
    start = k
    while start > 0 and (sql[start - 1].isalnum() or sql[start - 1] in "_$"):
        start -= 1
    return start + 1 if start < k else pos


def _word_at(sql: str, i: int) -> str:
    j = i
    while j < len(sql) and (sql[j].isalnum() or sql[j] in "_$"):
        j += 1
    return sql[i:j]


def _is_argument_start(node: exp.Expr, sql: str, i: int) -> bool:
    """Is offset ``i`` where the first argument of ``node`` begins (not the call's name)?"""
    meta = getattr(node, "_meta", None) or {}
    if meta.get("start") is not None:
        return False
    k = i - 1
    while k >= 0 and sql[k].isspace():
        k -= 1
    return k >= 0 and sql[k] == "("


def _syntax_error(err: ParseError | TokenError, prep: Prepared) -> SyntaxError:
    info = err.errors[0] if isinstance(err, ParseError) and err.errors else {}
    desc = info.get("description") or str(err).split("\n")[0]
    pos = None
    start = info.get("start")
    if start is None and isinstance(err, TokenError):
        start = getattr(err, "start", None)
    if start is not None:
        pos = prep.orig(int(start)) + 1
    elif info.get("line") is not None and info.get("col") is not None:
        end = _line_col_offset(prep.text, info["line"], info["col"])
        pos = prep.orig(max(0, end - max(len(info.get("highlight") or ""), 1) + 1)) + 1
    near = info.get("highlight")
    if near and pos is not None:
        near = prep.sql[pos - 1:pos - 1 + len(near)] or near
    message = f"syntax error at or near \"{near}\"" if near else "syntax error"
    if pos is None:
        pos = len(prep.sql) + 1
        message = "syntax error at end of input" if not near else message
    return SyntaxError(message, position=pos, detail=_plain(desc), hint="check the SQL near the reported position")


def _plain(desc: str) -> str:
    """sqlglot's description without its class names ("for <class 'sqlglot…GT'>")."""
    cut = desc.find(" for <class")
    return desc[:cut] if cut > 0 else desc


def _line_col_offset(text: str, line: int, col: int) -> int:
    """0-based offset of the character ending at (line, col), as sqlglot reports it."""
    off = 0
    for _ in range(max(line, 1) - 1):
        nl = text.find("\n", off)
        if nl < 0:
            break
        off = nl + 1
    return max(0, min(len(text) - 1, off + col - 1))


# --- parameters ----------------------------------------------------------------------------

def _literal_for(value: Any, label: str, pos: int | None) -> exp.Expr:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, int):
        if abs(value) > _BIGINT:
            raise DataError(f"parameter {label} is out of range for type bigint", position=pos,
                            hint="pass an integer between -2⁶³ and 2⁶³-1")
        return exp.Neg(this=exp.Literal.number(str(-value))) if value < 0 else exp.Literal.number(str(value))
    if isinstance(value, (float, decimal.Decimal)):
        try:
            finite = math.isfinite(float(value))
        except (OverflowError, ValueError):
            finite = False
        if not finite:
            raise DataError(f"parameter {label} is not a finite number", position=pos,
                            hint="pass a finite number (NaN and infinities cannot be compared with a domain)")
        text = repr(float(value)) if isinstance(value, float) else format(value, "f")
        if value < 0:
            # sqlglot spells negative numbers as unary minus; keep that shape for binding.
            return exp.Neg(this=exp.Literal.number(text.lstrip("-")))
        return exp.Literal.number(text)
    if isinstance(value, str):
        if "\x00" in value:
            raise DataError(f"parameter {label} contains a NUL character", position=pos,
                            hint="text values cannot contain \\x00")
        return exp.Literal.string(value)
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return exp.Literal.string(value.isoformat())
    if isinstance(value, (bytes, bytearray, memoryview)):
        raise DataError(f"parameter {label} is binary data, which no declared column holds", position=pos,
                        hint="pass text or a number")
    raise ProgrammingError(f"parameter {label} has unsupported type {type(value).__name__}", position=pos,
                           hint="pass None, bool, int, float, Decimal, str or a date")


def _holes(tree: exp.Expr) -> dict[str, list[exp.Expr]]:
    """Parameter nodes by key: "1", "2", … for $n (and the rewritten '?'), names otherwise."""
    out: dict[str, list[exp.Expr]] = {}
    for n in tree.walk():
        key = None
        if isinstance(n, exp.Parameter):
            inner = n.this
            key = inner.name if isinstance(inner, (exp.Literal, exp.Identifier, exp.Var)) else str(inner)
        elif isinstance(n, exp.Placeholder):
            inner = n.this
            key = inner.name if isinstance(inner, exp.Expression) else (str(inner) if inner is not None else None)
            if key is None:
                raise SyntaxError("a parameter marker could not be placed", position=None,
                                  hint="use ? or $1, $2, … for parameters")
        if key is not None:
            out.setdefault(key, []).append(n)
    return out


def _bind_params(tree: exp.Expr, params: Any, prep: Prepared) -> None:
    if params is not None and isinstance(params, (str, bytes, bytearray)):
        raise ProgrammingError("parameters must be a sequence, not a string", hint="wrap it: (value,)")
    holes = _holes(tree)
    markers = prep.markers
    if prep.style == "named":
        if params is None or not isinstance(params, Mapping):
            raise ProgrammingError("the statement uses named parameters, so pass a mapping",
                                   position=markers[0].start + 1, hint="e.g. {'age': 30}")
        for m in markers:
            name = m.text[2:-2] if m.text.startswith("%(") else m.text[1:]
            if name not in params:
                raise ProgrammingError(f"no value for parameter {name!r}", position=m.start + 1,
                                       hint=f"add {name!r} to the mapping")
        for key, nodes in holes.items():
            value = params.get(key)
            where = next((m.start + 1 for m in markers if key in m.text), None)
            for node in nodes:
                node.replace(_literal_for(value, repr(key), where))
        return
    if isinstance(params, Mapping):
        if not params and not markers:
            return
        where = markers[0].start + 1 if markers else None
        raise ProgrammingError("a mapping of parameters was passed but the statement uses positional markers"
                               if markers else "a mapping of parameters was passed but the statement has none",
                               position=where, hint="pass a sequence: one value per ? (or $n) in order")
    try:
        given = list(params) if params is not None else []
    except TypeError:
        raise ProgrammingError(f"parameters must be a sequence, not {type(params).__name__}",
                               hint="pass a list or tuple of values") from None
    if prep.style == "numbered":
        numbers = sorted({int(m.text[1:]) for m in markers})
        top = numbers[-1]
        if top != len(given) or numbers != list(range(1, top + 1)):
            first = next((m for m in markers if int(m.text[1:]) > len(given)), markers[-1])
            raise ProgrammingError(f"the statement uses parameters up to ${top} but {len(given)} were given",
                                   position=first.start + 1, hint="pass one value per distinct $n, in order")
        first_at = {int(m.text[1:]): m.start + 1 for m in reversed(markers)}
    else:
        if len(markers) != len(given):
            at = markers[len(given)].start + 1 if len(markers) > len(given) else None
            raise ProgrammingError(f"the statement has {len(markers)} parameter marker(s) but "
                                   f"{len(given)} parameter(s) were given", position=at,
                                   hint="pass one value per '?' in the SQL")
        first_at = {k + 1: m.start + 1 for k, m in enumerate(markers)}
    for key, nodes in holes.items():
        if not key.isdigit() or not 1 <= int(key) <= len(given):
            raise ProgrammingError(f"parameter ${key} has no value", position=None,
                                   hint="pass one value per marker")
        k = int(key)
        for node in nodes:
            node.replace(_literal_for(given[k - 1], str(k), first_at.get(k)))


# --- shape -------------------------------------------------------------------------------

def _restore_in_lists(tree: exp.Expr, prep: Prepared) -> bool:
    """Put the compacted IN lists back, each value once (``x IN (a, a, b)`` is
    ``x IN (a, b)``); False if a placeholder is not where it belongs."""
    if not prep.inlists:
        return True
    found = 0
    for node in list(tree.find_all(exp.Column)):
        items = prep.inlists.get(node.name)
        if items is None:
            continue
        parent = node.parent
        if not isinstance(parent, exp.In) or len(parent.expressions) != 1 or node.table:
            return False
        seen: dict = {}
        for t in items:
            key: tuple[str, object]
            if t.kind == "str":
                key = ("s", t.text[1:-1].replace("''", "'"))
            else:
                try:
                    key = ("n", decimal.Decimal(t.text))
                except decimal.InvalidOperation:
                    key = ("t", t.text)
            if key not in seen:
                seen[key] = t
                if len(seen) > MAX_IN_VALUES:
                    raise StatementTooComplexError(
                        f"statement too complex: an IN list of more than {MAX_IN_VALUES:,} distinct values",
                        position=prep.orig(prep.text.find(node.name)) + 1,
                        hint="no declared column has that many cells; filter on ranges instead")
        lits: list[exp.Expr] = []
        for (kind, value), t in seen.items():
            if kind == "s":
                lits.append(exp.Literal.string(value))
            elif t.text.startswith("-"):
                lits.append(exp.Neg(this=exp.Literal.number(t.text[1:])))
            else:
                lits.append(exp.Literal.number(t.text))
        # The first item keeps the list's position for messages.
        lits[0].meta["start"] = prep.text.find(node.name)
        parent.set("expressions", lits)
        found += 1
    return found == len(prep.inlists)


def _balance(tree: exp.Expr) -> exp.Expr:
    """Rebalance long AND/OR chains (sqlglot builds them left-deep, one level per term)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (exp.And, exp.Or)):
            kind = type(node)
            operands: list[exp.Expr] = []
            todo: list[exp.Expr] = [node]
            length = 0
            while todo:
                n = todo.pop()
                if type(n) is kind:
                    todo.append(n.expression)
                    todo.append(n.this)
                    length += 1
                else:
                    operands.append(n)
            if length > _CHAIN:
                balanced = _build(kind, operands)
                if node is tree:
                    tree = balanced
                else:
                    node.replace(balanced)
                stack.extend(operands)
                continue
        stack.extend(v for v in node.iter_expressions())
    return tree


def _build(kind, operands: list[exp.Expr]) -> exp.Expr:
    level = list(operands)
    while len(level) > 1:
        nxt = [kind(this=level[i], expression=level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _check_depth(tree: exp.Expr, stmt_pos) -> None:
    stack = [(tree, 1)]
    while stack:
        node, d = stack.pop()
        if d > MAX_DEPTH:
            raise StatementTooComplexError(
                f"statement too complex: expressions nested more than {MAX_DEPTH} levels deep",
                position=stmt_pos(node), hint="simplify the expression, e.g. split a long chain of + or ||")
        stack.extend((c, d + 1) for c in node.iter_expressions())


def parse_statement(sql: str, params: Sequence[Any] | Mapping[str, Any] | None = None,
                    dialect: str = "postgres") -> Statement:
    """Parse exactly one query; raise dpsql errors for anything else."""
    if dialect not in DIALECTS:
        raise InterfaceError(f"unknown SQL dialect {dialect!r}", hint=f"use one of {', '.join(DIALECTS)}")
    if not isinstance(sql, str):
        raise ProgrammingError(f"the statement must be a str, not {type(sql).__name__}",
                               hint="pass the SQL text (decode bytes first: sql.decode('utf-8'))")
    prep = prepare(sql, dialect)
    if not prep.text.strip() and not prep.explain:
        raise SyntaxError("empty query", position=1, hint="write a SELECT statement")
    try:
        trees = [t for t in sqlglot.parse(prep.text, read=dialect) if t is not None]
    except (ParseError, TokenError) as err:
        raise _syntax_error(err, prep) from None
    except RecursionError:
        raise StatementTooComplexError("statement too complex: nested too deeply to parse",
                                       position=prep.start + 1, hint="simplify the statement") from None
    if not trees:
        raise SyntaxError("empty query", position=len(sql) + 1, hint="write a SELECT statement")
    if len(trees) > 1:
        raise UnsupportedQueryError("only one statement can be compiled at a time", position=prep.start + 1,
                                    hint="send the statements separately")
    tree = trees[0]
    stmt = Statement(sql=sql, tree=tree, offset=prep.start, explain=prep.explain, prepared=prep)
    _check_kind(stmt, tree, prep)
    if not _restore_in_lists(tree, prep):
        raise StatementTooComplexError("statement too complex: a long IN list could not be placed",
                                       position=prep.start + 1, hint="list at most a few thousand values")
    tree = _balance(tree)
    _check_depth(tree, stmt.pos)
    _bind_params(tree, params, prep)
    return Statement(sql=sql, tree=tree, offset=prep.start, explain=prep.explain, prepared=prep)


def _first_word(sql: str, start: int) -> str:
    return _word_at(sql, start).upper()


def _check_kind(stmt: Statement, tree: exp.Expr, prep: Prepared) -> None:
    word = _first_word(prep.sql, prep.start)
    at = prep.start + 1
    if isinstance(tree, _WRITES) or word in _WRITE_WORDS:
        raise PrivacyViolationError(f"{word or 'write'} statements are not allowed: the private table is "
                                    "read-only and its schema is declared, not defined in SQL",
                                    position=at, hint="only aggregate SELECT queries can be run")
    if isinstance(tree, (exp.Union, exp.Intersect, exp.Except)):
        raise UnsupportedQueryError("set operations (UNION, INTERSECT, EXCEPT) are not supported",
                                    position=stmt.pos(tree), hint="run each SELECT separately")
    if isinstance(tree, exp.Select):
        return
    if word not in _STATEMENT_WORDS:
        near = prep.sql[prep.start:prep.start + 20].split()[0] if prep.sql[prep.start:].strip() else ""
        raise SyntaxError(f"syntax error at or near \"{near}\"", position=at,
                          hint="a statement starts with SELECT (or WITH, EXPLAIN, SET, SHOW)")
    raise UnsupportedQueryError(f"{word} statements are not supported", position=at,
                                hint="only aggregate SELECT queries (and EXPLAIN of them) can be run")
