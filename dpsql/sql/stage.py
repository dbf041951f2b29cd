"""Outer stages: a SELECT over an aggregate subquery, answered from the subquery's rows.

BI tools wrap aggregate queries: Power BI ``select "_"."sex", "_"."a0" from (select …
group by …) "_" where not "_"."a0" is null limit 1000001``, Superset ``SELECT * FROM
(<virtual dataset>) AS virtual_table LIMIT 1000``, dbplyr ``SELECT * FROM (… GROUP BY …)
"q01" WHERE ("n" > 100.0)``, SQLAlchemy's ``.subquery()``.  The inner query is compiled as
usual; the outer one is a function of its released rows (post-processing, no budget):

* **row-wise**: projections, renames, arithmetic, WHERE, ORDER BY, DISTINCT,
  OFFSET/LIMIT/FETCH over the inner rows;
* **grouped, one inner row per outer group** (the outer GROUP BY names every inner group
  key, or the inner query has no GROUP BY): ``SUM(x)``, ``AVG(x)``, ``MIN(x)``, ``MAX(x)``
  are ``x`` itself, ``COUNT(*)`` is 1 and ``COUNT(x)`` is 1 unless x is NULL (Superset
  wraps virtual datasets this way);
* **grouped, coarser**: only ``SUM`` of inner columns: the inner query lists every group of
  the declared domain, empty ones included, so a count, average, minimum or maximum over
  its rows would depend on which groups are empty, which is private.  A sum over empty
  groups adds (noisy) zeros; its variance is the sum of the rows' variances.

Standard errors follow the inner columns' derivatives through the outer arithmetic (the
delta method, ``postprocess.py``); a coarser SUM becomes a new independent quantity.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from sqlglot import exp

from dpsql.errors import ProgrammingError, UnknownColumnError, UnsupportedQueryError
from dpsql.sql.aggregates import is_aggregate
from dpsql.sql.cells import canonical, literal_value, snippet
from dpsql.sql.derived import folded, limit_clause
from dpsql.sql.ir import Agg, Expr, Key, Output, SortKey, noisy, type_of, uses
from dpsql.sql.postprocess import order_items, to_ir
from dpsql.sql.query import CompiledQuery, OutputColumn
from dpsql.sql.relation import Evaluator, Relation, V, as_num, as_obj, full_grad, py_value, select_rows, take
from dpsql.sql.timefuncs import extract_name

__all__ = ["compile_stage", "StageProgram", "StageAgg"]

_STAGE_AGGS = (exp.Sum, exp.Avg, exp.Min, exp.Max, exp.Count)


@dataclass(frozen=True)
class StageAgg:
    """An aggregate over the inner rows: ``func`` (sum avg min max count count_star), its
    argument's IR over the inner columns (None for COUNT(*)) and the node, for messages."""

    func: str
    arg: Expr | None
    node: Any


@dataclass
class _Key:
    type: str
    sort_rank: dict | None = None


class _Lowering:
    """What ``postprocess.to_ir`` needs to translate SQL over the inner query's columns."""

    def __init__(self, stmt, tree: exp.Select, alias: str | None, inner: CompiledQuery) -> None:
        self.stmt = stmt
        self.tree = tree
        self.alias = alias
        self.inner = inner
        self.names: list[str] = [c.name for c in inner.columns]   # quoted: compared exactly
        self.keys: list[_Key] = []
        self.key_index: dict = {}
        self.key_irs: list = []
        self.aggs: list[StageAgg] = []
        self.agg_index: dict = {}
        self.aliases: dict = {}
        self.row_mode = True
        self.rows: _Lowering | None = None

    def ir_type(self, e: Expr) -> str:
        return _type_of(e, self)

    def pos(self, node, name=None):
        return self.stmt.pos(node, name)

    def written(self, node) -> str:
        from dpsql.sql.parse import written
        return written(self.stmt, node)

    def call_pos(self, node):
        from dpsql.sql.parse import call_position
        return call_position(self.stmt, node)

    def column(self, col: exp.Column) -> int:
        """Index of the inner output column ``col`` names."""
        qual = folded(col.args.get("table"))
        if qual is not None and qual != self.alias:
            raise UnsupportedQueryError(f"missing FROM-clause entry for table \"{col.table}\"",
                                        position=self.pos(col), hint=f"the subquery is named {self.alias!r}")
        name = folded(col.this)
        hits = [j for j, n in enumerate(self.names) if n == name or (not col.this.args.get("quoted")
                                                                    and n.lower() == name)]
        if not hits:
            raise UnknownColumnError(f"column \"{col.name}\" does not exist", position=self.pos(col),
                                     hint="the subquery has columns " + ", ".join(c.name for c in self.inner.columns))
        if len(hits) > 1:
            raise ProgrammingError(f"column reference \"{col.name}\" is ambiguous", position=self.pos(col),
                                   hint="give the subquery's columns distinct names")
        return hits[0]

    def canon(self, node):
        return canonical(node, self._canon_column)

    def _canon_column(self, col: exp.Column):
        body = self.output_alias(col)
        return self.canon(body) if body is not None else ("in", self.column(col))

    def output_alias(self, col: exp.Column):
        if col.table or not self.aliases:
            return None
        name = folded(col.this)
        if any(n == name for n in self.names):
            return None
        return self.aliases.get(name)

    def resolve(self, col: exp.Column):
        self.column(col)
        raise ProgrammingError(f"column \"{col.name}\" must appear in the GROUP BY clause or be used in an "
                               "aggregate function", position=self.pos(col),
                               hint="group by it, or aggregate it (e.g. SUM)")

    def register(self, node) -> int:
        if isinstance(node, exp.Filter) or not isinstance(node, _STAGE_AGGS):
            what = self.written(node) if isinstance(node, exp.Func) else snippet(node, 40)
            raise UnsupportedQueryError(f"aggregate {what} over the rows of a subquery is not supported",
                                        position=self.call_pos(node),
                                        hint="use SUM, AVG, MIN, MAX or COUNT over the subquery's columns")
        arg = node.this
        if isinstance(node, exp.Count) and (arg is None or isinstance(arg, exp.Star)):
            func, arg_ir = "count_star", None
        else:
            if isinstance(arg, exp.Distinct):
                raise UnsupportedQueryError("DISTINCT inside an aggregate over a subquery is not supported",
                                            position=self.pos(node), hint="aggregate the values themselves")
            func = type(node).__name__.lower()
            arg_ir = to_ir(arg, self.rows)
        key = (func, repr(arg_ir))
        if key not in self.agg_index:
            self.agg_index[key] = len(self.aggs)
            self.aggs.append(StageAgg(func, arg_ir, node))
        return self.agg_index[key]


def _type_of(e: Expr, low: _Lowering) -> str:
    """``ir.type_of`` over a stage's leaves: keys have the inner columns' (or the outer group
    keys') types; COUNT is an integer, MIN and MAX have their argument's type, SUM and AVG
    are double precision."""
    def agg_type(i: int) -> str:
        agg = low.aggs[i]
        if agg.func in ("count", "count_star"):
            return "integer"
        if agg.func in ("min", "max") and agg.arg is not None:
            assert low.rows is not None     # compile_stage sets it before any aggregate is lowered
            return _type_of(agg.arg, low.rows)
        return "double precision"
    return type_of(e, lambda i: low.keys[i].type, agg_type)


@dataclass
class StageProgram:
    """The outer query over an inner compiled query's rows (see the module docstring)."""

    inner: CompiledQuery
    row_mode: bool
    identity: bool
    where: Expr | None
    keys: list[Expr]
    aggs: list[StageAgg]
    outputs: list[Expr]
    having: Expr | None
    order: list[SortKey]
    limit: int | None
    offset: int | None
    distinct: bool
    types: list[str]
    ranks: list
    key_ranks: list = field(default_factory=list)

    def evaluate(self, cq, answers, stderrs, present=None) -> Relation:
        rel = self.inner.program.evaluate(self.inner, answers, stderrs, present)
        n = rel.n
        variances = list(rel.variances)
        inputs = rel.cols
        ev_in = Evaluator(n, [], inputs)
        rows_keep = np.ones(n, dtype=bool)
        if self.where is not None:
            rows_keep = np.array([x is True for x in as_obj(ev_in(self.where))], dtype=bool)
        sel = np.flatnonzero(rows_keep)
        if self.row_mode:
            m = len(sel)
            keys = [take(c, sel) for c in inputs]
            variances = [v[sel] for v in variances]
            ev = Evaluator(m, [], keys)
        else:
            key_vals = [take(ev_in(k), sel) for k in self.keys]
            groups: dict[tuple, list[int]] = {}
            for r in range(len(sel)):
                t = tuple(py_value(k.val[r]) for k in key_vals)
                groups.setdefault(t, []).append(r)
            if not self.keys and not groups:
                groups[()] = []          # an aggregate without GROUP BY always has one row
            members = list(groups.values())
            m = len(members)
            first = np.array([g[0] if g else -1 for g in members], dtype=np.int64)
            keys = [V(np.array([py_value(k.val[i]) if i >= 0 else None for i in first], dtype=object), None, False)
                    if not k.num else _first(k, first) for k in key_vals]
            args = [take(ev_in(a.arg), sel) if a.arg is not None else None for a in self.aggs]
            # Inner quantities a group's first row refers to (its keys, identity aggregates).
            base = [np.where(first >= 0, v[sel][np.maximum(first, 0)], np.nan) for v in variances]
            if self.identity:
                aggs = [_identity(agg.func, a, first, m) for agg, a in zip(self.aggs, args)]
                variances = base
            else:
                aggs, extra = [], []
                for a in args:
                    assert a is not None        # only SUM(x): compile_stage refuses the rest over groups
                    val, var = _sum(a, members, [v[sel] for v in variances])
                    extra.append(var)
                    aggs.append(V(val, {len(base) + len(extra) - 1: np.ones(m)}))
                variances = base + extra
            ev = Evaluator(m, aggs, keys)
        keep = np.ones(m, dtype=bool)
        if self.having is not None:
            keep = np.array([x is True for x in as_obj(ev(self.having))], dtype=bool)
        outs = [ev(o) for o in self.outputs]
        full = Relation(outs, variances, self.types, [c.name for c in cq.columns], self.ranks)
        rows, _ = full.rows(False)
        order = []
        for spec in self.order:
            by = spec.by
            ir = self.outputs[by.index] if isinstance(by, Output) else by
            col = [r[by.index] for r in rows] if isinstance(by, Output) else [py_value(x) for x in as_obj(ev(by))]
            rank = self.key_ranks[ir.index] if isinstance(ir, Key) and ir.index < len(self.key_ranks) else None
            if rank is not None:
                col = [None if v is None else rank.get(v, v) for v in col]
            order.append((col, spec.desc, spec.nulls_first))
        chosen = np.asarray(select_rows(rows, keep, order, self.distinct, self.offset, self.limit), dtype=np.int64)
        return Relation([take(o, chosen) for o in outs], [v[chosen] for v in variances], self.types,
                        full.names, self.ranks)


def _first(k: V, first: np.ndarray) -> V:
    idx = np.maximum(first, 0)
    val = np.where(first >= 0, np.asarray(k.val, dtype=float)[idx], np.nan)
    return V(val, {j: np.where(first >= 0, d[idx], 0.0) for j, d in full_grad(k, len(k.val)).items()})


def _identity(func: str, a: V | None, first: np.ndarray, m: int) -> V:
    """An aggregate over a group that holds exactly one row (or none)."""
    has = first >= 0
    if func == "count_star":
        return V(has.astype(float), {})
    assert a is not None   # every aggregate but COUNT(*) has an argument
    if func == "count":
        vals = as_obj(a)
        return V(np.array([1.0 if h and vals[i] is not None else 0.0 for h, i in zip(has, np.maximum(first, 0))]),
                 {})
    if not a.num:
        vals = as_obj(a)
        return V(np.array([vals[i] if h else None for h, i in zip(has, np.maximum(first, 0))], dtype=object),
                 None, False)
    return _first(a, first)


def _sum(a: V, members: list[list[int]], variances: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """SUM over each group's rows (NULLs skipped; NULL when all are) and its variance."""
    x = as_num(a)
    n = len(x.val)
    var_rows = np.zeros(n)
    for k, d in full_grad(x, n).items():
        var_rows = var_rows + d ** 2 * variances[k]
    val, var = np.full(len(members), np.nan), np.full(len(members), np.nan)
    for g, rows in enumerate(members):
        vals = x.val[rows]
        ok = ~np.isnan(vals)
        if ok.any():
            val[g] = float(vals[ok].sum())
            var[g] = float(var_rows[rows][ok].sum())
    return val, var


def compile_stage(stmt, tree: exp.Select, sub: exp.Subquery, inner: CompiledQuery) -> CompiledQuery:
    """The CompiledQuery of ``tree``, whose FROM is the aggregate subquery ``sub`` compiled as
    ``inner``."""
    alias_node = sub.args.get("alias")
    alias = folded(alias_node.this) if isinstance(alias_node, exp.TableAlias) and alias_node.this else None
    for key in ("joins", "laterals"):
        if tree.args.get(key):
            raise UnsupportedQueryError("joins with a subquery over an aggregate subquery are not supported",
                                        position=stmt.pos(tree.args[key][0]),
                                        hint="apply the top-N filter inside the subquery")
    low = _Lowering(stmt, tree, alias, inner)
    rows = _Lowering(stmt, tree, alias, inner)
    low.rows = rows
    rows.rows = rows
    inner_types = [c.type for c in inner.columns]
    for j in range(len(inner.columns)):
        rows.key_index[("in", j)] = j
        rows.keys.append(_Key(inner_types[j], _rank(inner, j)))
    projections: list[tuple[str | None, exp.Expr]] = []
    for e in tree.expressions:
        if isinstance(e, exp.Star) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            if isinstance(e, exp.Column) and folded(e.args.get("table")) not in (None, alias):
                raise UnsupportedQueryError(f"missing FROM-clause entry for table \"{e.table}\"",
                                            position=stmt.pos(e), hint=f"the subquery is named {alias!r}")
            for c in inner.columns:
                projections.append((c.name, exp.column(exp.to_identifier(c.name, quoted=True))))
        elif isinstance(e, exp.Alias):
            projections.append((e.alias, e.this))
        else:
            projections.append((None, e))
    group = tree.args.get("group")
    has_aggs = any(is_aggregate(n) for _, b in projections for n in b.walk()) or tree.args.get("having") is not None
    where_ir = to_ir(tree.args["where"].this, rows) if tree.args.get("where") is not None else None
    if where_ir is not None and uses(where_ir, lambda e: isinstance(e, Agg)):
        raise ProgrammingError("aggregate functions are not allowed in WHERE", position=stmt.pos(tree.args["where"]),
                               hint="move the condition to HAVING")
    identity = True
    if group is None and not has_aggs:
        low.row_mode = True
        low.key_index, low.keys = rows.key_index, rows.keys
        key_irs: list = []
        key_ranks = [k.sort_rank for k in rows.keys]
    else:
        low.row_mode = False
        items = list(group.expressions) if group is not None else []
        key_irs, key_ranks = [], []
        for item in items:
            ok, v = literal_value(item)
            node = projections[v - 1][1] if ok and isinstance(v, int) and not isinstance(v, bool) \
                and 1 <= v <= len(projections) else item
            if isinstance(node, exp.Column) and not node.table and folded(node.this) not in rows.names:
                named = {folded(exp.to_identifier(a)): b for a, b in projections if a}
                node = named.get(folded(node.this), node)
            c = low.canon(node)
            if c in low.key_index:
                continue
            ir = to_ir(node, rows)
            low.key_index[c] = len(low.keys)
            rank = rows.keys[ir.index].sort_rank if isinstance(ir, Key) else None
            low.keys.append(_Key(_type_of(ir, rows), rank))
            key_irs.append(ir)
            key_ranks.append(rank)
        identity = _one_row_per_group(inner, key_irs)
    low.aliases = {}
    outputs, columns = [], []
    for name, body in projections:
        ir = to_ir(body, low)
        outputs.append(ir)
        columns.append(OutputColumn(name or _default_name(body, low), _type_of(ir, low),
                                    _noisy(ir, low, inner)))
    low.aliases = {folded(exp.to_identifier(a)): b for a, b in projections if a}
    if not low.row_mode and not identity:
        for agg in low.aggs:
            func, node = agg.func, agg.node
            if func != "sum":
                raise UnsupportedQueryError(
                    f"{func.upper().replace('_STAR', '(*)')} over groups of the subquery's rows is not supported: "
                    "the subquery lists every group of the declared domain, empty ones included, and which are "
                    "empty is private", position=low.call_pos(node),
                    hint="use SUM over the subquery's rows, or GROUP BY every group key of the subquery")
    having = tree.args.get("having")
    having_ir = to_ir(having.this, low) if having is not None else None
    order = order_items(tree, columns, lambda node: to_ir(node, low), low.pos)
    limit, offset = limit_clause(tree, stmt.pos)
    ranks = [key_ranks[o.index] if isinstance(o, Key) and o.index < len(key_ranks) else None for o in outputs]
    program = StageProgram(inner=inner, row_mode=low.row_mode, identity=identity, where=where_ir, keys=key_irs,
                           aggs=low.aggs, outputs=outputs, having=having_ir, order=order, limit=limit, offset=offset,
                           distinct=tree.args.get("distinct") is not None, types=[c.type for c in columns],
                           ranks=ranks, key_ranks=key_ranks)
    if inner.is_schema_probe:
        # The subquery returns no rows (LIMIT 0, a WHERE never true): neither does this query.
        return CompiledQuery(sql=stmt.sql, table=inner.table, columns=columns, groups=[], linear_queries=[],
                             is_schema_probe=True, schema=inner.schema)
    return CompiledQuery(sql=stmt.sql, table=inner.table, columns=columns, groups=inner.groups,
                         linear_queries=list(inner.linear_queries), program=program, schema=inner.schema,
                         offset_queries=list(inner.offset_queries))


def _rank(inner: CompiledQuery, j: int):
    prog = inner.program
    outs = getattr(prog, "outputs", None)
    if outs is None:
        return None
    ranks = getattr(prog, "ranks", None)
    if ranks is not None:
        return ranks[j]
    o = outs[j]
    return prog.keys[o.index].sort_rank if isinstance(o, Key) else None


def _one_row_per_group(inner: CompiledQuery, key_irs: list) -> bool:
    """Does grouping by ``key_irs`` put at most one inner row in each group?  True when the
    inner query has no GROUP BY, or when the keys name a column of every inner group key."""
    prog = inner.program
    keys = getattr(prog, "keys", None)
    if isinstance(prog, StageProgram):
        if prog.row_mode:
            return False
        cols = {ir.index for ir in key_irs if isinstance(ir, Key)}
        needed = [j for j, o in enumerate(prog.outputs) if isinstance(o, Key)]
        return len(prog.keys) == len(needed) and set(needed) <= cols or not prog.keys
    if not keys:
        return True
    named = {o.index for ir in key_irs if isinstance(ir, Key) and isinstance(o := prog.outputs[ir.index], Key)}
    return named >= set(range(len(keys)))


def _noisy(e: Expr, low: _Lowering, inner: CompiledQuery) -> bool:
    """``ir.noisy`` over a stage's leaves: row-wise, an input column is noisy when the inner
    query's is."""
    return noisy(e, lambda i: low.row_mode and inner.columns[i].is_aggregate)


def _default_name(body, low: _Lowering) -> str:
    if isinstance(body, exp.Column):
        return body.name
    node = body
    if isinstance(node, exp.Count):
        return "count"
    if isinstance(node, exp.Extract):      # PostgreSQL names EXTRACT(…) "extract", date_part(…) "date_part"
        return extract_name(low.stmt.sql, low.pos(node))
    if isinstance(node, exp.Func):
        return low.written(node).lower()
    return "?column?"


