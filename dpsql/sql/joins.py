"""Joins of the private table with public tables, compiled as post-processing (issue 31).

A statement's FROM clause is read into a :class:`JoinTree`: the tables it names (each
private or public) and, per join, its kind and the column pairs its ON / USING equates.
The representation knows nothing of privacy, so a later join of two private tables can use
it; today :func:`star` accepts exactly one private table joined (INNER or LEFT, chains
included) with public tables on declared keys (composite ones too), and refuses every other
shape with a SQLSTATE and a hint.

**The compilation.**  Every public table is public metadata, so the rows a private row
joins with depend only on the private row's value of the key column it is joined on.  For
each such key attribute K (``flights.origin``) the join is evaluated here, on public data
only, once per *cell* of K: cell k yields the list of joined dimension rows R(k) — none
(an INNER join with no match: the row drops out), one, or several (a key matching several
dimension rows: the private row is repeated, as SQL repeats it), or one all-NULL row (a LEFT
join with no match).  The pairs (k, r), r ∈ R(k), are the cells of a
:class:`JoinedAttribute` that replaces K while the query is compiled; every column of the
joined tables, and K itself, becomes a :class:`~dpsql.sql.cells.DimRef`, an expression of
that one attribute, so WHERE, GROUP BY, SUM/AVG arguments, HAVING and ORDER BY over them
compile exactly as expressions of one column do.  Each linear query's factor on the joined
attribute, F (m × |cells of the join|), is finally multiplied by the public 0/1 expansion E
(E[(k, r), k] = 1): F·E is a matrix over K's declared cells, so the query is W·x on the
private table's own histogram x — the same measurements, the same model, no extra budget.
A key matching several rows gives F·E entries above 1 (its answer's error scales with
them); the sensitivity of the measurements, which never see E, does not change.

A composite key (``ON f.origin = w.origin AND f.month = w.month``, declared as one key),
and public tables hanging from overlapping key columns, are evaluated on every combination
of the columns' cells; the query compiles over the largest column with the others folded to
one cell, and :func:`expand_linear` writes F·E over their product back as one Kronecker
block per cell combination of the folded columns.  An ON condition that reads the joined
public table alone filters its rows before they are matched (``catalog.query``, public data;
for a LEFT join rows matching none keep NULLs); an INNER join's condition on the tables
before it moves to WHERE; a LEFT join's condition on the tables before it (the private
table, public tables joined earlier) becomes a WHERE conjunct choosing, per joined row, the
matching rows or one all-NULL row added to the join's cells (:func:`dpsql.sql.joined.guard`).

Key cells: a NULL key matches nothing (SQL's NULL ≠ NULL); the "(other)" cell of an open
categorical matches nothing either, because the configuration refuses a reference whose
public keys are not all declared labels (``dpsql.engine.config``); a closed categorical's
invalid values share its NULL cell, since a closed key must be nullable (cell 0, its invalid
place otherwise, would join the first label's rows: ``engine.public._check_key``).
Integer keys join on their value and need one-value bins; a declared integer key is read
unclamped (``IntegerRange.clamp``), so its values outside the declared range sit in the
NULL cell and match nothing, instead of joining the end key's rows.
"""

from __future__ import annotations

import datetime
import decimal
import itertools
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from sqlglot import exp

from dpsql.errors import (ProgrammingError, StatementTooComplexError, UnknownColumnError,
                          UnknownTableError, UnsupportedQueryError)
from dpsql.sql.cells import OTHER, DimRef, conjuncts, snippet
from dpsql.sql.joined import JoinedAttribute, expand, expand_linear, folded_part, guard, on_marker
from dpsql.timeaxis import iso_text

__all__ = ["TableRef", "JoinEdge", "JoinTree", "JoinedAttribute", "join_tree", "star", "expand", "expand_linear",
           "public_in_lists", "reads_only_public", "answer_public", "table_columns"]

#: Cells of one joined attribute (pairs of a key cell and a joined row) a statement may build.
MAX_JOINED_CELLS = 1_000_000

_HINT_DECLARE = ("declare the key in dpsql.toml, e.g. [tables.flights.keys] origin = \"airports.faa\" "
                 "(docs/config.md, \"Public tables\")")
_HINT_SHAPE = ("join the private table with public tables on declared keys: FROM flights f JOIN airports a "
               "ON f.origin = a.faa (INNER or LEFT)")


def _folded(ident) -> str:
    """An identifier as PostgreSQL compares it ("" for none)."""
    if ident is None:
        return ""
    return ident.name if ident.args.get("quoted") else ident.name.lower()


@dataclass(frozen=True)
class TableRef:
    """One table of a FROM clause: its catalog name, the name it goes by in the statement
    (alias or name, folded), whether it is private, and its schema or public content."""

    name: str
    alias: str
    private: bool
    table: Any
    node: exp.Expr = field(compare=False, repr=False)

    def column_names(self) -> tuple[str, ...]:
        return tuple(self.table.column_names)

    def column(self, ident: exp.Identifier) -> str | None:
        """The declared column an identifier names (PostgreSQL folding), or None."""
        names = self.column_names()
        if ident.args.get("quoted"):
            return ident.name if ident.name in names else None
        if ident.name in names:
            return ident.name
        hits = [n for n in names if n.lower() == ident.name.lower()]
        return hits[0] if len(hits) == 1 else None


@dataclass(frozen=True)
class JoinEdge:
    """A join attaching ``tables[right]``: kind ``inner`` or ``left`` and the equated
    column pairs, each ((table index, column), (table index, column))."""

    kind: str
    right: int
    pairs: tuple[tuple[tuple[int, str], tuple[int, str]], ...]
    node: exp.Expr = field(compare=False, repr=False)
    using: tuple[str, ...] = ()      # USING (…) columns: unqualified, they name the left side's
    # ON conditions that read the attached public table alone: they choose which of its rows
    # match (for a LEFT join, rows matching none keep NULLs)
    filters: tuple[exp.Expr, ...] = field(default=(), compare=False, repr=False)
    # ON conditions of an INNER join that read one other table: the same as in WHERE
    where: tuple[exp.Expr, ...] = field(default=(), compare=False, repr=False)
    # ON conditions of a LEFT join that read the private table alone: a row for which they
    # are not TRUE joins no row of the attached table (it keeps NULLs, ``joined.guard``)
    guards: tuple[exp.Expr, ...] = field(default=(), compare=False, repr=False)


@dataclass(frozen=True)
class JoinTree:
    """The FROM clause: ``tables[0]`` is the FROM table, ``edges[i]`` attaches ``tables[i + 1]``."""

    tables: tuple[TableRef, ...]
    edges: tuple[JoinEdge, ...]

    @property
    def private(self) -> list[int]:
        return [i for i, t in enumerate(self.tables) if t.private]


def _table_ref(node, catalog, stmt) -> TableRef | None:
    """A FROM or JOIN item naming a declared (private or public) table, else None."""
    if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier) or \
            node.args.get("catalog") is not None:
        return None
    db = node.args.get("db")
    if db is not None and _folded(db) not in ("public", "main"):
        return None
    name = _folded(node.this)
    public = getattr(catalog, "public", {})
    found = None
    for pool, private in ((catalog, True), (public, False)):
        if name in pool:
            found = (name, pool[name], private)
            break
        if not node.this.args.get("quoted"):
            hits = [k for k in list(pool) if k.lower() == name]     # a snapshot: tables are added at run time
            if len(hits) == 1:
                found = (hits[0], pool[hits[0]], private)
                break
    if found is None:
        return None
    alias = node.args.get("alias")
    shown = _folded(alias.this) if alias is not None and alias.this is not None else name
    return TableRef(found[0], shown, found[2], found[1], node)


def join_tree(tree: exp.Select, stmt, catalog) -> JoinTree | None:
    """The FROM clause of ``tree`` when it joins declared tables (joins of subqueries are
    top-N restrictions, ``derived.py``); None when it joins none."""
    joins = [j for j in tree.args.get("joins") or [] if not isinstance(j.this, exp.Subquery)]
    from_ = tree.args.get("from_") or tree.args.get("from")
    first = _table_ref(from_.this, catalog, stmt) if from_ is not None else None
    if not joins:
        return None
    if first is None:
        return None           # bind_table explains what FROM holds
    tables = [first]
    edges = []
    lead = _table_ref(joins[0].this, catalog, stmt)
    if not first.private and lead is not None and lead.private and (joins[0].args.get("side") or "").upper() \
            == "RIGHT" and (joins[0].args.get("kind") or "").upper() in ("", "OUTER"):
        # public p RIGHT JOIN private f ON …: the rows of f LEFT JOIN p ON … (its mirror)
        tables, joins = [lead], [joins[0].copy()] + joins[1:]
        joins[0].set("side", "LEFT")
        joins[0].set("this", first.node.copy())
    for j in joins:
        ref = _table_ref(j.this, catalog, stmt)
        if ref is None:
            if isinstance(j.this, exp.Table) and isinstance(j.this.this, exp.Identifier):
                public = ", ".join(getattr(catalog, "public", {})) or "(none)"
                raise UnknownTableError(f"relation \"{snippet(j.this, 60)}\" does not exist",
                                        position=stmt.pos(j.this),
                                        hint=f"private tables: {', '.join(catalog) or '(none)'}; "
                                             f"public tables: {public}")
            raise UnsupportedQueryError(f"{snippet(j.this, 60)} cannot be joined", position=stmt.pos(j),
                                        hint=_HINT_SHAPE)
        if any(t.alias == ref.alias for t in tables):
            raise ProgrammingError(f"table name \"{ref.alias}\" specified more than once", position=stmt.pos(j.this),
                                   hint="give each joined table its own alias")
        tables.append(ref)
        edges.append(_edge(j, tables, stmt))
    return JoinTree(tuple(tables), tuple(edges))


def table_columns(select: exp.Select, stmt, catalog) -> list[exp.Column] | None:
    """The columns ``*`` stands for in a SELECT over joined tables (every table's columns,
    in FROM order, each qualified by its table's name in the statement); None without
    table joins."""
    joins = [j for j in select.args.get("joins") or [] if isinstance(j.this, exp.Table)]
    from_ = select.args.get("from_") or select.args.get("from")
    if not joins or from_ is None:
        return None
    out = []
    for node in [from_.this] + [j.this for j in joins]:
        ref = _table_ref(node, catalog, stmt)
        if ref is None:
            return None             # the join's own error is raised when it is compiled
        qual = exp.to_identifier(ref.alias, quoted=True)
        out += [exp.Column(this=exp.to_identifier(n, quoted=True), table=qual.copy()) for n in ref.column_names()]
    return out


def _edge(j: exp.Join, tables: list[TableRef], stmt) -> JoinEdge:
    side = (j.args.get("side") or "").upper()
    kind = (j.args.get("kind") or "").upper()
    right = len(tables) - 1
    if j.args.get("method") or kind in ("CROSS", "NATURAL") or \
            (j.args.get("on") is None and not j.args.get("using")):
        word = "NATURAL" if (j.args.get("method") or "").upper() == "NATURAL" or kind == "NATURAL" else "cross"
        raise UnsupportedQueryError(f"{word} joins are not supported: a join must name the keys it equates",
                                    position=stmt.pos(j), hint=_HINT_SHAPE)
    if side in ("RIGHT", "FULL") or kind not in ("", "INNER", "OUTER"):
        raise UnsupportedQueryError(f"{(side + ' ' + kind).strip()} JOIN is not supported here: it keeps public rows "
                                    "no private row matches (which ones depends on the private rows)",
                                    position=stmt.pos(j), hint="keep every private row with FROM flights f LEFT JOIN "
                                                               "carriers c ON … (or carriers c RIGHT JOIN flights f)")
    pairs: list[tuple[tuple[int, str], tuple[int, str]]] = []
    if j.args.get("using"):
        for ident in j.args["using"]:
            rcol = tables[right].column(ident)
            lefts = [(i, c) for i, t in enumerate(tables[:right]) if (c := t.column(ident)) is not None]
            if rcol is None or not lefts:
                raise UnknownColumnError(f"column \"{ident.name}\" specified in USING clause does not exist in "
                                         "both tables", position=stmt.pos(ident), hint=_HINT_SHAPE)
            if len(lefts) > 1:
                raise ProgrammingError(f"common column name \"{ident.name}\" appears more than once in the left "
                                       "tables", position=stmt.pos(ident), hint="write the join with ON")
            pairs.append((lefts[0], (right, rcol)))
    filters: list[exp.Expr] = []
    where: list[exp.Expr] = []
    guards: list[exp.Expr] = []
    if not j.args.get("using"):
        for cond in conjuncts(j.args["on"]):
            if isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column) and \
                    isinstance(cond.expression, exp.Column):
                a, b = _side(cond.this, tables, stmt), _side(cond.expression, tables, stmt)
                if a[0] != b[0]:
                    if a[0] == right:
                        a, b = b, a
                    if b[0] != right:
                        raise UnsupportedQueryError(f"join condition '{snippet(cond, 60)}' must equate a column of "
                                                    f"\"{tables[right].alias}\" with one of the tables before it",
                                                    position=stmt.pos(cond), hint=_HINT_SHAPE)
                    pairs.append((a, b))
                    continue
            _on_condition(cond, tables, right, side == "LEFT", stmt, filters, where, guards)
        if not pairs:
            raise UnsupportedQueryError(f"the join of \"{tables[right].alias}\" equates no columns: it is a cross "
                                        "join", position=stmt.pos(j), hint=_HINT_SHAPE)
    using = tuple(rc for _, (_, rc) in pairs) if j.args.get("using") else ()
    return JoinEdge("left" if side == "LEFT" else "inner", right, tuple(pairs), j, using, tuple(filters), tuple(where),
                    tuple(guards))


def _on_condition(cond, tables: list[TableRef], right: int, left_join: bool, stmt, filters: list,
                  where: list, guards: list) -> None:
    """Place an ON condition that is not a key equality: one reading the attached public
    table alone chooses which of its rows match (``filters``, INNER or LEFT); one reading
    only tables before it (the private table, public tables joined before) filters as in
    WHERE in an INNER join (``where``) and, in a LEFT join, chooses per joined row between
    the matching rows and one all-NULL row (``guards``); one reading the attached table
    together with another (a comparison across tables) is refused."""
    if any(isinstance(n, (exp.Select, exp.Subquery)) for n in cond.walk()):
        raise UnsupportedQueryError(f"join condition '{snippet(cond, 60)}' holds a subquery", position=stmt.pos(cond),
                                    hint="write it in WHERE")
    at = {_side(c, tables, stmt)[0] for c in cond.find_all(exp.Column)}
    if at <= {right} and not tables[right].private:
        filters.append(cond)
        return
    if right in at and len(at) > 1:
        others = ", ".join(f'"{tables[i].alias}"' for i in sorted(at - {right}))
        joined = tables[right].alias
        raise UnsupportedQueryError(f"join condition '{snippet(cond, 60)}' compares columns of \"{joined}\" with "
                                    f"{others} other than by equality: only equi-joins on declared keys are supported",
                                    position=stmt.pos(cond),
                                    hint=f"split it into conditions on \"{joined}\" alone and on the tables "
                                         "before it, joined by AND; " + _HINT_SHAPE)
    if left_join:
        # on tables before this join only (the private table, public tables joined before
        # it): per joined row it chooses between the matching rows and one all-NULL row, so
        # it is a guard (joined.guard); a public table's columns are public per-cell values
        # of the joined cells, as the private table's are its own cells (W·x still)
        guards.append(cond)
        return
    where.append(cond)


def _side(col: exp.Column, tables: list[TableRef], stmt) -> tuple[int, str]:
    qual = _folded(col.args.get("table")) or None
    hits = []
    for i, t in enumerate(tables):
        if qual is not None and t.alias != qual:
            continue
        name = t.column(col.this)
        if name is not None:
            hits.append((i, name))
    if not hits:
        raise UnknownColumnError(f"column \"{snippet(col, 60)}\" does not exist in the joined tables",
                                 position=stmt.pos(col), hint="qualify it with a table of the FROM clause")
    if len(hits) > 1:
        raise ProgrammingError(f"column reference \"{col.name}\" is ambiguous", position=stmt.pos(col),
                               hint="qualify it with its table's name or alias")
    return hits[0]


# --- the star: one private table, public dimensions --------------------------------------

def _key_values(attr, stmt, node) -> list:
    """The value each cell of a join key holds (None: NULL, OTHER: undeclared)."""
    labels = attr.labels()
    if attr.kind == "categorical":
        return [OTHER if i == attr.other_index else labels[i] for i in range(attr.size)]
    bounds = attr.bin_bounds()
    if attr.kind == "integer" and all(b is None or b[0] == b[1] for b in bounds):
        return [None if b is None else int(b[0]) for b in bounds]
    raise UnsupportedQueryError(f"column '{attr.name}' cannot be a join key: its declared bins hold several values "
                                "each, so the rows a bin joins with are not known", position=stmt.pos(node),
                                hint="join on a categorical column or an integer column with one-value bins")


def _public_value(v):
    # the evaluator computes on numbers, text, dates, timestamps and times of day
    # (dpsql.sql.timefuncs: so a public DATE or TIME column compares, truncates and extracts
    # as a declared one does); decimals are read as doubles
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v


def star(tree: exp.Select, jt: JoinTree, stmt, catalog) -> tuple[exp.Select, Any, dict[str, JoinedAttribute]]:
    """``tree`` rewritten over the private table alone, the schema with every joined key
    replaced by its :class:`JoinedAttribute`, and those attributes by key name."""
    private = jt.private
    if len(private) > 1:
        second = jt.tables[private[1]]
        raise UnsupportedQueryError(f"joins of two private tables ('{jt.tables[private[0]].name}' and "
                                    f"'{second.name}') are not supported", position=stmt.pos(second.node),
                                    hint="join the private table with public tables only (a join of private tables "
                                         "needs person-level accounting across tables)")
    if not private:
        raise UnsupportedQueryError("a query over public tables only cannot join with subqueries here",
                                    position=stmt.pos(jt.tables[0].node), hint=_HINT_SHAPE)
    fact = private[0]
    schema: Any = jt.tables[fact].table
    for e in jt.edges:
        if e.kind == "left" and fact != 0:
            why = "onto the private table would add rows for public keys that no private row has" \
                if e.right == fact else "is answered only when the private table leads the FROM clause"
            raise UnsupportedQueryError(f"a LEFT JOIN {why}", position=stmt.pos(e.node), hint="put the private "
                                        "table first: FROM flights f [JOIN carriers c ON …] LEFT JOIN airports a ON …")
        _declared(catalog, jt, e, stmt)
    order = _attach_order(jt, fact, stmt)
    # Which key columns of the private table each public table hangs from (through chains):
    # tables joined on overlapping columns hang from the union of them (one joined attribute)
    comps = _components(order, fact, schema.column_names)
    # an INNER join's ON conditions on one table are WHERE's (every join is INNER when the
    # private table is not first, and the edges are then re-attached from it)
    moved = [c.copy() for e in jt.edges for c in e.where + (e.filters if fact != 0 else ())]
    # a LEFT join's ON conditions on the private table choose, per private row, between the
    # matching rows and one all-NULL row: the joined cells carry which is which (joined.guard)
    moved += [guard(jt.tables[e.right].alias, e.right, e.guards) for e in jt.edges if e.guards]
    if moved:
        tree = tree.copy()
        tree.set("where", exp.Where(this=exp.and_(*([tree.args["where"].this] if tree.args.get("where") else []),
                                                  *moved)))
    used = _references(tree, jt, stmt)
    joined: dict[str, JoinedAttribute] = {}
    root: dict[int, str] = {}            # public table → the joined attribute it lives in
    fact_root: dict[str, str] = {}       # private key column → the same
    for keys in sorted(set(comps.values()), key=lambda k: schema.column_names.index(k[0])):
        edges = [e for e in order if comps[e.right] == keys]
        ja = _expand_key([schema.attribute(k) for k in keys], jt, fact, edges, used, stmt, catalog)
        joined[ja.name] = ja
        fact_root.update((k, ja.name) for k in keys)
        root.update((e.right, ja.name) for e in edges)
    tree = _rewrite(tree, jt, fact, root, fact_root, stmt)
    attrs = tuple(joined[a.name] if a.name in joined else folded_part(a) if a.name in fact_root else a
                  for a in schema.attributes)
    return tree, type(schema)(schema.name, attrs, schema.source), joined


def _components(order: list[JoinEdge], fact: int, columns) -> dict[int, tuple[str, ...]]:
    """Per public table, the private key columns its joins read (schema order); tables whose
    columns overlap share them all (union-find over the key columns)."""
    parent: dict[str, str] = {}

    def find(c: str) -> str:
        while parent[c] != c:
            c = parent[c]
        return c
    rep: dict[int, str] = {}
    for e in order:
        cols = [lc if li == fact else rep[li] for (li, lc), _ in e.pairs]
        for c in cols:
            parent.setdefault(c, c)
        for c in cols[1:]:
            parent[find(c)] = find(cols[0])
        rep[e.right] = cols[0]
    groups: dict[str, list[str]] = {}
    for c in parent:
        groups.setdefault(find(c), []).append(c)
    return {t: tuple(sorted(groups[find(c)], key=list(columns).index)) for t, c in rep.items()}


def _declared(catalog, jt: JoinTree, e: JoinEdge, stmt) -> None:
    """Each table's equalities in a join are declared keys: whole composite keys, or
    one-column keys (a composite key joined on some of its columns is not declared)."""
    groups: dict[int, set] = {}
    for (li, lc), (_, rc) in e.pairs:
        groups.setdefault(li, set()).add((lc, rc))
    right = jt.tables[e.right]
    for li, pairs in groups.items():
        left = jt.tables[li]
        between = getattr(catalog, "references_between", None)
        refs = between(left.name, right.name) if between is not None else []
        remaining = set(pairs)
        for declared, _ in sorted(refs, key=lambda r: -len(r[0])):
            if declared <= remaining:
                remaining -= declared
        if remaining:
            lc, rc = sorted(remaining)[0]
            partial = [r for declared, r in refs if (lc, rc) in declared]
            hint = f"{partial[0]} is declared: join on all of its columns" if partial else _HINT_DECLARE
            raise UnsupportedQueryError(f"{left.name}.{lc} = {right.name}.{rc} is not a declared key",
                                        position=stmt.pos(e.node), hint=hint)


def _attach_order(jt: JoinTree, fact: int, stmt) -> list[JoinEdge]:
    """The edges in an order where each attaches a table to ones already reached from the
    private table: FROM order when it comes first; for INNER joins (symmetric) any table
    order is rewritten so (the edge's sides swapped where needed)."""
    if fact == 0:
        return list(jt.edges)
    reached, out, todo = {fact}, [], list(jt.edges)
    while todo:
        for e in todo:
            sides = {i for pair in e.pairs for i, _ in pair}
            new = sides - reached
            if len(new) == 1 and sides & reached:
                n = new.pop()
                pairs = tuple((a, b) if b[0] == n else (b, a) for a, b in e.pairs)
                out.append(replace(e, right=n, pairs=pairs, filters=()))   # star() moved them to WHERE
                reached.add(n)
                todo.remove(e)
                break
        else:
            raise UnsupportedQueryError("these joins do not connect every table to the private table",
                                        position=stmt.pos(todo[0].node), hint=_HINT_SHAPE)
    return out


def _column_at(node: exp.Column, jt: JoinTree, stmt) -> tuple[int, str] | None:
    """(table index, column) of a column reference in the joined scope; None for names no
    table has (output aliases, or errors the compiler reports)."""
    if isinstance(node.this, exp.Star) or "dpsql_guard" in (node._meta or {}):
        return None
    qual = _folded(node.args.get("table")) or None
    hits = []
    for i, t in enumerate(jt.tables):
        if qual is not None and t.alias != qual and not (t.alias == t.name and qual == t.name):
            continue
        name = t.column(node.this)
        if name is not None:
            hits.append((i, name))
    if len(hits) > 1 and qual is None:
        # JOIN … USING (c) merges c: unqualified, it is the left side's (equal, or NULL-extended right)
        merged = {(e.right, c) for e in jt.edges for c in e.using}
        hits = [h for h in hits if h not in merged] or hits
    if len(hits) > 1:
        raise ProgrammingError(f"column reference \"{node.name}\" is ambiguous", position=stmt.pos(node),
                               hint="qualify it with its table's name or alias")
    if not hits and qual is not None and any(t.alias == qual and not t.private for t in jt.tables):
        t = next(t for t in jt.tables if t.alias == qual)
        raise UnknownColumnError(f"column {qual}.{node.name} does not exist", position=stmt.pos(node),
                                 hint=f"columns of {t.name}: {', '.join(t.column_names())}"[:300])
    return hits[0] if hits else None


def _scope(tree: exp.Select):
    """Nodes of ``tree``'s own scope (nested SELECTs are other scopes), skipping the ON
    clauses of table joins, which :func:`star` consumes."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in node.iter_expressions():
            if isinstance(child, (exp.Subquery, exp.Select)) and child is not tree:
                continue
            if isinstance(child, exp.Join) and not isinstance(child.this, exp.Subquery):
                continue
            stack.append(child)


def _references(tree, jt: JoinTree, stmt) -> set[tuple[int, str]]:
    """(table index, column) of every column the statement's own scope reads: the joined
    attributes hold per-cell values of these only."""
    out = set()
    for node in _scope(tree):
        if isinstance(node, exp.Column):
            at = _column_at(node, jt, stmt)
            if at is not None:
                out.add(at)
    return out


def _shown(jt: JoinTree, at: tuple[int, str]) -> str:
    return f"{jt.tables[at[0]].alias}.{at[1]}"


def _expand_key(attrs: list, jt: JoinTree, fact: int, edges: list[JoinEdge], used: set, stmt,
                catalog) -> JoinedAttribute:
    """Evaluate the joins hanging from key attributes ``attrs`` (one, or a composite key's)
    on each of their cells (each combination of cells: public data only)."""
    keys = {a.name: _key_values(a, stmt, edges[0].node) for a in attrs}
    sizes = [a.size for a in attrs]
    if int(np.prod(sizes)) > MAX_JOINED_CELLS:
        raise StatementTooComplexError(f"the join on {', '.join(a.name for a in attrs)} has more than "
                                       f"{MAX_JOINED_CELLS:,} combinations of key cells",
                                       position=stmt.pos(edges[0].node), hint="join on fewer key columns")
    members = [e.right for e in edges]
    # per joined row: {table index: row tuple or None}; the private side is the key value
    indexes = []
    for e in edges:
        table: Any = jt.tables[e.right].table
        cols = [table.index(rc) for _, (_, rc) in e.pairs]
        index: dict[tuple, list] = {}
        for row in _matching_rows(jt.tables[e.right], e.filters, catalog, stmt):
            k = tuple(row[c] for c in cols)
            if any(v is None for v in k):
                continue           # NULL never equals anything
            index.setdefault(k, []).append(row)
        indexes.append(index)
    source: list[tuple[int, ...]] = []
    rows_out: list[dict] = []
    for cells in itertools.product(*(range(n) for n in sizes)):
        value = {a.name: keys[a.name][c] for a, c in zip(attrs, cells)}
        rows: list[dict] = [{}]
        for e, index in zip(edges, indexes):
            nxt: list[dict] = []
            for r in rows:
                probe = []
                for (li, lc), _ in e.pairs:
                    if li == fact:
                        probe.append(None if value[lc] is OTHER else value[lc])
                    else:
                        left = r.get(li)
                        probe.append(None if left is None else left[jt.tables[li].table.index(lc)])
                hits = [] if any(v is None for v in probe) else index.get(tuple(probe), [])
                if not e.guards:
                    if hits:
                        nxt.extend({**r, e.right: h} for h in hits)
                    elif e.kind == "left":
                        nxt.append({**r, e.right: None})
                    continue
                # a LEFT join with conditions on the private table (joined.guard): the matching
                # rows, and the all-NULL row of the private rows the conditions reject
                nxt.extend({**r, e.right: h, ("on", e.right): 1} for h in hits)
                nxt.append({**r, e.right: None, ("on", e.right): 0 if hits else 2})
            rows = nxt
        source.extend([cells] * len(rows))
        rows_out.extend(rows)
        if len(source) > MAX_JOINED_CELLS:
            raise StatementTooComplexError(f"the join on '{attrs[0].name}' gives more than {MAX_JOINED_CELLS:,} "
                                           "(key, dimension row) pairs", position=stmt.pos(edges[0].node),
                                           hint="join fewer tables, or tables whose keys match fewer rows")
    if not source:
        raise UnsupportedQueryError(f"no declared value of {', '.join(repr(a.name) for a in attrs)} matches a row "
                                    "of the joined tables", position=stmt.pos(edges[0].node),
                                    hint="check the join keys")
    cells_of = np.asarray(source, dtype=np.int64).reshape(len(source), len(attrs))
    parts = tuple((a, cells_of[:, i]) for i, a in enumerate(attrs))
    values: dict[str, list] = {}
    key_of: dict[str, int] = {}
    names = [a.name for a in attrs]
    for ti, col in used:
        if ti == fact:
            if col in names:
                i = names.index(col)
                values[_shown(jt, (ti, col))] = [keys[col][c] for c in cells_of[:, i]]
                key_of[_shown(jt, (ti, col))] = i
            continue
        if ti not in members:
            continue
        idx = jt.tables[ti].table.index(col)
        values[_shown(jt, (ti, col))] = [None if r.get(ti) is None else _public_value(r[ti][idx]) for r in rows_out]
    for e in edges:
        if e.guards:
            values[on_marker(jt.tables[e.right].alias)] = [r[("on", e.right)] for r in rows_out]
    # the query is compiled over the largest key attribute (its groups stay on it); the
    # others are folded to one cell and enumerated again by expand_linear
    top = max(range(len(attrs)), key=lambda i: (sizes[i], -i))
    return JoinedAttribute(attrs[top], parts[top][1], values, parts=parts, key_of=key_of)


def _matching_rows(ref: TableRef, filters: tuple, catalog, stmt) -> tuple:
    """The rows of a public table that its join's ON conditions on it alone accept: run by
    ``catalog.query`` over the public tables (exactly, as SQL evaluates them: NULL rejects)."""
    table: Any = ref.table
    if not filters:
        return table.rows
    query = getattr(catalog, "query", None)
    if query is None:
        raise UnsupportedQueryError("public tables cannot be read here", position=stmt.pos(filters[0]),
                                    hint="connect through a configuration that declares the public tables")
    source = exp.Table(this=exp.to_identifier(ref.name, quoted=True),
                       alias=exp.TableAlias(this=exp.to_identifier(ref.alias, quoted=True)))
    cond = exp.and_(*[f.copy() for f in filters])
    for col in cond.find_all(exp.Column):       # "public"."airports"."alt" as a.alt is
        col.set("table", exp.to_identifier(ref.alias, quoted=True))
        col.set("db", None)
        col.set("catalog", None)
    sql = exp.select(exp.Star()).distinct().from_(source).where(cond)
    _, rows = query(sql.sql(dialect="duckdb"))
    accepted = {tuple(map(repr, r)) for r in rows}
    return tuple(r for r in table.rows if tuple(map(repr, r)) in accepted)


def _rewrite(tree, jt: JoinTree, fact: int, root: dict, fact_root: dict, stmt) -> exp.Select:
    """Replace every column of a joined table, and every joined key, by its DimRef; drop
    the table joins (what they mean now lives in the joined attributes)."""
    tree = tree.copy()
    fact_ref = jt.tables[fact]
    qual = exp.to_identifier(fact_ref.alias, quoted=True)
    for node in list(_scope(tree)):
        if not isinstance(node, exp.Column):
            continue
        marked = (node._meta or {}).get("dpsql_guard")
        if marked is not None:          # a LEFT join's marker (joined.guard): a column of its joined cells
            node.replace(DimRef(this=exp.Column(this=exp.to_identifier(root[marked], quoted=True), table=qual.copy()),
                                expression=exp.Literal.string(node.name)))
            continue
        at = _column_at(node, jt, stmt)
        if at is None:
            continue
        ti, col = at
        if ti == fact and col not in fact_root:
            if node.args.get("table") is not None:
                node.set("table", qual.copy())      # the private table under its own alias
                node.set("db", None)
            continue
        key = fact_root[col] if ti == fact else root.get(ti)
        if key is None:
            raise UnsupportedQueryError(f"{snippet(node)} belongs to a table that is not joined to the private table",
                                        position=stmt.pos(node), hint=_HINT_SHAPE)
        ref = DimRef(this=exp.Column(this=exp.to_identifier(key, quoted=True), table=qual.copy()),
                     expression=exp.Literal.string(_shown(jt, at)))
        start = _start(node)
        if start is not None:
            ref.meta["start"] = start
        parent = node.parent
        replacement: exp.Expr = ref
        if isinstance(parent, exp.Select) and node.arg_key == "expressions":
            replacement = exp.Alias(this=ref, alias=exp.to_identifier(col))
        node.replace(replacement)
    from_ = tree.args.get("from_") or tree.args.get("from")
    from_.set("this", fact_ref.node.copy())
    tree.set("joins", [j for j in tree.args.get("joins") or [] if isinstance(j.this, exp.Subquery)] or None)
    return tree


def _start(node) -> int | None:
    best = None
    for n in node.walk():
        s = (getattr(n, "_meta", None) or {}).get("start")
        if s is not None and (best is None or s < best):
            best = s
    return best


# --- public tables read on their own ------------------------------------------------------

def reads_only_public(select: exp.Expr, catalog) -> bool:
    """Does ``select`` read public tables and nothing else (no private table, no table
    function, no FROM-less SELECT)?"""
    public = getattr(catalog, "public", {})
    tables = list(select.find_all(exp.Table))
    if not tables or not public:
        return False
    for t in tables:
        if not isinstance(t.this, exp.Identifier) or t.args.get("catalog") is not None:
            return False
        db = t.args.get("db")
        if db is not None and _folded(db) not in ("public", "main"):
            return False
        name = _folded(t.this)
        if name not in public and not any(k.lower() == name for k in public if not t.this.args.get("quoted")):
            return False
    return True


def answer_public(stmt, catalog):
    """A statement that reads public tables only, answered exactly by ``catalog.query``
    (public metadata: no noise, no budget).  Its rows are computed here, at compile time,
    so the columns are known to a client's Describe as they are to Execute."""
    from dpsql.sql.query import CompiledQuery, OutputColumn
    names = sorted({_folded(t.this) for t in stmt.tree.find_all(exp.Table)})
    if stmt.explain:
        text = f"exact answer over public table(s) {', '.join(names)}: no linear queries, no budget"
        return CompiledQuery(sql=stmt.sql, table=names[0], columns=[OutputColumn("QUERY PLAN", "text")],
                             groups=[], linear_queries=[], exact_rows=[(text,)])
    cols, rows = catalog.query(_named(stmt.tree).sql(dialect="duckdb"))
    return CompiledQuery(sql=stmt.sql, table=names[0], columns=[OutputColumn(n, t) for n, t in cols], groups=[],
                         linear_queries=[], exact_rows=[tuple(_public_value(v) for v in r) for r in rows])


def _named(tree: exp.Expr) -> exp.Expr:
    """``tree`` with its output columns named as PostgreSQL names them (a column by its
    name, a function call by the function, anything else ``?column?``), not as DuckDB does
    (``count_star()``)."""
    if not isinstance(tree, exp.Select):
        return tree
    tree = tree.copy()
    items = []
    for e in tree.expressions:
        if isinstance(e, (exp.Alias, exp.Star)) or (isinstance(e, exp.Column) and isinstance(e.this, exp.Star)):
            items.append(e)
            continue
        node = e.this if isinstance(e, exp.Paren) else e
        name = node.name if isinstance(node, exp.Column) else \
            "count" if isinstance(node, exp.Count) else \
            str(node.this).lower() if isinstance(node, exp.Anonymous) else \
            node.sql_name().lower() if isinstance(node, exp.Func) else "?column?"
        items.append(exp.Alias(this=e, alias=exp.to_identifier(name, quoted=True)))
    tree.set("expressions", items)
    return tree


def _literal(v) -> exp.Expr:
    v = _public_value(v)
    if v is None:
        return exp.Null()
    if isinstance(v, bool):
        return exp.Boolean(this=v)
    if isinstance(v, (int, float)):
        return exp.Literal.number(repr(v) if isinstance(v, float) else str(v))
    if isinstance(v, datetime.date):     # a typed literal: DATE '…' or TIMESTAMP '…'
        if isinstance(v, datetime.datetime) and v.tzinfo is not None:
            return exp.cast(exp.Literal.string(v.isoformat(sep=" ")), "TIMESTAMPTZ")
        kind = "TIMESTAMP" if isinstance(v, datetime.datetime) else "DATE"
        return exp.cast(exp.Literal.string(iso_text(v)), kind)
    if isinstance(v, datetime.time):
        return exp.cast(exp.Literal.string(iso_text(v)), "TIME")
    return exp.Literal.string(str(v))


def public_in_lists(tree: exp.Select, stmt, catalog) -> exp.Select:
    """``x IN (SELECT … FROM dim …)`` over public tables only, replaced by the list of
    values it returns (run exactly by ``catalog.query``: public data)."""
    query = getattr(catalog, "query", None)
    found = [n for n in _scope(tree) if isinstance(n, exp.In) and n.args.get("query") is not None]
    found = [n for n in found if reads_only_public(n.args["query"], catalog)]
    if not found:
        return tree
    if query is None:
        raise UnsupportedQueryError("public tables cannot be read here", position=stmt.pos(found[0]),
                                    hint="connect through a configuration that declares the public tables")
    tree = tree.copy()
    for node in [n for n in _scope(tree) if isinstance(n, exp.In) and n.args.get("query") is not None]:
        sub = node.args["query"]
        if not reads_only_public(sub, catalog):
            continue
        inner = sub.this if isinstance(sub, exp.Subquery) else sub
        if not isinstance(inner, exp.Select) or len(inner.expressions) != 1 or \
                isinstance(inner.expressions[0], exp.Star):
            raise UnsupportedQueryError("IN (SELECT …) needs a subquery with one output column",
                                        position=stmt.pos(node), hint="e.g. carrier IN (SELECT carrier FROM carriers "
                                                                      "WHERE name LIKE 'A%')")
        _, rows = query(inner.sql(dialect="duckdb"))
        values = list(dict.fromkeys(_public_value(r[0]) for r in rows))
        if not values:
            node.replace(exp.Boolean(this=False))
            continue
        node.set("query", None)
        node.set("expressions", [_literal(v) for v in values])
    return tree

