"""Exact (NON-private) answers, for tests, benchmarks and the demo on public data only.

The engine never calls this.  It runs the analyst's SQL directly in DuckDB on the table
with every column replaced by the value its declared cell stands for ("the binned data"),
so that dpsql's answers at a near-infinite budget must equal these exactly.  Rows are read
by the same total reader as the measurement (``DuckDBBackend``).
"""

from __future__ import annotations

from dpsql.domain import TableSchema
from dpsql.measure import sqlgen
from dpsql.measure.backend import DuckDBBackend
from dpsql.measure.source import Source
from dpsql.timeaxis import iso_text


class ExactOracle:
    """Answers SQL exactly on the binned copy of a (public) table."""

    def __init__(self, schemas: dict[str, TableSchema], sources: dict[str, Source], public=None) -> None:
        self._backend = DuckDBBackend({n: sources[n] for n in schemas})
        for name, schema in schemas.items():
            cols = [_decode_expr(att, sqlgen.cell_column(i)) for i, att in enumerate(schema.attributes)]
            self._backend.create_cells_table(name, schema, cols)
        # public tables (dpsql.public.PublicTable), as they are: joins with them run in DuckDB
        for name, table in (public or {}).items():
            self._backend.create_rows_table(name, [(c.name, c.type) for c in table.columns], table.rows)

    def query(self, sql: str, params=None) -> list[tuple]:
        return self._backend.fetch(sql, list(params or []))

    def close(self) -> None:
        self._backend.close()


def _sql_literal(v) -> str:
    if v is None:
        return "NULL"
    if isinstance(v, str):
        return "'" + v.replace("'", "''") + "'"
    return repr(float(v)) if isinstance(v, float) else str(int(v))


def _decode_expr(att, column: str) -> str:
    """Cell index → the value the cell stands for (label, integer, or bin representative;
    a time bin's first value)."""
    if att.kind in ("date", "timestamp", "time"):
        sql_type = {"date": "DATE", "timestamp": "TIMESTAMP", "time": "TIME"}[att.kind]
        whens = " ".join(f"WHEN {column} = {i} THEN {sql_type} '{iso_text(b[0])}'"
                         for i, b in enumerate(att.bin_bounds()) if b is not None)
        return f'CAST(CASE {whens} ELSE NULL END AS {sql_type}) AS "{att.name}"'
    if att.kind == "categorical":
        values = att.labels()
    else:
        reps = att.cell_values()
        values = [None if r != r else (int(r) if float(r).is_integer() and att.kind == "integer" else float(r))
                  for r in reps]
    whens = " ".join(f"WHEN {column} = {i} THEN {_sql_literal(v)}" for i, v in enumerate(values)
                     if not (att.kind == "categorical" and v == "(other)"))
    sql_type = {"categorical": "VARCHAR", "integer": "BIGINT"}.get(att.kind, "DOUBLE")
    if att.kind == "categorical" and att.other_index is not None:
        whens += f" WHEN {column} = {att.other_index} THEN '(other)'"
    return f'CAST(CASE {whens} ELSE NULL END AS {sql_type}) AS "{att.name}"'
