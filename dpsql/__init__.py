"""dpsql: differentially private SQL over a sensitive table.

Public surface: the DB-API 2.0 driver (``connect`` and the module globals) and the
exception hierarchy.  Everything else is internal and documented in ``docs/``.
"""

from dpsql.errors import (  # noqa: F401  (re-exported, PEP 249)
    BudgetExhaustedError, DataError, DatabaseError, DomainViolationError, Error, IntegrityError,
    InterfaceError, InternalError, ModelTooLargeError, NotSupportedError, OperationalError,
    PrivacyViolationError, ProgrammingError, UnsupportedQueryError, Warning,
)

__version__ = "0.1.0"
