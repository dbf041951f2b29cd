"""The compiled form of one SQL statement: output columns, groups and linear queries.

A :class:`CompiledQuery` is what the rest of dpsql sees of a SQL statement.  It names the
private table, the output columns, the output groups (every cell or bucket of the public
domain that the WHERE clause allows, never only the non-empty ones, since emptiness is
private), and the linear
queries whose answers determine the rows.  Each :class:`LinearQuery` is a factored query
matrix over the table's full domain (ICML 2019 appendix B.1, Table 2; thesis §3.4): a
``Union`` of ``Weighted(Kron)`` blocks whose factors align with the schema's attributes.

Block semantics: the blocks of one linear query are *disjoint predicate terms* and the
query's value for a group is the **sum** of its blocks' rows for that group.  A
conjunctive WHERE gives a single block; a disjunction gives several (see
``predicates.py``).  Every block has the same row layout (see :class:`RowLayout`).

The values of the linear queries are turned into rows by :meth:`CompiledQuery.postprocess`,
which is pure post-processing of (possibly noisy) answers and so costs no privacy budget.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["OutputColumn", "LinearQuery", "RowLayout", "CompiledQuery"]


@dataclass(frozen=True)
class OutputColumn:
    """One output column: its name, a PostgreSQL type name, and whether it is noisy."""

    name: str
    type: str
    is_aggregate: bool = False


@dataclass(frozen=True)
class RowLayout:
    """How the rows of one block map to (group, cell) pairs.

    ``axes`` lists, in domain order, the attributes whose factor has more than one row,
    with that row count.  Group attributes contribute their bucket count; the quantile
    attribute (if any) contributes its cell count.  When the quantile attribute is also
    grouped, its factor is the identity and ``quantile_group_map`` gives the bucket of each
    cell, so post-processing can fold cells into groups.
    """

    axes: tuple[tuple[str, int], ...]
    quantile_attr: str | None = None
    quantile_group_map: tuple[int, ...] | None = None

    @property
    def rows(self) -> int:
        n = 1
        for _, k in self.axes:
            n *= k
        return n


@dataclass(frozen=True)
class LinearQuery:
    """A factored linear query; see the module docstring for block semantics.

    ``kind`` is ``"linear"`` (one value per group and block), ``"quantile"`` (per group,
    the histogram of ``quantile_attr``: the P factor of Table 2 is applied in
    post-processing, on the estimated histogram) or ``"offset"``: the same rows applied to
    the per-cell sums of a binned column's offsets from its bins' values instead of the
    counts (``dpsql.measure.offsets``; in :attr:`CompiledQuery.offset_queries`, never in
    ``linear_queries``: the model holds counts only).
    """

    name: str
    matrix: Any
    attributes: tuple[str, ...]
    kind: str
    description: str
    layout: RowLayout
    blocks: int
    # Per block, for quantiles: which cells of the quantile attribute satisfy the block's
    # predicate (the factor itself is the identity, so the mask is applied afterwards).
    cell_masks: tuple[np.ndarray, ...] | None = field(default=None, compare=False)
    # The predicate is never TRUE (decided from the domain): the answer is known to be 0, so
    # the query is kept out of ``CompiledQuery.linear_queries`` and costs nothing.
    always_zero: bool = False
    # kind "offset": the binned column whose offsets the rows sum
    offset_column: str | None = None


@dataclass(frozen=True)
class CompiledQuery:
    """Everything needed to answer one statement; built by :func:`dpsql.sql.compile`."""

    sql: str
    table: str
    columns: list[OutputColumn]
    groups: list[tuple]
    linear_queries: list[LinearQuery]
    is_schema_probe: bool = False
    is_explain: bool = False
    inner: CompiledQuery | None = None
    # The post-processing program (postprocess.Program); kept opaque to callers.
    program: Any = None
    schema: Any = None
    # Binning offsets of the SUMs/AVGs over wide bins (kind "offset", ``offset_column``
    # names the summed column): answered from offset measurements when they support them,
    # else the aggregate falls back to its binning bound (docs/engine.md)
    offset_queries: list[LinearQuery] = field(default_factory=list)
    # A statement over public tables only: its rows, exact (public data, no linear queries)
    exact_rows: list[tuple] | None = None

    def postprocess(self, answers: dict[str, np.ndarray],
                    stderrs: dict[str, np.ndarray] | None = None, bounds=None, with_bias: bool = False):
        """Rows (and per-cell standard errors) from the answers of :attr:`linear_queries`.

        ``answers[name]`` is the vector ``matrix @ x`` for the data vector (or model) x;
        ``stderrs[name]``, if given, holds the standard error of each entry.  Returns
        ``(rows, stderr_rows)``; ``stderr_rows`` is None when ``stderrs`` is None, and holds
        None for group-key and constant cells.  With ``bounds`` (name → (lower, upper) per
        entry) a third list holds each output cell's range (interval arithmetic; None where
        none follows).  With ``with_bias`` a last list holds each cell's bound on its binning
        error, already included in its standard error (None where there is none).
        """
        if self.exact_rows is not None:
            blank = [tuple(None for _ in self.columns) for _ in self.exact_rows]
            return list(self.exact_rows), (blank if stderrs is not None else None)
        from dpsql.sql.postprocess import run_program
        return run_program(self, answers, stderrs, present=None, bounds=bounds, with_bias=with_bias)

    def offset_pairs(self) -> dict[str, tuple[str | None, str]]:
        """Per offset query: (the binning-bound query it makes unnecessary, the SUM row
        query it completes), for the aggregates of this statement (or of the subquery a
        derived table reads)."""
        program = self.program
        if program is None:
            return {}
        inner = getattr(program, "inner", None)   # a derived table's stage reads its subquery
        if isinstance(inner, CompiledQuery):
            return inner.offset_pairs()
        return {a.offset_query: (a.bias_query, a.queries[0]) for a in program.aggs if a.offset_query}

    def may_be_binned(self) -> bool:
        """Whether a value of this statement may carry a binning bound (an aggregate over a
        column's wide bins: SUM, AVG, VARIANCE, STDDEV), from the statement alone: front ends
        that announce columns before answering (the wire's Describe) add a ``binned`` flag."""
        program = self.program
        if program is None:
            return False
        inner = getattr(program, "inner", None)   # a derived table's stage reads its subquery
        if isinstance(inner, CompiledQuery) and inner.may_be_binned():
            return True
        # a derived table's outer aggregates are (function, argument, node) tuples over the
        # subquery's answers, which carry no binning bound of their own (the inner check above)
        return any(getattr(a, "halfwidth", 0) > 0 for a in program.aggs)

    def explain(self) -> str:
        from dpsql.sql.explain import explain_text
        return explain_text(self.inner if self.is_explain else self)
