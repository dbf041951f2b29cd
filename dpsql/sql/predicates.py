"""Boolean predicates over several columns → a disjoint union of Kronecker terms.

A predicate restricts the data vector to the cells where it is TRUE.  For a conjunction
of one-column predicates that set is a box (a product of per-attribute cell sets), which
is one Kron term with an ``e_S`` (Indicator) factor per attribute (ICML 2019 appendix
Table 2).  A general boolean predicate (OR, NOT over several columns) is split into
connected components of its top-level conjunction; each component that couples several
attributes is evaluated in SQL's three-valued logic on the joint cells of just those
attributes and its TRUE set is cut into disjoint boxes.  Disjoint boxes make the
query's value the plain sum of the terms' values.

Three-valued logic (Kleene): every sub-predicate yields a TRUE mask and a FALSE mask;
NOT swaps them, AND/OR combine them, and only TRUE cells are counted.  So ``NOT (a = 'x')``
excludes the NULL cell of ``a``, as in SQL.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
from sqlglot import exp

from dpsql.domain import Attribute
from dpsql.errors import StatementTooComplexError, UnsupportedQueryError
from dpsql.sql.aggregates import is_aggregate
from dpsql.sql.cells import CellEvaluator, columns_in, conjuncts, snippet

__all__ = ["Term", "compile_predicate", "MAX_JOINT_CELLS"]

# A term maps attribute name → boolean mask over its cells; absent attributes are unrestricted.
Term = dict[str, np.ndarray]

# Joint evaluation of a coupled component materialises this many booleans at most; beyond
# it the predicate is refused rather than slowing every compile to a crawl.
MAX_JOINT_CELLS = 4_000_000
#: Terms × joint cells one coupled predicate may evaluate (numpy work, ~0.2 s).
MAX_JOINT_WORK = 200_000_000
_PERMUTE_CELLS = 100_000


def _all_of(parts: list[exp.Expr]) -> exp.Expr:
    """AND of ``parts`` as a balanced tree (a left-deep chain of thousands of conjuncts would
    recurse once per conjunct when evaluated)."""
    level = list(parts)
    while len(level) > 1:
        nxt: list[exp.Expr] = [exp.And(this=level[i], expression=level[i + 1]) for i in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


class _Compiler:
    def __init__(self, resolve: Callable[[exp.Column], Attribute],
                 evaluator: Callable[[object], CellEvaluator], pos, any_attr) -> None:
        self.any_attr = any_attr
        self.resolve = resolve
        self.evaluator = evaluator
        self.pos = pos

    def attrs(self, node) -> list:
        seen: dict[str, Attribute] = {}
        for col in columns_in(node):
            a = self.resolve(col)
            seen.setdefault(a.name, a)
        return list(seen.values())

    def joint(self, node, order: list, sizes: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """(TRUE, FALSE) of ``node`` broadcastable over the grid of ``order``."""
        if isinstance(node, exp.Paren):
            return self.joint(node.this, order, sizes)
        if isinstance(node, exp.Not):
            t, f = self.joint(node.this, order, sizes)
            return f, t
        if isinstance(node, (exp.And, exp.Or)):
            t1, f1 = self.joint(node.this, order, sizes)
            t2, f2 = self.joint(node.expression, order, sizes)
            if isinstance(node, exp.And):
                return t1 & t2, f1 | f2
            return t1 | t2, f1 & f2
        if isinstance(node, exp.Is) and isinstance(node.expression, exp.Boolean):
            t, f = self.joint(node.this, order, sizes)       # IS [NOT] TRUE/FALSE: never UNKNOWN
            hit = t if node.expression.this else f
            return (~hit, hit) if node.args.get("negate") else (hit, ~hit)
        attrs = self.attrs(node)
        if len(attrs) > 1:
            raise UnsupportedQueryError(f"'{snippet(node)}' compares columns with each other",
                                        position=self.pos(node),
                                        hint="compare each column with constants; combine with AND/OR")
        shape = [1] * len(order)
        if not attrs:
            if any(is_aggregate(n) for n in node.walk()):
                raise UnsupportedQueryError("aggregate functions are not allowed in WHERE or FILTER",
                                            position=self.pos(node), hint="move the condition to HAVING")
            # A constant predicate has the same truth value on every cell of any attribute.
            t, f = self.evaluator(self.any_attr).truth(node)
            return np.full(shape, bool(t[0])), np.full(shape, bool(f[0]))
        names = [a.name for a in order]
        axis = names.index(attrs[0].name)
        t, f = self.evaluator(attrs[0]).truth(node)
        shape[axis] = sizes[axis]
        return t.reshape(shape), f.reshape(shape)


def _boxes(mask: np.ndarray, names: list[str]) -> list[Term]:
    """Disjoint boxes covering the TRUE cells of ``mask`` (axes named by ``names``)."""
    if not mask.any():
        return []
    if len(names) == 1:
        return [{names[0]: mask.copy()}]
    flat = mask.reshape(mask.shape[0], -1)
    # Cells of the first attribute with the same slice over the others share their boxes;
    # hashing packed rows is far cheaper than np.unique(axis=0) on wide boolean rows.
    packed = np.packbits(flat, axis=1)
    same: dict[bytes, list[int]] = {}
    for i in range(flat.shape[0]):
        same.setdefault(packed[i].tobytes(), []).append(i)
    out: list[Term] = []
    for cells in same.values():
        pattern = flat[cells[0]]
        if not pattern.any():
            continue
        rows = np.zeros(flat.shape[0], dtype=bool)
        rows[cells] = True
        for sub in _boxes(pattern.reshape(mask.shape[1:]), names[1:]):
            out.append({names[0]: rows, **sub})
    return out


def _fewest_boxes(mask: np.ndarray, names: list[str]) -> list[Term]:
    """Disjoint boxes, trying every attribute order when that is cheap.

    The split depends on which attribute is peeled first (``a OR b`` is 2 boxes one way and
    may be more the other); fewer boxes mean fewer workload rows for the planner.
    """
    if len(names) > 3 or mask.size > _PERMUTE_CELLS:
        return _boxes(mask, names)
    best: list[Term] = []
    for order in itertools.permutations(range(len(names))):   # one order at least
        boxes = _boxes(np.transpose(mask, order), [names[i] for i in order])
        if not best or len(boxes) < len(best):
            best = boxes
    return best


def compile_predicate(node: exp.Expr | None, resolve, evaluator, pos, any_attr) -> list[Term]:
    """Disjoint terms whose union is the TRUE set of ``node`` (``[{}]`` when no predicate).

    ``resolve`` maps a column node to its Attribute, ``evaluator`` an Attribute to its
    :class:`CellEvaluator`, ``pos`` a node to its SQL position; ``any_attr`` (any attribute
    of the table) evaluates constant conjuncts such as ``1 = 1``.  An empty list means the
    predicate is never TRUE.
    """
    if node is None:
        return [{}]
    comp = _Compiler(resolve, evaluator, pos, any_attr)
    conj = conjuncts(node)
    # Union-find on attributes: conjuncts sharing a column belong to one component.
    parent: dict[str, str] = {}

    def find(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    by_conj = []
    constant_parts = []
    for c in conj:
        attrs = comp.attrs(c)
        by_conj.append(attrs)
        if not attrs:
            constant_parts.append(c)
        for a in attrs:
            parent.setdefault(a.name, a.name)
        for a in attrs[1:]:
            parent[find(a.name)] = find(attrs[0].name)
    for c in constant_parts:
        t, _ = comp.joint(c, [], [])
        if not bool(t):
            return []
    components: dict[str, list] = {}
    comp_attrs: dict[str, dict] = {}
    for c, attrs in zip(conj, by_conj):
        if not attrs:
            continue
        root = find(attrs[0].name)
        components.setdefault(root, []).append(c)
        bucket = comp_attrs.setdefault(root, {})
        for a in attrs:
            bucket.setdefault(a.name, a)
    terms: list[Term] = [{}]
    for root, parts in components.items():
        attrs = list(comp_attrs[root].values())
        expr = _all_of(parts)
        if len(attrs) == 1:
            t, _ = evaluator(attrs[0]).truth(expr)
            pieces = [{attrs[0].name: t}] if t.any() else []
        else:
            sizes = [a.size for a in attrs]
            total = int(np.prod(sizes, dtype=float))
            if total > MAX_JOINT_CELLS:
                raise UnsupportedQueryError(
                    f"the predicate couples columns {', '.join(a.name for a in attrs)} whose joint domain "
                    f"has {total:,} cells (limit {MAX_JOINT_CELLS:,})", position=pos(expr),
                    hint="split the OR into separate queries, or use columns with coarser domains")
            leaves = sum(1 for n in expr.walk() if not isinstance(n, (exp.And, exp.Or, exp.Not, exp.Paren)))
            if leaves * total > MAX_JOINT_WORK:
                raise StatementTooComplexError(
                    f"statement too complex: a predicate of {leaves:,} terms over the {total:,}-cell joint domain "
                    f"of {', '.join(a.name for a in attrs)}", position=pos(expr),
                    hint="split the OR into separate queries, or use IN (…) for lists of values")
            t, _ = comp.joint(expr, attrs, sizes)
            t = np.broadcast_to(t, sizes)
            pieces = _fewest_boxes(t, [a.name for a in attrs])
        if not pieces:
            return []
        terms = [{**old, **new} for old in terms for new in pieces]
    return terms
