"""dpsql: differentially private SQL over a sensitive table.

Public surface: the DB-API 2.0 driver (``connect`` and the PEP 249 module globals) and
the exception hierarchy.  Everything else is internal and documented in ``docs/``.
"""

from dpsql.errors import (  # noqa: F401  (re-exported, PEP 249)
    BudgetExhaustedError, DataError, DatabaseError, DomainViolationError, Error, InsufficientResourcesError,
    IntegrityError, InterfaceError, InternalError, ModelTooLargeError, NotSupportedError, OperationalError,
    PrivacyViolationError, ProgrammingError, StatementTooComplexError, UnsupportedQueryError,
    UselessMeasurementError, Warning,
)

__version__ = "0.1.0"

_DBAPI = {"connect", "apilevel", "threadsafety", "paramstyle", "Connection", "Cursor", "STRING",
          "NUMBER", "DATETIME", "BINARY", "ROWID", "Date", "Time", "Timestamp", "DateFromTicks",
          "TimeFromTicks", "TimestampFromTicks", "Binary", "read_sql"}


def __getattr__(name):
    # The driver pulls in the whole engine (numpy, scipy, duckdb); importing it lazily keeps
    # `import dpsql.errors` and the command line's help fast.
    if name in _DBAPI:
        from dpsql import dbapi
        return getattr(dbapi, name)
    raise AttributeError(f"module 'dpsql' has no attribute {name!r}")


__all__ = sorted(_DBAPI) + ["Error", "Warning", "InterfaceError", "DatabaseError", "DataError",
                            "OperationalError", "IntegrityError", "InternalError", "ProgrammingError",
                            "NotSupportedError", "BudgetExhaustedError", "DomainViolationError",
                            "InsufficientResourcesError", "ModelTooLargeError", "PrivacyViolationError",
                            "StatementTooComplexError", "UnsupportedQueryError", "UselessMeasurementError"]
