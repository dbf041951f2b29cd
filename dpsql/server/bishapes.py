"""BI-tool query shapes the wire server answers in two steps: Superset's series limit.

A Superset chart with a dimension and a series limit ("top 3 races by count") sends

    SELECT sex AS sex, race AS race, COUNT(*) AS count
    FROM public.adult JOIN (SELECT race AS race__, COUNT(*) AS mme_inner__
                            FROM public.adult GROUP BY race ORDER BY COUNT(*) DESC LIMIT 3)
         AS series_limit ON race = race__
    GROUP BY sex, race ORDER BY count DESC LIMIT 1000

which the SQL front end refuses (a join).  It means: answer the inner query, keep its groups,
and answer the outer query restricted to them — what Superset itself does for databases
without joins.  ``split_series_limit`` recognises exactly that shape (one inner join with a
derived table over the same private table, ON equalities between outer columns and the
derived table's output names) and returns the inner SQL and a function building the outer
SQL from the inner answer: ``WHERE … AND race IN ('White', 'Black', …)``.  Both steps are
ordinary DP queries; choosing the top groups from a noisy answer is post-processing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sqlglot import exp


@dataclass
class SeriesLimit:
    inner_sql: str
    outer: Callable[[list[str], list[tuple]], str]   # (inner column names, inner rows) -> outer SQL


def _table_name(node) -> str | None:
    if isinstance(node, exp.Table) and isinstance(node.this, exp.Identifier):
        return node.name.lower()
    return None


def _literal(value) -> exp.Expression:
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        return exp.Literal.number(value)
    return exp.Literal.string(str(value))


def split_series_limit(tree, private) -> SeriesLimit | None:
    if not isinstance(tree, exp.Select) or tree.args.get("with"):
        return None
    joins = tree.args.get("joins") or []
    if len(joins) != 1:
        return None
    join = joins[0]
    if join.args.get("side") or join.args.get("kind") not in (None, "", "INNER") or join.args.get("using"):
        return None
    sub = join.this
    if not isinstance(sub, exp.Subquery) or not isinstance(sub.this, exp.Select):
        return None
    inner = sub.this
    source = tree.args.get("from_") or tree.args.get("from")
    inner_source = inner.args.get("from_") or inner.args.get("from")
    outer_table = _table_name(source.this) if source is not None else None
    if outer_table is None or outer_table not in private or inner.args.get("joins") \
            or inner_source is None or _table_name(inner_source.this) != outer_table:
        return None
    names = [e.alias_or_name for e in inner.expressions]
    pairs = []
    condition = join.args.get("on")
    stack = [condition]
    while stack:
        node = stack.pop()
        if isinstance(node, exp.And):
            stack += [node.this, node.expression]
        elif isinstance(node, exp.EQ) and isinstance(node.this, exp.Column) and isinstance(node.expression, exp.Column):
            a, b = node.this, node.expression
            if b.name in names and not b.table and a.name not in names:
                pairs.append((a, names.index(b.name)))
            elif a.name in names and not a.table and b.name not in names:
                pairs.append((b, names.index(a.name)))
            else:
                return None
        else:
            return None
    if not pairs:
        return None
    alias = sub.alias_or_name

    def outer(inner_names: list[str], rows: list[tuple]) -> str:
        query = tree.copy()
        query.set("joins", None)
        keys = [(col.copy(), idx) for col, idx in pairs]
        for col, _ in keys:
            if col.table and col.table == alias:
                return ""  # a reference to the derived table itself: not this shape
        if not rows:
            keep = exp.false()
        elif len(keys) == 1:
            col, idx = keys[0]
            keep = exp.In(this=col, expressions=[_literal(r[idx]) for r in rows])
        else:
            keep = exp.or_(*[exp.and_(*[exp.EQ(this=col.copy(), expression=_literal(r[idx])) for col, idx in keys])
                             for r in rows])
        return query.where(keep, copy=False).sql("postgres")

    return SeriesLimit(inner.sql("postgres"), outer)
