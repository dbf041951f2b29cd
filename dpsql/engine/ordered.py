"""Fine ordered columns through SQL (issue 35 item 4): quantiles, CDF and range counts over
an integer, date or timestamp column of 10⁴–10⁶ cells, planned by a tree or the Toeplitz
square root of the prefix matrix (``dpsql.plan.ordered``), measured by the engine like any
release (``Engine.measure_strategy``: preview, count, durable charge, noise, release) and
answered here in closed form (``dpsql.measure.ordered.OrderedEstimate``).

Two arrows of the pipeline change for such a column, both from public metadata only:

* **workload**: a quantile over a large ordered attribute is read from the estimated
  CDF, so the workload asks for every prefix (``Prefix``) instead of every cell (an
  identity over 10⁵ cells is a model no planner can fit, and what a quantile's interval
  needs is the CDF's accuracy).  A workload holding such a prefix is planned by
  ``opt_ordered`` (``plan.planner``);
* **answers**: a statement whose every linear query is a thin query on that attribute
  alone (the other attributes summed out: a COUNT with ``x <= c`` or ``BETWEEN``, a
  quantile without GROUP BY, over the values when the column is nullable) is answered from
  the ordered release: values and their exact
  variances, and a quantile's 95% interval from the noisy CDF's band with the exact
  variance of C_j − q·N (``OrderedEstimate.quantile``), not from cells taken as
  independent.  Anything else takes the model's path (and its refusals).
"""

from __future__ import annotations

import io
import zipfile
from typing import Any

import numpy as np

from dpsql import linalg
from dpsql.linalg import kron_terms

__all__ = ["workload_matrix", "answer_ordered", "is_ordered_strategy", "is_ordered_payload",
           "ORDERED_KINDS", "MAX_ROWS"]

#: Attribute kinds whose cells are ordered values (a CDF means something over them).
ORDERED_KINDS = ("integer", "date", "timestamp")

#: The most rows one linear query may ask of the ordered release (each is a dense row over
#: the column's cells): a GROUP BY over every cell takes the identity's closed form instead.
MAX_ROWS = 512


def is_ordered_strategy(strategy) -> bool:
    """An ``OrderedStrategy`` (plan/ordered.py), told without importing the planner: a
    process that only answers never imports it (issue 17)."""
    return type(strategy).__name__ == "OrderedStrategy"


def is_ordered_payload(payload: bytes) -> bool:
    """Whether a release payload is an ordered release (``measure.ordered.pack``): read
    from the npz's member names, without importing the planner."""
    with zipfile.ZipFile(io.BytesIO(payload)) as z:
        return "__ordered__.npy" in z.namelist()


def _large_cells() -> int:
    from dpsql.plan.gram import LARGE_CELLS    # the planner's threshold, read where used
    return int(LARGE_CELLS)


def _ordered_axis(schema, factors) -> int | None:
    """The one attribute a Kronecker term asks about (every other factor a Total), when it
    is a large ordered attribute; else None."""
    axes = [i for i, f in enumerate(factors) if not isinstance(f, linalg.Total)]
    if len(axes) != 1:
        return None
    i = axes[0]
    attr = schema.attributes[i]
    if attr.kind not in ORDERED_KINDS or attr.size <= _large_cells():
        return None
    return i


def _values_then_null(values: np.ndarray) -> bool:
    """The cells' values are finite, but for a NULL cell (NaN) at the end."""
    m = int(np.isfinite(values).sum())
    return m > 0 and bool(np.all(np.isfinite(values[:m])))


def workload_matrix(schema, lq) -> Any:
    """The matrix the workload plans for linear query ``lq``: a quantile over a large
    ordered attribute (one term, the identity on it, no GROUP BY) asks for the prefixes of
    that attribute; every other query for itself."""
    if lq.kind != "quantile":
        return lq.matrix
    terms = kron_terms(lq.matrix)
    if len(terms) != 1:
        return lq.matrix
    w, factors = terms[0]
    i = _ordered_axis(schema, factors)
    if i is None or not isinstance(factors[i], linalg.Identity):
        return lq.matrix
    factors = list(factors)
    factors[i] = linalg.Prefix(factors[i].shape[1])
    out = linalg.Kron(factors) if len(factors) > 1 else factors[0]
    return out if w == 1.0 else linalg.Weighted(float(w), out)


def answer_ordered(schema, estimate, compiled):
    """(answers, stderrs) of every linear query of ``compiled`` from the ordered release's
    ``estimate``, or None when some query is not a thin query on its attribute alone.
    ``answers`` is a ``postprocess.Answers`` whose ``cdfs`` name the quantile queries the
    estimate's CDF answers (their intervals come from its band)."""
    from dpsql.sql.postprocess import Answers

    if compiled.offset_queries:
        return None
    attr = estimate.strategy.attribute
    names = list(schema.domain.attributes)
    if attr not in names:
        return None
    k = names.index(attr)
    answers, stderrs = Answers(), {}
    for lq in compiled.linear_queries:
        terms = kron_terms(lq.matrix)
        if lq.blocks != 1 or len(terms) != 1:
            return None      # rows summed across blocks would add correlated variances
        w, factors = terms[0]
        if all(isinstance(g, linalg.Total) for g in factors):
            f = factors[k]       # COUNT(*) alone: the total of the column's cells
        elif _ordered_axis(schema, factors) == k:
            f = factors[k]
        else:
            return None
        if lq.kind == "quantile":
            values = schema.attribute(attr).cell_values()     # per cell: read only for quantiles
            masks = lq.cell_masks
            if not isinstance(f, linalg.Identity) or w != 1.0 or lq.layout.quantile_group_map is not None \
                    or (masks is not None and not all(np.all(m) for m in masks)) \
                    or values is None or not _values_then_null(values):
                return None
            answers[lq.name] = estimate.cells.copy()
            stderrs[lq.name] = np.sqrt(estimate.cell_variance())
            answers.cdfs[lq.name] = estimate
            continue
        if isinstance(f, linalg.Identity):
            a, var = w * estimate.cells, w * w * estimate.cell_variance()
        elif f.shape[0] <= MAX_ROWS:
            a, var = estimate.answer(w * np.atleast_2d(np.asarray(f.dense(), dtype=np.float64)))
        else:
            return None
        answers[lq.name], stderrs[lq.name] = a, np.sqrt(np.maximum(var, 0.0))
    return answers, stderrs
