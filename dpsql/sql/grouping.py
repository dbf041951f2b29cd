"""GROUP BY keys → buckets of the declared domain (the R_f factor of ICML appendix Table 2).

Each key is an expression of one column: the column itself (one group per declared cell)
or a bucketing expression (``age / 10``, ``CASE WHEN … END``, ``width_bucket``, ``floor``),
evaluated on every cell (see ``cells.py``).  Keys on the same column are combined: a cell
belongs to the group of its tuple of key values.  Groups are enumerated from the domain,
so empty groups are returned (with zero counts) and nothing about the rows decides which
groups exist.

The WHERE clause is the one exception that removes groups, and it too reads only the
domain: a group is listed when at least one cell of it can make the WHERE TRUE (in
three-valued logic, so ``WHERE x IS NOT NULL`` drops the NULL group), and left out when no
cell can, as SQL would never produce a row for it.  A listed group whose count is zero
stays listed: whether it is empty is private.

Group order: groups are the C-order product over the grouped attributes in *domain* order
(that is the row order of the Kron product); within one attribute, buckets appear in the
order of the first cell that falls in them, so a bare column keeps its declared order
and numeric buckets are ascending.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sqlglot import exp

from dpsql.domain import Attribute
from dpsql.errors import UnsupportedQueryError
from dpsql.sql.cells import OTHER, CellEvaluator, DimRef, snippet
from dpsql.sql.scalars import common_type, type_name

__all__ = ["GroupKey", "GroupAttr", "Grouping", "key_value_type", "MAX_GROUPS"]

# Every group is returned (empty ones included), so a GROUP BY over many fine columns would
# produce a result nobody can read and a linear query nobody can answer accurately.
MAX_GROUPS = 1_000_000


@dataclass
class GroupKey:
    """One GROUP BY key: its canonical text, attribute and per-cell value."""

    canonical: str
    node: exp.Expr
    attr: Attribute
    values: list
    type: str
    # Wide bins are reported by label; ORDER BY must follow the bins, not the label text.
    sort_rank: dict | None = None


@dataclass
class GroupAttr:
    """All keys on one attribute, folded into one bucket mapping."""

    attr: Attribute
    keys: list[int]             # indices into Grouping.keys
    mapping: np.ndarray          # cell → bucket
    labels: list[tuple]          # bucket → tuple of key values (in ``keys`` order)

    @property
    def buckets(self) -> int:
        return len(self.labels)


def key_value_type(attr, values: list) -> str:
    """The type of a grouped expression's values on the cells: the rule of a CASE's or
    COALESCE's type over released values (``scalars.common_type``)."""
    # type_name reads only a value's type: one value of each type (1,459 labels, issue 35)
    one_of_each: dict[type, object] = {}
    for v in values:
        if v is not None and v is not OTHER:
            one_of_each.setdefault(type(v), v)
    return common_type(type_name(v) for v in one_of_each.values())


def column_key_values(attr) -> tuple[list, str]:
    """Per-cell output value of a bare grouped column: its label, as a number when exact."""
    labels = attr.labels()
    if attr.kind == "categorical":
        other = attr.other_index
        vals = ["(other)" if i == other else labels[i] for i in range(attr.size)]
        return vals, key_value_type(attr, [v for v in vals if v != "(other)"])
    bounds = attr.bin_bounds()
    if attr.kind == "integer" and all(b is None or b[0] == b[1] for b in bounds):
        return [None if b is None else int(b[0]) for b in bounds], "integer"
    if attr.kind == "date" and all(b is None or b[0] == b[1] for b in bounds):
        return [None if b is None else b[0] for b in bounds], "date"   # one day per cell: the day
    # Wide bins are reported by their label ("[20, 29]"): the value inside is not known.
    return list(labels), "text"


class Grouping:
    """The grouped attributes (domain order) and the enumeration of output groups."""

    def __init__(self, keys: list[GroupKey], schema, pos=None) -> None:
        self.keys = keys
        order = [a.name for a in schema.attributes]
        by_attr: dict[str, list[int]] = {}
        for i, k in enumerate(keys):
            by_attr.setdefault(k.attr.name, []).append(i)
        self.attrs: list[GroupAttr] = []
        for name in order:
            if name not in by_attr:
                continue
            idx = by_attr[name]
            attr = keys[idx[0]].attr
            seen: dict[tuple, int] = {}
            columns = [[_hashable(v) for v in keys[i].values[:attr.size]] for i in idx]
            # first appearance order (setdefault's len(seen) is read before it inserts)
            mapping = np.array([seen.setdefault(tup, len(seen)) for tup in zip(*columns)],
                               dtype=np.int64).reshape(attr.size)
            self.attrs.append(GroupAttr(attr=attr, keys=idx, mapping=mapping, labels=list(seen)))
        if self.size > MAX_GROUPS:
            sizes = " × ".join(f"{g.buckets} ({g.attr.name})" for g in self.attrs)
            raise UnsupportedQueryError(
                f"GROUP BY would produce {self.size:,} groups ({sizes}); the limit is {MAX_GROUPS:,}",
                position=pos(keys[0].node) if pos is not None and keys else None,
                hint="group by fewer or coarser columns, e.g. age / 10 instead of age")
        # Indices (in group order) of the groups that are output; see restrict().
        self.listed = np.arange(self.size)

    @property
    def size(self) -> int:
        n = 1
        for g in self.attrs:
            n *= g.buckets
        return n

    def restrict(self, terms: list[dict]) -> None:
        """List only the groups holding a cell of some WHERE term (see the module docstring).

        ``terms`` are the disjoint boxes of the WHERE's TRUE set (``predicates.py``): attribute
        → cell mask, an absent attribute unrestricted, ``[]`` for a WHERE never TRUE.  A box
        meets a group when, on every grouped attribute, one of its cells lies in the group's
        bucket.  Without GROUP BY the one group stays: SQL returns its row even then.
        """
        if not self.attrs:
            return
        ok = np.zeros(self.size, dtype=bool)
        seen: set[bytes] = set()
        for term in terms:
            per_attr = []
            for g in self.attrs:
                mask = term.get(g.attr.name)
                hit = np.zeros(g.buckets, dtype=bool)
                hit[g.mapping if mask is None else g.mapping[mask]] = True
                per_attr.append(hit)
            # Boxes that differ only off the grouped attributes meet the same groups.
            sig = b"|".join(h.tobytes() for h in per_attr)
            if sig in seen:
                continue
            seen.add(sig)
            box = per_attr[0]
            for h in per_attr[1:]:
                box = np.logical_and.outer(box, h)
            ok |= box.ravel()  # C order: the order of group_tuples
        self.listed = np.flatnonzero(ok)

    def group_tuples(self) -> list[tuple]:
        """Label tuples (in GROUP BY key order) for the listed groups, in group order."""
        # the listed groups' bucket per attribute (C order: the order of product(...)),
        # then each key's label column: no per-group loop (1,459 groups, issue 35)
        n = len(self.listed)
        cols: list[list] = [[None] * n for _ in self.keys]
        if self.attrs:
            index = np.unravel_index(np.asarray(self.listed, dtype=np.int64), [g.buckets for g in self.attrs])
            for g, buckets in zip(self.attrs, index):
                picked = [g.labels[b] for b in buckets.tolist()]
                for j, k in enumerate(g.keys):
                    cols[k] = [label[j] for label in picked]
        return list(zip(*cols)) if cols else [() for _ in range(n)]

    def attr_map(self) -> dict[str, GroupAttr]:
        return {g.attr.name: g for g in self.attrs}


def _hashable(v):
    return "(other)" if v is OTHER else v


def build_key(canonical: str, node: exp.Expr, attr, evaluator: CellEvaluator) -> GroupKey:
    """Evaluate a key expression on the cells of ``attr``."""
    inner = node.this if isinstance(node, exp.Paren) else node
    if isinstance(inner, exp.Column):
        values, typ = column_key_values(attr)
        rank = None
        if attr.kind != "categorical" and typ == "text":
            rank = {v: i for i, v in enumerate(values) if v is not None}
        return GroupKey(canonical, node, attr, values, typ, rank)
    if isinstance(inner, DimRef) and attr.is_key(inner.shown):
        # a joined key grouped as the bare column is (its "(other)" cell a group of its own)
        values, typ = column_key_values(attr.key_attr(inner.shown))
        return GroupKey(canonical, node, attr, [values[k] for k in attr.key_cells(inner.shown)], typ)
    values, null = evaluator.constant_values(node)
    values = [None if null[i] else values[i] for i in range(len(values))]
    if any(v is OTHER for v in values):
        raise UnsupportedQueryError(f"GROUP BY {snippet(node)} would need undeclared labels of '{attr.name}'",
                                    position=evaluator.pos(node), hint="map every label with CASE WHEN … ELSE")
    values = [int(v) if isinstance(v, float) and v.is_integer() and _integral(node) else v for v in values]
    return GroupKey(canonical, node, attr, values, key_value_type(attr, values))


def _integral(node) -> bool:
    # floor/ceil/width_bucket return integers in SQL even though Python computes floats.
    return isinstance(node, (exp.Floor, exp.Ceil, exp.WidthBucket))
