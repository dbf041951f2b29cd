"""Joins of private tables along a people schema's declared keys (issue 32 item 4).

With ``[people]`` (``docs/config.md``, "People across tables") every private table T is
served through its *view*: the join from the person table down to T, with the columns of
every table on the path (an ancestor A's column c is the view column ``A__c``), bounded per
person (``dpsql/engine/people.py``).  A statement joining private tables along that path —

    SELECT c.segment, o.status, COUNT(*), SUM(l.qty)
    FROM customers c JOIN orders o ON o.custkey = c.custkey
                     JOIN lineitem l ON l.orderkey = o.orderkey
    GROUP BY c.segment, o.status

— is the same relation as the deepest table's view (inner joins; rows that reach no person
are in no view and never counted), so it is rewritten here into a statement over that view
alone (``FROM lineitem l``, ``c.segment`` → ``l.customers__segment``), which the compiler
then compiles like any single-table statement (and ``joins.star`` joins with public tables
as before).  The output keeps the names the statement gives (``segment``, ``status``).

Refused, with a SQLSTATE and a hint, from the SQL and the declared schema alone: a join of
two private tables on columns that are not a declared key pair, private tables on different
branches (orders and payments of the same customer: each person would be counted once per
*pair* of their rows, without bound), a table on the path skipped (customers joined to
lineitem directly), LEFT/RIGHT/FULL joins between private tables (a person without rows
would add a row no view holds), and COUNT(DISTINCT …) of anything but the person's key
(``COUNT(DISTINCT c.custkey)`` is answered from the person view's 0/1 flags ``orders__exists``,
sensitivity 1).  Its WHERE conjuncts that read another table's columns are one condition:
the person has a row of the deepest table's view satisfying it.  Each such condition of a
``[workload]`` statement (``person_flags``, at configuration time) is one more flag of the
person's view, ``T__has_<hash>`` (``flag_column``), so the statement is answered as a count
of the person's view with that flag set; a condition no workload statement declared is
refused with that hint (its flag was never measured), and so is grouping such a count by a
child table's column (a person would fall in several groups).  The catalog's ``people`` (the
engine's ``PeopleSchema``) is read by duck typing: this package imports nothing above it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

from sqlglot import exp

from dpsql.errors import ProgrammingError, UnknownColumnError, UnsupportedQueryError
from dpsql.sql.cells import conjuncts, snippet
from dpsql.sql.joins import _folded, _table_ref

__all__ = ["person_join", "person_flags", "flag_column", "flag_table", "parse_condition", "flag_uses",
           "flag_numbers", "flag_constants"]

# the person view's flag columns (dpsql.measure.views.SEP, EXISTS; this package may not import it)
_SEP, _EXISTS = "__", "exists"


def flag_table(person: str, column: str) -> str:
    """The table an engine may add for a flag no workload statement declared (``column``, a
    ``flag_column``): the person's own columns and that flag, measured on demand."""
    return f"{person}{_SEP}{column}"


def parse_condition(text: str) -> exp.Expr:
    """A flag's condition from its text (``condition.sql(dialect="postgres")``, as a charge
    keeps it), so that ``flag_column`` names the same flag again."""
    from dpsql.sql.syntax import parse_statement
    tree = parse_statement(text)
    if tree is None:
        raise ProgrammingError(f"not a condition: {text[:60]!r}")
    return tree


def flag_column(table: str, condition: exp.Expr) -> str:
    """The person view's column flagging the persons with a row of ``table``'s view that
    satisfies ``condition`` (over that view's columns): named by a hash of its text, so the
    same condition written anywhere finds the same measured flag."""
    text = condition.sql(dialect="postgres")
    return f"{table}{_SEP}has_{hashlib.sha256(text.encode()).hexdigest()[:12]}"

_HINT = ("join private tables along the declared keys, from the person down one path: "
         "FROM customers c JOIN orders o ON o.custkey = c.custkey JOIN lineitem l ON l.orderkey = o.orderkey")


@dataclass(frozen=True)
class _Private:
    name: str           # the catalog (view) name
    alias: str          # as the statement names it
    own: tuple[str, ...]    # the table's own declared columns
    keys: tuple[str, ...]   # its declared key columns (primary and foreign)
    node: exp.Expr


def _keys(people: Any, table: str) -> tuple[str, ...]:
    out = []
    if table == people.person:
        out.append(people.key)
    for view in people.views.values():
        for i, hop in enumerate(view.hops):
            if hop.table == table and hop.key is not None:
                out.append(hop.key)
            if i + 1 < len(view.hops) and hop.table == table and view.hops[i + 1].parent_key is not None:
                out.append(view.hops[i + 1].parent_key)
    return tuple(dict.fromkeys(out))


def _resolve(col: exp.Column, refs: list[_Private], stmt, *, keys: bool) -> tuple[_Private, str] | None:
    """The private table and declared column (own, or a key when ``keys``) a column names;
    None when it names no private table's column (a public table's, or an output alias)."""
    qual = _folded(col.args.get("table")) or None
    ident = col.this
    if not isinstance(ident, exp.Identifier):
        return None
    hits = []
    for r in refs:
        if qual is not None and r.alias != qual:
            continue
        names = r.own + (r.keys if keys else ())
        if ident.args.get("quoted"):
            found = ident.name if ident.name in names else None
        else:
            low = [n for n in names if n.lower() == ident.name.lower()]
            found = ident.name if ident.name in names else (low[0] if len(low) == 1 else None)
        if found is not None:
            hits.append((r, found))
    if len(hits) > 1:
        raise ProgrammingError(f"column reference \"{col.name}\" is ambiguous", position=stmt.pos(col),
                               hint="qualify it with its table's name or alias")
    if not hits and qual is not None and any(r.alias == qual for r in refs):
        raise UnknownColumnError(f"column \"{snippet(col, 60)}\" does not exist", position=stmt.pos(col),
                                 hint="name a column declared in the table's domain")
    return hits[0] if hits else None


def _using(j: exp.Join, right: str, refs: list[_Private], stmt) -> exp.Expr:
    """``JOIN t USING (k)`` as ``t.k = <the one table before t with a key k>.k``."""
    conds = []
    names = [r.alias for r in refs]
    before = refs[:names.index(right)]
    for ident in j.args["using"]:
        name = ident.name if isinstance(ident, exp.Identifier) else str(ident.name)
        lefts = [r for r in before if name in r.keys or name.lower() in (k.lower() for k in r.keys)]
        if len(lefts) != 1:
            raise UnsupportedQueryError(f"USING ({name}) does not name one declared key of the tables before "
                                        f"\"{right}\"", position=stmt.pos(ident), hint=_HINT)
        conds.append(exp.EQ(this=exp.column(name, table=right), expression=exp.column(name, table=lefts[0].alias)))
    return exp.and_(*conds)


def _analyse(tree: exp.Select, stmt, catalog):
    """(people, refs, joins, COUNT(DISTINCT person) aggregates) of a statement over private
    tables of a people schema, or None when it reads none."""
    people = getattr(catalog, "people", None)
    joins = [j for j in tree.args.get("joins") or [] if not isinstance(j.this, exp.Subquery)]
    from_ = tree.args.get("from_") or tree.args.get("from")
    if people is None or from_ is None:
        return None
    items = [from_.this] + [j.this for j in joins]
    refs: list[_Private] = []
    for node in items:
        ref = _table_ref(node, catalog, stmt)
        if ref is not None and ref.private:
            own = tuple(src for src, _ in people.views[ref.name].hops[-1].columns)
            refs.append(_Private(ref.name, ref.alias, own, _keys(people, ref.name), node))
    return people, refs, joins, _person_counts(tree, refs, people, stmt)


def person_join(tree: exp.Select, stmt, catalog) -> exp.Select:
    """``tree`` over the deepest private table's view when its FROM clause joins two or more
    private tables of the catalog's people schema; otherwise ``tree`` unchanged."""
    found = _analyse(tree, stmt, catalog)
    if found is None:
        return tree
    people, refs, joins, persons = found
    if len(refs) < 2 and not persons:
        if refs:
            _check_keys_and_distinct(tree, stmt, refs, people, persons)
        return tree
    deepest = _check_path(tree, joins, refs, people, stmt, catalog)
    _check_keys_and_distinct(tree, stmt, refs, people, persons)
    if persons:
        return _count_persons(tree, stmt, catalog, refs, deepest, people, persons)
    return _rewrite(tree, stmt, catalog, refs, deepest, people)


def _person_key_text(refs: list[_Private], people) -> str:
    """How this statement would name the person's key: ``c.custkey`` for the person table,
    ``o.custkey`` for a table that references it, else the join that reaches it."""
    for r in refs:
        if r.name == people.person:
            return f"COUNT(DISTINCT {r.alias}.{people.key})"
    for r in refs:
        view = people.views[r.name]
        if len(view.hops) > 1 and view.hops[1].table == r.name:
            return f"COUNT(DISTINCT {r.alias}.{view.hops[1].key})"
    return f"COUNT(DISTINCT {people.person}.{people.key}) over a join with {people.person}"


def _check_keys_and_distinct(tree: exp.Select, stmt, refs: list[_Private], people, persons) -> None:
    """Refuse, with a hint for the people schema, a statement that reads a key column outside
    its joins and person counts (42703: keys link the tables and are never released as
    values) or counts distinct values of anything but the person (0A000)."""
    for agg in tree.find_all(exp.Count):
        if isinstance(agg.this, exp.Distinct) and agg not in persons and agg.find_ancestor(exp.Select) is tree:
            raise UnsupportedQueryError(
                f"{snippet(agg, 60)} is not supported: of distinct counts only persons are answered",
                position=stmt.pos(agg),
                hint=f"count persons with {_person_key_text(refs, people)} (one row per person in the "
                     f"{people.person!r} view), or rows with COUNT(*)")
    skip = [c for p in persons for c in p.find_all(exp.Column)]
    skip += [c for j in tree.args.get("joins") or [] for c in j.find_all(exp.Column)]
    for col in tree.find_all(exp.Column):
        if col.find_ancestor(exp.Select) is not tree or any(col is c for c in skip):
            continue
        hit = _resolve(col, refs, stmt, keys=True)
        if hit is None or hit[1] in hit[0].own:
            continue
        ref, name = hit
        if persons and col.find_ancestor(exp.Where) is not None and ref.name != people.person:
            continue    # a condition on persons' rows: refused with its own message (_flag_condition)
        raise UnknownColumnError(
            f"column \"{snippet(col, 60)}\" is a key of the people schema: keys link the tables and are "
            "never released", position=stmt.pos(col),
            hint=f"use the declared columns of {ref.name!r} ({', '.join(ref.own)}); to count persons, "
                 f"{_person_key_text(refs, people)}")


def person_flags(statements, catalog) -> list[tuple[str, exp.Expr]]:
    """The per-person flags a workload needs: for each ``COUNT(DISTINCT person)`` statement
    with conditions on another table's columns, (the deepest table, the condition over its
    view's columns), in order and without repeats.  Public: SQL and the declared schema.
    A statement that does not compile this far is left to the compiler to refuse."""
    from dpsql.errors import Error
    from dpsql.sql.parse import parse_statement

    out: dict[str, tuple[str, exp.Expr]] = {}
    for sql in statements:
        try:
            stmt = parse_statement(sql)
            tree = stmt.tree
            if not isinstance(tree, exp.Select):
                continue
            found = _analyse(tree, stmt, catalog)
            if found is None or not found[3]:
                continue
            people, refs, joins, _ = found
            deepest = _check_path(tree, joins, refs, people, stmt, catalog)
            flag = _flag_condition(tree, stmt, refs, deepest, people)
        except Error:
            continue
        if flag is not None:
            out.setdefault(flag_column(deepest.name, flag[1]), (deepest.name, flag[1]))
    return list(out.values())


# What a flag's condition may hold.  It is evaluated inside the engine on the rows' own
# values (``View.relation``), so a cast of a column, arithmetic or a function, which can fail
# on some values (a text that is no number, an overflow), would make whether every
# measurement of the person's view fails depend on the data; comparisons of columns with
# constants fail, if at all, when the statement is bound, whatever the rows.
_FLAG_NODES = (exp.Column, exp.Identifier, exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.And, exp.Or,
               exp.Not, exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE, exp.In, exp.Between, exp.Is,
               exp.Like, exp.ILike)


#: What a constant's cast or sign may hold: literals and types only.  Not a function: the
#: engine evaluates a condition's constants at each row it reaches, so a volatile one
#: (``CAST(CASE WHEN random() < 0.5 THEN 1 ELSE error('x') END AS INT)``) would fail with a
#: probability that grows with the number of rows reaching it.
_LITERAL_NODES = (exp.Literal, exp.Boolean, exp.Null, exp.Paren, exp.Neg, exp.Cast, exp.DataType,
                  exp.DataTypeParam)


def _unsafe(cond: exp.Expr) -> exp.Expr | None:
    """The first node of ``cond`` outside ``_FLAG_NODES`` (a cast or sign of literals is a
    constant: allowed), or None."""
    if isinstance(cond, (exp.Cast, exp.Neg)) and not any(isinstance(n, exp.Column) for n in cond.walk()):
        return next((n for n in cond.walk() if not isinstance(n, _LITERAL_NODES)), None)
    if not isinstance(cond, _FLAG_NODES):
        return cond
    if isinstance(cond, (exp.Like, exp.ILike)) and not isinstance(cond.expression, exp.Literal):
        return cond.expression     # a pattern read from the rows can be malformed (PostgreSQL: a trailing backslash)
    for child in cond.iter_expressions():
        bad = _unsafe(child)
        if bad is not None:
            return bad
    return None


_COMPARISONS = (exp.EQ, exp.NEQ, exp.LT, exp.LTE, exp.GT, exp.GTE)


def _bad_pattern(cond: exp.Expr) -> exp.Expr | None:
    """The first LIKE pattern of ``cond`` with a backslash that escapes neither %, _ nor a
    backslash, or None.  PostgreSQL reads a pattern as it matches a row's value, so 'P\\'
    fails ('must not end with escape character') only on a value starting with P: whether
    the measurement failed would tell something about the rows."""
    for node in cond.find_all(exp.Like, exp.ILike):
        pattern = node.expression
        if not isinstance(pattern, exp.Literal):
            continue
        text, i = pattern.name, 0
        while i < len(text):
            if text[i] == "\\":
                if i + 1 >= len(text) or text[i + 1] not in "%_\\":
                    return pattern
                i += 1
            i += 1
    return None


def _constant(node: exp.Expr) -> bool:
    return not any(isinstance(n, exp.Column) for n in node.walk())


def _unpaired(cond: exp.Expr) -> exp.Expr | None:
    """The first predicate of ``cond`` (already within ``_FLAG_NODES``) that does not compare
    one column with constants: two columns compared (their types could make the engine cast
    one of them, row by row), or a constant on the side a column belongs; None when every
    predicate does."""
    for node in cond.walk():
        if isinstance(node, _COMPARISONS):
            a, b = node.this, node.expression
            if not ((isinstance(a, exp.Column) and _constant(b)) or (isinstance(b, exp.Column) and _constant(a))):
                return node
        elif isinstance(node, (exp.In, exp.Between, exp.Like, exp.ILike, exp.Is)):
            others = [v for k, v in node.args.items() if k != "this" and isinstance(v, exp.Expr)] + \
                list(node.args.get("expressions") or [])
            if not isinstance(node.this, exp.Column) or not all(_constant(o) for o in others):
                return node
    return None


def _constant_use(node: exp.Expr) -> str:
    """What a column compared with constant ``node`` must hold for the engine to compare it
    without casting the column: "number", "text" (a string literal is cast to the column's
    type; ``measure.flag_types.flag_type_problem`` checks that it converts), "temporal",
    "boolean" or "null"."""
    while isinstance(node, (exp.Paren, exp.Neg)):
        node = node.this
    if isinstance(node, exp.Null):
        return "null"
    if isinstance(node, exp.Boolean):
        return "boolean"
    if isinstance(node, exp.Literal):
        return "text" if node.is_string else "number"
    if isinstance(node, exp.Cast):
        to = node.args["to"]
        if to.is_type(*exp.DataType.TEXT_TYPES):
            return "text"
        if to.is_type(*exp.DataType.TEMPORAL_TYPES):
            return "temporal"
        if to.is_type(exp.DataType.Type.BOOLEAN):
            return "boolean"
        return "number"
    return "number"


def flag_uses(condition: exp.Expr) -> list[tuple[str, str]]:
    """(view column, what it is compared with: ``_constant_use``, or "pattern" for LIKE, or
    "boolean" for a bare column or IS TRUE/FALSE) for every column of a flag's condition
    that ``_flag_condition`` accepted: the engine checks them against the columns' types in
    the source (public metadata), so that evaluating the condition never casts a row's value
    (a cast that fails on some values would make the measurement fail with the data)."""
    return [(column, use) for column, use, _ in _flag_pairs(condition)]


def flag_numbers(condition: exp.Expr) -> list[tuple[str, exp.Expr]]:
    """(view column, the constant) for every comparison of a flag's condition with a number
    (``flag_uses``' "number"): the engine checks the constant's decimal places against the
    column's type (``measure.flag_types.flag_type_problem``)."""
    return [(column, const) for column, use, const in _flag_pairs(condition)
            if use == "number" and const is not None]


def flag_constants(condition: exp.Expr) -> list[tuple[str, str, exp.Expr]]:
    """(view column, ``flag_uses``' use, the constant) for every comparison of a flag's
    condition with a constant: the engine checks that it converts the constant whatever the
    rows (``measure.flag_types.flag_type_problem``)."""
    return [(column, use, const) for column, use, const in _flag_pairs(condition) if const is not None]


def _flag_pairs(condition: exp.Expr) -> list[tuple[str, str, exp.Expr | None]]:
    """(view column, ``flag_uses``' use, the constant compared or None) of each comparison."""
    out: list[tuple[str, str, exp.Expr | None]] = []
    for node in condition.walk():
        if isinstance(node, _COMPARISONS):
            col, other = (node.this, node.expression) if isinstance(node.this, exp.Column) else \
                (node.expression, node.this)
            out.append((col.name, _constant_use(other), other))
        elif isinstance(node, exp.In):
            out += [(node.this.name, _constant_use(e), e) for e in node.expressions]
        elif isinstance(node, exp.Between):
            out += [(node.this.name, _constant_use(node.args[k]), node.args[k]) for k in ("low", "high")]
        elif isinstance(node, (exp.Like, exp.ILike)):
            out.append((node.this.name, "pattern", None))
        elif isinstance(node, exp.Is):
            out.append((node.this.name, _constant_use(node.expression), node.expression))
        elif isinstance(node, exp.Column) and isinstance(node.parent, (exp.And, exp.Or, exp.Not, exp.Paren)) \
                or node is condition and isinstance(node, exp.Column):
            out.append((node.name, "boolean", None))
    return out


def _flag_condition(tree: exp.Select, stmt, refs: list[_Private], deepest: _Private,
                    people) -> tuple[list[exp.Expr], exp.Expr] | None:
    """(the WHERE conjuncts that read a column of a table other than the person's, their AND
    over the deepest table's view columns), or None when there are none.  Refused (0A000):
    such a conjunct with a subquery, or naming a key column the view does not hold."""
    where = tree.args.get("where")
    if where is None:
        return None
    moved = []
    for cond in conjuncts(where.this):
        hits = [(c, _resolve(c, refs, stmt, keys=True)) for c in cond.find_all(exp.Column)]
        if not any(h is not None and h[0].name != people.person for _, h in hits):
            continue
        if cond.find(exp.Subquery, exp.Select) is not None:
            raise UnsupportedQueryError(f"the condition '{snippet(cond, 60)}' on persons' rows holds a subquery",
                                        position=stmt.pos(cond), hint="write it with the table's own columns")
        bad = _unsafe(cond)
        if bad is not None:
            raise UnsupportedQueryError(
                f"the condition '{snippet(cond, 60)}' on persons' rows computes '{snippet(bad, 40)}' from their values",
                position=stmt.pos(bad),
                hint="such a condition is evaluated on every row inside the engine, where a computation can fail "
                     "on some values; compare columns with constants (=, <, IN, BETWEEN, LIKE, IS NULL; AND, OR, NOT)")
        bad = _bad_pattern(cond)
        if bad is not None:
            raise UnsupportedQueryError(
                f"the condition '{snippet(cond, 60)}' on persons' rows has the LIKE pattern {snippet(bad, 40)}, "
                "whose backslash escapes neither %, _ nor a backslash", position=stmt.pos(bad),
                hint="escape only %, _ and \\ with a backslash: PostgreSQL fails on a pattern ending in one when a "
                     "row's value reaches it, Spark on one before another character")
        bad = _unpaired(cond)
        if bad is not None:
            raise UnsupportedQueryError(
                f"the condition '{snippet(cond, 60)}' on persons' rows compares columns with each other in "
                f"'{snippet(bad, 40)}'", position=stmt.pos(bad),
                hint="compare each column with constants (o.status = 'F' AND o.priority <= 2): the engine would "
                     "otherwise convert one column's values to the other's type, which can fail on some values")
        moved.append((cond, hits))
    if not moved:
        return None
    alias_free = []
    for cond, hits in moved:
        new = cond.copy()
        for (old, hit), col in zip(hits, list(new.find_all(exp.Column))):
            if hit is None:
                continue
            ref, name = hit
            if name not in ref.own:
                raise UnsupportedQueryError(f"the condition '{snippet(cond, 60)}' reads the key {snippet(old, 40)}, "
                                            "which the tables' views do not hold", position=stmt.pos(old),
                                            hint="condition persons' rows on declared (domain) columns")
            col.set("this", exp.to_identifier(people.column(deepest.name, ref.name, name), quoted=True))
            col.set("table", None)
        alias_free.append(new)
    return [c for c, _ in moved], exp.and_(*alias_free) if len(alias_free) > 1 else alias_free[0]


def _check_path(tree, joins, refs: list[_Private], people, stmt, catalog) -> _Private:
    """The deepest private table, after checking that the private tables lie on its path
    from the person, each joined to the next along the declared key (else 0A000)."""
    # the deepest table's path must hold every other private table (one branch)
    deepest = max(refs, key=lambda r: len(people.path(r.name)))
    path = people.path(deepest.name)
    for r in refs:
        if r.name not in path:
            raise UnsupportedQueryError(
                f"'{r.name}' and '{deepest.name}' are on different branches of the people schema: each person "
                "would be counted once per pair of their rows, without a bound", position=stmt.pos(r.node),
                hint="query each table with its own path from the person (a separate statement), " + _HINT)
    names = [r.name for r in refs]
    if len(set(names)) != len(names):
        raise UnsupportedQueryError("a private table joined with itself pairs a person's rows without a bound",
                                    position=stmt.pos(refs[-1].node), hint=_HINT)
    top = min(path.index(n) for n in names)
    needed = path[top:]
    missing = [t for t in needed if t not in names]
    if missing:
        raise UnsupportedQueryError(f"the join skips '{missing[0]}': private tables join only along the declared "
                                    f"path {' -> '.join(path)}", position=stmt.pos(deepest.node), hint=_HINT)
    view = people.views[deepest.name]
    links = {(h.table, h.key, view.hops[i - 1].table, h.parent_key) for i, h in enumerate(view.hops) if i}
    joined_links = set()
    for j in joins:
        ref = _table_ref(j.this, catalog, stmt)
        if ref is None or not ref.private:
            continue
        side = (j.args.get("side") or "").upper()
        kind = (j.args.get("kind") or "").upper()
        if side or kind not in ("", "INNER") or j.args.get("method"):
            raise UnsupportedQueryError(f"{(side + ' ' + kind).strip() or 'this'} join of private tables is not "
                                        "supported: only INNER joins keep every row one person's",
                                        position=stmt.pos(j), hint=_HINT)
        on = j.args.get("on")
        if on is None and j.args.get("using"):
            on = _using(j, ref.alias, refs, stmt)
        if on is None:
            raise UnsupportedQueryError("a join of private tables must name the declared key it equates",
                                        position=stmt.pos(j), hint=_HINT)
        for cond in conjuncts(on):
            if not (isinstance(cond, exp.EQ) and isinstance(cond.this, exp.Column)
                    and isinstance(cond.expression, exp.Column)):
                raise UnsupportedQueryError(f"join condition '{snippet(cond, 60)}' is not an equality of declared "
                                            "keys", position=stmt.pos(cond), hint="move other conditions to WHERE; "
                                            + _HINT)
            a = _resolve(cond.this, refs, stmt, keys=True)
            b = _resolve(cond.expression, refs, stmt, keys=True)
            pair = None
            if a is not None and b is not None:
                for x, y in ((a, b), (b, a)):
                    link = (x[0].name, x[1], y[0].name, y[1])
                    if link in links:
                        pair = link
            if pair is None:
                raise UnsupportedQueryError(f"join condition '{snippet(cond, 60)}' is not a declared key of the "
                                            "people schema", position=stmt.pos(cond), hint=_HINT)
            joined_links.add(pair)
    expected = {link for link in links if link[0] in names and link[2] in names}
    if joined_links != expected:
        raise UnsupportedQueryError("the private tables are not joined on every declared key of their path",
                                    position=stmt.pos(deepest.node), hint=_HINT)
    return deepest


def _person_counts(tree: exp.Select, refs: list[_Private], people, stmt) -> list[exp.Count]:
    """The ``COUNT(DISTINCT <person key>)`` aggregates of ``tree``: the person table's key,
    or a foreign key that references it (equal to it in every joined row)."""
    refers = {(v.hops[1].table, v.hops[1].key) for v in people.views.values() if len(v.hops) > 1}
    out = []
    for agg in tree.find_all(exp.Count):
        inner = agg.this
        if not isinstance(inner, exp.Distinct) or len(inner.expressions) != 1 \
                or not isinstance(inner.expressions[0], exp.Column):
            continue
        hit = _resolve(inner.expressions[0], refs, stmt, keys=True)
        if hit is not None and ((hit[0].name, hit[1]) == (people.person, people.key) or
                                (hit[0].name, hit[1]) in refers):
            out.append(agg)
    return out


def _count_persons(tree: exp.Select, stmt, catalog, refs: list[_Private], deepest: _Private, people,
                   counts: list[exp.Count]) -> exp.Select:
    """``COUNT(DISTINCT c.custkey) … FROM customers c JOIN orders o …`` as ``COUNT(*) FROM
    customers c WHERE c.orders__exists = 1``: the persons having a row of the deepest
    table's view, one row each in the person's view (its flag column, ``views.EXISTS``).
    Every other column must be the person table's: a child's column would ask which of a
    person's rows match, which the flags do not hold."""
    for agg in tree.find_all(exp.AggFunc):
        if agg not in counts and not any(agg in c.find_all(exp.AggFunc) for c in counts):
            raise UnsupportedQueryError(f"{snippet(agg, 60)} counts rows while COUNT(DISTINCT …) counts persons: "
                                        "they are answered from different views", position=stmt.pos(agg),
                                        hint="ask for them in two statements")
    person = next((r for r in refs if r.name == people.person), None)
    flag = _flag_condition(tree, stmt, refs, deepest, people)
    moved = flag[0] if flag is not None else []
    column = None
    table = people.person     # what the persons are counted from
    if flag is not None:
        column = flag_column(deepest.name, flag[1])
        if column not in catalog[people.person].column_names:
            # not a workload flag: the person's own columns and this flag, a table of its own
            # that the engine added for this statement to be measured on demand
            table = flag_table(people.person, column)
            if table not in catalog:
                raise UnsupportedQueryError(
                    f"no per-person flag of '{snippet(flag[1], 60)}' on {deepest.name!r} was measured: counting "
                    "persons with such rows needs one", position=stmt.pos(moved[0]),
                    hint="add this statement to [workload]: each COUNT(DISTINCT person) condition there on "
                         "another table's columns gets a measured 0/1 flag per person (sensitivity 1); a session "
                         "with SET dpsql.policy = 'measure' measures it on demand")
    for col in tree.find_all(exp.Column):
        if any(col in c.find_all(exp.Column) for c in counts) or col.find_ancestor(exp.Select) is not tree:
            continue
        if any(col in j.find_all(exp.Column) for j in tree.args.get("joins") or []):
            continue
        if any(col in m.find_all(exp.Column) for m in moved):
            continue
        hit = _resolve(col, refs, stmt, keys=True)
        if hit is not None and hit[0].name != people.person:
            raise UnsupportedQueryError(
                f"COUNT(DISTINCT …) of persons can group and filter by columns of {people.person!r} only, "
                f"not {snippet(col, 40)}", position=stmt.pos(col),
                hint="count persons by the person table's columns, or count rows with COUNT(*)")
    out = tree.copy()
    key = "from_" if "from_" in out.args else "from"
    alias = person.alias if person is not None else people.person
    node = person.node.copy() if person is not None else exp.to_table(people.person)
    if table != people.person:
        # the flag's table under the person's alias, so the person's columns read as written
        node = exp.Table(this=exp.to_identifier(table, quoted=True),
                         alias=exp.TableAlias(this=exp.to_identifier(alias, quoted=True)))
    out.set(key, exp.From(this=node))
    kept = [j for j in out.args.get("joins") or []
            if isinstance(j.this, exp.Subquery) or not getattr(_table_ref(j.this, catalog, stmt), "private", False)]
    out.set("joins", kept or None)
    for agg in list(out.find_all(exp.Count)):
        inner = agg.this
        if isinstance(inner, exp.Distinct) and len(inner.expressions) == 1 \
                and isinstance(inner.expressions[0], exp.Column):
            hit = _resolve(inner.expressions[0], refs, stmt, keys=True)
            if hit is not None and hit[1] in hit[0].keys:
                agg.set("this", exp.Star())
    if deepest.name != people.person:
        name = column if column is not None else f"{deepest.name}{_SEP}{_EXISTS}"
        cond = exp.EQ(this=exp.column(name, table=exp.to_identifier(alias, quoted=True), quoted=True),
                      expression=exp.Literal.number(1))
        where = out.args.get("where")
        if where is not None and moved:
            # the conditions on other tables' rows are the flag's: the rest stay
            kept_conds = [c for c, original in zip(conjuncts(where.this), conjuncts(tree.args["where"].this))
                          if not any(original is m for m in moved)]
            where = exp.Where(this=exp.and_(*kept_conds)) if kept_conds else None
        out.set("where", exp.Where(this=exp.and_(cond, where.this) if where is not None else cond))
    return out


def _rewrite(tree: exp.Select, stmt, catalog, refs: list[_Private], deepest: _Private, people) -> exp.Select:
    """``tree`` with the deepest table's view as FROM, the joins of private tables dropped
    (the view holds them) and every column of a private table renamed to its view column."""
    out = tree.copy()
    key = "from_" if "from_" in out.args else "from"
    out.set(key, exp.From(this=deepest.node.copy()))
    kept = [j for j in out.args.get("joins") or []
            if isinstance(j.this, exp.Subquery) or not getattr(_table_ref(j.this, catalog, stmt), "private", False)]
    out.set("joins", kept or None)
    # the statement's own select items keep their names: a bare column is aliased to it
    for item in list(out.expressions):
        if isinstance(item, exp.Column) and _resolve(item, refs, stmt, keys=False) is not None:
            item.replace(exp.alias_(item.copy(), exp.to_identifier(item.name, quoted=True)))
    alias = exp.to_identifier(deepest.alias, quoted=True)
    for col in list(out.find_all(exp.Column)):
        if col.find_ancestor(exp.Select) is not out:
            continue        # a nested query (IN (SELECT key FROM dim …)) reads public tables
        hit = _resolve(col, refs, stmt, keys=False)
        if hit is None:
            continue
        ref, name = hit
        col.set("this", exp.to_identifier(people.column(deepest.name, ref.name, name), quoted=True))
        col.set("table", alias.copy())
    return out
