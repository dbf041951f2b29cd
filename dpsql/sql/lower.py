"""Lowering: bound aggregates, predicates and groups → factored linear queries.

One block of a linear query is ``Kron([Q_1, …, Q_d])`` over the schema's attributes in
declared order (ICML 2019 appendix B.1, Table 2; thesis §3.4), built per attribute from
what the query asks of it:

* untouched → ``Total(n)`` (the 1 factor: marginalise out);
* restricted by a predicate term → ``Indicator(n, S)`` (e_S);
* summed → ``Values(n, v)`` (E), times the predicate's mask if both apply;
* grouped → ``Bucket(n, f)`` (R_f), with cells outside the predicate mapped to -1, or an
  ``Explicit`` weighted bucket matrix when the grouped attribute is also summed;
* the argument of a quantile → ``Identity(n)`` (I): the per-group histogram; the
  predicate's mask on it is applied in post-processing (cell masks per block).

Blocks are disjoint predicate terms; see ``query.py`` for how their rows add up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsql.linalg import Bucket, Explicit, Identity, Indicator, Kron, Total, Union, Values, Weighted
from dpsql.sql.grouping import Grouping
from dpsql.sql.query import LinearQuery, RowLayout

__all__ = ["QuerySpec", "build_linear_query"]


@dataclass
class QuerySpec:
    """What one linear query measures, before it becomes a matrix."""

    name: str
    kind: str                          # linear | quantile | offset
    terms: list[dict]                  # disjoint predicate terms (attr → cell mask)
    weight_attr: str | None = None     # attribute carrying the E factor (SUM)
    weights: np.ndarray | None = None  # per-cell values of the summed expression
    quantile_attr: str | None = None
    description: str = ""


def _factor(attr, mask, weights, group, quantile: bool):
    n = attr.size
    if quantile:
        return Identity(n)
    w = None if weights is None else np.asarray(weights, dtype=float)
    if mask is not None:
        w = mask.astype(float) if w is None else w * mask
    if group is not None:
        if w is None:
            return Bucket(n, group.mapping, buckets=group.buckets)
        if np.all((w == 0) | (w == 1)):
            mapping = np.where(w == 1, group.mapping, -1)
            return Bucket(n, mapping, buckets=group.buckets)
        dense = np.zeros((group.buckets, n))
        dense[group.mapping, np.arange(n)] = w
        return Explicit(dense)
    if w is None:
        return Total(n)
    if np.all(w == 1):
        return Total(n)
    if np.all((w == 0) | (w == 1)):
        return Indicator(n, w.astype(bool))
    return Values(n, w)


def build_linear_query(spec: QuerySpec, schema, grouping: Grouping) -> LinearQuery:
    """Assemble the Union of Weighted(Kron) blocks and its row layout."""
    groups = grouping.attr_map()
    attrs = schema.attributes
    terms = spec.terms
    zero = not terms
    if zero:
        # The predicate is never TRUE: keep the shape (one block) but weigh it 0.
        terms = [{}]
    blocks, masks = [], []
    touched: set[str] = set()
    for term in terms:
        factors = []
        for a in attrs:
            mask = term.get(a.name)
            weights = spec.weights if a.name == spec.weight_attr else None
            group = groups.get(a.name)
            is_q = a.name == spec.quantile_attr
            f = _factor(a, mask, weights, group, is_q)
            if not isinstance(f, Total):
                touched.add(a.name)
            factors.append(f)
        if spec.quantile_attr is not None:
            qa = next(a for a in attrs if a.name == spec.quantile_attr)
            m = term.get(qa.name)
            masks.append(np.ones(qa.size, bool) if m is None else m.copy())
        blocks.append(Weighted(0.0 if zero else 1.0, Kron(factors)))
    axes = []
    qmap = None
    for a in attrs:
        if a.name == spec.quantile_attr:
            axes.append((a.name, a.size))
            if a.name in groups:
                qmap = tuple(int(x) for x in groups[a.name].mapping)
        elif a.name in groups:
            axes.append((a.name, groups[a.name].buckets))
    layout = RowLayout(axes=tuple(axes), quantile_attr=spec.quantile_attr, quantile_group_map=qmap)
    return LinearQuery(name=spec.name, matrix=Union(blocks),
                       attributes=tuple(a.name for a in attrs if a.name in touched),
                       kind=spec.kind, description=spec.description, layout=layout,
                       blocks=len(blocks), cell_masks=tuple(masks) if masks else None, always_zero=zero,
                       offset_column=spec.weight_attr if spec.kind == "offset" else None)
