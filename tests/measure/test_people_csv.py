"""A people schema over CSV files (issue 32): each table's view joins the CSV records read by
the total reader, and counts exactly like the Parquet copy of the same rows — the Python
reference of ``test_people_engines`` (join along the keys, cells by ``index_of``, at most
``max_rows`` rows per person by the keyed SHA-256 order) — with orphans, NULL keys and NULL
cells, a quoted field holding the delimiter, and tables of both kinds in one schema.
Removing one person moves each marginal by at most the view's bound."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

import shop
from test_people_engines import _assert_within_bound, _counts, reference

import dpsql
from dpsql.errors import ConfigError


def write_csv(rows: dict[str, list[tuple]], directory: Path) -> dict[str, Path]:
    """The shop's tables as CSV (header, NULL as an empty field, text quoted when needed)."""
    files = shop.write_parquet(rows, directory / "parquet")
    con = duckdb.connect()
    out = {}
    for table, path in files.items():
        out[table] = directory / f"{table}.csv"
        con.execute(f"COPY (SELECT * FROM read_parquet('{path}')) TO '{out[table]}' (FORMAT csv, HEADER true)")
    con.close()
    return out


def _quoted_rows() -> dict[str, list[tuple]]:
    # a label holding the delimiter is written quoted: it must land in its own cell
    rows = shop.shop_rows()
    rows["customers"].append((501, "AUTO,BUILDING", 1))
    rows["orders"].append((95001, 501, "O", 2))
    rows["lineitem"].append((95001, 1, "N", 3))
    return rows


def test_csv_views_count_like_the_reference_and_like_parquet(tmp_path):
    rows = _quoted_rows()
    csv = write_csv(rows, tmp_path / "csv")
    assert '"AUTO,BUILDING"' in csv["customers"].read_text()
    cfg, counts = _counts(tmp_path, {t: {"csv": str(p)} for t, p in csv.items()})
    parquet = shop.write_parquet(rows, tmp_path / "pq")
    _, typed = _counts(tmp_path, {t: {"parquet": str(p)} for t, p in parquet.items()})
    mixed_sources = {"customers": {"csv": str(csv["customers"])}, "orders": {"parquet": str(parquet["orders"])},
                     "lineitem": {"csv": str(csv["lineitem"])}}
    _, mixed = _counts(tmp_path, mixed_sources)
    for table in shop.TYPES:
        expected = reference(rows, cfg, table)
        for clique, got in counts[table].items():
            assert np.array_equal(got, expected[clique]), (table, clique, got, expected[clique])
            assert np.array_equal(got, typed[table][clique]), (table, clique)
            assert np.array_equal(got, mixed[table][clique]), (table, clique)


def test_one_person_moves_each_csv_view_by_at_most_its_bound(tmp_path):
    rows = shop.shop_rows()
    cfg, full = _counts(tmp_path, {t: {"csv": str(p)} for t, p in write_csv(rows, tmp_path / "full").items()})
    for person in (7, 14, 1):
        files = write_csv(shop.without(rows, person), tmp_path / f"n{person}")
        _, after = _counts(tmp_path, {t: {"csv": str(p)} for t, p in files.items()})
        _assert_within_bound(cfg, full, after, person)
    # the heavy customer is truncated: removing them moves the line items by exactly the bound
    assert int(full["lineitem"][()] - after["lineitem"][()]) <= cfg.people.views["lineitem"].max_rows


def test_a_csv_people_schema_measures_and_answers_a_join(tmp_path):
    csv = write_csv(shop.shop_rows(customers=60), tmp_path)
    sql = ("SELECT o.status, l.flag, COUNT(*) FROM customers c JOIN orders o ON o.custkey = c.custkey "
           "JOIN lineitem l ON l.orderkey = o.orderkey GROUP BY o.status, l.flag")
    spec = shop.config(tmp_path, {t: {"csv": str(p)} for t, p in csv.items()}, bounds={"orders": 20, "lineitem": 200},
                       workload={"queries": [sql]})
    con = dpsql.connect(spec, budget={"epsilon": 1e7, "delta": 1e-6})
    for view in con.session.engine.view_shares(con.session.engine.workload_rho()):
        con.session.measure(view)
    cur = con.cursor()
    cur.execute("SET dpsql.estimator = 'least_squares'")
    cur.execute(sql)
    got = {tuple(r[:2]): r[2] for r in cur.fetchall()}
    exact = duckdb.connect()
    for t, p in csv.items():
        exact.execute(f"CREATE VIEW {t} AS SELECT * FROM read_csv('{p}', header = true)")
    for status, flag, n in exact.execute(sql).fetchall():
        assert abs(got[(status, flag)] - n) < 0.5, (status, flag, got[(status, flag)], n)
    con.close()


FLAG_SQL = ("SELECT c.nation, COUNT(DISTINCT c.custkey) FROM customers c JOIN orders o ON o.custkey = c.custkey "
            "WHERE {} GROUP BY c.nation")


def _flag_counts(tmp_path: Path, sources: dict, condition: str):
    from dpsql.engine.config import load_config
    from dpsql.measure.router import open_backend

    cfg = load_config(shop.config(tmp_path, sources, workload={"queries": [FLAG_SQL.format(condition)]}))
    schema = cfg.tables["customers"]
    flag = next(c for c in schema.column_names if c.startswith("orders__has_"))
    backend = open_backend(cfg.sources)
    try:
        return backend.count_marginals(schema, [(flag,)])[(flag,)]
    finally:
        backend.close()


def test_a_flag_on_a_csv_column_of_text_counts_like_parquet_and_a_numeric_one_is_refused_at_load(tmp_path):
    # a CSV hop's columns are the records' text: a condition on a categorical compares text
    # and counts like the Parquet copy; one on a declared number or date cannot be evaluated
    # on that text (DuckDB's binder refused it at every measurement, whatever the rows), so
    # the configuration refuses it when it loads, before any row is read
    rows = shop.shop_rows()
    csv = write_csv(rows, tmp_path / "csv")
    parquet = shop.write_parquet(rows, tmp_path / "pq")
    on_csv = _flag_counts(tmp_path, {t: {"csv": str(p)} for t, p in csv.items()}, "o.status = 'F'")
    on_parquet = _flag_counts(tmp_path, {t: {"parquet": str(p)} for t, p in parquet.items()}, "o.status = 'F'")
    assert np.array_equal(on_csv, on_parquet) and on_csv[1] > 0
    with pytest.raises(ConfigError, match="priority") as err:
        _flag_counts(tmp_path, {t: {"csv": str(p)} for t, p in csv.items()}, "o.priority <= 2")
    assert err.value.hint


def test_a_csv_table_of_a_people_schema_may_not_declare_records_spanning_lines(tmp_path):
    # framed one row per line, a record's later line can be a well-formed row naming another
    # person's key (an order of customer 7 inside a comment of customer 1's order): removing
    # one person would then move other persons' rows, which max_rows does not bound; an id
    # privacy unit refuses max_record_lines for the same reason (Source.with_unit)
    csv = write_csv(shop.shop_rows(), tmp_path / "csv")
    sources = {t: {"csv": str(p)} for t, p in csv.items()}
    sources["orders"]["max_record_lines"] = 3
    with pytest.raises(ConfigError, match="max_record_lines") as err:
        from dpsql.engine.config import load_config
        load_config(shop.config(tmp_path, sources))
    assert "max_rows" in err.value.hint
