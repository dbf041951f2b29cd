"""``cells_for_predicate`` over arrays for columns above ``binned_cells.VECTOR_BINS`` bins
(issue 35: a comparison on a 10⁶-bin column looped over every bin in Python) gives exactly
the cells and the split flag of the bin-by-bin case analysis, for every operator, for unit,
wide and uneven integer bins and for real bins, at literals on, between and beyond the ends."""

from __future__ import annotations

import numpy as np
import pytest

import dpsql.binned_cells as binned_cells
import dpsql.domain as domain
from dpsql.domain import IntegerRange, Numeric

OPS = ("=", "!=", "<>", "<", "<=", ">", ">=")


def _columns():
    rng = np.random.default_rng(11)
    edges = np.unique(rng.integers(-50_000, 50_000, 4_500))
    real = np.unique(np.round(rng.normal(0, 1000, 4_500), 3))
    return [IntegerRange("a", 0, 4_999), IntegerRange("b", -20_000, 14_999, bin_width=7),
            IntegerRange("c", int(edges[0]), 60_000, edges=[int(e) for e in edges]),
            Numeric("d", [float(e) for e in real])]


def _literals(attr, rng):
    lo, hi = attr.bin_bounds()[0][0], attr.bin_bounds()[-1][1]
    picks = [lo, hi, lo - 1, hi + 1, (lo + hi) / 2]
    for a, b in (attr.bin_bounds()[i] for i in rng.integers(0, attr.size, 4)):
        picks += [a, b, a + 0.5, b - 0.5, int(a) - 1]
    return [p if isinstance(p, float) and not float(p).is_integer() else (int(p) if float(p).is_integer() else p)
            for p in picks]


@pytest.mark.parametrize("attr", _columns(), ids=lambda a: a.name)
def test_the_array_path_equals_the_loop(attr, monkeypatch):
    assert attr.size > binned_cells.VECTOR_BINS
    rng = np.random.default_rng(5)
    used = []
    real = binned_cells.interval_cells
    monkeypatch.setattr(domain, "interval_cells", lambda *a, **k: (used.append(1), real(*a, **k))[1])
    cases = [(op, v) for op in OPS for v in _literals(attr, rng)]
    fast = [attr.cells_for_predicate(op, v) for op, v in cases]
    assert len(used) == len(cases)                         # every case took the array path
    monkeypatch.setattr(domain, "VECTOR_BINS", 10 ** 9)    # the bin-by-bin loop
    slow = [attr.cells_for_predicate(op, v) for op, v in cases]
    for (op, v), f, s in zip(cases, fast, slow):
        assert f == s, (op, v)
