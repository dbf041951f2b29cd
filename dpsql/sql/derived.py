"""The shapes BI tools wrap around an aggregate query, brought back to one table.

* **Row-level derived tables** (Superset virtual datasets ``FROM (SELECT * FROM t) AS
  virtual_table``, Metabase nested questions, Power BI's ``"rows"``/``"_"`` layers,
  SQLAlchemy's ``query.count()``, dbplyr's ``SELECT "t".*, expr AS x``): a subquery in FROM
  that only projects and filters rows is merged into the query around it — its output
  columns are replaced by their expressions and its WHERE is AND-ed in (:func:`flatten`).
  The merged query reads the private table directly and is compiled as usual.
* **Top-N restrictions** (Superset's series limit, Tableau's top-N filter): ``JOIN (SELECT
  keys, metric … GROUP BY keys ORDER BY metric DESC LIMIT n) AS t ON key = t.key`` or
  ``WHERE key IN (SELECT key … LIMIT n)``.  The ranking subquery is an aggregate query in
  its own right; :func:`restrictions` takes it out of the tree and records which outer
  expressions must equal which of its output columns.  The compiler answers both and
  keeps the outer groups that the released ranking chose (``postprocess.Restriction``):
  post-processing of released answers, so the choice costs no privacy budget.

Aggregate derived tables (an aggregate subquery in FROM) are answered as an outer stage
over the released rows (``stage.py``).  Everything here reads only the SQL and the declared
schema.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp

from dpsql.errors import (ProgrammingError, UnknownColumnError, UnknownTableError, UnsupportedQueryError)
from dpsql.sql.aggregates import is_aggregate
from dpsql.sql.cells import conjuncts, literal_value, snippet

__all__ = ["flatten", "is_row_level", "restrictions", "Pending", "limit_clause", "folded", "output_names"]


def folded(ident: exp.Identifier | None) -> str | None:
    """An identifier as PostgreSQL compares it: exact when quoted, lower case otherwise."""
    if ident is None:
        return None
    return ident.name if ident.args.get("quoted") else ident.name.lower()


def _alias_ident(node: exp.Expr) -> exp.Identifier | None:
    alias = node.args.get("alias")
    if isinstance(alias, exp.TableAlias):
        return alias.this
    if isinstance(alias, exp.Identifier):
        return alias
    return None


def _scoped_nodes(tree: exp.Expr):
    """Nodes of ``tree``'s own scope: nested SELECTs (other scopes) are not entered."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in node.iter_expressions():
            if isinstance(child, (exp.Subquery, exp.Select)) and child is not tree:
                continue
            stack.append(child)


def _has_aggregate(node: exp.Expr) -> bool:
    return any(is_aggregate(n) for n in _scoped_nodes(node))


def is_row_level(select: exp.Select) -> bool:
    """Does ``select`` only project and filter rows (no grouping, aggregates, limits)?"""
    if not isinstance(select, exp.Select):
        return False
    for key in ("group", "having", "distinct", "limit", "offset", "qualify", "with_", "with"):
        if select.args.get(key):
            return False
    # joins of tables (public dimensions, joins.py) keep it row-level; joins of subqueries do not
    if any(not isinstance(j.this, exp.Table) for j in select.args.get("joins") or []):
        return False
    return not any(_has_aggregate(e) for e in select.expressions) and \
        not any(isinstance(n, exp.Window) for e in select.expressions for n in _scoped_nodes(e))


def output_names(select: exp.Select, star_columns) -> list[tuple[str | None, exp.Expr]]:
    """(folded output name, expression) per output column of ``select``; ``*`` and ``t.*``
    expand to ``star_columns(select)`` (declared names, as quoted columns)."""
    out: list[tuple[str | None, exp.Expr]] = []
    for e in select.expressions:
        if isinstance(e, exp.Star):
            out.extend((c.name, c) for c in star_columns(select))
        elif isinstance(e, exp.Column) and isinstance(e.this, exp.Star):
            # t.*: the columns of t alone (every column when t names the only table)
            cols = star_columns(select)
            qual = folded(e.args.get("table"))
            mine = [c for c in cols if c.table == qual]
            out.extend((c.name, c) for c in (mine if mine or not qual else cols))
        elif isinstance(e, exp.Alias):
            out.append((folded(e.args.get("alias")), e.this))
        elif isinstance(e, exp.Column):
            out.append((folded(e.this), e))
        else:
            out.append((None, e))      # "?column?": not referenceable by name
    return out


def _paren(node: exp.Expr) -> exp.Expr:
    return node if isinstance(node, (exp.Column, exp.Literal, exp.Paren, exp.Null, exp.Boolean)) \
        else exp.Paren(this=node)


def _merge(outer: exp.Select, sub: exp.Subquery, inner: exp.Select, star_columns, stmt) -> exp.Select:
    """``outer`` with its FROM subquery ``sub`` (whose SELECT is ``inner``) merged in."""
    alias = folded(_alias_ident(sub))
    names = output_names(inner, star_columns)
    by_name: dict[str, list[exp.Expr]] = {}
    for name, e in names:
        if name is not None:
            by_name.setdefault(name, []).append(e)
    join_aliases = {folded(_alias_ident(j.this)) for j in outer.args.get("joins") or []}
    join_outputs: set[str] = set()
    for j in outer.args.get("joins") or []:
        if isinstance(j.this, exp.Subquery) and isinstance(j.this.this, exp.Select):
            join_outputs |= {n for n, _ in output_names(j.this.this, star_columns) if n}
    out_aliases = {folded(e.args.get("alias")) for e in outer.expressions if isinstance(e, exp.Alias)}
    merged = outer.copy()
    for node in list(_scoped_nodes(merged)):
        if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
            continue
        qual = folded(node.args.get("table"))
        name = folded(node.this)
        if qual is not None and qual != alias:
            if qual in join_aliases:
                continue
            raise UnknownTableError(f"missing FROM-clause entry for table \"{node.table}\"",
                                    position=stmt.pos(node), hint=f"the subquery in FROM is named {sub.alias!r}"
                                    if sub.alias else "name the subquery and use its name")
        hits = by_name.get(name) if name is not None else None
        if qual is None and not hits:
            if name in join_outputs or name in out_aliases:
                continue
            raise UnknownColumnError(f"column \"{node.name}\" does not exist", position=stmt.pos(node),
                                     hint="the subquery in FROM has columns "
                                          + ", ".join(n for n, _ in names if n)[:200])
        if not hits:
            raise UnknownColumnError(f"column {sub.alias}.{node.name} does not exist", position=stmt.pos(node),
                                     hint="the subquery in FROM has columns "
                                          + ", ".join(n for n, _ in names if n)[:200])
        if len(hits) > 1:
            raise ProgrammingError(f"column reference \"{node.name}\" is ambiguous", position=stmt.pos(node),
                                   hint="name the subquery's columns apart")
        if qual is None and name in join_outputs:
            raise ProgrammingError(f"column reference \"{node.name}\" is ambiguous", position=stmt.pos(node),
                                   hint="qualify it with the subquery's name")
        replacement = _paren(hits[0].copy())
        parent = node.parent
        if isinstance(parent, exp.Select) and node in parent.expressions and \
                not (isinstance(replacement, exp.Column) and folded(replacement.this) == name):
            replacement = exp.Alias(this=replacement, alias=node.this.copy())
        node.replace(replacement)        # node is a Column inside merged, never merged itself
    inner_from = inner.args.get("from_") or inner.args.get("from")
    merged.set("from_", inner_from.copy() if inner_from is not None else None)
    # the subquery's joins of tables come along (its WHERE applied after them, as before)
    inner_joins = [j.copy() for j in inner.args.get("joins") or []]
    if inner_joins:
        merged.set("joins", inner_joins + list(merged.args.get("joins") or []))
    inner_where = inner.args.get("where")
    outer_where = merged.args.get("where")
    if inner_where is not None and outer_where is not None:
        merged.set("where", exp.Where(this=exp.And(this=exp.Paren(this=inner_where.this.copy()),
                                                   expression=exp.Paren(this=outer_where.this))))
    elif inner_where is not None:
        merged.set("where", inner_where.copy())
    return merged


def flatten(tree: exp.Select, star_columns, stmt) -> exp.Select:
    """Merge every row-level subquery in FROM into ``tree`` (innermost first)."""
    while True:
        from_ = tree.args.get("from_") or tree.args.get("from")
        src = from_.this if from_ is not None else None
        if not isinstance(src, exp.Subquery) or not isinstance(src.this, exp.Select):
            return tree
        inner = src.this
        if not is_row_level(inner):
            if inner.args.get("limit") is not None and is_row_level_but_limit(inner):
                raise UnsupportedQueryError(
                    "LIMIT in a subquery that returns table rows is not supported: it would pick "
                    "individual rows", position=stmt.pos(inner.args["limit"]),
                    hint="filter with WHERE instead, or aggregate inside the subquery")
            return tree
        inner = flatten(inner.copy(), star_columns, stmt)
        tree = _merge(tree, src, inner, star_columns, stmt)


def is_row_level_but_limit(select: exp.Select) -> bool:
    probe = select.copy()
    for key in ("limit", "offset", "order"):
        probe.set(key, None)
    return is_row_level(probe)


@dataclass
class Pending:
    """A top-N restriction found in the SQL, before either side is compiled: rows of the
    outer query survive when each ``outer`` expression equals the ranking subquery's output
    column of the same index in ``inner_cols`` (``null_safe``: NULL matches NULL)."""

    select: exp.Select
    outer: list[exp.Expr]
    inner_cols: list[int]
    null_safe: list[bool]
    node: exp.Expr


def _strip(node):
    while isinstance(node, exp.Paren):
        node = node.this
    return node


def _null_safe_pair(node):
    """(a, b) for Tableau's ``(a = b) OR ((a IS NULL) AND (b IS NULL))``, else None."""
    node = _strip(node)
    if not isinstance(node, exp.Or):
        return None
    eq, both = _strip(node.this), _strip(node.expression)
    if not isinstance(eq, exp.EQ) or not isinstance(both, exp.And):
        return None
    nulls = [_strip(both.this), _strip(both.expression)]
    if not all(isinstance(x, exp.Is) and isinstance(x.expression, exp.Null) and not x.args.get("negate")
               for x in nulls):
        return None
    sides = {eq.this.sql(), eq.expression.sql()}
    if {nulls[0].this.sql(), nulls[1].this.sql()} != sides:
        return None
    return eq.this, eq.expression


def restrictions(tree: exp.Select, stmt, star_columns) -> tuple[exp.Select, list[Pending]]:
    """Take top-N joins and ``IN (subquery)`` conjuncts out of ``tree``."""
    found: list[Pending] = []
    joins = tree.args.get("joins") or []
    if joins:
        tree = tree.copy()
        for join in tree.args.get("joins") or []:
            found.append(_join_restriction(join, stmt, star_columns))
        tree.set("joins", None)
    where = tree.args.get("where")
    if where is not None and any(isinstance(n, exp.In) and n.args.get("query") is not None
                                 for n in conjuncts(where.this)):
        tree = tree.copy()
        keep = []
        for c in conjuncts(tree.args["where"].this):
            if isinstance(c, exp.In) and c.args.get("query") is not None:
                found.append(_in_restriction(c, stmt))
            else:
                keep.append(c)
        if keep:
            expr = keep[0]
            for k in keep[1:]:
                expr = exp.And(this=expr, expression=k)
            tree.set("where", exp.Where(this=expr))
        else:
            tree.set("where", None)
    return tree, found


_TOPN_HINT = ("a top-N filter joins an aggregate subquery on its group keys, e.g. JOIN (SELECT sex, COUNT(*) AS n "
              "FROM t GROUP BY sex ORDER BY n DESC LIMIT 5) AS top ON t.sex = top.sex")


def _ranking(inner: exp.Select, stmt, where) -> None:
    """A top-N subquery ranks groups: it must aggregate (a row-level one would list rows)."""
    if inner.args.get("group") is None and not any(_has_aggregate(e) for e in inner.expressions):
        raise UnsupportedQueryError("a subquery in a join or IN must rank groups: GROUP BY its keys and aggregate",
                                    position=stmt.pos(where), hint=_TOPN_HINT)


def _join_restriction(join: exp.Join, stmt, star_columns) -> Pending:
    sub = join.this
    side = (join.args.get("side") or "").upper()
    kind = (join.args.get("kind") or "").upper()
    if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
        raise UnsupportedQueryError("joins are not supported: dpsql answers queries over one private table",
                                    position=stmt.pos(join), hint="query one table at a time; " + _TOPN_HINT)
    if side or kind not in ("", "INNER"):
        raise UnsupportedQueryError(f"{(side + ' ' + kind).strip() or 'this'} JOIN of a subquery is not "
                                    "supported; only an inner join that keeps the top-N groups is",
                                    position=stmt.pos(join), hint=_TOPN_HINT)
    inner = sub.this
    _ranking(inner, stmt, sub)
    alias = folded(_alias_ident(sub))
    names = [n for n, _ in output_names(inner, star_columns)]
    using = join.args.get("using")
    pairs: list[tuple[exp.Expr, int, bool]] = []
    if using:
        for ident in using:
            name = folded(ident)
            if name not in names:
                raise UnknownColumnError(f"column \"{ident.name}\" specified in USING clause does not exist "
                                         "in the subquery", position=stmt.pos(ident), hint=_TOPN_HINT)
            pairs.append((exp.column(ident.copy()), names.index(name), False))
    else:
        on = join.args.get("on")
        if on is None:
            raise UnsupportedQueryError("a join needs ON or USING", position=stmt.pos(join), hint=_TOPN_HINT)
        for c in conjuncts(on):
            pair = _null_safe_pair(c)
            null_safe = pair is not None
            if pair is None:
                c = _strip(c)
                if isinstance(c, (exp.EQ, exp.NullSafeEQ)):
                    pair, null_safe = (c.this, c.expression), isinstance(c, exp.NullSafeEQ)
                else:
                    raise UnsupportedQueryError(f"join condition '{snippet(c, 60)}' is not an equality of "
                                                "group keys", position=stmt.pos(c), hint=_TOPN_HINT)
            a, b = (_strip(x) for x in pair)
            ia, ib = _inner_ref(a, alias, names), _inner_ref(b, alias, names)
            if ia is not None and ib is None:
                pairs.append((b, ia, null_safe))
            elif ib is not None and ia is None:
                pairs.append((a, ib, null_safe))
            else:
                raise UnsupportedQueryError(f"join condition '{snippet(c, 60)}' must compare a column of the "
                                            "subquery with an expression of the table", position=stmt.pos(c),
                                            hint=_TOPN_HINT)
    return Pending(inner, [p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs], join)


def _inner_ref(node, alias: str | None, names: list) -> int | None:
    if not isinstance(node, exp.Column) or isinstance(node.this, exp.Star):
        return None
    qual = folded(node.args.get("table"))
    name = folded(node.this)
    if qual is not None:
        return names.index(name) if qual == alias and name in names else None
    return names.index(name) if name in names and names.count(name) == 1 else None


def _in_restriction(node: exp.In, stmt) -> Pending:
    query = node.args["query"]
    inner = query.this if isinstance(query, exp.Subquery) else query
    if not isinstance(inner, exp.Select) or len(inner.expressions) != 1:
        raise UnsupportedQueryError("IN (SELECT …) needs a subquery with one output column",
                                    position=stmt.pos(node), hint=_TOPN_HINT)
    _ranking(inner, stmt, query)
    return Pending(inner, [node.this], [0], [False], node)


def limit_clause(tree: exp.Select, pos) -> tuple[int | None, int | None]:
    """(LIMIT, OFFSET) as integers: LIMIT n, LIMIT ALL / NULL (none), FETCH FIRST|NEXT [n]
    ROW[S] ONLY, OFFSET n [ROWS]; casts of constants and bound parameters are fine."""
    limit = tree.args.get("limit")
    value = None
    if isinstance(limit, exp.Fetch):
        opts = limit.args.get("limit_options")
        if opts is not None and (opts.args.get("percent") or opts.args.get("with_ties")):
            word = "PERCENT" if opts.args.get("percent") else "WITH TIES"
            raise UnsupportedQueryError(f"FETCH … {word} is not supported", position=pos(limit),
                                        hint="use FETCH FIRST n ROWS ONLY")
        count = limit.args.get("count")
        value = 1 if count is None else _non_negative(count, "FETCH FIRST", pos, limit)
    elif limit is not None:
        node = limit.expression
        if not (isinstance(node, exp.Var) and node.name.upper() == "ALL"):
            value = _non_negative(node, "LIMIT", pos, limit)
    offset = tree.args.get("offset")
    off = None
    if offset is not None:
        off = _non_negative(offset.expression if isinstance(offset, exp.Offset) else offset, "OFFSET", pos, offset)
    return value, off


def _non_negative(node, word: str, pos, where) -> int | None:
    ok, v = literal_value(node)
    if ok and v is None:
        return None            # LIMIT NULL is no limit (PostgreSQL)
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if not ok or not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise UnsupportedQueryError(f"{word} must be a non-negative integer constant", position=pos(where),
                                    hint=f"e.g. {word} 10")
    return v
