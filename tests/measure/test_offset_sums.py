"""Binning offsets (issue 29 item 1, option a): the engine's per-cell sums of the rows' lattice
offsets equal a brute-force reference, and removing one row (or one privacy unit) moves every
offset measurement by at most its stated sensitivity."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from dpsql.domain import Categorical, IntegerRange, Numeric, TableSchema
from dpsql.measure.backend import DuckDBBackend, Source
from dpsql.measure.offsets import GRID_BITS, brute_force_offsets, lattice_offset, offset_grid

ATTRS = (Categorical("g", ["a", "b", "c"]),
         Numeric("x", [0.0, 10.0, 100.0, 1000.0], nullable=True),
         IntegerRange("y", 0, 99, bin_width=25),
         IntegerRange("z", 0, 3))          # one-value bins: nothing to measure
CLIQUES = [(), ("g",), ("x",), ("g", "x"), ("y",), ("g", "y")]


def _rows(seed: int = 3, n: int = 14) -> list[dict]:
    """Small rows with the awkward cases: NULL, values on bin edges, beyond the declared range
    (clamped to an end bin), fractions that are and are not binary."""
    rng = np.random.default_rng(seed)
    xs = [None, 0.0, 10.0, 99.99, 1000.0, 2500.0, -7.5, 0.1, 55.25, 999.0, 123.456, 10.5, 42.0, 777.7]
    rows = []
    for i in range(n):
        rows.append({"id": i // 2, "g": "abc"[int(rng.integers(3))], "x": xs[i % len(xs)],
                     "y": int(rng.integers(0, 100)), "z": int(rng.integers(0, 4))})
    return rows


def _write(path: Path, rows: list[dict]) -> Path:
    with path.open("w") as f:
        f.write("id,g,x,y,z\n")
        for r in rows:
            f.write(",".join("" if r[k] is None else repr(r[k]) if isinstance(r[k], float) else str(r[k])
                             for k in ("id", "g", "x", "y", "z")) + "\n")
    return path


def _sums(path: Path, unit: dict | None = None) -> dict:
    schema = TableSchema("t", ATTRS)
    backend = DuckDBBackend({"t": Source.from_config({"csv": str(path)}, path.parent).with_unit(unit, path.parent)})
    try:
        return backend.sum_offsets(schema, [(c, a) for c in CLIQUES for a in ("x", "y", "z")])
    finally:
        backend.close()


def test_the_grid_puts_integers_and_binary_fractions_on_the_lattice():
    for att in ATTRS[1:3]:
        grid = offset_grid(att)
        assert grid is not None
        h = max(grid.bounds) * grid.spacing
        assert 2 ** GRID_BITS <= max(grid.bounds) < 2 ** (GRID_BITS + 1)
        assert h <= max((b[1] - b[0]) / 2 for b in att.bin_bounds() if b is not None)
    assert offset_grid(ATTRS[0]) is None and offset_grid(ATTRS[3]) is None
    x = ATTRS[1]
    g = offset_grid(x).spacing
    # 55.25 is 0.25 below the midpoint 55 … above it: exactly representable
    assert lattice_offset(x, 55.25) * g == 0.25
    # beyond the range: clamped to the end bin's half width
    assert lattice_offset(x, 2500.0) == offset_grid(x).bounds[2]
    assert lattice_offset(x, None) == 0


def test_engine_sums_equal_the_brute_force_reference(tmp_path):
    rows = _rows()
    got = _sums(_write(tmp_path / "t.csv", rows))
    for clique in CLIQUES:
        for a in ("x", "y", "z"):
            want = brute_force_offsets(rows, ATTRS, clique, a)
            assert np.array_equal(got[(clique, a)], want), (clique, a)
    assert not got[((), "z")].any()


@pytest.mark.parametrize("unit", [None, {"id": "id", "max_rows": 2}])
def test_removing_one_row_or_unit_moves_each_offset_measurement_by_at_most_its_sensitivity(tmp_path, unit):
    """Every neighbour (one row, or with a privacy unit one id, removed): the change of each
    lattice block's measurement M·o in L2 is at most k·√(Δ₂²) as the release calibrates it
    (``LatticeBlock.l2_sensitivity_sq``: S² times M's; k = the rows a unit may add), for the
    blocks a workload of SUMs plans (``dpsql.engine.offsets.offset_blocks``)."""
    from dpsql.engine.offsets import offset_blocks
    from dpsql.sql import compile as compile_sql

    rows = _rows(seed=11)
    schema = TableSchema("t", ATTRS)
    catalog = {"t": schema}
    sqls = ["SELECT SUM(x) FROM t", "SELECT g, AVG(x) FROM t GROUP BY g", "SELECT g, SUM(y) FROM t GROUP BY g",
            "SELECT SUM(x) FROM t WHERE x >= 10 AND g <> 'c'"]
    queries = [(lq, 0) for sql in sqls for lq in compile_sql(sql, catalog).offset_queries]
    blocks = [b for b, _ in offset_blocks(schema, queries)]
    assert {b.offsets for b in blocks} == {"x", "y"} and len(blocks) >= 4
    full = _sums(_write(tmp_path / "full.csv", rows), unit)
    ids = sorted({r["id"] for r in rows})
    neighbours = [[r for r in rows if r["id"] != i] for i in ids] if unit else \
        [rows[:k] + rows[k + 1:] for k in range(len(rows))]
    unit_rows = unit["max_rows"] if unit else 1
    worst = 0.0
    for k, other in enumerate(neighbours):
        near = _sums(_write(tmp_path / f"n{k}.csv", other), unit)
        for b in blocks:
            a = b.apply(full[(b.clique, b.offsets)])
            c = b.apply(near[(b.clique, b.offsets)])
            change = math.sqrt(float(sum(int(v) ** 2 for v in (a - c))))
            limit = unit_rows * math.sqrt(b.l2_sensitivity_sq())
            assert change <= limit, (k, b.clique, b.offsets, change, limit)
            worst = max(worst, change / limit)
    # the bound is reached: a value beyond the range sits at its bin's edge
    assert worst == pytest.approx(1.0)
