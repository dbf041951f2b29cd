"""Column names and types of a source, for ``dpsql init`` (the operator drafting a
configuration).  Only metadata is read — the engine's catalog or the Parquet footers —
never a row, and no domain is inferred: domains must come from public knowledge."""

from __future__ import annotations

from dpsql.measure.reader import type_family
from dpsql.measure.source import FILE_KINDS, Source

_KIND = {"integer": "integer", "float": "numeric", "decimal": "numeric", "text": "categorical",
         "boolean": "boolean", "uuid": "other", "other": "other", "date": "date", "timestamp": "timestamp",
         "timestamptz": "timestamp", "time": "time"}


def describe(source: Source, name: str = "source") -> list[tuple[str, str, str]]:
    """``[(column, type as the catalog names it, coarse kind)]`` with kind one of integer,
    numeric, categorical, boolean, date, timestamp, time or other (a type no domain column reads)."""
    from dpsql.measure.router import open_backend

    backend = open_backend({name: source})
    try:
        columns = backend.source_columns(name)
    finally:
        backend.close()
    dialect = "duckdb" if source.kind in FILE_KINDS else source.kind
    return [(col, sql_type, _KIND[type_family(sql_type, dialect)]) for col, sql_type in columns.items()]


__all__ = ["describe"]
