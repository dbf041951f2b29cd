"""Date and timestamp columns in the total reader (issue 30): DuckDB tables, Parquet files and
CSV text land every value where ``Attribute.index_of`` does (the Python reference), and the
data check names what fell outside the period or was not ISO text."""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import time_rows  # noqa: E402

from dpsql.domain import TableSchema  # noqa: E402
from dpsql.errors import ConfigError  # noqa: E402
from dpsql.measure.backend import DuckDBBackend  # noqa: E402
from dpsql.measure.source import Source  # noqa: E402
from dpsql.temporal import DateRange  # noqa: E402

SCHEMA = time_rows.SCHEMA
CLIQUES = [(a,) for a in SCHEMA.column_names] + [("d", "ts"), ("tz", "dt_text", "ts_text")]


def expected(rows, schema=SCHEMA):
    table = np.array([[time_rows.cell(schema.attribute(c), v) for c, v in zip(time_rows.COLUMNS, r)] for r in rows])
    pos = {a: i for i, a in enumerate(time_rows.COLUMNS)}
    out = {}
    for clique in CLIQUES:
        arr = np.zeros(tuple(schema.domain[a] for a in clique), dtype=np.int64)
        np.add.at(arr, tuple(table[:, pos[a]] for a in clique), 1)
        out[clique] = arr
    return out


@pytest.fixture(scope="module")
def lake(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("times")
    con = duckdb.connect()
    con.execute("SET TimeZone = 'Asia/Kolkata'")     # the session zone must not matter
    con.execute(time_rows.DDL)
    rows = time_rows.rows()
    con.executemany(f"INSERT INTO times VALUES ({', '.join('?' * len(time_rows.COLUMNS))})", rows)
    con.execute(f"COPY times TO '{tmp / 'times.parquet'}' (FORMAT parquet)")
    db = tmp / "times.duckdb"
    con.execute(f"ATTACH '{db}' AS f")
    con.execute("CREATE TABLE f.times AS SELECT * FROM times")
    con.execute("DETACH f")
    return tmp, rows


def _count(source, schema=SCHEMA, cliques=CLIQUES):
    backend = DuckDBBackend({"times": source}, threads=1)
    try:
        return backend.count_marginals(schema, cliques)
    finally:
        backend.close()


@pytest.mark.parametrize("kind", ["parquet", "duckdb"])
def test_typed_time_columns_land_as_index_of(lake, kind):
    tmp, rows = lake
    spec = {"parquet": str(tmp / "times.parquet")} if kind == "parquet" else \
        {"duckdb": str(tmp / "times.duckdb"), "table": "times"}
    got = _count(Source.from_config(spec, tmp))
    want = expected(rows)
    for clique in CLIQUES:
        assert np.array_equal(got[clique], want[clique]), (clique, got[clique], want[clique])
    # the reference is not trivial: the values reach every kind of place
    d = SCHEMA.attribute("d")
    assert want[("d",)][d.null_index] > 0 and want[("d",)][0] > 0 and want[("d",)][11] > 0


def test_iso_text_in_a_csv_lands_as_the_grammar_says(lake, tmp_path):
    """The CSV holds the ISO form of every value; text columns hold the hostile texts."""
    _, rows = lake
    def text(v):
        if v is None:
            return ""
        if isinstance(v, dt.datetime):
            return v.isoformat(sep=" ") if v.tzinfo is None else v.isoformat(sep=" ")
        return str(v)
    lines = [",".join(time_rows.COLUMNS)]
    keep = [r for r in rows if not any(isinstance(v, str) and ("\n" in v or '"' in v or "," in v) for v in r)]
    for r in keep:
        lines.append(",".join(text(v) for v in r))
    path = tmp_path / "times.csv"
    path.write_text("\n".join(lines) + "\n")
    got = _count(Source.from_config({"csv": str(path), "null": [""]}, tmp_path))
    # every typed value becomes its ISO text: instants with an offset are not ISO text here
    as_text = [[None if v is None else (text(v) if not isinstance(v, str) else v) for v in r] for r in keep]
    want = expected(as_text)
    for clique in CLIQUES:
        assert np.array_equal(got[clique], want[clique]), (clique, got[clique], want[clique])
    tz = SCHEMA.attribute("tz")
    assert got[("tz",)][tz.null_index] == len(keep)         # NULL, or unreadable: an offset is not ISO here


def test_a_date_axis_refuses_instants_from_metadata(lake):
    tmp, _ = lake
    schema = TableSchema("times", (DateRange("tz", "2013-01-01", "2013-12-31", "day"),))
    with pytest.raises(ConfigError, match="'tz' has type TIMESTAMP WITH TIME ZONE"):
        _count(Source.from_config({"parquet": str(tmp / "times.parquet")}, tmp), schema, [("tz",)])


def test_data_check_names_out_of_period_and_unreadable_values(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("d\n2013-01-05\n2012-12-31\n2014-01-01\n2013-02-30\n13/01/2013\n\n2013-03-01\n")
    schema = TableSchema("t", (DateRange("d", "2013-01-01", "2013-12-31", "month", nullable=True),))
    backend = DuckDBBackend({"t": Source.from_config({"csv": str(path), "null": [""]}, tmp_path)})
    report = backend.data_check(schema)
    backend.close()
    col = report.columns[0]
    assert col.problems == {"below_range": 1, "above_range": 1, "unreadable": 2}
    assert dict(col.examples["unreadable"]) == {"2013-02-30": 1, "13/01/2013": 1}


def test_the_exact_oracle_decodes_time_cells(lake):
    """dpsql.measure.exact (the bench's truth): a time cell decodes to its bin's first value,
    so SQL over the decoded table counts by period as the cells do."""
    from dpsql.measure.exact import ExactOracle
    tmp, rows = lake
    schema = TableSchema("times", (SCHEMA.attribute("d"), SCHEMA.attribute("ts")))
    oracle = ExactOracle({"times": schema}, {"times": Source.from_config({"parquet": str(tmp / "times.parquet")}, tmp)})
    try:
        got = dict(oracle.query("SELECT d, COUNT(*) FROM times GROUP BY d"))
        hours = dict(oracle.query("SELECT ts, COUNT(*) FROM times GROUP BY ts"))
    finally:
        oracle.close()
    d = SCHEMA.attribute("d")
    want = expected(rows)
    for i, (first, _) in enumerate(d.bin_bounds()[:-1]):
        assert got.get(first, 0) == want[("d",)][i]
    assert got.get(None, 0) == want[("d",)][d.null_index]
    assert hours.get(dt.datetime(2013, 3, 9, 0), 0) == want[("ts",)][0] > 0
