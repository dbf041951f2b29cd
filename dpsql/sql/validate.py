"""Structural checks: refuse SQL shapes the compiler cannot express, before binding.

Everything here looks at the AST only (no schema, no data), so a refusal costs nothing
and reveals nothing.  Finer checks (bare private columns, unsupported functions, literals
outside a declared domain) happen during lowering, where the attribute is known.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UnsupportedQueryError
from dpsql.sql.parse import Statement

__all__ = ["check_structure"]


def _refuse(stmt: Statement, node, message: str, hint: str) -> None:
    raise UnsupportedQueryError(message, position=stmt.pos(node), hint=hint)


def check_structure(stmt: Statement) -> None:
    """Raise UnsupportedQueryError for joins, subqueries, windows and similar shapes."""
    tree = stmt.tree
    if tree.args.get("with_") or tree.args.get("with"):
        _refuse(stmt, tree.args.get("with_") or tree.args.get("with"),
                "WITH (common table expressions) is not supported",
                "write the aggregate query directly over the private table")
    for join in tree.args.get("joins") or []:
        _refuse(stmt, join, "joins are not supported: dpsql answers queries over one private table",
                "query one table at a time; combine the (public) results afterwards")
    if tree.args.get("laterals"):
        _refuse(stmt, tree.args["laterals"][0], "LATERAL is not supported", "remove the LATERAL clause")
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is not None and isinstance(from_.this, exp.Table) and from_.this.args.get("sample"):
        _refuse(stmt, from_.this, "TABLESAMPLE is not supported", "query the whole table")
    for node in tree.walk():
        if node is tree:
            continue
        if isinstance(node, (exp.Select, exp.Subquery)):
            _refuse(stmt, node, "subqueries are not supported over private tables",
                    "rewrite the query without a nested SELECT")
        if isinstance(node, exp.Window):
            _refuse(stmt, node, "window functions are not supported",
                    "use GROUP BY; windows would expose per-row values")
        if isinstance(node, (exp.Rollup, exp.Cube, exp.GroupingSets)):
            _refuse(stmt, node, "ROLLUP, CUBE and GROUPING SETS are not supported",
                    "run one GROUP BY query per grouping")
        if isinstance(node, exp.Distinct) and isinstance(node.parent, exp.AggFunc):
            _refuse(stmt, node.parent, f"{node.parent.sql_name()}(DISTINCT ...) is not supported: "
                    "distinct counts are not linear in the data vector",
                    "count rows instead, e.g. COUNT(*) with GROUP BY")
    if tree.args.get("qualify") is not None:
        _refuse(stmt, tree.args["qualify"], "QUALIFY is not supported", "use HAVING")
    if tree.args.get("into") is not None:
        _refuse(stmt, tree.args["into"], "SELECT INTO is not supported", "dpsql never writes tables")
    if tree.args.get("locks"):
        _refuse(stmt, tree.args["locks"][0], "locking clauses are not supported", "remove FOR UPDATE/SHARE")
    distinct = tree.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        _refuse(stmt, distinct, "DISTINCT ON is not supported", "use GROUP BY")
