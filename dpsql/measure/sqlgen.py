"""Measurement SQL, built as sqlglot ASTs (never by string concatenation).

Two statements make a measurement round (``../shared/research/scale_out.md`` §5):

1. *encode once*: ``SELECT <total CASE per attribute> AS c0, c1, … FROM source`` — every
   private value becomes the index of its declared cell.  The CASE expressions come from
   ``Attribute.index_sql`` and are total (explicit NULL branch, ELSE), so the encoding can
   never fail or return NULL, whatever the rows hold;
2. *count*: ``SELECT c_i…, COUNT(*) FROM cells GROUP BY GROUPING SETS ((…), …)``.  Because
   the cell expressions are never NULL, the grouping set of an output row is read off its
   NULL pattern; no ``GROUPING()``/``GROUPING_ID()``, whose spelling differs by engine.

Only portable constructs are emitted so that another engine can run the same AST through
``sqlglot`` transpilation (``Backend.dialect``).
"""

from __future__ import annotations

from typing import Sequence

from sqlglot import exp

from dpsql.domain import TableSchema


def cell_column(i: int) -> str:
    """Name of the encoded column for the table's i-th attribute."""
    return f"c{i}"


def _source_column(attribute, name: str) -> exp.Expression:
    """The raw column as the bin expression expects it.

    Sources are read as text so that loading can never fail on a malformed value (a
    failure that depended on the data would itself leak).  Numeric attributes are parsed
    with TRY_CAST, so unparsable text becomes NULL and lands in the NULL cell (or the
    attribute's documented fallback cell) instead of raising.
    """
    col = exp.column(name, quoted=True)
    if attribute.kind == "categorical":
        return col
    return exp.TryCast(this=col, to=exp.DataType.build("DOUBLE"))


def cell_type(size: int) -> str:
    """Smallest unsigned SQL integer type holding cell indices 0..size-1."""
    return "UTINYINT" if size <= 255 else "USMALLINT" if size <= 65535 else "UINTEGER"


def encode_select(schema: TableSchema, source: exp.Expression) -> exp.Select:
    """SELECT that maps every row of ``source`` to its cell indices (one column per attribute)."""
    projections = []
    for i, attribute in enumerate(schema.attributes):
        raw = _source_column(attribute, attribute.name)
        # the narrowest integer type: grouping a 10M-row table of 1-byte keys is ~25% faster
        # than of 4-byte ones (bench/measure_speed.py)
        narrow = exp.cast(attribute.index_sql(raw), exp.DataType.build(cell_type(attribute.size), dialect="duckdb"))
        projections.append(exp.alias_(narrow, cell_column(i)))
    return exp.select(*projections).from_(source)


def grouping_sets_select(table: str, columns: Sequence[str],
                         sets: Sequence[Sequence[str]]) -> exp.Select:
    """One GROUP BY GROUPING SETS query counting every requested column subset."""
    tuples = [exp.Tuple(expressions=[exp.column(c) for c in s]) for s in sets]
    select = exp.select(*[exp.column(c) for c in columns],
                        exp.alias_(exp.Count(this=exp.Star()), "n")).from_(table)
    select.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=tuples)]))
    return select


def contribution_bounded(source: exp.Expression, id_column: str, max_rows: int,
                         key_parameter: exp.Expression, columns: Sequence[str]) -> exp.Select:
    """Keep at most ``max_rows`` rows per privacy unit, chosen by a keyed hash.

    The order is ``md5(secret key || row content)``: deterministic (a repeat of the same
    data and key keeps the same rows, so re-measurement is reproducible), unpredictable to
    an analyst who lacks the key, and never DuckDB's ``random()``.
    """
    parts = [key_parameter] + [exp.Coalesce(this=exp.cast(exp.column(c, quoted=True), "VARCHAR"),
                                            expressions=[exp.Literal.string("\u2400")])
                               for c in columns]
    order_key = exp.MD5(this=exp.func("concat_ws", exp.Literal.string("|"), *parts))
    window = exp.Window(this=exp.RowNumber(),
                        partition_by=[exp.column(id_column, quoted=True)],
                        order=exp.Order(expressions=[exp.Ordered(this=order_key)]))
    inner = exp.select(exp.Star(), exp.alias_(window, "__dpsql_rank")).from_(source)
    return (exp.select(exp.Star()).from_(exp.alias_(exp.Subquery(this=inner), "__dpsql_ranked"))
            .where(exp.LTE(this=exp.column("__dpsql_rank"), expression=exp.Literal.number(max_rows))))
