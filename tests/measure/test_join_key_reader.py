"""The total reader for integer join keys (``IntegerRange.clamp = False``, issue 31): a
value outside ``lo..hi`` lands in ``invalid_index`` (the NULL cell), never in an end bin,
in the CSV reader and in every typed conversion, and still every record lands in exactly
one cell.  The SQL equals ``index_of`` row by row; single-row edits move each marginal by
at most one row (two for a replacement), as for every other column
(``test_neighbours.py``).  DuckDB here; PostgreSQL and Spark in ``test_engines.py``."""

from __future__ import annotations

import math
import random
import sys
from decimal import Decimal
from pathlib import Path

import duckdb
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import reference  # noqa: E402

from dpsql.domain import IntegerRange, TableSchema  # noqa: E402
from dpsql.measure.backend import DuckDBBackend  # noqa: E402
from dpsql.measure.source import Source  # noqa: E402

SCHEMA = TableSchema("t", (
    IntegerRange("month", 1, 12, nullable=True).unclamped(),                         # arithmetic bins
    IntegerRange("code", -3, 40, edges=list(range(-3, 41)), nullable=True).unclamped(),  # the comparison chain
    IntegerRange("age", 17, 90, bin_width=10),                                       # not a key: clamped
))
CLIQUES = [("month",), ("code",), ("age",), ("month", "code"), ()]
HEADER = b"month,code,age"
TEXTS = ["0", "1", "12", "13", "-1", " 12 ", "1e1", "12.5", "0.5", "0.999", "12.0000001", "abc", "", "NaN",
         "99999999999999999999", "-0", "+7", "1e999", "40", "41", "-3", "-4", "-3.5", "40.5", "100", "17", "91"]


def _csv(rows: list[bytes]) -> bytes:
    return b"\n".join([HEADER] + rows) + b"\n"


def _row(rng: random.Random) -> bytes:
    return ",".join(rng.choice(TEXTS) for _ in range(3)).encode()


@pytest.fixture()
def csv_backend(tmp_path):
    path = tmp_path / "t.csv"
    backend = DuckDBBackend({"t": Source("csv", path)}, threads=1)
    yield backend, path
    backend.close()


def test_out_of_range_text_lands_in_the_null_cell(csv_backend):
    backend, path = csv_backend
    rows = [b"13,41,100", b"0,-4,5", b"12,40,90", b"1,-3,17", b"12.5,40.5,91", b"1e999,abc,"]
    path.write_bytes(_csv(rows))
    got = backend.count_marginals(SCHEMA, CLIQUES)
    month, code, age = SCHEMA.attributes
    assert got[("month",)][month.null_index] == 4 and got[("month",)][[0, 11]].tolist() == [1, 1]
    assert got[("code",)][code.null_index] == 4 and got[("code",)][[0, 43]].tolist() == [1, 1]
    assert got[("age",)].tolist()[-1] == 3          # the clamped column: 100, 90, 91 in the last bin


def test_random_single_row_edits_of_join_keys(csv_backend):
    """The CSV reader equals its Python twin (``index_of`` after the documented text
    conversion) on every edited file, and one edit moves a marginal by ≤ 1 (≤ 2 replaced)."""
    backend, path = csv_backend
    rng = random.Random(31)
    rows = [_row(rng) for _ in range(30)]
    data = _csv(rows)
    path.write_bytes(data)
    clean = backend.count_marginals(SCHEMA, CLIQUES)
    for c in CLIQUES:
        assert np.array_equal(clean[c], reference.counts(data, SCHEMA, c)), c
    for _ in range(25):
        op = rng.choice(["append", "remove", "replace"])
        edited = list(rows)
        if op == "append":
            edited.insert(rng.randrange(len(edited) + 1), _row(rng))
        elif op == "remove":
            del edited[rng.randrange(len(edited))]
        else:
            edited[rng.randrange(len(edited))] = _row(rng)
        data = _csv(edited)
        path.write_bytes(data)
        counts = backend.count_marginals(SCHEMA, CLIQUES)
        for c in CLIQUES:
            assert np.array_equal(counts[c], reference.counts(data, SCHEMA, c)), (op, c)
            assert int(np.abs(counts[c] - clean[c]).sum()) <= (2 if op == "replace" else 1), (op, c)
            assert int(counts[c].sum()) == len(edited)        # total: every record in one cell


TYPED = {
    "BIGINT": [None, 0, 1, 12, 13, -1, 99, -2 ** 63, 2 ** 63 - 1, 6],
    "INTEGER": [None, 0, 1, 12, 13, -2 ** 31, 2 ** 31 - 1, 7],
    "HUGEINT": [None, 0, 12, 13, -2 ** 100, 2 ** 100, 2 ** 62, 2 ** 62 + 1, 5],
    "UBIGINT": [None, 0, 1, 12, 13, 2 ** 64 - 1, 2 ** 63, 3],
    "DOUBLE": [None, 0.5, 1.0, 12.0, 12.5, 13.0, math.nan, math.inf, -math.inf, 0.9999, 1e300, -0.0],
    "DECIMAL(10,3)": [None, Decimal("12.000"), Decimal("12.001"), Decimal("0.999"), Decimal("1.000"),
                      Decimal("-5.5"), Decimal("9999999.999")],
    "VARCHAR": [None] + TEXTS,
}


@pytest.mark.parametrize("sql_type", sorted(TYPED))
def test_typed_columns_land_as_index_of(tmp_path, sql_type):
    """Parquet columns of every integer width, floats, decimals and text, each read into
    the cell ``index_of`` gives (text through the number grammar)."""
    from dpsql.measure.reader import parse_number
    values = TYPED[sql_type]
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t (month {sql_type}, code {sql_type})")
    con.executemany("INSERT INTO t VALUES (?, ?)", [[v, v] for v in values])
    con.execute(f"COPY t TO '{tmp_path / 't.parquet'}' (FORMAT parquet)")
    con.close()
    schema = TableSchema("t", SCHEMA.attributes[:2])
    backend = DuckDBBackend({"t": Source("parquet", tmp_path / "t.parquet")}, threads=1)
    try:
        got = backend.count_marginals(schema, [("month", "code")])[("month", "code")]
    finally:
        backend.close()
    want = np.zeros_like(got)
    for v in values:
        if sql_type == "VARCHAR" and v is not None:
            x = parse_number(v)
            cells = tuple(a.invalid_index if x is None else a.index_of(x) for a in schema.attributes)
        else:
            cells = tuple(a.index_of(v) for a in schema.attributes)
        want[cells] += 1
    assert np.array_equal(got, want), (got.nonzero(), want.nonzero())
