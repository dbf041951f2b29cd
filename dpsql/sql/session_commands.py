"""Session commands: SET / SHOW / RESET / BEGIN / COMMIT / ROLLBACK (and the wire's no-op
SAVEPOINT, DISCARD, ...): the one parser of them, for the engine session and the wire server.

They touch no data and cost nothing; the engine answers ``dpsql.*`` settings from the
session's, the wire server the PostgreSQL settings drivers send (``dpsql/server/gucs.py``).
Recognised from the statement's tokens (never by matching text of data queries), as
PostgreSQL's grammar reads them: ``SET [SESSION | LOCAL] name {= | TO} value [, ...]``,
``SET name = DEFAULT`` (a reset), ``SET TIME ZONE value``, ``SHOW name | ALL``,
``RESET name | ALL``.  The server and the engine each had a parser once, and they disagreed:
``SET dpsql.error_columns = DEFAULT`` was a reset on the wire and the invalid value 'default'
in the engine the wire forwarded it to; ``SHOW TIME ZONE`` named two settings.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from dpsql.errors import ProgrammingError, UnsupportedQueryError
from dpsql.errors import SyntaxError as SQLSyntaxError
from dpsql.sql.lexer import prepare
from dpsql.sql.syntax import Token, TokenType, tokens as statement_tokens

__all__ = ["SessionCommand", "parse_session_command", "parse_tokens", "ENGINE_HEADS"]

#: The statements the engine session answers (the wire server also acknowledges SAVEPOINT,
#: RELEASE, DISCARD, DEALLOCATE and UNLISTEN itself).
ENGINE_HEADS = frozenset({"SET", "SHOW", "RESET", "BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT"})

_ALIASES = {"transaction isolation level": "transaction_isolation", "time zone": "timezone",
            "session authorization": "session_authorization"}
_NOOP_SET = {"TRANSACTION", "CHARACTERISTICS", "CONSTRAINTS"}
_IDENTITY_SET = {"ROLE", "AUTHORIZATION", "SESSION_AUTHORIZATION"}


@dataclass(frozen=True)
class SessionCommand:
    """``kind``: set | show | reset | begin | commit | rollback | rollback_to | ack (a no-op
    answered with ``tag``); ``name`` lower-cased; ``value`` for set."""

    kind: str
    name: str = ""
    value: str | None = None
    tag: str = ""


def parse_tokens(tokens: Sequence[Token]) -> SessionCommand:
    """A session command's meaning from its tokens (no semicolons; the first is its verb)."""
    head = tokens[0].text.upper()
    upper = [t.text.upper() for t in tokens]
    if head == "SET":
        i = 1
        while i < len(tokens) and upper[i] in ("SESSION", "LOCAL") and not (
                i + 1 < len(tokens) and tokens[i + 1].token_type == TokenType.EQ):
            i += 1
        if i < len(tokens) and upper[i] in _IDENTITY_SET:
            # the budget principal is whoever authenticated; switching identity would move charges
            raise UnsupportedQueryError("SET ROLE and SET SESSION AUTHORIZATION are not supported by dpsql",
                                        position=tokens[0].start + 1,
                                        hint="connect as the user whose budget the queries should use")
        if i < len(tokens) and upper[i] in _NOOP_SET:
            return SessionCommand("ack", tag="SET")
        if i + 1 < len(tokens) and upper[i] == "TIME" and upper[i + 1] == "ZONE":
            name, j = "timezone", i + 2
        else:
            j = i
            while j < len(tokens) and tokens[j].token_type != TokenType.EQ and upper[j] != "TO":
                j += 1
            name = "".join(t.text for t in tokens[i:j]).lower()
            j += 1
        values = [t for t in tokens[j:] if t.token_type != TokenType.COMMA]
        if not name or not values:
            raise SQLSyntaxError("syntax error in SET", hint="SET name = value, e.g. SET dpsql.error_columns = 'ci95'")
        if (len(values) == 1 and values[0].text.upper() in ("DEFAULT", "LOCAL")
                and values[0].token_type != TokenType.STRING):
            return SessionCommand("reset", name)
        return SessionCommand("set", name, ", ".join(t.text for t in values))
    if head in ("SHOW", "RESET"):
        name = " ".join(t.text for t in tokens[1:]).strip().lower()
        name = _ALIASES.get(name, name.replace(" ", "") if head == "SHOW" else name)
        return SessionCommand(head.lower(), name or ("all" if head == "SHOW" else ""))
    if head in ("BEGIN", "START"):
        return SessionCommand("begin", tag="BEGIN")
    if head in ("COMMIT", "END"):
        return SessionCommand("commit", tag="COMMIT")
    if head in ("ROLLBACK", "ABORT"):
        return SessionCommand("rollback_to" if "TO" in upper else "rollback", tag="ROLLBACK")
    if head in ("DISCARD", "DEALLOCATE"):
        return SessionCommand("ack", tag=f"{head} ALL" if "ALL" in upper else head)
    return SessionCommand("ack", tag=head)


def parse_session_command(sql: str) -> SessionCommand | None:
    """The session command in ``sql`` for the engine session, or None when it is not one."""
    if not isinstance(sql, str):
        raise ProgrammingError(f"the statement must be a str, not {type(sql).__name__}",
                               hint="pass the SQL text (decode bytes first: sql.decode('utf-8'))")
    head = sql.lstrip().split(None, 1)[0].upper().rstrip(";") if sql.strip() else ""
    if head not in ENGINE_HEADS:
        return None
    prepare(sql)  # the lexer's checks: bounded nesting and size, closed quotes
    toks = statement_tokens(sql)
    toks = [t for t in toks or () if t.token_type != TokenType.SEMICOLON]
    if not toks or toks[0].text.upper() != head:
        raise SQLSyntaxError("syntax error in session command", hint="e.g. SET dpsql.error_columns = 'ci95'")
    return parse_tokens(toks)
