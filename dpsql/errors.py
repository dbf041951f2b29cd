"""The dpsql exception hierarchy.

One root, :class:`Error`, with the PEP 249 categories beneath it and DP-specific
subclasses beneath those.  Every class carries a SQLSTATE (PostgreSQL's codes, so the
wire server and drivers such as psycopg map them sensibly) and every instance carries a
message, a hint telling the user what to change, and, for errors in SQL text, a
1-based character position.

Privacy: messages and hints must be built from the SQL text and *public* metadata
only (declared domains, budgets).  Nothing derived from private rows may appear in an
error; see ``docs/privacy.md`` ("Errors").
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = [
    "Error",
    "Warning",
    "InterfaceError",
    "DatabaseError",
    "DataError",
    "OperationalError",
    "IntegrityError",
    "InternalError",
    "ProgrammingError",
    "NotSupportedError",
    "ConfigError",
    "SyntaxError",
    "UnknownTableError",
    "UnknownColumnError",
    "DomainViolationError",
    "PrivacyViolationError",
    "UnsupportedQueryError",
    "BudgetExhaustedError",
    "ModelTooLargeError",
    "LedgerCorruptError",
    "QueryCanceledError",
    "StatementTooComplexError",
    "error_for_sqlstate",
]


class Error(Exception):
    """Root of every error dpsql raises (PEP 249 ``Error``)."""

    sqlstate: str = "XX000"

    def __init__(self, message: str, *, hint: str | None = None,
                 position: int | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.position = position
        self.detail = detail

    def __str__(self) -> str:
        text = self.message
        if self.detail:
            text += f"\nDETAIL: {self.detail}"
        if self.hint:
            text += f"\nHINT: {self.hint}"
        return text

    def __reduce__(self) -> tuple[Any, ...]:  # keep hint/position across pickling (multiprocessing)
        return (_rebuild, (type(self), self.message, self.hint, self.position, self.detail))


def _rebuild(cls: type[Error], message: str, hint: str | None, position: int | None, detail: str | None) -> Error:
    return cls(message, hint=hint, position=position, detail=detail)


class Warning(Error):  # noqa: A001 - PEP 249 name
    """PEP 249 ``Warning``: kept under the single root so ``except dpsql.Error`` sees all."""

    sqlstate = "01000"


class InterfaceError(Error):
    """Misuse of the driver itself (closed cursor, fetch before execute, bad config)."""

    sqlstate = "HY000"


class DatabaseError(Error):
    sqlstate = "XX000"


class DataError(DatabaseError):
    sqlstate = "22000"


class OperationalError(DatabaseError):
    # a source engine's own message, scrubbed (dpsql.measure.counting.source_error): printed
    # by the operator's CLI, never sent to analysts
    operator_detail: str | None = None

    sqlstate = "58000"


class IntegrityError(DatabaseError):
    sqlstate = "23000"


class InternalError(DatabaseError):
    sqlstate = "XX000"


class ProgrammingError(DatabaseError):
    sqlstate = "42000"


class NotSupportedError(DatabaseError):
    sqlstate = "0A000"


# --- DP-specific and SQL-specific errors ------------------------------------------------

class ConfigError(InterfaceError):
    """A configuration or domain-declaration file is invalid (names the file and field)."""

    sqlstate = "F0000"


class SyntaxError(ProgrammingError):  # noqa: A001 - SQL syntax error
    sqlstate = "42601"


class UnknownTableError(ProgrammingError):
    sqlstate = "42P01"


class UnknownColumnError(ProgrammingError):
    sqlstate = "42703"


class DomainViolationError(ProgrammingError):
    """A literal or expression falls outside an attribute's declared (public) domain."""

    sqlstate = "22023"


class PrivacyViolationError(ProgrammingError):
    """The query would reveal individual rows (``SELECT *``, a bare private column)."""

    sqlstate = "42501"


class UnsupportedQueryError(NotSupportedError):
    """Valid SQL that the DP compiler cannot express as linear queries over the domain."""

    sqlstate = "0A000"


class BudgetExhaustedError(OperationalError):
    """The privacy budget cannot cover the request; refused before any data is read."""

    sqlstate = "53400"

    def __init__(self, message: str, *, requested_rho: float | None = None,
                 remaining_rho: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.requested_rho = requested_rho
        self.remaining_rho = remaining_rho


class ModelTooLargeError(OperationalError):
    """The graphical model (junction tree) would exceed the configured capacity."""

    sqlstate = "54000"

    def __init__(self, message: str, *, cliques: Any = None, size: int | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.cliques = cliques
        self.size = size


class StatementTooComplexError(OperationalError):
    """A statement nested too deeply, too long or too much work to compile (PostgreSQL's
    statement_too_complex); refused before it can exhaust the stack or the CPU."""

    sqlstate = "54001"


class LedgerCorruptError(IntegrityError):
    """The privacy ledger failed its integrity check; no further charges are accepted."""

    sqlstate = "XX001"


class QueryCanceledError(OperationalError):
    sqlstate = "57014"


def _all_subclasses(cls: type[Error]) -> Iterator[type[Error]]:
    for sub in cls.__subclasses__():
        yield sub
        yield from _all_subclasses(sub)


def error_for_sqlstate(sqlstate: str) -> type[Error]:
    """The most specific class registered for ``sqlstate`` (falls back by class, then root)."""
    best = None
    for cls in _all_subclasses(Error):
        if cls.sqlstate == sqlstate:
            best = cls
            break
    if best is None:
        prefix = sqlstate[:2]
        by_class = {"22": DataError, "23": IntegrityError, "42": ProgrammingError,
                    "0A": NotSupportedError, "53": OperationalError, "54": OperationalError,
                    "57": OperationalError, "58": OperationalError, "XX": InternalError}
        best = by_class.get(prefix, DatabaseError)
    return best
