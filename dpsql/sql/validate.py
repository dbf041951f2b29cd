"""Structural checks: refuse SQL shapes the compiler cannot express, before binding.

Everything here looks at the AST only (no schema, no data), so a refusal costs nothing
and reveals nothing.  Finer checks (bare private columns, unsupported functions, literals
outside a declared domain) happen during lowering, where the attribute is known.

Joins of tables are read by ``joins.py`` (public dimension tables on declared keys).
Subqueries are allowed where BI tools put them (``derived.py``, ``stage.py``): as the
FROM source, as the target of a join (a top-N filter), and as ``x IN (SELECT …)`` in a
top-level conjunct of WHERE.  Each is checked when it is compiled in turn.
"""

from __future__ import annotations

from sqlglot import exp

from dpsql.errors import UnsupportedQueryError
from dpsql.sql.cells import conjuncts, snippet
from dpsql.sql.parse import Statement

__all__ = ["check_structure"]


def _refuse(stmt: Statement, node, message: str, hint: str) -> None:
    raise UnsupportedQueryError(message, position=stmt.pos(node), hint=hint)


def check_structure(stmt: Statement, tree: exp.Expr | None = None) -> None:
    """Raise UnsupportedQueryError for windows, CTEs, ROLLUP and subqueries elsewhere than in
    FROM, a join, or a top-level ``IN (SELECT …)``."""
    tree = stmt.tree if tree is None else tree
    if not isinstance(tree, exp.Select):
        _refuse(stmt, tree, f"{snippet(tree, 40)} is not a SELECT", "write an aggregate SELECT")
    if tree.args.get("with_") or tree.args.get("with"):
        _refuse(stmt, tree.args.get("with_") or tree.args.get("with"),
                "WITH (common table expressions) is not supported",
                "write the aggregate query directly over the private table")
    if tree.args.get("laterals"):
        _refuse(stmt, tree.args["laterals"][0], "LATERAL is not supported", "remove the LATERAL clause")
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is not None and isinstance(from_.this, exp.Table) and from_.this.args.get("sample"):
        _refuse(stmt, from_.this, "TABLESAMPLE is not supported", "query the whole table")
    allowed: set[int] = set()
    if from_ is not None:
        allowed.add(id(from_.this))
    for join in tree.args.get("joins") or []:
        allowed.add(id(join.this))
    where = tree.args.get("where")
    if where is not None:
        for c in conjuncts(where.this):
            if isinstance(c, exp.In) and c.args.get("query") is not None:
                allowed.add(id(c.args["query"]))
    stack = list(tree.iter_expressions())
    while stack:
        node = stack.pop()
        if isinstance(node, (exp.Select, exp.Subquery, exp.Union, exp.Intersect, exp.Except)):
            if id(node) not in allowed:
                _refuse(stmt, node, "subqueries are only supported in FROM, in a join that keeps the top-N "
                        "groups, or as IN (SELECT …) in WHERE", "rewrite the query without this nested SELECT")
            if not isinstance(node, exp.Subquery) or not isinstance(node.this, exp.Select):
                inner = node.this if isinstance(node, exp.Subquery) else node
                if not isinstance(inner, exp.Select):
                    _refuse(stmt, node, "set operations (UNION, INTERSECT, EXCEPT) are not supported in a "
                            "subquery", "run each SELECT separately")
            continue                      # its own scope: checked when it is compiled
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
        if isinstance(node, exp.Exists):
            _refuse(stmt, node, "EXISTS is not supported", "rewrite the query without a nested SELECT")
        stack.extend(node.iter_expressions())
    if tree.args.get("qualify") is not None:
        _refuse(stmt, tree.args["qualify"], "QUALIFY is not supported", "use HAVING")
    if tree.args.get("into") is not None:
        _refuse(stmt, tree.args["into"], "SELECT INTO is not supported", "dpsql never writes tables")
    if tree.args.get("locks"):
        _refuse(stmt, tree.args["locks"][0], "locking clauses are not supported", "remove FOR UPDATE/SHARE")
    distinct = tree.args.get("distinct")
    if distinct is not None and distinct.args.get("on"):
        _refuse(stmt, distinct, "DISTINCT ON is not supported", "use GROUP BY")
