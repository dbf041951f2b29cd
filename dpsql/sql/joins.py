"""Joins of the private table with public tables, compiled as post-processing (issue 31).

A statement's FROM clause is read into a :class:`JoinTree`: the tables it names (each
private or public) and, per join, its kind and the column pairs its ON / USING equates.
The representation knows nothing of privacy, so a later join of two private tables can use
it; today :func:`star` accepts exactly one private table joined (INNER or LEFT, chains
included) with public tables on declared keys, and refuses every other shape with a
SQLSTATE and a hint.

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

Key cells: a NULL key matches nothing (SQL's NULL ≠ NULL); the "(other)" cell of an open
categorical matches nothing either, because the configuration refuses a reference whose
public keys are not all declared labels (``dpsql.engine.config``); a closed categorical's
invalid values share cell 0 or the NULL cell and join like them, as they are counted.
Integer keys join on their value and need one-value bins; a declared integer key is read
unclamped (``IntegerRange.clamp``), so its values outside the declared range sit in the
NULL cell and match nothing, instead of joining the end key's rows.
"""

from __future__ import annotations

import datetime
import decimal
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from sqlglot import exp

from dpsql.errors import (ProgrammingError, StatementTooComplexError, UnknownColumnError,
                          UnknownTableError, UnsupportedQueryError)
from dpsql.linalg import Bucket, Explicit, Indicator, Kron, Total, Union, Values, Weighted
from dpsql.sql.cells import OTHER, DimRef, conjuncts, snippet
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
            hits = [k for k in pool if k.lower() == name]
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
        raise UnsupportedQueryError(f"{(side + ' ' + kind).strip()} JOIN is not supported: only INNER and LEFT "
                                    "joins keep every joined row a function of one private row",
                                    position=stmt.pos(j), hint=_HINT_SHAPE)
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
    else:
        for cond in conjuncts(j.args["on"]):
            if not isinstance(cond, exp.EQ) or not isinstance(cond.this, exp.Column) or \
                    not isinstance(cond.expression, exp.Column):
                raise UnsupportedQueryError(f"join condition '{snippet(cond, 60)}' is not an equality of two columns: "
                                            "only equi-joins on declared keys are supported",
                                            position=stmt.pos(cond),
                                            hint="move other conditions to WHERE; " + _HINT_SHAPE)
            a, b = _side(cond.this, tables, stmt), _side(cond.expression, tables, stmt)
            if a[0] == right and b[0] != right:
                a, b = b, a
            if b[0] != right or a[0] == right:
                raise UnsupportedQueryError(f"join condition '{snippet(cond, 60)}' must equate a column of "
                                            f"\"{tables[right].alias}\" with one of the tables before it",
                                            position=stmt.pos(cond), hint=_HINT_SHAPE)
            pairs.append((a, b))
    using = tuple(rc for _, (_, rc) in pairs) if j.args.get("using") else ()
    return JoinEdge("left" if side == "LEFT" else "inner", right, tuple(pairs), j, using)


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

@dataclass
class JoinedAttribute:
    """The cells of a join hanging from key attribute ``key`` (see the module docstring):
    ``source[j]`` is the key cell of joined cell j, ``values[shown][j]`` the value of a
    column there.  Duck-types the parts of ``Attribute`` the compiler reads."""

    key: Any
    source: np.ndarray
    values: dict[str, list]
    kind: str = "joined"
    nullable: bool = False
    null_index: None = None
    other_index: None = None

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def size(self) -> int:
        return len(self.source)

    def labels(self) -> list:
        keys = self.key.labels()
        return [f"{keys[k]}·{j}" for j, k in enumerate(self.source)]

    def bin_bounds(self):
        return None

    def cell_values(self):
        return None

    def column(self, shown: str) -> list:
        return self.values[shown]

    def is_key(self, shown: str) -> bool:
        """Does ``shown`` name the private key column itself (not a joined table's)?"""
        return shown in self.keys

    keys: frozenset = frozenset()


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
    # the evaluator computes on numbers, text, dates and timestamps (dpsql.sql.timefuncs: so
    # a public DATE column compares, truncates and extracts as a declared date column does);
    # a time of day and other public values are read as their text
    if isinstance(v, decimal.Decimal):
        return float(v)
    if isinstance(v, datetime.time):
        return v.isoformat()
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
            raise UnsupportedQueryError("a LEFT JOIN onto the private table would add rows for public keys that no "
                                        "private row has", position=stmt.pos(e.node),
                                        hint="put the private table first: FROM flights f LEFT JOIN airports a ON …")
        for (li, lc), (ri, rc) in e.pairs:
            _declared(catalog, jt.tables[li], lc, jt.tables[ri], rc, stmt, e.node)
    # Which key of the private table each public table hangs from (through chains).
    root: dict[int, str] = {}
    order = _attach_order(jt, fact, stmt)
    for e in order:
        keys = set()
        for (li, lc), _ in e.pairs:
            keys.add(lc if li == fact else root[li])
        if len(keys) > 1:
            raise UnsupportedQueryError(f"\"{jt.tables[e.right].alias}\" is joined on several columns of the private "
                                        f"table ({', '.join(sorted(keys))})", position=stmt.pos(e.node),
                                        hint="join each public table on one key column of the private table")
        root[e.right] = keys.pop()
    used = _references(tree, jt, stmt)
    joined: dict[str, JoinedAttribute] = {}
    for key in sorted({root[i] for i in root}, key=schema.column_names.index):
        attr = schema.attribute(key)
        edges = [e for e in order if root[e.right] == key]
        joined[key] = _expand_key(attr, jt, fact, edges, used, stmt)
    tree = _rewrite(tree, jt, fact, root, joined, stmt)
    attrs = tuple(joined.get(a.name, a) for a in schema.attributes)
    return tree, type(schema)(schema.name, attrs, schema.source), joined


def _declared(catalog, left: TableRef, lc: str, right: TableRef, rc: str, stmt, node) -> None:
    refs = getattr(catalog, "reference", None)
    if refs is None or refs(left.name, lc, right.name, rc) is None:
        raise UnsupportedQueryError(f"{left.name}.{lc} = {right.name}.{rc} is not a declared key",
                                    position=stmt.pos(node), hint=_HINT_DECLARE)


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
                out.append(JoinEdge(e.kind, n, pairs, e.node))
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
    if isinstance(node.this, exp.Star):
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


def _expand_key(attr, jt: JoinTree, fact: int, edges: list[JoinEdge], used: set, stmt) -> JoinedAttribute:
    """Evaluate the joins hanging from ``attr`` on each of its cells (public data only)."""
    keys = _key_values(attr, stmt, edges[0].node)
    members = [e.right for e in edges]
    # per joined row: {table index: row tuple or None}; the private side is the key value
    indexes = []
    for e in edges:
        table: Any = jt.tables[e.right].table
        cols = [table.index(rc) for _, (_, rc) in e.pairs]
        index: dict[tuple, list] = {}
        for row in table.rows:
            k = tuple(row[c] for c in cols)
            if any(v is None for v in k):
                continue           # NULL never equals anything
            index.setdefault(k, []).append(row)
        indexes.append(index)
    source: list[int] = []
    rows_out: list[dict] = []
    for cell, value in enumerate(keys):
        rows: list[dict] = [{}]
        for e, index in zip(edges, indexes):
            nxt: list[dict] = []
            for r in rows:
                probe = []
                for (li, lc), _ in e.pairs:
                    if li == fact:
                        probe.append(None if value is OTHER else value)
                    else:
                        left = r.get(li)
                        probe.append(None if left is None else left[jt.tables[li].table.index(lc)])
                hits = [] if any(v is None for v in probe) else index.get(tuple(probe), [])
                if hits:
                    nxt.extend({**r, e.right: h} for h in hits)
                elif e.kind == "left":
                    nxt.append({**r, e.right: None})
            rows = nxt
        source.extend([cell] * len(rows))
        rows_out.extend(rows)
        if len(source) > MAX_JOINED_CELLS:
            raise StatementTooComplexError(f"the join on '{attr.name}' gives more than {MAX_JOINED_CELLS:,} "
                                           "(key, dimension row) pairs", position=stmt.pos(edges[0].node),
                                           hint="join fewer tables, or tables whose keys match fewer rows")
    if not source:
        raise UnsupportedQueryError(f"no declared value of '{attr.name}' matches a row of the joined tables",
                                    position=stmt.pos(edges[0].node), hint="check the join keys")
    values: dict[str, list] = {}
    own = set()
    for ti, col in used:
        if ti == fact:
            if col == attr.name:
                values[_shown(jt, (ti, col))] = [keys[c] for c in source]
                own.add(_shown(jt, (ti, col)))
            continue
        if ti not in members:
            continue
        idx = jt.tables[ti].table.index(col)
        values[_shown(jt, (ti, col))] = [None if r.get(ti) is None else _public_value(r[ti][idx]) for r in rows_out]
    return JoinedAttribute(attr, np.asarray(source, dtype=np.int64), values, keys=frozenset(own))


def _rewrite(tree, jt: JoinTree, fact: int, root: dict, joined: dict, stmt) -> exp.Select:
    """Replace every column of a joined table, and every joined key, by its DimRef; drop
    the table joins (what they mean now lives in the joined attributes)."""
    tree = tree.copy()
    fact_ref = jt.tables[fact]
    qual = exp.to_identifier(fact_ref.alias, quoted=True)
    for node in list(_scope(tree)):
        if not isinstance(node, exp.Column):
            continue
        at = _column_at(node, jt, stmt)
        if at is None:
            continue
        ti, col = at
        if ti == fact and col not in joined:
            if node.args.get("table") is not None:
                node.set("table", qual.copy())      # the private table under its own alias
                node.set("db", None)
            continue
        key = col if ti == fact else root.get(ti)
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


# --- F·E: back to the private table's own cells --------------------------------------

def _compose(factor, attr: JoinedAttribute):
    """``factor`` (m × joined cells) times the expansion E: m × the key's cells."""
    n = attr.key.size
    dense = np.asarray(factor.dense(), dtype=float)
    out = np.zeros((dense.shape[0], n))
    np.add.at(out.T, attr.source, dense.T)
    if out.shape[0] == 1:
        w = out[0]
        if np.all(w == 1):
            return Total(n)
        if np.all((w == 0) | (w == 1)):
            return Indicator(n, w.astype(bool))
        return Values(n, w)
    nonzero = out != 0
    if np.all(out[nonzero] == 1) and np.all(nonzero.sum(axis=0) <= 1) and isinstance(factor, Bucket):
        mapping = np.where(nonzero.any(axis=0), nonzero.argmax(axis=0), -1)
        return Bucket(n, mapping, buckets=out.shape[0])
    return Explicit(out)


def expand_linear(lq, schema, joined: dict[str, JoinedAttribute]):
    """A linear query built over the joined attributes, over ``schema`` (the private
    table's declared domain): each factor on a joined attribute times its expansion."""
    names = [a.name for a in schema.attributes]
    blocks = []
    touched = set(lq.attributes)
    for block in lq.matrix.blocks:
        factors = [(_compose(f, joined[a]) if a in joined else f) for a, f in zip(names, block.base.factors)]
        # an INNER join restricts (or repeats) its key's cells even where the query reads
        # nothing of it: the composed factor is then no longer the all-ones Total
        touched |= {a for a, f in zip(names, factors) if not isinstance(f, Total)}
        blocks.append(Weighted(block.weight, Kron(factors)))
    return replace(lq, matrix=Union(blocks), attributes=tuple(a for a in names if a in touched))


def expand(cq, schema, joined: dict[str, JoinedAttribute]):
    """``cq`` (compiled over the joined attributes) with its own linear queries, and the
    offset queries of its SUMs over binned columns, multiplied by the expansions, over
    ``schema`` (an offset query left over the joined cells was applied to the key's offset
    sums, which have the key's width: SUM over a join failed once offsets were measured)."""
    if cq.is_schema_probe or not joined:
        return replace(cq, schema=schema)
    program = cq.program
    program.lq_by_name = {k: expand_linear(v, schema, joined) for k, v in program.lq_by_name.items()}
    out = [program.lq_by_name.get(lq.name, lq) for lq in cq.linear_queries]
    offsets = [program.lq_by_name.get(lq.name) or expand_linear(lq, schema, joined) for lq in cq.offset_queries]
    program.joined = dict(joined)
    return replace(cq, linear_queries=out, offset_queries=offsets, schema=schema)


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

