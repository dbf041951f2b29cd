"""Session commands: SET / SHOW / RESET / BEGIN / COMMIT / ROLLBACK.

They touch no data and cost nothing; the engine answers them from the session's settings.
Recognised from the sqlglot AST (never by matching text of data queries): a statement that
parses to ``Set``, ``Transaction``, ``Commit`` or ``Rollback``, or to the generic
``Command`` node for ``SHOW``/``RESET`` (which sqlglot does not model for PostgreSQL).
"""

from __future__ import annotations

import logging

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from dpsql.errors import SyntaxError as SQLSyntaxError

SessionCommand = tuple[str, str, str]  # (kind, setting name, value)


def _setting_name(node: exp.Expression) -> str:
    if isinstance(node, exp.Column):
        return ".".join(p.name for p in node.parts).lower()
    return node.name.lower()


def _value(node: exp.Expression) -> str:
    if isinstance(node, (exp.Literal, exp.Var, exp.Identifier)):
        return str(node.name)
    if isinstance(node, exp.Column):
        return ".".join(p.name for p in node.parts)
    return node.sql("postgres")


def parse_session_command(sql: str) -> SessionCommand | None:
    """The session command in ``sql``, or None when it is not one."""
    head = sql.lstrip().split(None, 1)[0].upper().rstrip(";") if sql.strip() else ""
    if head not in ("SET", "SHOW", "RESET", "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT"):
        return None
    logger = logging.getLogger("sqlglot")
    level = logger.level
    logger.setLevel(logging.ERROR)  # SHOW falls back to Command with a warning
    try:
        node = sqlglot.parse_one(sql, read="postgres")
    except ParseError as exc:
        err = exc.errors[0] if exc.errors else {}
        raise SQLSyntaxError(f"syntax error in session command: {err.get('description', exc)}",
                             hint="e.g. SET dpsql.error_columns = 'ci95'") from None
    finally:
        logger.setLevel(level)
    if isinstance(node, exp.Set):
        items = node.expressions
        if len(items) != 1 or not isinstance(items[0].this, exp.EQ):
            raise SQLSyntaxError("SET takes one setting", hint="SET name = value")
        eq = items[0].this
        return ("set", _setting_name(eq.this), _value(eq.expression))
    if isinstance(node, exp.Transaction):
        return ("begin", "", "")
    if isinstance(node, exp.Commit):
        return ("commit", "", "")
    if isinstance(node, exp.Rollback):
        return ("rollback", "", "")
    if isinstance(node, exp.Command):
        verb = str(node.this).upper()
        arg = node.expression.name if node.expression is not None else ""
        name = arg.strip().strip(";").strip().lower()
        if verb == "SHOW":
            return ("show", name or "all", "")
        if verb == "RESET":
            return ("reset", name, "")
        if verb in ("END", "ABORT"):
            return ("commit" if verb == "END" else "rollback", "", "")
    return None
