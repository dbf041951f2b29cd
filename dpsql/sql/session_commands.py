"""Session commands: SET / SHOW / RESET / BEGIN / COMMIT / ROLLBACK.

They touch no data and cost nothing; the engine answers them from the session's settings.
Recognised from the sqlglot AST (never by matching text of data queries): a statement that
parses to ``Set``, ``Transaction``, ``Commit`` or ``Rollback``, or to the generic
``Command`` node for ``SHOW``/``RESET`` (which sqlglot does not model for PostgreSQL).
"""

from __future__ import annotations

import sqlglot
from sqlglot import exp
from sqlglot.errors import ParseError

from dpsql.errors import ProgrammingError, UnsupportedQueryError
from dpsql.errors import SyntaxError as SQLSyntaxError
from dpsql.sql.lexer import prepare
from dpsql.sql.syntax import SQLGLOT_QUIET  # noqa: F401  (installs the filter)

SessionCommand = tuple[str, str, str]  # (kind, setting name, value)


def _setting_name(node: exp.Expr) -> str:
    if isinstance(node, exp.Column):
        return ".".join(p.name for p in node.parts).lower()
    return node.name.lower()


def _value(node: exp.Expr) -> str:
    if isinstance(node, (exp.Literal, exp.Var, exp.Identifier)):
        return str(node.name)
    if isinstance(node, exp.Column):
        return ".".join(p.name for p in node.parts)
    return node.sql("postgres")


def parse_session_command(sql: str) -> SessionCommand | None:
    """The session command in ``sql``, or None when it is not one."""
    if not isinstance(sql, str):
        raise ProgrammingError(f"the statement must be a str, not {type(sql).__name__}",
                               hint="pass the SQL text (decode bytes first: sql.decode('utf-8'))")
    head = sql.lstrip().split(None, 1)[0].upper().rstrip(";") if sql.strip() else ""
    if head not in ("SET", "SHOW", "RESET", "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT"):
        return None
    prepare(sql)  # the lexer's checks: bounded nesting and size, closed quotes
    try:  # SHOW falls back to a Command node with a warning, which syntax.SQLGLOT_QUIET drops
        node = sqlglot.parse_one(sql, read="postgres")
    except ParseError as exc:
        err = exc.errors[0] if exc.errors else {}
        raise SQLSyntaxError(f"syntax error in session command: {err.get('description', exc)}",
                             hint="e.g. SET dpsql.error_columns = 'ci95'") from None
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
        rest = node.expression
        arg = "" if rest is None else rest if isinstance(rest, str) else rest.name
        name = arg.strip().strip(";").strip().lower()
        if verb == "SET":
            words = name.split()
            if words[:2] == ["time", "zone"] and len(words) == 3:
                return ("set", "timezone", arg.strip().strip(";").split()[-1].strip("'"))
            what = words[0].upper() if words else ""
            start = len(sql) - len(sql.lstrip()) + 1
            raise UnsupportedQueryError(f"SET {what} is not supported".replace("  ", " "), position=start,
                                        hint="dpsql settings are set with SET dpsql.<name> = <value>; the "
                                             "user is fixed when the connection opens")
        if verb == "SHOW":
            return ("show", name or "all", "")
        if verb == "RESET":
            return ("reset", name, "")
        if verb in ("END", "ABORT"):
            return ("commit" if verb == "END" else "rollback", "", "")
    return None
