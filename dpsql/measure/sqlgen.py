"""Measurement SQL, built as sqlglot ASTs (never by string concatenation).

Two statements make a measurement round (``../shared/research/scale_out.md`` §5):

1. *encode once*: ``SELECT <total CASE per attribute> AS c0, c1, … FROM source`` — every
   private value becomes the index of its declared cell.  The CASE expressions come from
   the total reader (``dpsql.measure.reader``) and ``cellsql.index_sql`` (explicit NULL
   branch, ELSE), so the encoding can never fail or return NULL, whatever the rows hold;
2. *count*: ``SELECT c_i…, COUNT(*) FROM cells GROUP BY GROUPING SETS ((…), …)``.  Because
   the cell expressions are never NULL, the grouping set of an output row is read off its
   NULL pattern; no ``GROUPING()``/``GROUPING_ID()``, whose spelling differs by engine.

Only portable constructs are emitted so that another engine can run the same AST through
``sqlglot`` transpilation (``Backend.dialect``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


from dpsql.domain import TableSchema
from dpsql.sql.syntax import exp


def cell_column(i: int) -> str:
    """Name of the encoded column for the table's i-th attribute."""
    return f"c{i}"


def cell_type(size: int) -> str:
    """Smallest unsigned SQL integer type holding cell indices 0..size-1."""
    return "UTINYINT" if size <= 255 else "USMALLINT" if size <= 65535 else "UINTEGER"


def grouping_sets_select(table: str | exp.Expr, columns: Sequence[str],
                         sets: Sequence[Sequence[str]]) -> exp.Select:
    """One GROUP BY GROUPING SETS query counting every requested column subset.  Result
    columns are read by position (engines fold unquoted names differently)."""
    tuples = [exp.Tuple(expressions=[exp.column(c) for c in s]) for s in sets]
    select = exp.select(*[exp.column(c) for c in columns],
                        exp.alias_(exp.Count(this=exp.Star()), "n")).from_(table)
    select.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=tuples)]))
    return select


# --- typed sources: one portable AST for DuckDB, PostgreSQL and Spark ------------------------

ID = "__id"


def layered(rel: exp.Expr, conv: Mapping, extra=()) -> exp.Expr:
    """FROM expression with every conversion's ``pre`` (then ``pre2``) columns computed once,
    so the CASE branches of ``cell``/``status`` never repeat the parsing."""
    pre = [exp.alias_(e, n) for c in conv.values() for n, e in c.pre]
    first = exp.select(exp.Star(), *pre, *extra).from_(exp.alias_(exp.Subquery(this=rel), "__rel"))
    pre2 = [exp.alias_(e, n) for c in conv.values() for n, e in (c.pre2 or [])]
    second = exp.select(exp.Star(), *pre2).from_(exp.alias_(exp.Subquery(this=first), "__pre1"))
    return exp.alias_(exp.Subquery(this=second), "__pre")


def typed_conversions(schema: TableSchema, columns: Mapping[str, str], dialect: str) -> dict:
    """``{attribute: reader.Converted}`` for a typed source (column types as its catalog
    names them; checked by ``reader.accepts`` first)."""
    from dpsql.measure import reader
    return {a.name: reader.typed_column(a, exp.column(a.name, quoted=True), columns[a.name], str(i), dialect)
            for i, a in enumerate(schema.attributes)}


def typed_relation(schema: TableSchema, id_column: str | None, scan: exp.Expr) -> exp.Select:
    """``SELECT <declared columns and the id> FROM scan`` (only the columns read)."""
    names = [a.name for a in schema.attributes] + ([id_column] if id_column else [])
    return exp.select(*[exp.column(n, quoted=True) for n in dict.fromkeys(names)]).from_(scan)


def cells_select(schema: TableSchema, rel: exp.Expr, conv: Mapping,
                 id_expr: exp.Expr | None, offsets: Sequence[str] = ()) -> exp.Select:
    """``SELECT c0, …, ck [, __id] FROM <rel with conversions>``: every record's cells
    (never NULL) and, under a privacy unit, its id (NULL: no id; not counted).  With
    ``offsets`` (binned attributes), also each one's lattice offset ``o<i>``
    (``dpsql.measure.offsets``), computed over the cells in an outer layer."""
    # copy=False: each cell expression is used here only (a fine time axis's is a CASE over
    # every bin start: copying its 100,800 branches twice took 40 s of a measurement)
    cols = [exp.alias_(conv[a.name].cell, cell_column(i), copy=False) for i, a in enumerate(schema.attributes)]
    if id_expr is not None:
        cols.append(exp.alias_(id_expr, ID))
    if not offsets:
        return exp.select(*cols, copy=False).from_(layered(rel, conv))
    from dpsql.measure.offsets import offset_sql
    index = {a.name: i for i, a in enumerate(schema.attributes)}
    # the value as the conversion parsed it (``__x<i>``: typed or read from text)
    values = [exp.alias_(exp.column(f"__x{index[a]}"), f"__v{index[a]}") for a in offsets]
    inner = exp.select(*cols, *values).from_(layered(rel, conv))
    keep = [exp.column(cell_column(i)) for i in range(len(schema.attributes))] + \
        ([exp.column(ID)] if id_expr is not None else [])
    outs = [exp.alias_(offset_sql(schema.attributes[index[a]], exp.column(cell_column(index[a])),
                                  exp.column(f"__v{index[a]}")), offset_column(index[a])) for a in offsets]
    return exp.select(*keep, *outs).from_(exp.alias_(exp.Subquery(this=inner), "__dpsql_values"))


def offset_column(i: int) -> str:
    """Name of the lattice offset of the table's i-th attribute (``cells_select``)."""
    return f"o{i}"


def key_expression(dialect: str) -> exp.Expr:
    """Where the bounding key enters the SQL: always a bind parameter, never a literal
    (DuckDB ``?``; Spark the named marker ``:dpsql_key``; PostgreSQL a transaction-local
    setting bound by ``set_config`` first, so the query itself takes no parameters and
    psycopg never parses ``%`` in it)."""
    if dialect == "postgres":
        return exp.Anonymous(this="current_setting", expressions=[exp.Literal.string("dpsql.hash_key")])
    if dialect == "spark":
        return exp.Placeholder(this="dpsql_key")
    return exp.Placeholder()


def sha256_hex(text: exp.Expr, dialect: str) -> exp.Expr:
    """Lower-case hex SHA-256 of the UTF-8 bytes of ``text``, on each engine."""
    if dialect == "postgres":
        utf8 = exp.Anonymous(this="convert_to", expressions=[text, exp.Literal.string("UTF8")])
        return exp.Anonymous(this="encode", expressions=[exp.Anonymous(this="sha256", expressions=[utf8]),
                                                        exp.Literal.string("hex")])
    return exp.SHA2(this=text, length=exp.Literal.number(256))   # DuckDB sha256(x), Spark sha2(x, 256)


def row_hash(ncells: int, dialect: str, key: exp.Expr | None = None) -> exp.Expr:
    """The bounding order of a row: SHA-256 of ``key|id|c0,c1,…`` (the row's cells are its
    fingerprint: text every engine writes alike; rows with equal cells count alike, so
    ties between them cannot change a count)."""
    parts: list[exp.Expr] = [key_expression(dialect) if key is None else key, exp.Literal.string("|"),
                                   exp.cast(exp.column(ID), "VARCHAR"), exp.Literal.string("|")]
    for i in range(ncells):
        if i:
            parts.append(exp.Literal.string(","))
        parts.append(exp.cast(exp.column(cell_column(i)), "VARCHAR"))
    return sha256_hex(exp.Concat(expressions=parts), dialect)


def group_hash(indices: Sequence[int], dialect: str, key: exp.Expr | None = None) -> exp.Expr:
    """The order of a person's groups: SHA-256 of ``key|id|g|c_i,c_j,…`` over the group
    attributes' cells (``g`` keeps it apart from every row hash)."""
    parts: list[exp.Expr] = [key_expression(dialect) if key is None else key, exp.Literal.string("|"),
                             exp.cast(exp.column(ID), "VARCHAR"), exp.Literal.string("|g|")]
    for n, i in enumerate(indices):
        if n:
            parts.append(exp.Literal.string(","))
        parts.append(exp.cast(exp.column(cell_column(i)), "VARCHAR"))
    return sha256_hex(exp.Concat(expressions=parts), dialect)


def _c_order(order: exp.Expr, dialect: str) -> exp.Expr:
    # PostgreSQL compares the hex digests byte by byte only under the "C" collation
    if dialect == "postgres":
        return exp.Collate(this=order, expression=exp.to_identifier("C", quoted=True))
    return order


def bounded(cells: exp.Expr, ncells: int, max_rows: int, dialect: str, extra: Sequence[str] = (),
            groups: tuple[Sequence[int], int, int] | None = None, keep_id: bool = False) -> exp.Select:
    """Keep at most ``max_rows`` rows per privacy unit, chosen by the keyed hash; rows
    without an id (``__id`` NULL) are dropped.

    The order is the lower-case hex SHA-256 of the key, the id and the row's cells, compared
    as a string of fixed length, i.e. as a 256-bit integer (PostgreSQL compares it under the
    "C" collation, byte by byte, like DuckDB and Spark).  Every backend computes it alike, so
    the same rows are kept everywhere.  Deterministic (a repeat keeps the same rows) and
    never an engine's random().  Each id's kept rows depend on that id's rows only, so
    bounding is stable with factor ``max_rows`` whatever the key (docs/privacy.md §2); a
    secret key only makes the choice unpredictable.  Dropping rows without an id is a
    row-wise filter (stable with factor 1).

    With ``groups`` = (the group attributes' cell indices, g, r), each id first keeps its
    rows of at most g groups (distinct values of those cells), the first by ``group_hash``
    (ties, impossible but for a SHA-256 collision, broken by the cells themselves, so never
    more than g), and at most r rows in each group by the row hash; then at most
    ``max_rows`` of those by the row hash.  Each step reads one id's rows only, so the kept
    rows of a person still depend on that person's rows alone (docs/privacy.md §2a).

    ``keep_id``: the kept rows keep their id column too (``SqlBackend.truncation``)."""
    if groups is not None:
        return _bounded_groups(cells, ncells, max_rows, dialect, extra, groups, keep_id)
    order = _c_order(row_hash(ncells, dialect), dialect)
    # ``extra`` columns (integer lattice offsets) only break ties between rows with equal
    # cells, so the kept rows' cells are those the counting query keeps, and their offsets
    # are the same on every engine
    window = exp.Window(this=exp.RowNumber(), partition_by=[exp.column(ID)],
                        order=exp.Order(expressions=[exp.Ordered(this=order)]
                                        + [exp.Ordered(this=exp.column(c)) for c in extra]))
    cols = [exp.column(cell_column(i)) for i in range(ncells)] + [exp.column(c) for c in extra] + \
        ([exp.column(ID)] if keep_id else [])
    inner = (exp.select(*cols, exp.alias_(window, "__dpsql_rank"))
             .from_(exp.alias_(exp.Subquery(this=cells), "__dpsql_cells"))
             .where(exp.Not(this=exp.Is(this=exp.column(ID), expression=exp.Null()))))
    return (exp.select(*[c.copy() for c in cols]).from_(exp.alias_(exp.Subquery(this=inner), "__dpsql_ranked"))
            .where(exp.LTE(this=exp.column("__dpsql_rank"), expression=exp.Literal.number(max_rows))))


def _bounded_groups(cells: exp.Expr, ncells: int, max_rows: int, dialect: str, extra: Sequence[str],
                    groups: tuple[Sequence[int], int, int], keep_id: bool = False) -> exp.Select:
    """``bounded`` with a group bound (its docstring): three layers over the cells."""
    indices, max_groups, per_group = groups
    cols = [exp.column(cell_column(i)) for i in range(ncells)] + [exp.column(c) for c in extra]
    gcols = [exp.column(cell_column(i)) for i in indices]
    # the key enters once (DuckDB binds one positional parameter), as a column both hashes read
    keyed = (exp.select(*cols, exp.column(ID), exp.alias_(key_expression(dialect), "__dpsql_k"))
             .from_(exp.alias_(exp.Subquery(this=cells), "__dpsql_cells"))
             .where(exp.Not(this=exp.Is(this=exp.column(ID), expression=exp.Null()))))
    key = exp.column("__dpsql_k")
    hashed = (exp.select(*[c.copy() for c in cols], exp.column(ID),
                         exp.alias_(row_hash(ncells, dialect, key.copy()), "__dpsql_h"),
                         exp.alias_(group_hash(indices, dialect, key.copy()), "__dpsql_gh"))
              .from_(exp.alias_(exp.Subquery(this=keyed), "__dpsql_keyed")))
    by_row = [exp.Ordered(this=_c_order(exp.column("__dpsql_h"), dialect))] + \
        [exp.Ordered(this=exp.column(c)) for c in extra]
    group_rank = exp.Window(this=exp.Anonymous(this="DENSE_RANK", expressions=[]),
                            partition_by=[exp.column(ID)],
                            order=exp.Order(expressions=[exp.Ordered(this=_c_order(exp.column("__dpsql_gh"), dialect))]
                                            + [exp.Ordered(this=g.copy()) for g in gcols]))
    in_group = exp.Window(this=exp.RowNumber(), partition_by=[exp.column(ID)] + [g.copy() for g in gcols],
                          order=exp.Order(expressions=[o.copy() for o in by_row]))
    ranked = (exp.select(*[c.copy() for c in cols], exp.column(ID), exp.column("__dpsql_h"),
                         exp.alias_(group_rank, "__dpsql_grank"), exp.alias_(in_group, "__dpsql_grow"))
              .from_(exp.alias_(exp.Subquery(this=hashed), "__dpsql_hashed")))
    overall = exp.Window(this=exp.RowNumber(), partition_by=[exp.column(ID)],
                         order=exp.Order(expressions=[o.copy() for o in by_row]))
    out = [c.copy() for c in cols] + ([exp.column(ID)] if keep_id else [])
    kept = (exp.select(*[c.copy() for c in out], exp.alias_(overall, "__dpsql_rank"))
            .from_(exp.alias_(exp.Subquery(this=ranked), "__dpsql_granked"))
            .where(exp.and_(exp.LTE(this=exp.column("__dpsql_grank"), expression=exp.Literal.number(max_groups)),
                            exp.LTE(this=exp.column("__dpsql_grow"), expression=exp.Literal.number(per_group)))))
    return (exp.select(*[c.copy() for c in out]).from_(exp.alias_(exp.Subquery(this=kept), "__dpsql_ranked"))
            .where(exp.LTE(this=exp.column("__dpsql_rank"), expression=exp.Literal.number(max_rows))))


def measurement_select(cells: exp.Expr, columns: Sequence[str],
                       sets: Sequence[Sequence[str]]) -> exp.Select:
    """The counting query over a cells relation (a SELECT or a table name)."""
    source = exp.alias_(exp.Subquery(this=cells), "__dpsql_counted") if isinstance(cells, exp.Select) else cells
    return grouping_sets_select(source, columns, sets)


def offsets_select(cells: exp.Expr, columns: Sequence[str], sets: Sequence[Sequence[str]],
                   sums: Sequence[str]) -> exp.Select:
    """Per grouping set, the integer SUM of each ``sums`` column (lattice offsets) over a
    cells relation: ``SELECT c_i…, SUM(o_j)… GROUP BY GROUPING SETS (…)``, read by position
    like the counting query."""
    source = exp.alias_(exp.Subquery(this=cells), "__dpsql_counted") if isinstance(cells, exp.Select) else cells
    tuples = [exp.Tuple(expressions=[exp.column(c) for c in s]) for s in sets]
    select = exp.select(*[exp.column(c) for c in columns],
                        *[exp.alias_(exp.Sum(this=exp.column(o)), f"s_{o}") for o in sums]).from_(source)
    select.set("group", exp.Group(expressions=[exp.GroupingSets(expressions=tuples)]))
    return select
