"""The cells of a join and their expansion back to the private table's cells (issue 31).

:class:`JoinedAttribute` is what a key column of the private table becomes while a joined
statement compiles (``dpsql.sql.joins``): one cell per (key cell, joined dimension row)
pair, each holding one value of every joined column.  :func:`expand_linear` multiplies each
linear query's factor F on it by the public 0/1 expansion E (E[(k, d), k] = 1), so the
query is W·x over the private table's own declared cells: post-processing of its histogram
(docs/privacy.md §7.4).  A composite key's F·E lives on the product of its columns' cells
and is written back as a sum of Kronecker terms, one block per cell combination of the
columns folded away while compiling (a linear query's blocks are summed, ``dpsql.sql.query``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from sqlglot import exp

from dpsql.errors import UnsupportedQueryError
from dpsql.linalg import Bucket, Explicit, Indicator, Kron, Total, Union, Values, Weighted

__all__ = ["JoinedAttribute", "folded_part", "expand_linear", "expand", "on_marker", "guard"]


@dataclass
class JoinedAttribute:
    """The cells of a join hanging from key attribute ``key`` (see the module docstring):
    ``source[j]`` is the key cell of joined cell j, ``values[shown][j]`` the value of a
    column there.  Duck-types the parts of ``Attribute`` the compiler reads.

    A composite key (several columns of the private table, ``parts``) hangs its joins from
    all of them: ``parts`` lists each key attribute with its cell per joined cell, ``key``
    being the one that stands for them in the compiled query (the others are folded to one
    cell there, :func:`folded_part`, and expanded again by :func:`expand_linear`)."""

    key: Any
    source: np.ndarray
    values: dict[str, list]
    kind: str = "joined"
    nullable: bool = False
    null_index: None = None
    other_index: None = None
    parts: tuple = ()
    # shown name of a private key column (``f.origin``) → its index in ``parts``
    key_of: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.key.name

    @property
    def size(self) -> int:
        return len(self.source)

    def labels(self) -> list:
        if len(self.parts) > 1:
            labels = [a.labels() for a, _ in self.parts]
            return ["/".join(str(lab[c[j]]) for lab, (_, c) in zip(labels, self.parts)) + f"·{j}"
                    for j in range(self.size)]
        keys = self.key.labels()
        return [f"{keys[k]}·{j}" for j, k in enumerate(self.source)]

    def bin_bounds(self):
        return None

    def cell_values(self):
        return None

    def column(self, shown: str) -> list:
        return self.values[shown]

    def is_key(self, shown: str) -> bool:
        """Does ``shown`` name a private key column itself (not a joined table's)?"""
        return shown in self.key_of

    def key_attr(self, shown: str):
        """The private key attribute ``shown`` names (:meth:`is_key`)."""
        return self.parts[self.key_of[shown]][0]

    def key_cells(self, shown: str) -> np.ndarray:
        """Per joined cell, the cell of the private key column ``shown`` names."""
        return self.parts[self.key_of[shown]][1]

    @property
    def others(self) -> tuple[str, ...]:
        """The names of a composite key's attributes folded into this one."""
        return tuple(a.name for a, _ in self.parts if a.name != self.key.name)


def folded_part(attr) -> JoinedAttribute:
    """A composite key's attribute other than the one its join hangs from, in the compiled
    query: one cell (its values live in the joined attribute)."""
    return JoinedAttribute(attr, np.zeros(1, dtype=np.int64), {}, parts=((attr, np.zeros(1, dtype=np.int64)),))


def _compose(factor, attr: JoinedAttribute):
    """``factor`` (m × joined cells) times the expansion E: m × the key's cells."""
    n = attr.key.size
    dense = np.asarray(factor.dense(), dtype=float)
    out = np.zeros((dense.shape[0], n))
    np.add.at(out.T, attr.source, dense.T)
    return _leaf(out, factor)


def _leaf(out: np.ndarray, factor):
    """The structured matrix ``out`` (m × n) is: a total, an indicator or weights for one
    row, a bucketing like ``factor``'s, else explicit."""
    n = out.shape[1]
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


def _compose_parts(factor, attr: JoinedAttribute, scale: float) -> list[dict]:
    """For a composite key: ``factor`` times E as a sum of Kronecker terms, one per cell
    combination c of the folded attributes with a non-zero slice — the factor on the key
    attribute is that slice (m × its cells), the folded ones one-hot rows for c — so each
    term is a block of the linear query (its blocks' rows are summed, ``dpsql.sql.query``)."""
    dense = np.asarray(factor.dense(), dtype=float) * scale
    folded = [(a, cells) for a, cells in attr.parts if a.name != attr.key.name]
    sizes = tuple(a.size for a, _ in folded)
    flat = np.ravel_multi_index(tuple(cells for _, cells in folded), sizes)
    out = np.zeros((attr.key.size, int(np.prod(sizes)), dense.shape[0]))
    np.add.at(out, (attr.source, flat), dense.T)
    terms: list[dict] = []
    for c in range(out.shape[1]):
        if not out[:, c].any() and (terms or c < out.shape[1] - 1):
            continue             # a zero term adds nothing (one is kept: a query has a block)
        combo = np.unravel_index(c, sizes)
        term = {attr.key.name: _leaf(out[:, c].T, factor)}
        for (a, _), i in zip(folded, combo):
            term[a.name] = Indicator(a.size, np.arange(a.size) == i)
        terms.append(term)
    return terms


def expand_linear(lq, schema, joined: dict[str, JoinedAttribute]):
    """A linear query built over the joined attributes, over ``schema`` (the private
    table's declared domain): each factor on a joined attribute times its expansion (a
    composite key's: one block per cell combination of its folded attributes)."""
    names = [a.name for a in schema.attributes]
    blocks = []
    masks = []
    touched = set(lq.attributes)
    for b, block in enumerate(lq.matrix.blocks):
        terms: list[list] = [list(block.base.factors)]
        for a, attr in joined.items():
            i = names.index(a)
            if len(attr.parts) <= 1:
                terms = [fs[:i] + [_compose(fs[i], attr)] + fs[i + 1:] for fs in terms]
                continue
            if lq.layout.quantile_attr in (a,) + attr.others:
                raise UnsupportedQueryError(f"a quantile of '{lq.layout.quantile_attr}' over a join on several key "
                                            "columns is not supported", hint="join on one key column")
            expanded = []
            for fs in terms:
                # a folded attribute's factor is one cell wide: a weight, if anything
                scale = float(np.prod([np.asarray(fs[names.index(o)].dense(), dtype=float).flat[0]
                                       for o in attr.others]))
                for term in _compose_parts(fs[i], attr, scale):
                    expanded.append([term.get(n, f) for n, f in zip(names, fs)])
            terms = expanded
        for fs in terms:
            # an INNER join restricts (or repeats) its key's cells even where the query reads
            # nothing of it: the composed factor is then no longer the all-ones Total
            touched |= {a for a, f in zip(names, fs) if not isinstance(f, Total)}
            blocks.append(Weighted(block.weight, Kron(fs)))
            if lq.cell_masks is not None:
                masks.append(lq.cell_masks[b])
    return replace(lq, matrix=Union(blocks), attributes=tuple(a for a in names if a in touched), blocks=len(blocks),
                   cell_masks=tuple(masks) if lq.cell_masks is not None else None)


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


def on_marker(alias: str) -> str:
    """The joined column telling, for a LEFT join whose ON reads the private table, whether
    a joined cell is a matching row (1), the all-NULL row of a key that has matching rows
    (0), or that of a key with none (2) (``joins._expand_key`` writes it)."""
    return f"ON({alias})"


def guard(alias: str, right: int, conditions) -> exp.Expr:
    """The WHERE conjunct of a LEFT join's ON conditions on the private table, C: a private
    row joins the matching rows where C is TRUE and the all-NULL row where it is not (FALSE
    or NULL), as SQL's ``LEFT JOIN d ON k = d.k AND C`` does; a key with no match joins the
    all-NULL row whatever C says.  Each term reads a public per-cell value of the joined
    attribute (:func:`on_marker`) or private columns, so the query stays W·x on the private
    histogram (docs/privacy.md §7.4).  The marker is a stand-in column (meta
    ``dpsql_guard`` = the joined table's index) that ``joins._rewrite`` makes a DimRef."""
    mark = exp.Column(this=exp.to_identifier(on_marker(alias), quoted=True))
    mark.meta["dpsql_guard"] = right

    def is_(n: int) -> exp.Expr:
        return exp.EQ(this=mark.copy(), expression=exp.Literal.number(n))
    cond = exp.Paren(this=exp.and_(*[c.copy() for c in conditions]))
    not_true = exp.Not(this=exp.Is(this=cond.copy(), expression=exp.Boolean(this=True)))
    return exp.Paren(this=exp.or_(is_(2), exp.and_(is_(1), cond.copy()), exp.and_(is_(0), not_true)))
