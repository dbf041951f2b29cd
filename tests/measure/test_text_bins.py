"""Integer bins of CSV text by arithmetic (issue 35): a 100,000-cell column's comparison
chain took 170 s to build; the clamp-floor-divide must land every value where
``Attribute.index_of`` does."""

from __future__ import annotations

import numpy as np
import pytest
from sqlglot import exp

from dpsql.domain import IntegerRange, TableSchema
from dpsql.measure import reader
from dpsql.measure.backend import DuckDBBackend
from dpsql.measure.source import Source


def test_text_integer_bins_are_one_expression():
    wide = IntegerRange("x", 0, 99_999)
    cell = reader.convert_text(wide, exp.column("raw"), exp.true(), None, "0", "duckdb").cell
    assert len(list(cell.find_all(exp.LT))) == 0
    assert reader.text_bins_sql(IntegerRange("e", 0, 100, edges=[0, 1, 10, 50]), exp.column("x"),
                                "duckdb") is None
    assert reader.text_bins_sql(IntegerRange("h", 0, 2 ** 60, bin_width=2 ** 50), exp.column("x"), "duckdb") is None


@pytest.mark.parametrize("att", [IntegerRange("x", 0, 99_999), IntegerRange("x", -7, 20, bin_width=4),
                                 IntegerRange("x", 17, 90, bin_width=10, nullable=True),
                                 IntegerRange("x", -(2 ** 52), 2 ** 52, bin_width=2 ** 40)])
def test_text_values_land_where_index_of_puts_them(tmp_path, att):
    texts = ["0", "1", "-1", "2.5", "-7.5", "-8", "20.999", "21", "3e1", "99999", "100000",
             "1e15", "-1e15", "17", "16.9999999", "89.5", "90", "91", " 5 ", "+4", ".5", "4.",
             str(2 ** 52), str(-(2 ** 52)), str(2 ** 52 + 1), "4503599627370495.5", ""]
    path = tmp_path / "t.csv"
    path.write_text("x\n" + "\n".join(texts) + "\n")
    backend = DuckDBBackend({"t": Source("csv", path)}, threads=1)
    try:
        got = backend.count_marginals(TableSchema("t", (att,)), [("x",)])[("x",)]
    finally:
        backend.close()
    want = np.zeros(att.size, dtype=np.int64)
    for t in texts:
        v = reader.parse_number(t) if t else None
        want[att.index_of(v) if v is not None or att.nullable else att.invalid_index] += 1
    assert np.array_equal(got, want)
