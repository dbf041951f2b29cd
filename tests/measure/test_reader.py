"""The total reader (dpsql.measure.reader): declared CSV dialects, framing at chunk
boundaries, typed Parquet/DuckDB sources (NaN, ±inf, NULL in non-nullable columns, type
mismatches refused from metadata), all against the Python twin in ``reference.py``.
Also run with the lowest DuckDB the project allows (Makefile)."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile  # noqa: E402
import reference  # noqa: E402

from dpsql.errors import ConfigError  # noqa: E402
from dpsql.measure import reader  # noqa: E402
from dpsql.measure.backend import DuckDBBackend  # noqa: E402
from dpsql.measure.source import CsvDialect, Source  # noqa: E402

SCHEMA = hostile.SCHEMA
CLIQUES = hostile.CLIQUES


def _counts(source: Source, schema=SCHEMA):
    backend = DuckDBBackend({"t": source}, threads=1)
    try:
        return backend.count_marginals(schema, CLIQUES)
    finally:
        backend.close()


def _agree(tmp_path, data: bytes, dialect: CsvDialect = CsvDialect()):
    path = tmp_path / "t.csv"
    path.write_bytes(data)
    got = _counts(Source("csv", path, dialect=dialect))
    ref = reference.counts_all(data, SCHEMA, CLIQUES, dialect)
    for c in CLIQUES:
        assert np.array_equal(got[c], ref[c]), c
    return got


@pytest.mark.parametrize("chunk", [3, 7, 64, reader.CHUNK])
def test_framing_is_the_same_at_every_chunk_boundary(tmp_path, monkeypatch, chunk):
    monkeypatch.setattr(reader, "CHUNK", chunk)
    rows = hostile.clean_rows(12, seed=5)
    data = (hostile.HEADER + b"\r\n" + b"\r\n".join(rows[:4]) + b"\r" + b"\n".join(rows[4:8]) + b"\r\r\n"
            + "40,M,Black,2,0.5,Zürich".encode() + b"\n" + b"\n".join(rows[8:]))   # no final newline
    got = _agree(tmp_path, data, CsvDialect(max_record_bytes=1024))
    assert int(got[()].sum()) == 13   # 12 rows + the Zürich row; the empty line (\r\r\n) is no record


@pytest.mark.parametrize("chunk, newline", [(1000, b"\n"), (999, b"\r\n"), (1001, b"\r\n"), (5017, b"\r"),
                                           (5018, b"\r\n"), (4096, b"\r\n")])
def test_overlong_records_are_malformed_across_chunks(tmp_path, monkeypatch, chunk, newline):
    monkeypatch.setattr(reader, "CHUNK", chunk)
    rows = hostile.clean_rows(5, seed=6)
    long = b"40,F,White,1,0.1," + b"x" * 5000
    data = hostile.csv_bytes(rows[:2] + [long] + rows[2:] + [long], newline, final=False)
    got = _agree(tmp_path, data, CsvDialect(max_record_bytes=2048))
    assert int(got[()].sum()) == 7
    assert got[("sex",)][SCHEMA.attribute("sex").invalid_index] >= 2


@pytest.mark.parametrize("dialect, text", [
    (CsvDialect(delimiter="\t"), "age\tsex\trace\tcode\tratio\tcity\n40\tM\tWhite\t1\t0.5\tZürich\n"
                                 "50\tF\t\"Bl\tack\"\t2\t\t\n"),
    (CsvDialect(quote=""), 'age,sex,race,code,ratio,city\n40,M,"White",1,0.5,Zürich\n'),
    (CsvDialect(escape="\\"), 'age,sex,race,code,ratio,city\n40,M,"Wh\\"ite",1,0.5,"Z\\\\ürich"\n'
                              '41,F,"Black",3,.5,"Gen\\ève"\n'),
    (CsvDialect(header=False, columns=("age", "sex", "race", "code", "ratio", "city")),
     "40,M,White,1,0.5,Zürich\n50,F,Black,,,\n"),
    (CsvDialect(null=("NA", "")), "age,sex,race,code,ratio,city\nNA,M,White,NA,NA,NA\n40,F,NA,1,,\n"),
])
def test_declared_dialects(tmp_path, dialect, text):
    _agree(tmp_path, text.encode("utf-8"), dialect)


def test_latin1_encoding_matches_labels_by_their_text(tmp_path):
    data = "age,sex,race,code,ratio,city\n40,M,White,1,0.5,Zürich\n41,F,White,1,0.5,Genève\n".encode("latin-1")
    got = _agree(tmp_path, data, CsvDialect(encoding="latin-1"))
    assert got[("city",)].tolist()[:2] == [1, 1]
    utf8 = _agree(tmp_path, data)   # read as UTF-8 the same bytes are not valid: no label matches
    assert utf8[("city",)].tolist()[:2] == [0, 0]


def test_header_problems_are_config_errors_before_counting(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(b"age;sex;race;code;ratio;city\n40;M;White;1;0.5;\n")
    with pytest.raises(ConfigError, match="no column 'age'"):
        _counts(Source("csv", path))
    path.write_bytes(b"")
    with pytest.raises(ConfigError, match="empty"):
        _counts(Source("csv", path))
    path.write_bytes(b'"age,sex\n')
    with pytest.raises(ConfigError, match="header line does not parse"):
        _counts(Source("csv", path))


def _typed_rows():
    nan, inf = float("nan"), float("inf")
    return [(40.0, "M", "White", 1, 0.5, "Zürich"), (nan, "F", "Black", 2, nan, None),
            (inf, None, None, None, -inf, "Genève"), (-inf, "X", "Asian", 7, 0.1, "Bern"),
            (None, "M", "White", 3, None, "Zürich"), (29.5, "F", "", 2, 1.0, "")]


def _expected(rows, c):
    pos = [SCHEMA.column_names.index(a) for a in c]
    arr = np.zeros(tuple(SCHEMA.domain[a] for a in c), dtype=np.int64)
    for r in rows:
        arr[tuple(SCHEMA.attributes[p].index_of(r[p]) for p in pos)] += 1
    return arr


@pytest.mark.parametrize("kind", ["parquet", "duckdb"])
def test_typed_sources_nan_inf_and_nulls(tmp_path, kind):
    rows = _typed_rows()
    con = duckdb.connect(str(tmp_path / "db.duckdb") if kind == "duckdb" else ":memory:")
    con.execute("CREATE TABLE t (age DOUBLE, sex VARCHAR, race VARCHAR, code BIGINT, ratio FLOAT, city VARCHAR)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?, ?, ?, ?)", [list(r) for r in rows])
    if kind == "parquet":
        path = tmp_path / "t.parquet"
        con.execute(f"COPY t TO '{path}' (FORMAT parquet)")
        source = Source("parquet", path)
    else:
        path, source = tmp_path / "db.duckdb", Source("duckdb", tmp_path / "db.duckdb", table="t")
    con.close()
    got = _counts(source)
    for c in CLIQUES:
        assert np.array_equal(got[c], _expected(rows, c)), c
    age = SCHEMA.attribute("age")
    assert age.index_of(math.nan) == age.invalid_index == 0     # NaN → the invalid place
    assert age.index_of(math.inf) == age.size - 1               # ±inf clamp like any number


# every integer type DuckDB has, each at both ends of its range, under attributes that take
# the arithmetic bins, the comparison chain (edges; bounds beyond the arithmetic guard) and
# the label lookup (BIGINT read as text labels)
INT_TYPES = {"TINYINT": 8, "SMALLINT": 16, "INTEGER": 32, "BIGINT": 64, "HUGEINT": 128}
UINT_TYPES = {"UTINYINT": 8, "USMALLINT": 16, "UINTEGER": 32, "UBIGINT": 64, "UHUGEINT": 128}


WIDE = ("UBIGINT", "HUGEINT", "UHUGEINT")   # integer types beyond BIGINT


def _integer_attributes(name: str, wide: bool) -> list:
    from dpsql.domain import Categorical, IntegerRange, Numeric
    out = [IntegerRange(f"{name}_u", -7, 20, bin_width=4, nullable=True),
           IntegerRange(f"{name}_w", -(2 ** 61), 2 ** 61, bin_width=2 ** 59),
           IntegerRange(f"{name}_e", 0, 100, edges=[0, 1, 10, 50], nullable=True),
           IntegerRange(f"{name}_one", 3, 3),
           Categorical(f"{name}_lab", ["0", "1", "-1", "255"], nullable=True),
           Categorical(f"{name}_ilab", [-1, 0, 255, 2 ** 61]),
           Numeric(f"{name}_num", [-1e20, -0.5, 0.5, 1e20])]
    if not wide:   # beyond the ±2^62 guard: the comparison chain (refused for wide types)
        out.append(IntegerRange(f"{name}_big", -(2 ** 63), 2 ** 63 - 1, bin_width=2 ** 60))
    return out


@pytest.mark.parametrize("kind", ["parquet", "duckdb"])
def test_typed_integer_columns_of_every_width_land_as_index_of(tmp_path, kind):
    """Arithmetic bins cast to BIGINT only where the declared type holds nothing else; the
    extremes of UBIGINT and the 128-bit types go through the comparison chain."""
    from dpsql.domain import TableSchema
    types = {**INT_TYPES, **UINT_TYPES}
    if kind == "parquet":   # Parquet has no 128-bit integers (DuckDB writes them as DOUBLE)
        types = {t: b for t, b in types.items() if b < 128}
    values = {}
    for t, bits in types.items():
        lo, hi = (0, 2 ** bits - 1) if t.startswith("U") else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
        probes = (-8, -7, -4, -3, -1, 0, 1, 3, 9, 10, 20, 21, 255, 2 ** 61, 2 ** 61 + 1, -(2 ** 61) - 1)
        values[t] = [None, lo, hi, lo + 1, hi - 1] + [v for v in probes if lo <= v <= hi]
    rows = max(len(v) for v in values.values())
    attributes, columns = [], []
    for t in types:
        these = _integer_attributes(t.lower(), t in WIDE)
        attributes += these
        columns += [(a.name, t) for a in these]
    schema = TableSchema("t", tuple(attributes))
    con = duckdb.connect(str(tmp_path / "db.duckdb") if kind == "duckdb" else ":memory:")
    con.execute("CREATE TABLE t (" + ", ".join(f"{n} {t}" for n, t in columns) + ")")
    data = [[values[t][i % len(values[t])] for _, t in columns] for i in range(rows)]
    for row in data:   # literals: DuckDB 1.4's client binds a 128-bit Python int as a DOUBLE
        con.execute("INSERT INTO t VALUES (" + ", ".join(
            "NULL" if v is None else f"CAST('{v}' AS {t})" for v, (_, t) in zip(row, columns)) + ")")
    if kind == "parquet":
        source = Source("parquet", tmp_path / "t.parquet")
        con.execute(f"COPY t TO '{source.path}' (FORMAT parquet)")
        described = con.execute(f"DESCRIBE SELECT * FROM read_parquet('{source.path}')").fetchall()
        types_read = {r[0]: r[1] for r in described}
    else:
        source = Source("duckdb", tmp_path / "db.duckdb", table="t")
        types_read = {r[0]: r[1] for r in con.execute("DESCRIBE t").fetchall()}
    con.close()
    backend = DuckDBBackend({"t": source}, threads=1)
    try:
        cliques = [(a.name,) for a in attributes]
        got = backend.count_marginals(schema, cliques)
    finally:
        backend.close()
    for j, a in enumerate(attributes):
        expected = np.zeros(a.size, dtype=np.int64)
        for row in data:
            value = row[j]
            assert reader.type_family(types_read[a.name]) == "integer"
            if value is not None and a.kind == "categorical" and a.python_type is str:
                value = str(value)
            expected[a.index_of(value)] += 1
        assert np.array_equal(got[(a.name,)], expected), (a.name, types_read[a.name], got[(a.name,)], expected)
    big = _integer_attributes("x", False)[-1]
    assert [reader.accepts(big, t) for t in types] == [t not in WIDE for t in types]


def test_typed_cells_cost_one_expression_per_row():
    """The per-row work of a typed column does not grow with its bins or labels on DuckDB:
    a 100,000-bin integer range is one clamp and a division (no comparison chain), and 500
    labels one ENUM lookup (no comparison per label), on any engine's integer type."""
    from dpsql.domain import Categorical, IntegerRange
    from sqlglot import exp
    wide = IntegerRange("x", 0, 999_999, bin_width=10)
    labels = Categorical("s", [f"l{i}" for i in range(500)])
    for dialect, int_type in (("duckdb", "BIGINT"), ("postgres", "integer"), ("spark", "int")):
        cell = reader.typed_column(wide, exp.column("x"), int_type, "0", dialect).cell
        assert not list(cell.find_all(exp.LT, exp.GT, exp.LTE, exp.GTE)), dialect
        assert len(list(cell.find_all(exp.Case))) == 1 and len(list(cell.find_all(exp.If))) == 1, dialect
    cell = reader.typed_column(labels, exp.column("s"), "VARCHAR", "0", "duckdb").cell
    assert not list(cell.find_all(exp.EQ, exp.Case)), cell.sql("duckdb")[:200]
    # a nullable open categorical keeps the NULL branch (NULL has its own cell), not the chain
    cell = reader.typed_column(Categorical("s", labels.labels_, nullable=True), exp.column("s"), "VARCHAR", "0",
                               "duckdb").cell
    assert len(list(cell.find_all(exp.EQ))) == 0


def test_typed_sources_with_wrong_types_are_refused_from_metadata(tmp_path):
    con = duckdb.connect()
    path = tmp_path / "t.parquet"
    con.execute(f"COPY (SELECT DATE '2020-01-01' AS age, 'M' AS sex, 'White' AS race, 1 AS code, "
                f"0.5 AS ratio, 'Zürich' AS city) TO '{path}' (FORMAT parquet)")
    with pytest.raises(ConfigError, match="'age' has type DATE"):
        _counts(Source("parquet", path))
    con.execute(f"COPY (SELECT 40 AS age, 'M' AS sex, 'White' AS race, 1 AS code, 0.5 AS ratio) "
                f"TO '{path}' (FORMAT parquet)")
    with pytest.raises(ConfigError, match="no column 'city'"):
        _counts(Source("parquet", path))


def test_data_check_counts_every_status(tmp_path):
    path = tmp_path / "t.csv"
    rows = hostile.clean_rows(10, seed=7)
    path.write_bytes(hostile.csv_bytes(rows + [b"NA,X,White,9,2.5,Bern", b"15,F", b"40.5,M,White,1,-1,"]))
    backend = DuckDBBackend({"t": Source("csv", path)})
    report = backend.data_check(SCHEMA)
    backend.close()
    cols = {c.name: c for c in report.columns}
    assert report.records == 13 and not report.ok
    assert cols["age"].problems == {"unreadable": 1, "malformed": 1, "not_integer": 1}
    assert cols["sex"].problems == {"not_a_label": 1, "malformed": 1}
    assert cols["ratio"].problems == {"above_range": 1, "below_range": 1, "malformed": 1}
    assert cols["city"].problems == {"not_a_label": 1, "malformed": 1}
    assert cols["sex"].examples["not_a_label"] == [("X", 1)]


@pytest.mark.parametrize("spec, match", [
    ({"csv": "x.csv", "header": False}, "needs source.columns"),
    ({"csv": "x.csv", "delimiter": ";;"}, "one ASCII character"),
    ({"csv": "x.csv", "encoding": "utf-16"}, "not supported"),
    ({"csv": "x.csv", "max_rows": 2}, "no longer declare the privacy unit"),   # privacy_unit, under the table
    ({"duckdb": "x.duckdb"}, "needs table"),
    ({"csv": "x.csv", "parquet": "y.parquet"}, "exactly one"),
])
def test_source_config_errors(tmp_path, spec, match):
    with pytest.raises(ConfigError, match=match):
        Source.from_config(spec, tmp_path)


def test_data_version_replaces_the_content_hash(tmp_path):
    path = tmp_path / "t.csv"
    path.write_bytes(hostile.csv_bytes(hostile.clean_rows(3)))
    a = Source.from_config({"csv": "t.csv"}, tmp_path).fingerprint()
    b = Source.from_config({"csv": "t.csv", "data_version": "2026-11"}, tmp_path).fingerprint()
    assert set(a) == {"size", "sha256"} and b == {"data_version": "2026-11"}
    path.write_bytes(hostile.csv_bytes(hostile.clean_rows(4)))
    assert Source.from_config({"csv": "t.csv"}, tmp_path).fingerprint() != a


def test_a_file_hash_is_kept_across_processes_and_redone_when_the_file_changes(tmp_path, monkeypatch):
    """Issue 17: every new process hashed the whole source before answering from a saved
    model; with a store beside the ledger it hashes only when the file's stat changed."""
    from dpsql.measure import source as source_mod

    path = tmp_path / "t.csv"
    path.write_bytes(hostile.csv_bytes(hostile.clean_rows(3)))
    store = tmp_path / "l.sources.json"
    src = Source.from_config({"csv": "t.csv"}, tmp_path)
    a = src.fingerprint(store=store)
    assert store.exists() and store.stat().st_mode & 0o077 == 0

    class NoHash:
        @staticmethod
        def sha256(*args):
            raise AssertionError("the file was hashed again")

    monkeypatch.setattr(source_mod, "_HASHES", {})          # a new process
    monkeypatch.setattr(source_mod, "hashlib", NoHash)
    assert src.fingerprint(store=store) == a
    monkeypatch.undo()
    path.write_bytes(hostile.csv_bytes(hostile.clean_rows(4)))
    monkeypatch.setattr(source_mod, "_HASHES", {})
    b = src.fingerprint(store=store)
    assert b != a
    monkeypatch.setattr(source_mod, "_HASHES", {})
    assert Source.from_config({"csv": "t.csv"}, tmp_path).fingerprint() == b      # no store: hashed
    store.write_text("{not json")                                                # a damaged store
    monkeypatch.setattr(source_mod, "_HASHES", {})
    assert src.fingerprint(store=store) == b


def test_data_check_with_a_privacy_unit_sees_every_record(tmp_path):
    path = tmp_path / "p.csv"
    rows = [b"p1," + r for r in hostile.clean_rows(4, seed=8)] + [b",40,F,White,1,0.1,", b'p2,"40,F']
    path.write_bytes(b"pid," + hostile.HEADER + b"\n" + b"\n".join(rows) + b"\n")
    backend = DuckDBBackend({"t": Source("csv", path, id_column="pid", max_rows_per_id=2)})
    report = backend.data_check(SCHEMA)
    counts = backend.count_marginals(SCHEMA, [()])
    backend.close()
    assert report.records == 6 and report.dropped == 4      # 2 of p1's 4 rows, no id, malformed
    assert int(counts[()]) == 2
    assert {c.name: c.problems.get("malformed") for c in report.columns}["age"] == 1
