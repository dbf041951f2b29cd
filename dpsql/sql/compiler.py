"""``compile(sql, catalog)``: the front end's driver, parse → validate → bind → lower.

It walks one SELECT: resolves GROUP BY keys to domain buckets (``grouping.py``), turns
the select list, HAVING and ORDER BY into a post-processing program over per-group
aggregate values (``postprocess.py``), and each distinct aggregate into one or two linear
queries (``aggregates.py``, ``predicates.py``, ``lower.py``).

Privacy: every decision here (accept, refuse, which groups exist) reads only the SQL and
the declared schema: groups are the buckets of the declared domain, less those that no
cell can put under the WHERE clause (``Grouping.restrict``).  In particular a bare private
column in the output is refused with 42501 because it would print individual rows; the one
exception is a schema probe (``LIMIT 0`` or a constant-false WHERE), which returns no rows at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, cast

import numpy as np
from sqlglot import exp

from dpsql import labels as wording
from dpsql.domain import Attribute
from dpsql.errors import PrivacyViolationError, StatementTooComplexError, UnsupportedQueryError
from dpsql.sql.aggregates import AggCall, check_argument, is_aggregate, parse_aggregate
from dpsql.sql.bind import Catalog, Scope, bind_table, table_schema
from dpsql.sql.cells import (WORK_LIMIT, CellEvaluator, canonical, columns_in, literal_value,
                             position_literal, snippet)
from dpsql.sql.grouping import GroupKey, Grouping, build_key
from dpsql.sql.lower import QuerySpec, build_linear_query
from dpsql.sql.parse import call_position, parse_statement, written
from dpsql.sql.joins import (answer_public, expand, join_tree, public_in_lists, reads_only_public, star,
                             table_columns)
from dpsql.sql.people import person_join
from dpsql.sql.derived import _TOPN_HINT, flatten, limit_clause, output_names, restrictions
from dpsql.sql.ir import Agg, Expr, Output, noisy, type_of, uses
from dpsql.sql.postprocess import AggPlan, Program, Restriction, order_items, to_ir
from dpsql.sql.predicates import compile_predicate
from dpsql.sql.query import CompiledQuery, OutputColumn
from dpsql.sql.stage import compile_stage
from dpsql.sql.validate import check_structure
from dpsql.sql.timefuncs import extract_name

__all__ = ["compile"]


def attribute_type(attr) -> str:
    """A schema probe's column type: the catalog's (``dpsql.labels.catalog_type``), in the
    engine's name for it."""
    kind = wording.catalog_type(attr)
    return "integer" if kind == "bigint" else kind


def _and(a, b):
    if a is None:
        return b
    if b is None:
        return a
    return exp.And(this=exp.Paren(this=a.copy()), expression=exp.Paren(this=b.copy()))


class _Lowering:
    def __init__(self, stmt, scope: Scope, tree=None, prefix: str = "", pending=()) -> None:
        self.stmt = stmt
        self.scope = scope
        self.schema = scope.schema
        self.tree = stmt.tree if tree is None else tree
        self.prefix = prefix
        self.column_set = {c.lower() for c in self.schema.column_names}
        self.meter = [WORK_LIMIT]
        self.pending = list(pending)     # [(compiled ranking query, derived.Pending)]
        self._evaluators: dict[str, CellEvaluator] = {}
        self.keys: list[GroupKey] = []
        self.key_index: dict[Any, int] = {}
        self.aggs: list[AggPlan] = []
        self.agg_index: dict[Any, int] = {}
        self.specs: dict[Any, QuerySpec] = {}
        self._terms: dict[Any, list[dict]] = {}
        self.aliases: dict[str, exp.Expr] = {}
        self.where = self.tree.args["where"].this if self.tree.args.get("where") is not None else None

    # --- helpers -----------------------------------------------------------------------
    def pos(self, node, name=None):
        return self.stmt.pos(node, name)

    def written(self, node) -> str:
        return written(self.stmt, node)

    def call_pos(self, node) -> int | None:
        return call_position(self.stmt, node)

    def resolve(self, col: exp.Column):
        return self.scope.attribute(col)

    def evaluator(self, attr) -> CellEvaluator:
        ev = self._evaluators.get(attr.name)
        if ev is None:
            ev = self._evaluators[attr.name] = CellEvaluator(attr, self.pos, self.written, self.meter,
                                                                getattr(self.schema, "name", None))
        return ev

    def canon(self, node):
        return canonical(node, self._canon_column)

    def _canon_column(self, col: exp.Column):
        body = self.output_alias(col)
        return self.canon(body) if body is not None else ("col", self.resolve(col).name)

    def output_alias(self, col: exp.Column):
        """The select item an unqualified non-column name refers to, if any."""
        if col.table or not self.aliases:
            return None
        name = col.name.lower()
        if name in self.column_set:
            return None
        return self.aliases.get(name)

    def attrs_of(self, node) -> list:
        seen: dict[str, Attribute] = {}
        for c in columns_in(node):
            a = self.resolve(c)
            seen.setdefault(a.name, a)
        return list(seen.values())

    # --- the statement -----------------------------------------------------------------
    def projections(self) -> list[tuple[str | None, exp.Expr]]:
        out: list[tuple[str | None, exp.Expr]] = []
        for e in self.tree.expressions:
            if isinstance(e, exp.Alias):
                out.append((e.alias, e.this))
            else:
                out.append((None, e))
        return out

    def is_probe(self) -> bool:
        if self.tree.args.get("limit") is not None and not self.pending and limit_clause(self.tree, self.pos)[0] == 0:
            return True
        if self.where is not None and not columns_in(self.where):
            ok, v = literal_value(self.where)
            if ok and (v is None or v is False):
                return True
            if isinstance(self.where, (exp.EQ, exp.NEQ)):
                lok, lv = literal_value(self.where.this)
                rok, rv = literal_value(self.where.expression)
                if lok and rok and ((lv == rv) != isinstance(self.where, exp.EQ)):
                    return True
        return False

    def probe(self) -> CompiledQuery:
        cols = []
        for alias, body in self.projections():
            if isinstance(body, exp.Star):
                cols += [OutputColumn(a.name, attribute_type(a)) for a in self.schema.attributes]
                continue
            for c in columns_in(body):
                self.resolve(c)
            name = alias or self.default_name(body)
            if isinstance(body, exp.Column):
                cols.append(OutputColumn(name, attribute_type(self.resolve(body))))
            else:
                agg = any(is_aggregate(n) for n in body.walk())
                cols.append(OutputColumn(name, "double precision" if agg else "text", agg))
        return CompiledQuery(sql=self.stmt.sql, table=self.schema.name, columns=cols, groups=[],
                             linear_queries=[], is_schema_probe=True, schema=self.schema)

    def default_name(self, body) -> str:
        if isinstance(body, exp.Column):
            return body.name
        node = body.this if isinstance(body, exp.Filter) else body
        if isinstance(node, exp.WithinGroup):
            node = node.this
        if isinstance(node, exp.Count):
            return "count"
        if isinstance(node, exp.Extract):      # PostgreSQL names EXTRACT(…) "extract", date_part(…) "date_part"
            return extract_name(self.stmt.sql, self.pos(node))
        if isinstance(node, exp.Func):
            return self.written(node).lower()
        return "?column?"

    def group_keys(self, projections) -> None:
        group = self.tree.args.get("group")
        if group is None:
            return
        columns = {c.lower() for c in self.schema.column_names}
        aliases = {a.lower(): b for a, b in projections if a}
        items = list(group.expressions)
        if group.args.get("all"):
            # DuckDB's GROUP BY ALL: every select item that contains no aggregate.
            items = [b.copy() for _, b in projections if not any(is_aggregate(n) for n in b.walk())]
        for item in items:
            node = item
            v = position_literal(item, len(projections), "GROUP BY", self.pos)
            if v is not None:
                node = projections[v - 1][1]
            elif isinstance(item, exp.Column) and not item.table and item.name.lower() not in columns \
                    and item.name.lower() in aliases:
                node = aliases[item.name.lower()]
            if any(is_aggregate(n) for n in node.walk()):
                raise UnsupportedQueryError("aggregate functions are not allowed in GROUP BY",
                                            position=self.pos(item), hint="group by columns")
            attrs = self.attrs_of(node)
            if not attrs:
                continue  # a constant key does not split the groups
            if len(attrs) > 1:
                raise UnsupportedQueryError(f"GROUP BY {snippet(node)} uses several columns",
                                            position=self.pos(item),
                                            hint="group by each column separately")
            c = self.canon(node)
            if c in self.key_index:
                continue
            self.key_index[c] = len(self.keys)
            self.keys.append(build_key(str(c), node, attrs[0], self.evaluator(attrs[0])))

    # --- aggregates ----------------------------------------------------------------------
    def register(self, node) -> int:
        call = parse_aggregate(node, self.pos, self.written, self.call_pos)
        if call.arg is not None and call.func in ("count", "sum", "avg") and not columns_in(call.arg):
            return self.register_constant(call, node)
        check_argument(call, self.pos)
        key = (call.func, self.canon(call.arg) if call.arg is not None else None,
               self.canon(call.filter) if call.filter is not None else None, call.q, call.method)
        if key in self.agg_index:
            return self.agg_index[key]
        pred = _and(self.where, call.filter)
        if call.filter is not None and any(is_aggregate(n) for n in call.filter.walk()):
            raise UnsupportedQueryError("aggregates are not allowed in FILTER", position=self.pos(call.filter),
                                        hint="filter on columns")
        attr = self.attrs_of(call.arg)[0] if call.arg is not None else None
        if attr is not None and call.arg is not None and attr.kind in ("date", "timestamp", "time") \
                and call.func not in ("count", "quantile") and isinstance(call.arg.unnest(), exp.Column):
            raise UnsupportedQueryError(f"{snippet(call.node)} aggregates {attr.kind} column '{attr.name}' as a number",
                                        position=self.pos(call.node),
                                        hint=f"count rows per period: GROUP BY date_trunc('month', {attr.name})")
        label = snippet(node, 200)
        if call.func == "count":
            shown = pred
            if call.arg is not None:
                pred = _and(pred, exp.Not(this=exp.Is(this=call.arg.copy(), expression=exp.Null())))
            shown_sql = f"COUNT({snippet(call.arg) if call.arg else '*'})"
            plan = AggPlan("count", label, [self.spec("linear", pred, shown_sql, shown=shown)])
        elif call.func in ("variance", "stddev"):
            assert call.arg is not None   # check_argument: these take a column
            weights = self.weights(call, attr)
            notnull = _and(pred, exp.Not(this=exp.Is(this=call.arg.copy(), expression=exp.Null())))
            arg = snippet(call.arg)
            s2 = self.spec("linear", pred, f"SUM(({arg})^2)", attr, weights ** 2)
            s1 = self.spec("linear", pred, f"SUM({arg})", attr, weights)
            c = self.spec("linear", notnull, f"COUNT({arg})", shown=pred)
            plan = AggPlan(call.func, label, [s2, s1, c], method=call.method,
                           halfwidth=float(self.half_widths(call, attr).max()))
        elif call.func in ("sum", "avg"):
            assert call.arg is not None   # check_argument: these take a column
            weights = self.weights(call, attr)
            s = self.spec("linear", pred, f"SUM({snippet(call.arg)})", attr, weights)
            # over wide bins the midpoints' sum is off by at most Σ rows' half bin widths: that
            # sum is measured with the workload, and its upper bound widens the interval
            half = self.half_widths(call, attr)
            bound = self.spec("linear", pred, f"SUM(half bin width of {snippet(call.arg)})", attr, half) \
                if half.max() > 0 else None
            # ... unless the rows' offsets from their bins' values were measured: then they
            # are added and the SUM is unbiased (dpsql.measure.offsets; same rows, 0/1 weights)
            offset = self.spec("offset", pred, f"SUM(offset of {snippet(call.arg)} in its bin)", attr,
                               (half > 0).astype(float)) if half.max() > 0 else None
            if call.func == "sum":
                plan = AggPlan("sum", label, [s], bias_query=bound, halfwidth=float(half.max()),
                               offset_query=offset)
            else:
                notnull = _and(pred, exp.Not(this=exp.Is(this=call.arg.copy(), expression=exp.Null())))
                c = self.spec("linear", notnull, f"COUNT({snippet(call.arg)})", shown=pred)
                # the cells' values (NaN for NULL) bound the average of an inferred group
                plan = AggPlan("avg", label, [s, c], cell_values=self.weights(call, attr, keep_null=True),
                               bias_query=bound, halfwidth=float(half.max()), offset_query=offset)
        elif attr is not None and attr.kind in ("date", "timestamp", "time") and isinstance(call.arg, exp.Column):
            # a time column's quantile: on numbers (temporal.time_number), reported as a DATE
            # (DISC of a date) or a TIMESTAMP, as DuckDB's quantile_disc / quantile_cont
            values, low, high = attr.quantile_cells()
            q = self.spec("quantile", pred, label, quantile_attr=attr)
            time_type = "time" if attr.kind == "time" else \
                "date" if attr.kind == "date" and call.method == "disc" else "timestamp"
            plan = AggPlan("quantile", label, [q], q=call.q, method=call.method, cell_values=values,
                           cell_low=low, cell_high=high, time_type=time_type,
                           time_days=attr.kind == "date")
        else:
            values = self.quantile_values(call, attr)
            q = self.spec("quantile", pred, label, quantile_attr=attr)
            low, high = self.quantile_ranges(call, attr, values)
            plan = AggPlan("quantile", label, [q], q=call.q, method=call.method, cell_values=values,
                           cell_low=low, cell_high=high)
        self.agg_index[key] = len(self.aggs)
        self.aggs.append(plan)
        return self.agg_index[key]

    def register_constant(self, call: AggCall, node) -> int:
        """COUNT/SUM/AVG of a constant (Tableau's SUM(1), COUNT(1+0), SUM(CAST(1 AS BIGINT))):
        COUNT(c) counts rows unless c is NULL, SUM(c) is c·COUNT(*), AVG(c) is c."""
        key = ("const", call.func, self.canon(call.arg),
               self.canon(call.filter) if call.filter is not None else None)
        if key in self.agg_index:
            return self.agg_index[key]
        ok, v = self.evaluator(self.schema.attributes[0])._constant(call.arg)
        if call.filter is not None and any(is_aggregate(n) for n in call.filter.walk()):
            raise UnsupportedQueryError("aggregates are not allowed in FILTER", position=self.pos(call.filter),
                                        hint="filter on columns")
        pred = _and(self.where, call.filter)
        label = snippet(node, 200)
        if call.func != "count" and v is not None and (isinstance(v, (bool, str)) or not isinstance(v, (int, float))):
            raise UnsupportedQueryError(f"{snippet(call.node)} sums text values", position=self.pos(call.node),
                                        hint="sum numbers, e.g. SUM(1)")
        if v is None:
            plan = AggPlan("null", label, []) if call.func != "count" else \
                AggPlan("count", label, [self.spec("linear", pred, "COUNT(*)")], scale=0.0)
        else:
            count = self.spec("linear", pred, "COUNT(*)")
            if call.func == "avg":
                plan = AggPlan("avg_const", label, [count], scale=float(v))
            else:
                plan = AggPlan("count" if call.func == "count" else "sum", label, [count],
                               scale=1.0 if call.func == "count" else float(v))
        self.agg_index[key] = len(self.aggs)
        self.aggs.append(plan)
        return self.agg_index[key]

    def weights(self, call: AggCall, attr, keep_null: bool = False) -> np.ndarray:
        ev = self.evaluator(attr)
        if isinstance(call.arg, exp.Column) and attr.kind != "categorical":
            w = np.asarray(attr.cell_values(), dtype=float)
        else:
            vals, null = ev.constant_values(call.arg)
            if any(isinstance(v, str) or v is None and not null[i] for i, v in enumerate(vals)):
                raise UnsupportedQueryError(f"{snippet(call.node)} sums text values", position=self.pos(call.node),
                                            hint="sum numbers, e.g. SUM(CASE WHEN col = 'x' THEN 1 ELSE 0 END)")
            w = np.array([np.nan if null[i] else float(v) for i, v in enumerate(vals)])
        return w if keep_null else np.where(np.isnan(w), 0.0, w)

    def half_widths(self, call: AggCall, attr) -> np.ndarray:
        """Per cell, how far a value of a bare numeric column can be from the cell's value
        (half the bin's width: 0 for one-value bins and NULL); zeros for expressions and
        categoricals, whose per-cell values are exact."""
        n = len(attr.labels())
        if not isinstance(call.arg, exp.Column) or attr.kind == "categorical":
            return np.zeros(n)
        return np.array([0.0 if b is None else (float(b[1]) - float(b[0])) / 2 for b in attr.bin_bounds()])

    def quantile_values(self, call: AggCall, attr) -> np.ndarray:
        if attr.kind == "categorical" and isinstance(call.arg, exp.Column):
            raise UnsupportedQueryError(f"quantiles of text column '{attr.name}' are not supported",
                                        position=self.pos(call.node), hint="use a numeric column")
        if isinstance(call.arg, exp.Column):
            return np.asarray(attr.cell_values(), dtype=float)
        vals, null = self.evaluator(attr).constant_values(call.arg)
        if any(isinstance(v, str) for v in vals):
            raise UnsupportedQueryError(f"{snippet(call.node)} is a quantile of text values",
                                        position=self.pos(call.node), hint="use a numeric expression")
        return np.array([np.nan if null[i] or v is None else float(v) for i, v in enumerate(vals)])

    @staticmethod
    def quantile_ranges(call: AggCall, attr, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The values each cell can hold: a column's bin ``[lo, hi]`` (its interval includes
        the bin, since the value inside the bin is not measured); an expression is constant
        on every cell (``quantile_values`` refuses it otherwise), so its value alone."""
        bounds = attr.bin_bounds() if isinstance(call.arg, exp.Column) else None
        if bounds is None:
            return values, values
        low = np.array([math.nan if b is None else float(b[0]) for b in bounds])
        high = np.array([math.nan if b is None else float(b[1]) for b in bounds])
        return low, high

    def terms(self, pred) -> list[dict]:
        pkey = self.canon(pred) if pred is not None else None
        if pkey not in self._terms:
            terms = compile_predicate(pred, self.resolve, self.evaluator, self.pos, self.schema.attributes[0])
            # An all-TRUE mask restricts nothing; dropping it lets equal queries share a key.
            self._terms[pkey] = [{a: m for a, m in t.items() if not m.all()} for t in terms]
        return self._terms[pkey]

    def spec(self, kind, pred, description, weight_attr=None, weights=None, quantile_attr=None,
             shown="same") -> str:
        terms = self.terms(pred)
        tkey = tuple(tuple(sorted((a, m.tobytes()) for a, m in t.items())) for t in terms)
        wkey = None if weights is None else (weight_attr.name, weights.tobytes())
        qkey = quantile_attr.name if quantile_attr is not None else None
        key = (kind, tkey, wkey, qkey)
        found = self.specs.get(key)
        if found is not None:
            return found.name
        name = f"{self.prefix}q{len(self.specs)}"
        shown = pred if shown == "same" else shown
        where = f" WHERE {snippet(shown, 300)}" if shown is not None else ""
        self.specs[key] = QuerySpec(name=name, kind=kind, terms=terms,
                                    weight_attr=weight_attr.name if weight_attr is not None else None,
                                    weights=weights,
                                    quantile_attr=quantile_attr.name if quantile_attr is not None else None,
                                    description=description + where)
        return name

    # --- driver --------------------------------------------------------------------------
    def run(self) -> CompiledQuery:
        if self.is_probe():
            return self.probe()
        projections = self.projections()
        for _, body in projections:
            if isinstance(body, exp.Star):
                raise PrivacyViolationError("SELECT * would reveal individual rows of a private table",
                                            position=self.pos(body, "*"),
                                            hint="select aggregates, e.g. SELECT COUNT(*) … GROUP BY col")
        self.group_keys(projections)
        grouping = Grouping(self.keys, self.schema, self.pos)
        ir = lambda node: to_ir(node, self)  # noqa: E731
        outputs, columns = [], []
        for alias, body in projections:
            node_ir = ir(body)
            outputs.append(node_ir)
            columns.append(OutputColumn(alias or self.default_name(body), self.ir_type(node_ir),
                                        noisy(node_ir, lambda i: False)))
        self.aliases = {a.lower(): b for a, b in projections if a}
        having = self.tree.args.get("having")
        having_ir = ir(having.this) if having is not None else None
        order = order_items(self.tree, columns, ir, self.pos)
        self.check_time_aggregates(outputs, having_ir, order)
        limit, offset = limit_clause(self.tree, self.pos)
        distinct = self.tree.args.get("distinct") is not None
        if self.where is not None:
            grouping.restrict(self.terms(self.where))
        lqs = [build_linear_query(s, self.schema, grouping) for s in self.specs.values()]
        restrictions, extra = self.restrictions()
        program = Program(outputs=outputs, having=having_ir, order=order, limit=limit, offset=offset,
                          distinct=distinct, aggs=self.aggs, keys=self.keys, grouping=grouping,
                          lq_by_name={lq.name: lq for lq in lqs}, restrictions=restrictions,
                          where_terms=self.terms(self.where) if self.where is not None else [{}])
        return CompiledQuery(sql=self.stmt.sql, table=self.schema.name, columns=columns,
                             groups=grouping.group_tuples(),
                             linear_queries=[lq for lq in lqs if not lq.always_zero and lq.kind != "offset"]
                             + extra, program=program, schema=self.schema,
                             offset_queries=[lq for lq in lqs if not lq.always_zero and lq.kind == "offset"])

    def restrictions(self):
        """Top-N restrictions: each outer expression must be a GROUP BY key (the rows kept
        are groups), and the ranking query must read the same table."""
        out, extra = [], []
        for inner, pending in self.pending:
            if inner.table != self.schema.name:
                raise UnsupportedQueryError("a top-N subquery must read the same table as the query around it",
                                            position=self.pos(pending.node), hint=_TOPN_HINT)
            keys = []
            for node in pending.outer:
                k = self.key_index.get(self.canon(node))
                if k is None:
                    raise UnsupportedQueryError(
                        f"the top-N filter on '{snippet(node, 60)}' needs it in the GROUP BY: dpsql keeps or drops "
                        "whole groups by the released ranking", position=self.pos(node), hint=_TOPN_HINT)
                keys.append(k)
            for j in pending.inner_cols:
                col = inner.columns[j]
                if col.is_aggregate:
                    raise UnsupportedQueryError(f"the top-N subquery's column {col.name!r} is an aggregate; join on "
                                                "its group keys", position=self.pos(pending.node), hint=_TOPN_HINT)
            out.append(Restriction(inner, keys, list(pending.inner_cols), list(pending.null_safe)))
            extra.extend(inner.linear_queries)
        return out, extra

    def ir_type(self, e: Expr) -> str:
        # aggregates here are noisy values (double precision), but for a time column's
        # quantile selected as it is (a DATE or TIMESTAMP); keys have their domain's type
        time_type = self.aggs[e.index].time_type if isinstance(e, Agg) else None
        if time_type is not None:
            return time_type
        return type_of(e, lambda i: self.keys[i].type, lambda i: "double precision")

    def check_time_aggregates(self, outputs, having, order) -> None:
        """A time column's quantile is a number inside (seconds or days): it may be selected
        (and ordered by), not computed with or compared, where that number would show."""
        timed = {i for i, a in enumerate(self.aggs) if a.time_type is not None}
        if not timed:
            return
        nested = [having] + [o for o in outputs if not isinstance(o, Agg)] + \
            [k.by for k in order if not isinstance(k.by, (Output, Agg))]
        for e in nested:
            if e is not None and uses(e, lambda x: isinstance(x, Agg) and x.index in timed):
                raise UnsupportedQueryError(
                    f"{self.aggs[min(timed)].label} is a date or timestamp: it can be selected and "
                    "ordered by, not used in an expression, a comparison or HAVING",
                    hint="select the quantile as it is")


class _Compiler:
    """Compiles one statement's SELECTs: the outer one, derived tables and top-N subqueries."""

    def __init__(self, stmt, catalog: Catalog) -> None:
        self.stmt = stmt
        self.catalog = catalog
        self.levels = 0

    def star_columns(self, select: exp.Select) -> list[exp.Column]:
        """The columns ``*`` stands for in ``select`` (declared names, quoted); over a join
        of tables, each table's in FROM order, qualified by its name in the statement."""
        joined = table_columns(select, self.stmt, self.catalog)
        if joined is not None:
            return joined
        from_ = select.args.get("from_") or select.args.get("from")
        src = from_.this if from_ is not None else None
        alias = src.args.get("alias") if src is not None else None
        qual = alias.this if isinstance(alias, exp.TableAlias) and alias.this is not None else \
            (src.this if isinstance(src, exp.Table) else None)
        if isinstance(src, exp.Subquery) and isinstance(src.this, exp.Select):
            names = [n for n, _ in output_names(src.this, self.star_columns) if n]
        else:
            schema = table_schema(self.catalog, src) if isinstance(src, exp.Table) else None
            if schema is None:
                bind_table(self.stmt, self.catalog, select)     # raises the right error
                return []
            names = list(schema.column_names)
        return [exp.Column(this=exp.to_identifier(n, quoted=True),
                           table=qual.copy() if isinstance(qual, exp.Identifier) else None) for n in names]

    def select(self, tree: exp.Select) -> CompiledQuery:
        tree = public_in_lists(tree, self.stmt, self.catalog)
        # joins of private tables along a people schema: the deepest table's view, and
        # COUNT(DISTINCT person) a count of the person's view (people.py)
        tree = person_join(tree, self.stmt, self.catalog)
        check_structure(self.stmt, tree)
        tree = flatten(tree, self.star_columns, self.stmt)
        from_ = tree.args.get("from_") or tree.args.get("from")
        src = from_.this if from_ is not None else None
        if isinstance(src, exp.Subquery):
            # an aggregate subquery (row-level ones were merged): an outer stage over its rows
            check_structure(self.stmt, src.this)
            return compile_stage(self.stmt, tree, src, self.select(src.this))
        # joins with public tables: compiled over the cells of each joined key (joins.py)
        joined: dict = {}
        jt = join_tree(tree, self.stmt, self.catalog)
        if jt is not None:
            tree, virtual, joined = star(tree, jt, self.stmt, self.catalog)
        tree, pending = restrictions(tree, self.stmt, self.star_columns)
        ranked = [(self.select(p.select), p) for p in pending]
        scope = bind_table(self.stmt, self.catalog, tree)
        private = scope.schema
        if joined:
            scope = replace(scope, schema=virtual)
        prefix = "" if self.levels == 0 and not ranked else f"s{self.levels}_"
        self.levels += 1
        compiled = _Lowering(self.stmt, scope, tree, prefix, ranked).run()
        return expand(compiled, private, joined) if joined else compiled


def compile(sql: str, catalog: Catalog, params: Sequence[Any] | None = None,
            dialect: str = "postgres") -> CompiledQuery:
    """Compile one aggregate query (or ``EXPLAIN`` of one) against the catalog's schemas."""
    stmt = parse_statement(sql, params, dialect)
    if getattr(catalog, "query", None) is not None and reads_only_public(stmt.tree, catalog):
        return answer_public(stmt, catalog)
    try:
        inner = _Compiler(stmt, catalog).select(cast(exp.Select, stmt.tree))   # _check_kind lets only a SELECT through
    except RecursionError:
        # The lexer and parser bound nesting; this is the last line of defence.
        raise StatementTooComplexError("statement too complex to compile", position=stmt.offset + 1,
                                       hint="simplify the statement") from None
    if not stmt.explain:
        return inner
    return CompiledQuery(sql=sql, table=inner.table, columns=[OutputColumn("QUERY PLAN", "text")],
                         groups=[], linear_queries=[], is_explain=True, inner=inner, schema=inner.schema)
