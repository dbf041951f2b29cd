"""SQL syntax for the packages above ``dpsql.sql``: the one door to sqlglot.

sqlglot is imported only inside ``dpsql/sql/`` (docs/architecture.md).  The measurement
SQL (``dpsql.measure``) and the wire server's statement router (``dpsql.server``) reach it
through this small API instead:

* :data:`exp` — the AST vocabulary (node classes and builders such as ``exp.select``,
  ``exp.column``, ``exp.cast``): measurement SQL is built as ASTs, never by joining
  strings, and rendered with ``tree.sql(dialect)``; the router inspects parsed statements
  with the same classes;
* :func:`tokens`, :data:`TokenType` — a statement's PostgreSQL tokens;
* :func:`parse_statement` — one statement's AST, or None when it is not exactly one
  parseable statement;
* :func:`data_type` — a column type as a catalog spells it (``double precision``), or None.

The dialect, the error types sqlglot raises and the thread-safety rules are handled here, so
a sqlglot upgrade touches this package only.
"""

from __future__ import annotations

import logging

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokens import Token, TokenType

__all__ = ["exp", "Token", "TokenType", "tokens", "parse_statement", "data_type", "SQLGLOT_QUIET"]


class _BelowError(logging.Filter):
    """Drops sqlglot's records below ERROR (chiefly "… contains unsupported syntax. Falling back
    to parsing as a 'Command'", which quotes the user's statement): noise about user input in a
    server's or a notebook's log, for a statement dpsql refuses or answers anyway.

    A filter installed once, not the logger's level flipped around each parse: the level is
    process-global, so save/set/restore from several server sessions' parse threads at once
    could leave it at any of their values, and it would override a host application's own
    logging configuration (issue 36 item 4)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR


#: The one instance; ``Logger.addFilter`` ignores an instance already installed.
SQLGLOT_QUIET = _BelowError()
logging.getLogger("sqlglot").addFilter(SQLGLOT_QUIET)


def tokens(sql: str) -> list[Token] | None:
    """The PostgreSQL-dialect tokens of ``sql`` (comments dropped), or None when it cannot
    be tokenized (an unterminated quote or comment).

    A tokenizer per call: sqlglot keeps its scan state (text, position, token list) on the
    instance, and the wire server routes statements in several parse threads at once, so a
    shared one handed one connection's tokens (or none: an empty query) to another
    (``tests/server/test_isolation.py``).  Making one costs ~5 µs."""
    try:
        return Postgres.Tokenizer().tokenize(sql)
    except (TokenError, ValueError):
        return None


def parse_statement(sql: str, dialect: str = "postgres") -> exp.Expr | None:
    """The AST of ``sql`` when it is exactly one statement sqlglot can parse, else None
    (no exception for any text; sqlglot's parse warnings are not logged)."""
    try:
        trees = sqlglot.parse(sql, read=dialect)
    except (ParseError, TokenError, ValueError, RecursionError):
        return None
    trees = [t for t in trees if t is not None]
    return trees[0] if len(trees) == 1 else None


def data_type(sql_type: str, dialect: str) -> exp.DataType | None:
    """A column type as an engine's catalog names it (``BIGINT``, ``double precision``,
    ``string``) as sqlglot's DataType, or None when sqlglot does not read it as a type."""
    try:
        return exp.DataType.build(sql_type, dialect=dialect)
    except (ParseError, ValueError, TypeError):
        return None
