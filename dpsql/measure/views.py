"""Person views: the join path from the person table to a private table, as one relation.

A *people schema* (``[people]`` in dpsql.toml, ``docs/config.md``) declares private tables
linked by keys — customers ← orders ← lineitem — and the primary private relation, the
*person* (customers).  Each private table T is measured through its **view**: the inner
join along the declared keys from the person to T, one row per row of T that reaches a
person, carrying the person's key (PrivateSQL, VLDB 2019, §4).  The view is bounded per
person by the keyed-hash truncation that bounds ``max_rows`` within one table
(``sqlgen.bounded``): at most ``max_rows`` view rows per person are kept, so adding or
removing one person and all their rows changes the view by at most that many rows, on every
engine alike (``docs/privacy.md`` §2a).

This module only builds public things: the join relation (a sqlglot AST over the member
tables' scans) and the view's description and content fingerprint.  A view is one
:class:`~dpsql.measure.source.Source` to the rest of dpsql (``Source.view``), so every
measurement path — the schema check, the cells query, bounding, GROUPING SETS — runs on it
unchanged.

Keys are compared by their text (``CAST(… AS VARCHAR)``): the id types a person key may have
(integers, text, UUIDs: ``reader.accepts_id``) write the same text on DuckDB, PostgreSQL and
Spark, so the same rows join everywhere whatever integer width each table declares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

from dpsql.plan.views import GroupBound
from dpsql.sql.syntax import exp


class HopSource(Protocol):
    """What a view needs of a hop's source (``dpsql.measure.source.Source`` is one): how it
    is read and which content it holds.  A protocol, so this module stays below ``source``
    (which holds a ``View``) instead of the two importing each other."""

    def describe(self) -> dict: ...

    def fingerprint(self, store: Path | None = None) -> dict: ...


#: The hops' source type (``Source`` in use): views are generic in it, so the backends read
#: each hop's full ``Source`` while this module never imports it.
S = TypeVar("S", bound=HopSource)

#: The view's column holding the person's key (the privacy unit id of the view).
PERSON = "__person"
#: Separator of an ancestor table's attributes in a view: ``customers__segment``.
SEP = "__"


@dataclass(frozen=True)
class Hop(Generic[S]):
    """One table on a view's path (the person first).

    ``columns``: (source column, view column) for each declared attribute read from this
    table; ``key``: this table's column equal to the parent's ``parent_key`` (None for the
    person); ``own_key``: this table's primary key, joined to by the next hop."""

    table: str
    source: S
    columns: tuple[tuple[str, str], ...]
    key: str | None = None
    parent_key: str | None = None


#: The person view's flag column of table T: 1 when the person has a row of T's view.
EXISTS = "exists"


@dataclass(frozen=True)
class View(Generic[S]):
    """The join path from the person to ``table`` with its per-person row bound.

    ``exists`` (the person's own view only): for each other table T, the hops from the
    person's child down to T; the view then has a column ``T__exists``, 1 when the person
    has a row of T's view and 0 otherwise — a function of that person's rows alone, so
    counting persons with an order (``COUNT(DISTINCT custkey)``) is a count of this view's
    rows, one per person.

    ``groups``: the view's per-person group bound (``[people.tables.T] group_by``,
    ``max_groups``, ``max_rows_per_group``), enforced by the same keyed-hash truncation
    (``sqlgen.bounded``) before ``max_rows``; None when only ``max_rows`` bounds it."""

    table: str
    hops: tuple[Hop[S], ...]
    person_key: str
    max_rows: int
    exists: tuple[tuple[str, tuple[Hop[S], ...]], ...] = ()
    groups: GroupBound | None = None
    # (the person's own view only) per-person flags of conditions on other tables: (column,
    # the view of the table the condition reads, the condition over that view's columns);
    # the column is 1 when the person has a row of that view satisfying it
    filters: tuple[tuple[str, View[S], exp.Expr], ...] = ()

    @property
    def path(self) -> tuple[str, ...]:
        return tuple(h.table for h in self.hops)

    @property
    def members(self) -> tuple[Hop[S], ...]:
        """Every table read, in the order :meth:`relation` takes their scans."""
        return self.hops + tuple(h for _, hops in self.exists for h in hops) + \
            tuple(h for _, view, _ in self.filters for h in view.members)

    def relation(self, scans: Sequence[exp.Expr]) -> exp.Select:
        """``SELECT t0.<person key> AS __person, tI.<col> AS <view col>, … FROM scan0 AS t0
        JOIN scan1 AS t1 ON CAST(t1.fk AS VARCHAR) = CAST(t0.pk AS VARCHAR) …``: every row of
        the last table that reaches a person, with the attributes of every table on the path
        (inner joins: a row whose key is NULL or matches no parent reaches nobody and is not
        counted, as a row without an id is not under ``max_rows``)."""
        if len(scans) != len(self.members):
            raise ValueError("one scan per member table")
        alias = [f"__t{i}" for i in range(len(self.hops))]

        def col(i: int, name: str) -> exp.Column:
            return exp.column(name, table=alias[i], quoted=True)

        cols: list[exp.Expr] = [exp.alias_(col(0, self.person_key), PERSON, quoted=True)]
        for i, hop in enumerate(self.hops):
            cols.extend(exp.alias_(col(i, src), view, quoted=True) for src, view in hop.columns)
        select = exp.select(*cols).from_(exp.alias_(_table_expr(scans[0]), alias[0]))
        for i in range(1, len(self.hops)):
            hop = self.hops[i]
            if hop.key is None or hop.parent_key is None:
                raise ValueError(f"hop {hop.table!r} names no keys")
            on = exp.EQ(this=exp.cast(col(i, hop.key), "VARCHAR"),
                        expression=exp.cast(col(i - 1, hop.parent_key), "VARCHAR"))
            select = select.join(exp.alias_(_table_expr(scans[i]), alias[i]), on=on, join_type="INNER")
        at = len(self.hops)
        for j, (table, hops) in enumerate(self.exists):
            # the persons having a row of table's view: DISTINCT keys of its path below the
            # person, LEFT JOINed to the person (a key matching none gives 0)
            found = f"__x{j}"
            sub = _keys_below(hops, scans[at:at + len(hops)], j)
            at += len(hops)
            on = exp.EQ(this=exp.column("__k", table=found), expression=exp.cast(col(0, self.person_key), "VARCHAR"))
            select = select.join(exp.alias_(exp.Subquery(this=sub), found), on=on, join_type="LEFT")
            flag = exp.Case().when(exp.Is(this=exp.column("__k", table=found), expression=exp.Null()),
                                   exp.Literal.number(0)).else_(exp.Literal.number(1))
            select = select.select(exp.alias_(flag, f"{table}{SEP}{EXISTS}", quoted=True))
        for j, (column, view, condition) in enumerate(self.filters):
            # the persons having a row of view satisfying condition (its columns are the view's):
            # a function of each person's own rows, LEFT JOINed to the person (none gives 0)
            found = f"__f{j}"
            n = len(view.members)
            inner = exp.alias_(exp.Subquery(this=view.relation(scans[at:at + n])), f"__fv{j}")
            at += n
            sub = (exp.select(exp.alias_(exp.cast(exp.column(PERSON, quoted=True), "VARCHAR"), "__k"))
                   .from_(inner).where(condition.copy()).distinct())
            on = exp.EQ(this=exp.column("__k", table=found), expression=exp.cast(col(0, self.person_key), "VARCHAR"))
            select = select.join(exp.alias_(exp.Subquery(this=sub), found), on=on, join_type="LEFT")
            flag = exp.Case().when(exp.Is(this=exp.column("__k", table=found), expression=exp.Null()),
                                   exp.Literal.number(0)).else_(exp.Literal.number(1))
            select = select.select(exp.alias_(flag, column, quoted=True))
        return select

    def describe(self) -> dict:
        """How the view is read (public): part of the release identity of its table."""
        def hop(h: Hop[S]) -> dict:
            return {"table": h.table, "key": h.key, "parent_key": h.parent_key,
                    "columns": [list(c) for c in h.columns], "read": h.source.describe()}
        out: dict = {"kind": "view", "person_key": self.person_key, "max_rows": self.max_rows,
                     "hops": [hop(h) for h in self.hops]}
        if self.groups is not None:
            out["groups"] = self.groups.describe()
        if self.exists:
            out["exists"] = [[t, [hop(h) for h in hops]] for t, hops in self.exists]
        if self.filters:
            out["filters"] = [[c, v.describe(), cond.sql(dialect="postgres")] for c, v, cond in self.filters]
        return out

    def fingerprint(self, store: Path | None = None) -> dict:
        """The content of every table read (file sources; others need their engine)."""
        return {h.table: h.source.fingerprint(store) for h in self.members}


def _keys_below(hops: Sequence[Hop[S]], scans: Sequence[exp.Expr], j: int) -> exp.Select:
    """``SELECT DISTINCT CAST(e0.<key to the person> AS VARCHAR) AS __k FROM e0 JOIN e1 …``
    along ``hops`` (the first references the person)."""
    alias = [f"__e{j}_{i}" for i in range(len(hops))]
    first = hops[0]
    if first.key is None:
        raise ValueError(f"hop {first.table!r} names no key")
    sub = exp.select(exp.alias_(exp.cast(exp.column(first.key, table=alias[0], quoted=True), "VARCHAR"), "__k"))
    sub = sub.from_(exp.alias_(_table_expr(scans[0]), alias[0])).distinct()
    for i in range(1, len(hops)):
        hop = hops[i]
        if hop.key is None or hop.parent_key is None:
            raise ValueError(f"hop {hop.table!r} names no keys")
        on = exp.EQ(this=exp.cast(exp.column(hop.key, table=alias[i], quoted=True), "VARCHAR"),
                    expression=exp.cast(exp.column(hop.parent_key, table=alias[i - 1], quoted=True), "VARCHAR"))
        sub = sub.join(exp.alias_(_table_expr(scans[i]), alias[i]), on=on, join_type="INNER")
    return sub


def _table_expr(scan: exp.Expr) -> exp.Expr:
    """A scan usable with an alias: table references and table functions as they are, a
    query as a subquery."""
    if isinstance(scan, exp.Alias):
        scan = scan.this
    if isinstance(scan, exp.Select):
        return exp.Subquery(this=scan)
    return scan.copy()


__all__ = ["Hop", "HopSource", "View", "PERSON", "SEP", "EXISTS"]
