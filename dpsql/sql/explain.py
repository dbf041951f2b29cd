"""Readable rendering of compiled linear queries (``EXPLAIN`` and ``CompiledQuery.explain``).

One paragraph per linear query: what it measures, its shape, and per block the factor on
each touched attribute (untouched attributes carry the Total factor and are omitted).
The text depends only on the SQL and the public schema.
"""

from __future__ import annotations

import numpy as np

from dpsql.linalg import Bucket, Explicit, Identity, Indicator, Kron, Total, Values, Weighted

__all__ = ["explain_text", "describe_factor"]


def _cells(attr, idx) -> str:
    labels = attr.labels()
    names = [("NULL" if labels[i] is None else str(labels[i])) for i in idx]
    if len(names) > 8:
        return ", ".join(names[:8]) + f", … ({len(names)} cells)"
    return ", ".join(names)


def describe_factor(attr, f) -> str:
    """One line for the factor a block applies to ``attr``."""
    if isinstance(f, Identity):
        return f"Identity({f.shape[1]})  histogram of all {f.shape[1]} cells"
    if isinstance(f, Indicator):
        return f"Indicator  cells {{{_cells(attr, f.cells)}}}"
    if isinstance(f, Values):
        return f"Values  per-cell weights (E factor), {int(np.count_nonzero(f.values))} non-zero"
    if isinstance(f, Bucket):
        dropped = int(np.count_nonzero(f.mapping < 0))
        extra = f", {dropped} cells excluded" if dropped else ""
        return f"Bucket({f.buckets}×{f.shape[1]})  group by{extra}"
    if isinstance(f, Explicit):
        return f"Explicit({f.shape[0]}×{f.shape[1]})  weighted group by"
    if isinstance(f, Total):
        return f"Total({f.shape[1]})"
    return repr(f)


def explain_text(cq) -> str:
    """The compiled plan of ``cq`` as text."""
    lines = [f"Compiled query over table {cq.table}"]
    if cq.is_schema_probe:
        lines.append("  schema probe: no rows, no linear queries, no privacy budget")
        return "\n".join(lines)
    lines.append(f"  output: {', '.join(c.name for c in cq.columns)}")
    lines.append(f"  groups: {len(cq.groups)}")
    attrs = cq.schema.attributes
    for lq in cq.linear_queries:
        m, n = lq.matrix.shape
        touched = ", ".join(lq.attributes) or "(none: total)"
        lines.append(f"  {lq.name} [{lq.kind}] {lq.description}")
        lines.append(f"    matrix {m}×{n}; {lq.blocks} block(s); attributes: {touched}")
        for b, block in enumerate(lq.matrix.blocks):
            w = block.weight if isinstance(block, Weighted) else 1.0
            kron = block.base if isinstance(block, Weighted) else block
            head = f"    block {b + 1}" + ("" if w == 1.0 else f" (weight {w:g})")
            lines.append(head + ":")
            factors = kron.factors if isinstance(kron, Kron) else [kron]
            for a, f in zip(attrs, factors):
                if not isinstance(f, Total) or isinstance(f, Identity):
                    lines.append(f"      {a.name}: {describe_factor(a, f)}")
    return "\n".join(lines)
