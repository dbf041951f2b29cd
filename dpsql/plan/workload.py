"""Workloads as the planner sees them: a union of weighted Kronecker products of grams.

HDMM never needs the rows of a workload, only its Gram matrix WᵀW (thesis Prop. 9, §3.5):
for W = w_1 W_1 + ... + w_k W_k with W_j = W_j1 ⊗ ... ⊗ W_jd (Eq. 3.3) the optimisers and
the error model work on the small per-attribute grams V_ji = W_jiᵀ W_ji and on the number of
rows of each factor (for RMSE).  :func:`workload_terms` performs that flattening once, from a
:class:`Workload` (a ``dpsql.linalg`` ``Union`` of ``Weighted(Kron)`` blocks aligned with the
domain), a bare 1-D ``dpsql.linalg`` matrix, or a dense array (tests, explicit workloads).

Each factor gram is also summarised by its projection onto span{I, 1} (thesis Theorem 8):
``beta`` (the I coefficient) and ``mean = sum(V)/n`` (the eigenvalue on the ones vector).
The marginals algebra (:mod:`dpsql.plan.marginals`) needs only these two numbers.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cached_property
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpsql.errors import UnsupportedQueryError
from dpsql.linalg import QueryMatrix, Union, kron_terms
from dpsql.plan.gram import LARGE_CELLS, LowRankGram, RangeGram, gram_trace
from dpsql.plan.objective import query_parts

__all__ = ["Workload", "KronTerm", "WorkloadTerms", "workload_terms", "factor_dense",
           "factor_gram", "LargeAttributeError", "THIN_ROWS"]


@dataclass(frozen=True, eq=False)
class Workload:
    """A workload over ``domain``: ``matrix`` is a Union of Weighted(Kron) blocks whose Kron
    factors align with ``domain.attributes`` (docs/architecture.md, ``dpsql.plan``)."""

    domain: Any
    matrix: Any
    parts: tuple = ()          # objective.QueryPart per query, when built by of_queries

    @classmethod
    def of_queries(cls, domain: Any, queries, noise: str = "gaussian",
                   objective: str = "relative") -> Workload:
        """A workload of queries (``objective.QuerySpec``) scaled for the planner's
        objective (:mod:`dpsql.plan.objective`); ``parts`` locate each query's terms."""
        mats, parts = query_parts(list(queries), noise, objective)
        return cls(domain, Union(mats), tuple(parts))

    @cached_property
    def terms(self) -> WorkloadTerms:
        names = [p.name for p in self.parts for _ in range(p.num_terms)] if self.parts else None
        t = _extract(self.matrix, tuple(self.domain.attributes), tuple(self.domain.shape), names)
        if self.parts:
            if sum(p.num_terms for p in self.parts) != len(t.terms):
                raise UnsupportedQueryError("workload parts do not cover its terms")
            t = WorkloadTerms(t.attributes, t.shape, t.terms, tuple(self.parts))
        return t


@dataclass(frozen=True, eq=False)
class KronTerm:
    """One weighted Kronecker product of the workload, kept as per-attribute grams."""

    weight: float
    grams: tuple[np.ndarray, ...]
    rows: tuple[int, ...]
    structured: tuple[Any, ...] = ()   # linalg gram objects (fast products), when known
    factors: tuple[Any, ...] = ()      # the workload's own factors (rows), when known

    @cached_property
    def beta(self) -> np.ndarray:
        """I-coefficient of each factor gram's projection onto span{I, 1} (Theorem 8)."""
        out = np.empty(len(self.grams))
        for i, g in enumerate(self.grams):
            n = g.shape[0]
            if n == 1:
                out[i] = 0.0
                continue
            tr, sm = gram_trace(g), _total(g)
            out[i] = max((n * tr - sm) / (n * (n - 1)), 0.0)
        return out

    @cached_property
    def mean(self) -> np.ndarray:
        """sum(V)/n per factor: the gram's eigenvalue on the ones vector."""
        return np.array([_total(g) / g.shape[0] for g in self.grams])

    @cached_property
    def support(self) -> frozenset[int]:
        """Attributes this term does not just sum over (beta > 0 up to rounding)."""
        scale = np.maximum(self.mean, 1e-300)
        return frozenset(int(i) for i in np.nonzero(self.beta > 1e-12 * scale)[0])

    @cached_property
    def marginal_like(self) -> tuple[bool, ...]:
        """Whether each factor gram lies exactly in span{I, 1} (I/T-built subworkloads)."""
        from dpsql.linalg import Identity, Ones

        out = []
        for k, (g, b, mu) in enumerate(zip(self.grams, self.beta, self.mean)):
            n = g.shape[0]
            f = self.factors[k] if k < len(self.factors) else None
            if isinstance(f, (Identity, Ones)):          # Total is a Ones: known exactly
                out.append(True)
                continue
            if isinstance(g, RangeGram):
                out.append(False)
                continue
            if isinstance(g, LowRankGram):
                # In span{I, 1}: the identity alone, or a constant low-rank part (a Total).
                out.append(bool(g.is_constant() or (g.c > 0 and not g.rows.size)))
                continue
            c = (mu - b) / n if n > 1 else 0.0
            tol = dict(rtol=1e-9, atol=1e-12 * max(abs(mu), 1.0))
            # The first row decides most non-marginal grams (ranges, prefixes) without
            # building and comparing an n×n matrix.
            first = np.full(n, c)
            first[0] += b
            out.append(bool(np.allclose(g[0], first, **tol)
                            and np.allclose(g, b * np.eye(n) + c, **tol)))
        return tuple(out)

    @property
    def num_queries(self) -> int:
        return int(np.prod(self.rows, dtype=object))

    @cached_property
    def large_kinds(self) -> tuple[str | None, ...]:
        """Per attribute: None for a small one; on a large one "count" when the factor's
        rows are 0/1 indicators (or constant), "value" otherwise (a SUM's values).  One
        strategy product cannot mix the two on the measurement lattice (plan/large.py)."""
        out: list[str | None] = []
        for g in self.grams:
            if isinstance(g, RangeGram):
                out.append("range")
            elif not isinstance(g, LowRankGram):
                out.append(None)
            elif g.c > 0 or not g.rows.size:
                out.append("count")
            else:
                r = g.rows / np.where(np.abs(g.rows).max(axis=1, keepdims=True) > 0,
                                      np.abs(g.rows).max(axis=1, keepdims=True), 1.0)
                out.append("count" if np.all((r == 0) | (np.abs(r) == 1)) else "value")
        return tuple(out)


@dataclass(frozen=True, eq=False)
class WorkloadTerms:
    """The flattened workload: attributes, shape and the list of weighted Kron terms."""

    attributes: tuple[str, ...]
    shape: tuple[int, ...]
    terms: tuple[KronTerm, ...]
    parts: tuple = ()          # objective.QueryPart per query (see Workload.of_queries)

    @property
    def num_queries(self) -> int:
        return int(sum(t.num_queries for t in self.terms))

    def select(self, indices: Sequence[int]) -> WorkloadTerms:
        """The sub-workload of the terms at ``indices`` (same attributes and shape)."""
        return WorkloadTerms(self.attributes, self.shape, tuple(self.terms[j] for j in indices))

    def split_marginal(self) -> tuple[list[int], list[int]]:
        """Indices of the marginal-like terms (every factor gram in span{I, 1}) and of the rest."""
        flags = [all(t.marginal_like) for t in self.terms]
        return ([j for j, f in enumerate(flags) if f], [j for j, f in enumerate(flags) if not f])

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=object))

    def attribute_gram(self, i: int, coeffs: Sequence[float] | np.ndarray | None = None) -> np.ndarray | LowRankGram:
        """sum_j coeffs_j² V_ji: the surrogate gram of Eq. 3.5 (plain w_j² by default)."""
        n = self.shape[i]
        cs = [t.weight if coeffs is None else coeffs[j] for j, t in enumerate(self.terms)]
        if isinstance(self.terms[0].grams[i], LowRankGram):
            return LowRankGram.combine([t.grams[i] for t in self.terms], [c * c for c in cs])
        out = np.zeros((n, n))
        for c, t in zip(cs, self.terms):
            out += (c * c) * t.grams[i]
        return out

    def dense_gram(self) -> np.ndarray:
        """Full WᵀW; only for small domains (tests and dense fallbacks)."""
        n = self.size
        out = np.zeros((n, n))
        for t in self.terms:
            g = np.ones((1, 1))
            for gi in t.grams:
                g = np.kron(g, gi.dense() if isinstance(gi, (LowRankGram, RangeGram)) else gi)
            out += t.weight ** 2 * g
        return out

    @cached_property
    def fingerprint(self) -> str:
        """Content hash of the grams, weights, rows and domain (strategy cache key)."""
        h = hashlib.sha256()
        h.update(repr((self.attributes, self.shape)).encode())
        # the baselines too: the planner keeps each query within its own (balance.py), and a
        # mixed workload's part is planned against baselines at its share of the budget; a
        # SUM's binning offsets (plan/shares.py) where it has any, so other keys stay as they were
        h.update(repr([(p.first_term, p.num_terms, p.scale, p.sensitivity, p.baseline)
                       + ((p.offsets,) if p.offsets else ())
                       for p in self.parts]).encode())
        seen: dict[int, str] = {}
        for t in self.terms:
            h.update(np.float64(t.weight).tobytes())
            h.update(repr(t.rows).encode())
            for g in t.grams:
                key = seen.get(id(g))
                if key is None:
                    raw = g.fingerprint() if isinstance(g, (LowRankGram, RangeGram)) else \
                        np.ascontiguousarray(g).tobytes()
                    key = hashlib.sha256(raw).hexdigest()
                    seen[id(g)] = key
                h.update(key.encode())
        return h.hexdigest()


def factor_dense(factor: Any) -> np.ndarray:
    """Dense matrix of one per-attribute factor (an ndarray or a dpsql.linalg matrix)."""
    if isinstance(factor, np.ndarray):
        return np.atleast_2d(np.asarray(factor, dtype=float))
    return np.atleast_2d(np.asarray(factor.dense(), dtype=float))


#: A factor on a large attribute (more than ``gram.LARGE_CELLS`` cells) with at most this
#: many rows is kept as its rows (``LowRankGram``); more rows there are refused.
THIN_ROWS = 512


def _summary(g) -> tuple[float, float]:
    """(beta, mean) of one factor gram: its projection onto span{I, 1} (Theorem 8)."""
    n = g.shape[0]
    tr, sm = gram_trace(g), _total(g)
    beta = 0.0 if n == 1 else max((n * tr - sm) / (n * (n - 1)), 0.0)
    return beta, sm / n




def _total(g) -> float:
    return g.total() if isinstance(g, (LowRankGram, RangeGram)) else float(g.sum())


def factor_gram(factor: Any) -> tuple[Any, Any]:
    """WᵀW of one factor (dense, or a ``LowRankGram`` on a large attribute), and the
    structured gram object it came from (or None).

    Structured grams matter: AllRange(1024) has 524,800 rows but a closed-form 1024² gram.
    On a large attribute a GROUP BY (Identity) is c·I, a thin factor (a Total, BETWEEN
    indicators, a SUM's values) is kept as its rows, and a prefix (CDF), suffix or
    all-range factor as its semiseparable gram (``RangeGram``: planned by a tree,
    plan/tree.py); anything else is refused (``LargeAttributeError``), with the attribute
    and query named by the caller.
    """
    from dpsql.linalg import AllRange, Identity, Prefix, Semiseparable, Suffix

    n = int(factor.shape[1]) if not isinstance(factor, np.ndarray) else np.atleast_2d(factor).shape[1]
    if n > LARGE_CELLS:
        if isinstance(factor, Identity):
            return LowRankGram(n, 1.0), None
        for cls, kind in ((Prefix, "prefix"), (Suffix, "suffix"), (AllRange, "allrange")):
            if isinstance(factor, cls):
                g = factor.gram()          # G[i, j] = a[min(i, j)] · b[max(i, j)]
                assert isinstance(g, Semiseparable)
                return RangeGram(kind, g.a, g.b), None
        rows = int(np.atleast_2d(factor).shape[0]) if isinstance(factor, np.ndarray) else int(factor.shape[0])
        if rows > THIN_ROWS:
            raise LargeAttributeError(n, rows)
        dense = np.atleast_2d(np.asarray(factor if isinstance(factor, np.ndarray) else factor.dense(),
                                         dtype=float))
        return LowRankGram(n, 0.0, dense), None
    if isinstance(factor, np.ndarray):
        f = np.atleast_2d(np.asarray(factor, dtype=float))
        return f.T @ f, None
    gram = factor.gram()
    if isinstance(gram, np.ndarray):
        return np.atleast_2d(gram.astype(float)), None
    return np.atleast_2d(np.asarray(gram.dense(), dtype=float)), gram


def _rows(factor: Any) -> int:
    return int(np.atleast_2d(factor).shape[0]) if isinstance(factor, np.ndarray) \
        else int(factor.shape[0])


def _flatten(matrix: Any, weight: float, out: list) -> None:
    if isinstance(matrix, np.ndarray):
        out.append((weight, [matrix]))
        return
    for w, factors in kron_terms(matrix):
        out.append((weight * float(w), list(factors)))


class LargeAttributeError(UnsupportedQueryError):
    """A query factor on a large attribute that the planner cannot keep thin."""

    def __init__(self, cells: int, rows: int, attribute: str | None = None,
                 query: str | None = None) -> None:
        self.cells, self.rows, self.attribute, self.query = cells, rows, attribute, query
        where = f"column {attribute!r}" if attribute else "an attribute"
        what = f"query {query!r}" if query else "a workload query"
        super().__init__(
            f"{what} asks for {rows:,} values over {where}, which has {cells:,} cells: "
            f"the planner keeps factors on attributes above {LARGE_CELLS:,} cells to at most "
            f"{THIN_ROWS} rows",
            hint=f"group {attribute or 'the column'} into coarser bins (declare bin_width in the "
                 "domain) or ask for ranges (BETWEEN) instead of every value")


def _extract(matrix: Any, attributes: tuple[str, ...], shape: tuple[int, ...],
             names: Sequence[str] | None = None) -> WorkloadTerms:
    flat: list = []
    _flatten(matrix, 1.0, flat)
    cache: dict[Any, tuple[np.ndarray, Any]] = {}
    summary: dict[int, tuple[float, float]] = {}       # id(gram) -> (beta, mean)
    terms = []
    for j, (weight, factors) in enumerate(flat):
        if len(factors) != len(shape):
            raise UnsupportedQueryError(
                f"workload block has {len(factors)} Kronecker factors but the domain has "
                f"{len(shape)} attributes",
                hint="build each workload block as Kron over all domain attributes")
        grams, structured = [], []
        for i, (f, n) in enumerate(zip(factors, shape)):
            # Identity and Total leaves of one size share a gram (thousands of marginals
            # repeat them), so their summaries below are computed once.
            key: Any = (type(f).__name__, f.shape) if type(f).__name__ in ("Identity", "Total") \
                else id(f)
            if type(f).__name__ == "Bucket":        # every GROUP BY on a column: one gram
                key = ("Bucket", f.shape, f.mapping.tobytes())
            entry = cache.get(key)
            if entry is None:
                try:
                    entry = factor_gram(f)
                except LargeAttributeError as exc:
                    raise LargeAttributeError(exc.cells, exc.rows, attributes[i],
                                              names[j] if names else None) from None
                cache[key] = entry
            g = entry[0]
            structured.append(entry[1])
            if g.shape != (n, n):
                raise UnsupportedQueryError(
                    f"workload factor has {g.shape[0]} columns, attribute has {n} cells")
            grams.append(g)
        term = KronTerm(float(weight), tuple(grams), tuple(_rows(f) for f in factors),
                        tuple(structured), tuple(factors))
        pairs = []
        for g in grams:
            got = summary.get(id(g))
            if got is None:
                got = summary[id(g)] = _summary(g)
            pairs.append(got)
        term.__dict__["beta"] = np.array([b for b, _ in pairs])      # cached_property slots
        term.__dict__["mean"] = np.array([m for _, m in pairs])
        terms.append(term)
    if not terms:
        raise UnsupportedQueryError("empty workload")
    return WorkloadTerms(attributes, shape, tuple(terms))


def workload_terms(W: Any) -> WorkloadTerms:
    """Flatten a :class:`Workload`, a bare 1-D matrix or a dense array into Kron terms."""
    if isinstance(W, WorkloadTerms):
        return W
    if isinstance(W, Workload):
        return W.terms
    if isinstance(W, np.ndarray):
        n = np.atleast_2d(W).shape[1]
        return _extract(np.atleast_2d(np.asarray(W, dtype=float)), ("x",), (n,))
    if not isinstance(W, QueryMatrix):
        raise UnsupportedQueryError(f"cannot plan for a {type(W).__name__}",
                                    hint="pass a Workload, a dpsql.linalg matrix or an array")
    # A bare matrix without a domain: one attribute per Kron factor position.
    flat: list = []
    _flatten(W, 1.0, flat)
    first = flat[0][1]
    shape = tuple(int(np.atleast_2d(f).shape[1]) if isinstance(f, np.ndarray)
                  else int(f.shape[1]) for f in first)
    attrs = tuple(f"x{i}" for i in range(len(shape))) if len(shape) > 1 else ("x",)
    return _extract(W, attrs, shape)
