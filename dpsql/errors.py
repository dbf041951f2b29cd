"""The dpsql exception hierarchy.

One root, :class:`Error`, with the PEP 249 categories beneath it and DP-specific
subclasses beneath those.  Every class carries a SQLSTATE (PostgreSQL's codes, so the
wire server and drivers such as psycopg map them sensibly) and every instance carries a
message, a hint telling the user what to change, and, for errors in SQL text, a
1-based character position.

Registry (as psycopg's ``errors.lookup``): a class that declares a ``sqlstate`` is registered
under it when it is defined; a code belongs to one class only, and the class must descend
from the PEP 249 category of the code's SQLSTATE class (``CATEGORIES``, the mapping
PostgreSQL's classes have in psycopg), so a DB-API user and a psycopg user of ``dpsql serve``
catch the same category for the same error.  :func:`error_for_sqlstate` looks a code up and
falls back by its two-character class, then its first character.

Privacy: messages and hints must be built from the SQL text and *public* metadata
only (declared domains, budgets).  Nothing derived from private rows may appear in an
error; see ``docs/privacy.md`` ("Errors").
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any, ClassVar

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
    "UselessMeasurementError",
    "ModelTooLargeError",
    "InsufficientResourcesError",
    "LedgerCorruptError",
    "LedgerVersionError",
    "QueryCanceledError",
    "StatementTooComplexError",
    "error_for_sqlstate",
    "category_of",
    "CATEGORIES",
]

#: The PEP 249 category of each SQLSTATE class: the code's first two characters, else its
#: first one (PostgreSQL's classes, Appendix A, categorised as psycopg's ``errors`` does).
#: "01" (warnings) and "HY" (misuse of the driver, ODBC's general-error class) are dpsql's
#: own: PostgreSQL never sends them, and the wire server sends no InterfaceError or Warning.
CATEGORIES: dict[str, str] = {
    "01": "Warning", "HY": "InterfaceError",
    "08": "OperationalError", "0A": "NotSupportedError", "10": "ProgrammingError",
    "20": "ProgrammingError", "21": "ProgrammingError", "22": "DataError", "23": "IntegrityError",
    "24": "InternalError", "25": "InternalError", "26": "ProgrammingError", "27": "OperationalError",
    "28": "OperationalError", "2B": "InternalError", "2D": "InternalError", "2F": "OperationalError",
    "34": "ProgrammingError", "38": "OperationalError", "39": "OperationalError",
    "3B": "OperationalError", "3D": "ProgrammingError", "3F": "ProgrammingError",
    "40": "OperationalError", "42": "ProgrammingError", "44": "ProgrammingError",
    "53": "OperationalError", "54": "OperationalError", "55": "OperationalError",
    "57": "OperationalError", "58": "OperationalError",
    "F": "OperationalError", "H": "OperationalError", "P": "ProgrammingError", "X": "InternalError",
}

_REGISTRY: dict[str, type[Error]] = {}


def category_of(sqlstate: str) -> str:
    """The PEP 249 category name of ``sqlstate``'s class ("DatabaseError" when unknown)."""
    return CATEGORIES.get(sqlstate[:2]) or CATEGORIES.get(sqlstate[:1]) or "DatabaseError"


class Error(Exception):
    """Root of every error dpsql raises (PEP 249 ``Error``).

    ``Error`` and ``DatabaseError`` are abstract categories: they declare no code of their
    own (their ``sqlstate`` is InternalError's; neither is ever raised as such)."""

    sqlstate: ClassVar[str] = "XX000"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("sqlstate")
        if code is None:
            return           # shares its parent's code: lookups find the parent
        if not (isinstance(code, str) and len(code) == 5 and code.isalnum() and code.upper() == code):
            raise TypeError(f"{cls.__name__}.sqlstate must be five digits or capital letters, got {code!r}")
        if code in _REGISTRY:
            raise TypeError(f"SQLSTATE {code} already belongs to {_REGISTRY[code].__name__}; "
                            f"give {cls.__name__} a code of its own or none")
        category = category_of(code)
        if not any(base.__name__ == category and base.__module__ == __name__ for base in cls.__mro__):
            raise TypeError(f"{cls.__name__} has SQLSTATE {code}, whose class is a PEP 249 "
                            f"{category}, but does not derive from {category}")
        _REGISTRY[code] = cls

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
    """Misuse of the driver itself (closed cursor, fetch before execute)."""

    sqlstate = "HY000"


class DatabaseError(Error):
    """PEP 249 ``DatabaseError``: abstract, the parent of every category below."""


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
    # 0A000 (feature_not_supported) is what a refused query sends: UnsupportedQueryError's
    sqlstate = "0AP01"


# --- DP-specific and SQL-specific errors ------------------------------------------------

class ConfigError(OperationalError):
    """A configuration or domain-declaration file is invalid (names the file and field).

    SQLSTATE F0000 (config_file_error): an OperationalError, as psycopg classes it."""

    sqlstate = "F0000"


class SyntaxError(ProgrammingError):  # noqa: A001 - SQL syntax error
    sqlstate = "42601"


class UnknownTableError(ProgrammingError):
    sqlstate = "42P01"


class UnknownColumnError(ProgrammingError):
    sqlstate = "42703"


class DomainViolationError(DataError):
    """A literal or expression falls outside an attribute's declared (public) domain.

    SQLSTATE 22023 (invalid_parameter_value), class 22: a PEP 249 DataError."""

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

    def __init__(self, message: str, *, requested_rho: Fraction | None = None,
                 remaining_rho: Fraction | None = None, **kw: Any) -> None:
        # exact, as the ledger keeps them: a float could round a remainder up (issue 28)
        super().__init__(message, **kw)
        self.requested_rho = requested_rho
        self.remaining_rho = remaining_rho


class UselessMeasurementError(BudgetExhaustedError):
    """A measurement's budget share is so small that its answers would be noise: refused
    from public metadata before any data is read (``docs/privacy.md``, "Useless
    measurements"); ``expected_error`` is the noise standard deviation it would have."""

    sqlstate = "53P01"

    def __init__(self, message: str, *, expected_error: float | None = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.expected_error = expected_error


class InsufficientResourcesError(OperationalError):
    """The engine already holds as many objects of a kind as its configuration allows (a
    people schema's on-demand flag tables, ``[people] max_ad_hoc_flags``)."""

    sqlstate = "53000"


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


class LedgerCorruptError(InternalError):
    """The privacy ledger failed its integrity check; no further charges are accepted.

    SQLSTATE XX001 (data_corrupted), class XX: a PEP 249 InternalError."""

    sqlstate = "XX001"


class LedgerVersionError(NotSupportedError):
    """The privacy ledger, or a release in it, was written in a format this dpsql does not
    read (a newer dpsql wrote it).  Nothing was read, charged or changed: the file stays as it
    is for the dpsql that reads it.  SQLSTATE 0AP02, a PEP 249 NotSupportedError."""

    sqlstate = "0AP02"


class QueryCanceledError(OperationalError):
    sqlstate = "57014"


def error_for_sqlstate(sqlstate: str) -> type[Error]:
    """The class registered for ``sqlstate``; else the category of its two-character class,
    then of its first character; else ``DatabaseError`` (as psycopg's lookup)."""
    code = sqlstate.upper()
    found = _REGISTRY.get(code)
    if found is not None:
        return found
    category: type[Error] = globals()[category_of(code)]
    return category
