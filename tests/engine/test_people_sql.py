"""SQL joins of private tables along the people schema (issue 32 item 4): accepted joins
equal DuckDB's exact join at a near-infinite budget (bounds above every person's rows, so
nothing is truncated), and every refused shape names its SQLSTATE and a hint."""

from __future__ import annotations

import sys
from pathlib import Path

import duckdb
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

import dpsql  # noqa: E402
from dpsql.engine.config import load_config  # noqa: E402
from dpsql.engine.engine import Engine  # noqa: E402
from dpsql.errors import UnsupportedQueryError  # noqa: E402
from dpsql.sql import compile as compile_sql  # noqa: E402

JOIN_CO = "customers c JOIN orders o ON o.custkey = c.custkey"
JOIN_COL = JOIN_CO + " JOIN lineitem l ON l.orderkey = o.orderkey"
ACCEPTED = [
    f"SELECT o.status, COUNT(*) FROM {JOIN_CO} GROUP BY o.status",
    f"SELECT o.status, l.flag, COUNT(*), SUM(l.qty) FROM {JOIN_COL} GROUP BY o.status, l.flag",
    "SELECT l.flag, AVG(l.qty) FROM orders o JOIN lineitem l ON l.orderkey = o.orderkey "
    "JOIN customers c ON c.custkey = o.custkey WHERE o.priority >= 3 GROUP BY l.flag",
    f"SELECT c.nation, SUM(l.qty) AS total FROM {JOIN_COL} WHERE c.nation <= 3 GROUP BY c.nation",
    "SELECT status, COUNT(*) FROM customers JOIN orders USING (custkey) WHERE nation < 2 GROUP BY status",
    # persons, not rows: customers with an order (with a line item), by nation
    f"SELECT c.nation, COUNT(DISTINCT c.custkey) FROM {JOIN_CO} WHERE c.nation <= 3 GROUP BY c.nation",
    f"SELECT COUNT(DISTINCT o.custkey) AS buyers FROM {JOIN_COL} WHERE c.nation = 1",
    # persons with at least one such row: a measured flag per person and condition
    f"SELECT c.nation, COUNT(DISTINCT c.custkey) FROM {JOIN_CO} WHERE o.priority = 1 AND c.nation <= 3 "
    "GROUP BY c.nation",
    f"SELECT COUNT(DISTINCT c.custkey) AS buyers FROM {JOIN_COL} WHERE l.flag = 'R' AND o.status = 'F'",
    f"SELECT c.nation, COUNT(DISTINCT o.custkey) FROM {JOIN_CO} WHERE (o.priority >= 4 OR c.nation = 0) "
    "AND c.nation <= 3 GROUP BY c.nation",
]


@pytest.fixture(scope="module")
def shop_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shop")
    return tmp, shop.write_parquet(shop.shop_rows(customers=60), tmp)


def _exact(files, sql):
    con = duckdb.connect()
    for t, p in files.items():
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{p}')")
    return con.execute(sql).fetchall()


def test_accepted_joins_equal_the_exact_join_at_a_huge_budget(shop_files, tmp_path):
    tmp, files = shop_files
    spec = shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                       bounds={"orders": 20, "lineitem": 200}, workload={"queries": ACCEPTED},
                       policy="refuse")
    con = dpsql.connect(spec, budget={"epsilon": 1e7, "delta": 1e-6})
    for view in con.session.engine.view_shares(con.session.engine.workload_rho()):
        con.session.measure(view)
    cur = con.cursor()
    # HDMM's least squares: unbiased and, at this budget, exact to rounding (the model's fit
    # stops at its convergence gap, ~0.2% on a SUM over 50 values)
    cur.execute("SET dpsql.estimator = 'least_squares'")
    for sql in ACCEPTED:
        cur.execute(sql)
        got = cur.fetchall()
        groups = len(cur.description) - sum(1 for d in cur.description
                                            if d[0] in ("count", "sum", "avg", "total", "buyers"))
        # each value within 6 of its reported standard errors (a SUM's noise grows with the
        # bound, 200 rows of up to 50 each; counts' errors are ~0.1)
        ours = {tuple(r[:groups]): (r[groups:], e[groups:]) for r, e in zip(got, cur.stderr)}
        for row in _exact(files, sql):
            key, values = tuple(row[:groups]), row[groups:]
            assert key in ours, (sql, key)
            for a, se, b in zip(*ours.pop(key), values):
                assert abs(a - float(b)) <= 6 * se + 1e-6, (sql, key, a, b, se)
        for key, (values, errs) in ours.items():   # groups the join does not have: empty cells
            shown = [(v, se) for v, se in zip(values, errs) if v is not None and v == v]
            assert all(abs(v) <= 6 * se + 1e-6 for v, se in shown), (sql, key, values)
    con.close()


def test_join_columns_keep_their_names_and_compile_over_the_deepest_view(shop_files, tmp_path):
    tmp, files = shop_files
    engine = Engine(load_config(shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()})))
    cq = compile_sql(ACCEPTED[1], engine.catalog)
    assert cq.table == "lineitem"
    assert [c.name for c in cq.columns] == ["status", "flag", "count", "sum"]
    assert compile_sql(ACCEPTED[0], engine.catalog).table == "orders"
    persons = compile_sql(ACCEPTED[6], engine.catalog)     # buyers: persons with a line item
    assert persons.table == "customers" and [c.name for c in persons.columns] == ["buyers"]
    assert "lineitem__exists" in persons.linear_queries[0].description


@pytest.mark.parametrize("sql, words", [
    ("SELECT COUNT(*) FROM customers c JOIN lineitem l ON l.orderkey = c.custkey", "skips 'orders'"),
    ("SELECT COUNT(*) FROM customers c JOIN orders o ON o.orderkey = c.custkey", "not a declared key"),
    ("SELECT COUNT(*) FROM customers c LEFT JOIN orders o ON o.custkey = c.custkey", "LEFT"),
    ("SELECT COUNT(*) FROM customers c JOIN orders o ON o.custkey = c.custkey AND o.priority = c.nation",
     "not a declared key"),
    ("SELECT COUNT(*) FROM customers c JOIN orders o ON o.custkey > c.custkey", "not an equality"),
    ("SELECT COUNT(*) FROM orders a JOIN orders b ON a.custkey = b.custkey", "joined with itself"),
    ("SELECT o.status, COUNT(DISTINCT c.custkey) FROM customers c JOIN orders o ON o.custkey = c.custkey "
     "GROUP BY o.status", "columns of 'customers' only"),
    ("SELECT COUNT(DISTINCT c.custkey), COUNT(*) FROM customers c JOIN orders o ON o.custkey = c.custkey",
     "different views"),
    ("SELECT COUNT(DISTINCT o.orderkey) FROM orders o", "DISTINCT"),
    # a condition on orders outside the workload: no flag of it was measured
    ("SELECT COUNT(DISTINCT c.custkey) FROM customers c JOIN orders o ON o.custkey = c.custkey "
     "WHERE o.priority = 2", "add this statement to [workload]"),
    ("SELECT COUNT(DISTINCT c.custkey) FROM customers c JOIN orders o ON o.custkey = c.custkey "
     "WHERE o.orderkey > 5", "reads the key"),
])
def test_refused_joins_name_sqlstate_and_hint(shop_files, tmp_path, sql, words):
    tmp, files = shop_files
    engine = Engine(load_config(shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()})))
    with pytest.raises(UnsupportedQueryError) as info:
        compile_sql(sql, engine.catalog)
    assert info.value.sqlstate == "0A000" and info.value.hint
    assert words in str(info.value), str(info.value)


def test_a_condition_on_persons_rows_is_one_measured_flag_of_the_persons_view(shop_files, tmp_path):
    """The workload's COUNT(DISTINCT person) conditions on orders/line items become 0/1
    columns of the person's view (one row per person: sensitivity 1), named by the
    condition's text, so the same condition written with other aliases finds its flag."""
    tmp, files = shop_files
    engine = Engine(load_config(shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                                            workload={"queries": ACCEPTED})))
    flags = [c for c in engine.catalog["customers"].column_names if "__has_" in c]
    assert len(flags) == 3 and flags[0].startswith("orders__has_") and flags[1].startswith("lineitem__has_")
    again = compile_sql("SELECT nation, COUNT(DISTINCT x.custkey) FROM customers x JOIN orders y "
                        "ON x.custkey = y.custkey WHERE y.priority = 1 AND x.nation <= 3 GROUP BY nation",
                        engine.catalog)
    assert again.table == "customers" and flags[0] in again.linear_queries[0].description
    assert engine.config.sources["customers"].unit_rows == 1


def test_private_tables_on_two_branches_are_refused(shop_files, tmp_path):
    """orders and a second child of customers (returns): pairs of one person's rows."""
    tmp, files = shop_files
    spec = shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()})
    spec["tables"]["returns"] = {"domain": spec["tables"]["orders"]["domain"], "domain_table": "orders",
                                 "source": {"parquet": str(files["orders"])}}
    spec["people"]["tables"]["returns"] = {"parent": "customers", "foreign_key": "custkey", "max_rows": 2}
    engine = Engine(load_config(spec))
    with pytest.raises(UnsupportedQueryError, match="different branches") as info:
        compile_sql("SELECT COUNT(*) FROM customers c JOIN orders o ON o.custkey = c.custkey "
                    "JOIN returns r ON r.custkey = c.custkey", engine.catalog)
    assert info.value.hint


def test_a_sum_over_wide_bins_on_a_view_measures_its_offsets_over_the_view(shop_files, tmp_path):
    """Review finding: the binning offsets were summed over the first hop's own source, not
    the view's join, so any people view with SUM/AVG over a wide-binned column failed to
    measure (``a parquet source has no local file``)."""
    tmp, files = shop_files
    sql = f"SELECT l.flag, SUM(l.qty) FROM {JOIN_COL} GROUP BY l.flag"
    spec = shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                       bounds={"orders": 20, "lineitem": 200}, workload={"queries": [sql]}, policy="refuse")
    domain = tmp_path / "shop.toml"
    domain.write_text(domain.read_text().replace("lo = 1\nhi = 50\n", "lo = 1\nhi = 50\nbin_width = 10\n"))
    con = dpsql.connect(spec, budget={"epsilon": 1e7, "delta": 1e-6})
    for view in con.session.engine.view_shares(con.session.engine.workload_rho()):
        con.session.measure(view)
    cur = con.cursor()
    cur.execute("SET dpsql.estimator = 'least_squares'")
    cur.execute(sql)
    got = {r[0]: (r[1], e[1]) for r, e in zip(cur.fetchall(), cur.stderr)}
    for flag, exact in _exact(files, sql):
        value, se = got[flag]
        assert abs(value - float(exact)) <= 6 * se + 1e-6, (flag, value, exact, se)
    con.close()


@pytest.mark.parametrize("condition", ["CAST(o.status AS INTEGER) = 1", "o.priority * 3 > 6", "abs(o.priority) = 2",
                                       "o.status LIKE o.status"])
def test_a_flag_condition_computing_from_the_rows_values_is_refused_and_never_measured(shop_files, tmp_path,
                                                                                          condition):
    """A flag's condition runs inside the engine on every row of the table: a cast of a
    column's text (here 'F' is no integer) failed every measurement of the person's view,
    on-demand ones included, and failing depended on the values held (a table of numeric
    texts would have counted).  Such a condition is refused from its SQL; the person's view
    gets no flag of it and is measured."""
    tmp, files = shop_files
    sql = f"SELECT COUNT(DISTINCT c.custkey) FROM {JOIN_CO} WHERE {condition}"
    cfg = load_config(shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                                  workload={"queries": [sql]}))
    assert not [c for c in cfg.tables["customers"].column_names if "__has_" in c]
    engine = Engine(cfg)
    with pytest.raises(UnsupportedQueryError) as info:
        compile_sql(sql, engine.catalog)
    assert info.value.sqlstate == "0A000" and "constants" in info.value.hint
    counts = engine.backend.count_marginals(cfg.tables["customers"], [("nation",)])
    assert counts[("nation",)].sum() == 60
