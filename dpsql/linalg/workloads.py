"""Workload constructors and the flattening the planner relies on.

* :func:`Marginals` builds a marginal workload: one block per clique, the Kron with
  I on the clique's attributes and 1 (Total) elsewhere (ICML appendix B.1;
  thesis §3.6 represents the same workload by its clique weights).
* :func:`kron_terms` flattens a tree of Union / Weighted / Kron into the weighted
  Kronecker terms Σ_j w_j 𝕎_j of thesis eq. (3.3), which is the form OPT_⊗, OPT_+
  and OPT_M consume; :func:`is_kron_union` tells whether a matrix has that form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from dpsql.errors import ProgrammingError, UnknownColumnError
from dpsql.linalg.base import QueryMatrix, Weighted, check_weight
from dpsql.linalg.composite import Kron, Union
from dpsql.linalg.leaves import Identity, Total, _check_size

__all__ = ["Marginals", "kron_terms", "is_kron_union", "dense_factors", "to_dense_factors"]

# A Domain (by duck typing: linalg must not import dpsql.domain), a mapping from names to
# sizes, or (name, size) pairs in domain order.
DomainSizes = Any


def _domain_pairs(domain_sizes: DomainSizes) -> list[tuple[str, int]]:
    # Accept a dsql.domain.Domain by duck typing: linalg sits beside domain in the
    # import order and must not import it.
    if hasattr(domain_sizes, "attributes") and hasattr(domain_sizes, "shape"):
        pairs = list(zip(domain_sizes.attributes, domain_sizes.shape))
    elif isinstance(domain_sizes, Mapping):
        pairs = list(domain_sizes.items())
    else:
        pairs = [tuple(p) for p in domain_sizes]
    names = [str(name) for name, _ in pairs]
    if len(set(names)) != len(names):
        raise ProgrammingError(f"duplicate attribute names in domain {names}",
                               hint="each attribute may appear once")
    return [(str(name), _check_size(size, f"size of {name!r}")) for name, size in pairs]


def Marginals(domain_sizes: DomainSizes, cliques: Iterable[Iterable[str]],  # noqa: N802 - a constructor
              weights: Iterable[float] | None = None) -> Union:
    """Union over cliques of ``Weighted(w, Kron([I or Total per attribute]))``.

    ``domain_sizes``: dict or sequence of (name, size) pairs in domain order (a
    ``Domain`` also works).  ``cliques``: tuples of attribute names (order
    irrelevant; the Kron factors follow domain order).  ``weights``: one per
    clique, default 1.0.
    """
    pairs = _domain_pairs(domain_sizes)
    known = {name for name, _ in pairs}
    cliques = [tuple(c) if not isinstance(c, str) else (c,) for c in cliques]
    if not cliques:
        raise ProgrammingError("Marginals needs at least one clique",
                               hint="pass e.g. [('age',), ('age', 'sex')]")
    if weights is None:
        weights = [1.0] * len(cliques)
    weights = [check_weight(w) for w in weights]
    if len(weights) != len(cliques):
        raise ProgrammingError(f"{len(weights)} weights for {len(cliques)} cliques",
                               hint="give one weight per clique or none")
    blocks = []
    for clique, w in zip(cliques, weights):
        for attr in clique:
            if attr not in known:
                raise UnknownColumnError(f"clique {clique} names unknown attribute {attr!r}",
                                         hint="attributes: " + ", ".join(sorted(known)))
        factors = [Identity(n) if name in clique else Total(n) for name, n in pairs]
        blocks.append(Weighted(w, Kron(factors)))
    return Union(blocks)


def kron_terms(M: QueryMatrix) -> list[tuple[float, list[QueryMatrix]]]:
    """Flatten Union / Weighted / Kron into [(w_j, [Q_1^(j), …, Q_d^(j)]), …].

    Row blocks keep their order (so term j's rows are rows of M in order), weights
    multiply through, nested Krons are spliced by associativity (Prop. 11) and
    weights on Kron factors are pulled out (c·A ⊗ B = c·(A ⊗ B)).  Any other matrix
    (a leaf, Sum, Product, Transpose) is one term with one factor.
    """
    out: list[tuple[float, list[QueryMatrix]]] = []

    def visit(node: QueryMatrix, w: float) -> None:
        if isinstance(node, Union):
            for b in node.blocks:
                visit(b, w)
        elif isinstance(node, Weighted):
            visit(node.base, w * node.weight)
        elif isinstance(node, Kron):
            scale, factors = _flatten_kron(node)
            out.append((w * scale, factors))
        else:
            out.append((w, [node]))

    if not isinstance(M, QueryMatrix):
        raise ProgrammingError(f"kron_terms needs a QueryMatrix, got {type(M).__name__}",
                               hint="build workloads from dpsql.linalg matrices")
    visit(M, 1.0)
    return out


def _flatten_kron(node: Kron) -> tuple[float, list[QueryMatrix]]:
    scale, factors = 1.0, []
    for f in node.factors:
        while isinstance(f, Weighted):
            scale *= f.weight
            f = f.base
        if isinstance(f, Kron):
            s, inner = _flatten_kron(f)
            scale *= s
            factors.extend(inner)
        else:
            factors.append(f)
    return scale, factors


def is_kron_union(M: QueryMatrix, attribute_sizes: Iterable[int] | None = None) -> bool:
    """True iff ``kron_terms(M)`` is a union of Krons with aligned factors.

    Aligned means every term has the same number of factors with the same column
    counts (and, when ``attribute_sizes`` is given, those counts equal it), so
    factor i of every term acts on attribute i.
    """
    if not isinstance(M, QueryMatrix):
        return False
    terms = kron_terms(M)
    widths = [tuple(f.shape[1] for f in factors) for _, factors in terms]
    if len(set(widths)) != 1:
        return False
    if attribute_sizes is not None and widths[0] != tuple(int(n) for n in attribute_sizes):
        return False
    return True


def dense_factors(M: QueryMatrix) -> list[tuple[float, list[np.ndarray]]]:
    """``kron_terms`` with every factor materialised: [(w, [ndarray, …]), …]."""
    return [(w, [f.dense() for f in factors]) for w, factors in kron_terms(M)]


#: The name used in the linalg issue; same function.
to_dense_factors = dense_factors
