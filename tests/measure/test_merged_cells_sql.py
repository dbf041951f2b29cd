"""The direct part's merged columns (``engine.direct.coarse_attribute``) in SQL: every value
lands, in the database, in the run holding the cell the fine column puts it in (the privacy
argument's "one record in one cell of the merged column", docs/privacy.md "Thin statements
over two fine columns").  ``tests/engine/test_two_fine.py`` checks ``index_of``; this checks
``cellsql.index_sql``, which is what is counted, on the values a total reader can hand it."""

from __future__ import annotations

import duckdb
import numpy as np
import pytest

from dpsql.domain import IntegerRange, Numeric
from dpsql.engine.direct import _class_of, coarse_attribute
from dpsql.measure.cellsql import index_sql

VALUES = [None, float("nan"), float("inf"), float("-inf"), -5.0, -0.0, 0.0, 0.5, 1.0, 4999.5, 5000.0, 5000.5,
          5001.0, 9999.999, 10000.0, 99998.5, 99999.0, 99999.5, 1e300, -1e300]


def _cells(con, att) -> list[int]:
    return [r[0] for r in con.execute(f"SELECT {index_sql(att, 'x').sql('duckdb')} FROM t ORDER BY i").fetchall()]


@pytest.fixture(scope="module")
def con():
    c = duckdb.connect()
    c.execute("CREATE TABLE t(i INTEGER, x DOUBLE)")
    c.executemany("INSERT INTO t VALUES (?, ?)", [[i, v] for i, v in enumerate(VALUES)])
    yield c
    c.close()


def _check(con, fine, starts):
    coarse = coarse_attribute(fine, starts)
    run = _class_of(starts, fine.size)
    for v, a, b in zip(VALUES, _cells(con, fine), _cells(con, coarse)):
        if 0 <= a < fine.size:
            assert b == run[a], (v, a, b)
        else:
            assert a == fine.invalid_index and b == coarse.invalid_index, (v, a, b)


@pytest.mark.parametrize("clamp", [True, False])
def test_an_integer_columns_runs_hold_every_value_where_its_cells_do(con, clamp):
    fine = IntegerRange("x", 0, 99999, nullable=True, clamp=clamp)
    _check(con, fine, (0, 1, 5001, 10000, fine.size - 1))
    wide = IntegerRange("x", -10, 99999, bin_width=7)
    _check(con, wide, (0, 3, 700, 1000))


def test_a_numeric_columns_runs_hold_every_value_where_its_cells_do(con):
    real = Numeric("x", list(np.linspace(0, 100000, 5001)), nullable=True)
    _check(con, real, (0, 7, 2500, real.size - 1))
