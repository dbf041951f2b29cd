"""One backend per engine, each table's calls sent to the backend of its source.

``open_backend(config.sources)`` is what the engine and the CLI use.  DuckDB reads csv,
parquet and duckdb sources; PostgreSQL and Spark backends are imported and started only
when a table needs them (psycopg and pyspark are loaded lazily, pyspark being an optional
extra).
"""

from __future__ import annotations

from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from dpsql.domain import TableSchema
from dpsql.errors import ConfigError
from dpsql.measure.source import FILE_KINDS, Source

if TYPE_CHECKING:
    from dpsql.measure.counting import Backend
    from dpsql.measure.postgres import PostgresBackend
    from dpsql.measure.spark import SparkBackend

Clique = tuple[str, ...]


def _engine_of(source: Source) -> str:
    return "duckdb" if source.kind in FILE_KINDS else source.kind


class Router:
    """The :class:`~dpsql.measure.counting.Backend` protocol over several engines."""

    def __init__(self, sources: Mapping[str, Source], *, fingerprint_store: Path | None = None,
                 **duckdb_options) -> None:
        self._sources = dict(sources)
        self._fingerprint_store = fingerprint_store
        self._duckdb_options = duckdb_options
        self._backends: dict[str, Backend] = {}

    def _source(self, table: str) -> Source:
        source = self._sources.get(table)
        if source is None:
            raise ConfigError(f"no source configured for table {table!r}")
        return source

    def backend(self, table: str):
        """The backend reading ``table`` (started on first use)."""
        source = self._source(table)
        engine = _engine_of(source)
        if engine not in self._backends:
            # a snapshot: add_source may add a table meanwhile (it tells started backends)
            group = {n: s for n, s in list(self._sources.items()) if _engine_of(s) == engine}
            if engine == "duckdb":
                from dpsql.measure.backend import DuckDBBackend
                self._backends[engine] = DuckDBBackend(group, **self._duckdb_options)
            elif engine == "postgres":
                from dpsql.measure.postgres import PostgresBackend
                self._backends[engine] = PostgresBackend(group)
            else:
                from dpsql.measure.spark import SparkBackend
                self._backends[engine] = SparkBackend(group)
        return self._backends[engine]

    def add_source(self, name: str, source: Source) -> None:
        """Route ``name`` to its engine's backend from now on (a table an engine adds at run
        time: a people schema's on-demand flag), the backend told too once started."""
        self._sources[name] = source
        started = self._backends.get(_engine_of(source))
        if started is not None:
            started.add_source(name, source)

    def remove_source(self, name: str) -> None:
        """Forget ``name`` (a table added at run time that the engine dropped), in its
        engine's backend too once started."""
        source = self._sources.pop(name, None)
        started = self._backends.get(_engine_of(source)) if source is not None else None
        if started is not None:
            started.remove_source(name)

    def count_marginals(self, schema: TableSchema, cliques: Sequence[Clique],
                        expect: dict | None = None) -> dict[Clique, np.ndarray]:
        return self.backend(schema.name).count_marginals(schema, cliques, expect=expect)

    def sum_offsets(self, schema: TableSchema, requests: Sequence[tuple[Clique, str]],
                    expect: dict | None = None) -> dict[tuple[Clique, str], np.ndarray]:
        return self.backend(schema.name).sum_offsets(schema, requests, expect)

    def fingerprint(self, table: str) -> dict:
        source = self._sources.get(table)
        if source is not None and (source.data_version is not None or _engine_of(source) == "duckdb"):
            # a declared version, or a file's size and hash: no engine needed, so a process
            # that answers from a saved model never starts DuckDB (issue 17)
            return source.fingerprint(store=self._fingerprint_store)
        return self.backend(table).fingerprint(table)

    def source_columns(self, table: str) -> dict[str, str]:
        return self.backend(table).source_columns(table)

    def dialect_of(self, table: str) -> str:
        """The SQL dialect of the engine reading ``table`` (how its catalog names types)."""
        return "duckdb" if _engine_of(self._source(table)) == "duckdb" else self.backend(table).dialect

    def check_schema(self, schema: TableSchema) -> dict[str, str]:
        return self.backend(schema.name).check_schema(schema)

    def contributions(self, schema: TableSchema, cap: int) -> np.ndarray:
        return self.backend(schema.name).contributions(schema, cap)

    def truncation(self, schema: TableSchema, cap: int) -> tuple[int, int]:
        return self.backend(schema.name).truncation(schema, cap)

    def data_check(self, schema: TableSchema, examples: int = 5):
        return self.backend(schema.name).data_check(schema, examples)

    def close(self) -> None:
        backends, self._backends = list(self._backends.values()), {}
        for b in backends:
            b.close()


def open_backend(sources: Mapping[str, Source], *, fingerprint_store: Path | None = None,
                 **duckdb_options) -> Router:
    """The backend of a configuration (``Config.sources``).  ``fingerprint_store``: a file
    that keeps source files' hashes across processes (``source.file_fingerprint``)."""
    return Router(sources, fingerprint_store=fingerprint_store, **duckdb_options)


def read_public(name: str, source: Source) -> tuple[list[tuple[str, str]], list[tuple]]:
    """Columns (name, DuckDB type) and rows of public table ``name`` held by PostgreSQL or
    Spark, read once by that engine's backend (``read_public``) and released; files are read
    by DuckDB itself (``dpsql.measure.backend.PublicDatabase``)."""
    backend: PostgresBackend | SparkBackend
    if source.kind == "postgres":
        from dpsql.measure.postgres import PostgresBackend
        backend = PostgresBackend({name: source})
    elif source.kind == "spark":
        from dpsql.measure.spark import SparkBackend
        backend = SparkBackend({name: source})
    else:
        raise ConfigError(f"public table {name!r}: a {source.kind} source is read by DuckDB",
                          hint="PublicDatabase reads csv, parquet and duckdb sources itself")
    try:
        columns, rows = backend.read_public(name)
    finally:
        backend.close()
    # an engine's table has no row order (PostgreSQL returns a heap's order, Spark its files'
    # and partitions'): sorted by its columns, so that labels_from, which lists a column's
    # values in row order, gives the same domain (and fingerprint) at every load
    rows.sort(key=lambda r: tuple((v is None, 0 if v is None else v) for v in r))
    return columns, rows


__all__ = ["Router", "open_backend", "read_public"]
