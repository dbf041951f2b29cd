"""Measurement SQL, built as sqlglot ASTs (never by string concatenation).

Two statements make a measurement round (``../shared/research/scale_out.md`` §5):

1. *encode once*: ``SELECT <total CASE per attribute> AS c0, c1, … FROM source`` — every
   private value becomes the index of its declared cell.  The CASE expressions come from
   the total reader (``dpsql.measure.reader``) and ``Attribute.index_sql`` (explicit NULL
   branch, ELSE), so the encoding can never fail or return NULL, whatever the rows hold;
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


def cell_type(size: int) -> str:
    """Smallest unsigned SQL integer type holding cell indices 0..size-1."""
    return "UTINYINT" if size <= 255 else "USMALLINT" if size <= 65535 else "UINTEGER"


def grouping_sets_select(table: str, columns: Sequence[str],
                         sets: Sequence[Sequence[str]]) -> exp.Select:
    """One GROUP BY GROUPING SETS query counting every requested column subset."""
    tuples = [exp.Tuple(expressions=[exp.column(c) for c in s]) for s in sets]
    select = exp.select(*[exp.column(c) for c in columns],
                        exp.alias_(exp.Count(this=exp.Star()), "n")).from_(table)
    select.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=tuples)]))
    return select


def contribution_bounded(source: exp.Expression, id_column: str, max_rows: int,
                         key_parameter: exp.Expression, content: exp.Expression) -> exp.Select:
    """Keep at most ``max_rows`` rows per privacy unit, chosen by a keyed hash; rows without
    a readable id (``__has_id`` false) are dropped.

    The order is ``md5(key || row content)``: deterministic (a repeat of the same data and
    key keeps the same rows, so re-measurement is reproducible) and never DuckDB's
    ``random()``.  Each id's kept rows depend on that id's rows only, so bounding is stable
    with factor ``max_rows`` whatever the key (docs/privacy.md §2); a secret key only makes
    the choice unpredictable.  Dropping rows without an id is a row-wise filter (stable with
    factor 1): a row that names no person cannot be bounded, so it is not counted.
    """
    # Anonymous: sqlglot's DuckDB output of CONCAT_WS repeats its arguments (and the
    # placeholder with them)
    order_key = exp.MD5(this=exp.Anonymous(this="concat_ws", expressions=[
        exp.Literal.string("|"), key_parameter, content]))
    window = exp.Window(this=exp.RowNumber(),
                        partition_by=[exp.column(id_column, quoted=True)],
                        order=exp.Order(expressions=[exp.Ordered(this=order_key)]))
    inner = (exp.select(exp.Star(), exp.alias_(window, "__dpsql_rank"))
             .from_(exp.alias_(exp.Subquery(this=source), "__dpsql_src"))
             .where(exp.column("__has_id")))
    return (exp.select(exp.Star()).from_(exp.alias_(exp.Subquery(this=inner), "__dpsql_ranked"))
            .where(exp.LTE(this=exp.column("__dpsql_rank"), expression=exp.Literal.number(max_rows))))
