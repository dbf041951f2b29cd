"""Unit tests of the SQL front end: structure of compiled queries, errors, parameters,
post-processing (quantiles, standard errors) and a full-domain brute-force check."""

import math

import duckdb
import numpy as np
import pytest

import dpsql.errors as errors
from dpsql.domain import Categorical, IntegerRange, Numeric, TableSchema
from dpsql.linalg import Kron, Total, Weighted
from dpsql.sql import compile as compile_sql
from dpsql.sql.postprocess import quantile_from_histogram, run_program
from sql_oracle import rows_equal


def exact(oracle, cq):
    return {lq.name: oracle.answer(lq) for lq in cq.linear_queries}


# --- structure of linear queries -------------------------------------------------------

def test_factors_align_with_schema_and_untouched_are_total(catalog):
    schema = catalog["adult"]
    cq = compile_sql("SELECT sex, AVG(age) FROM adult WHERE race = 'White' GROUP BY sex", catalog)
    names = list(schema.column_names)
    assert [c.name for c in cq.columns] == ["sex", "avg"]
    assert cq.groups == [("Female",), ("Male",)]
    for lq in cq.linear_queries:
        assert lq.kind == "linear"
        assert lq.matrix.shape == (2, schema.domain.size())
        for block in lq.matrix.blocks:
            assert isinstance(block, Weighted) and isinstance(block.base, Kron)
            factors = block.base.factors
            assert len(factors) == len(names)
            for name, f in zip(names, factors):
                assert f.shape[1] == schema.attribute(name).size
                assert isinstance(f, Total) == (name not in lq.attributes)
    assert {lq.attributes for lq in cq.linear_queries} == {("age", "race", "sex"), ("race", "sex")}


def test_shared_linear_queries_are_deduplicated(catalog):
    cq = compile_sql("SELECT COUNT(age), AVG(age), SUM(age), COUNT(*) FROM adult", catalog)
    # COUNT(age) on a non-nullable column is COUNT(*): one count query and one sum query.
    assert len(cq.linear_queries) == 2


def test_disjunction_gives_disjoint_blocks(oracle, catalog):
    cq = compile_sql("SELECT COUNT(*) FROM adult WHERE sex = 'Male' OR age < 30", catalog)
    (lq,) = cq.linear_queries
    assert lq.blocks == 2
    rows, _ = cq.postprocess(exact(oracle, cq))
    assert rows == [tuple(oracle.duck("SELECT COUNT(*) FROM adult WHERE sex = 'Male' OR age < 30")[0])]


def test_never_true_predicate_is_zero(oracle, catalog):
    cq = compile_sql("SELECT COUNT(*), SUM(age) FROM adult WHERE sex = 'Male' AND sex = 'Female'", catalog)
    assert cq.linear_queries == []  # known from the domain alone: nothing to measure
    rows, errs = cq.postprocess({}, {})
    assert rows == [(0.0, 0.0)] and errs == [(0.0, 0.0)]


def test_three_valued_logic_excludes_null_cells(catalog):
    schema = catalog["adult"]
    wc = schema.attribute("workclass")
    for sql in ["SELECT COUNT(*) FROM adult WHERE NOT (workclass = 'Private')",
                "SELECT COUNT(*) FROM adult WHERE workclass <> 'Private'",
                "SELECT COUNT(*) FROM adult WHERE workclass NOT IN ('Private')"]:
        (lq,) = compile_sql(sql, catalog).linear_queries
        f = lq.matrix.blocks[0].base.factors[schema.column_names.index("workclass")]
        dense = f.dense()[0]
        assert dense[wc.null_index] == 0 and dense[0] == 0 and dense[1:wc.null_index].all(), sql


def test_empty_groups_are_returned_with_zero_counts(oracle, catalog):
    # No one in the extract is 90 and never worked, but the WHERE allows it: the group is
    # listed with a zero count, because whether it is empty is private.
    cq = compile_sql("SELECT workclass, COUNT(*) FROM adult WHERE age = 90 GROUP BY workclass", catalog)
    assert len(cq.groups) == catalog["adult"].attribute("workclass").size
    rows, _ = cq.postprocess(exact(oracle, cq))
    assert dict(rows)["Never-worked"] == 0.0
    assert all(r[1] >= 0 for r in rows)
    assert len(oracle.duck(cq.sql)) < len(rows)


def test_where_drops_groups_no_cell_can_reach(catalog):
    cq = compile_sql("SELECT workclass, COUNT(*) FROM adult WHERE workclass IS NOT NULL GROUP BY workclass",
                     catalog)
    labels = [g[0] for g in cq.groups]
    assert None not in labels and len(labels) == catalog["adult"].attribute("workclass").size - 1


def test_group_order_is_domain_order_and_keys_follow_group_by(oracle, catalog):
    a = compile_sql("SELECT income, sex, COUNT(*) FROM adult GROUP BY income, sex", catalog)
    b = compile_sql("SELECT income, sex, COUNT(*) FROM adult GROUP BY sex, income", catalog)
    assert a.groups == [("<=50K", "Female"), (">50K", "Female"), ("<=50K", "Male"), (">50K", "Male")]
    assert b.groups == [("Female", "<=50K"), ("Female", ">50K"), ("Male", "<=50K"), ("Male", ">50K")]
    ra, _ = a.postprocess(exact(oracle, a))
    rb, _ = b.postprocess(exact(oracle, b))
    assert ra == rb


def test_quantile_query_is_a_per_group_histogram(catalog):
    cq = compile_sql("SELECT sex, median(age) FROM adult GROUP BY sex", catalog)
    (lq,) = cq.linear_queries
    assert lq.kind == "quantile"
    assert lq.matrix.shape[0] == 2 * catalog["adult"].attribute("age").size


def test_bucket_expression_groups_come_from_the_domain(catalog):
    cq = compile_sql("SELECT CASE WHEN age < 30 THEN 'young' ELSE 'older' END AS band, COUNT(*) "
                     "FROM adult GROUP BY 1", catalog)
    assert cq.groups == [("young",), ("older",)]
    cq = compile_sql("SELECT age / 10 AS d, COUNT(*) FROM adult GROUP BY d", catalog)
    assert cq.groups == [(d,) for d in range(1, 10)]
    assert cq.columns[0].type == "integer"


# --- parameters ----------------------------------------------------------------------

def test_qmark_parameters_are_bound_as_literals(oracle, catalog):
    sql = "SELECT sex, COUNT(*) FROM adult WHERE race = ? AND age > ? GROUP BY sex"
    cq = compile_sql(sql, catalog, params=("White", 30))
    lit = compile_sql("SELECT sex, COUNT(*) FROM adult WHERE race = 'White' AND age > 30 GROUP BY sex", catalog)
    assert cq.postprocess(exact(oracle, cq)) == lit.postprocess(exact(oracle, lit))


def test_parameter_cannot_change_the_statement(catalog):
    with pytest.raises(errors.DomainViolationError) as info:
        compile_sql("SELECT COUNT(*) FROM adult WHERE sex = ?", catalog, params=("Male' OR '1'='1",))
    assert "Male' OR '1'='1" in info.value.message


def test_dollar_parameters_and_count_mismatch(oracle, catalog):
    cq = compile_sql("SELECT COUNT(*) FROM adult WHERE age BETWEEN $1 AND $2 AND sex = $3", catalog,
                     params=[30, 40, "Male"])
    rows, _ = cq.postprocess(exact(oracle, cq))
    assert rows == oracle.duck("SELECT COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40 AND sex = 'Male'")
    with pytest.raises(errors.ProgrammingError) as info:
        compile_sql("SELECT COUNT(*) FROM adult WHERE age > ?", catalog, params=())
    assert info.value.position == 40      # the marker that has no value
    with pytest.raises(errors.ProgrammingError):
        compile_sql("SELECT COUNT(*) FROM adult", catalog, params=(1,))


def test_negative_and_null_parameters(oracle, catalog):
    cq = compile_sql("SELECT COUNT(*) FROM adult WHERE age > ? AND workclass = ?", catalog, params=(-3, None))
    rows, _ = cq.postprocess(exact(oracle, cq))
    assert rows == [(0.0,)]


# --- errors --------------------------------------------------------------------------

def test_unknown_names_suggest_declared_ones(catalog):
    with pytest.raises(errors.UnknownTableError) as t:
        compile_sql("SELECT COUNT(*) FROM adlt", catalog)
    assert '"adult"' in t.value.hint and t.value.position == 22
    with pytest.raises(errors.UnknownColumnError) as c:
        compile_sql("SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING AVG(hours_per_wek) > 3", catalog)
    assert '"hours_per_week"' in c.value.hint
    assert c.value.position == len("SELECT sex, COUNT(*) FROM adult GROUP BY sex HAVING AVG(") + 1


def test_domain_violation_names_allowed_values(catalog):
    with pytest.raises(errors.DomainViolationError) as info:
        compile_sql("SELECT COUNT(*) FROM adult WHERE race = 'Asian'", catalog)
    for label in ("White", "Asian-Pac-Islander", "Black"):
        assert label in info.value.hint


def test_bin_split_is_refused_with_bin_edges(catalog):
    with pytest.raises(errors.UnsupportedQueryError) as info:
        compile_sql("SELECT COUNT(*) FROM adult WHERE fnlwgt < 123456", catalog)
    assert "100001..150000" in info.value.message
    assert "100001" in info.value.hint and "150001" in info.value.hint


def test_syntax_error_has_position(catalog):
    with pytest.raises(errors.SyntaxError) as info:
        compile_sql("SELECT COUNT(*) FROM adult WHERE age > AND 3", catalog)
    assert info.value.sqlstate == "42601"
    assert info.value.position == len("SELECT COUNT(*) FROM adult WHERE age > ") + 1


def test_positions_survive_explain_prefix(catalog):
    with pytest.raises(errors.UnknownColumnError) as info:
        compile_sql("EXPLAIN SELECT COUNT(agee) FROM adult", catalog)
    assert info.value.position == len("EXPLAIN SELECT COUNT(") + 1


def test_refusals_happen_before_any_data(catalog):
    # The catalog alone decides: a schema with no data source compiles and refuses the same.
    bare = {"adult": TableSchema("adult", catalog["adult"].attributes, None)}
    compile_sql("SELECT sex, COUNT(*) FROM adult GROUP BY sex", bare)
    with pytest.raises(errors.PrivacyViolationError):
        compile_sql("SELECT age FROM adult", bare)


# --- EXPLAIN and schema probes -------------------------------------------------------

def test_explain_statement(catalog):
    cq = compile_sql("EXPLAIN SELECT sex, COUNT(*) FROM adult WHERE race IN ('White', 'Black') GROUP BY sex",
                     catalog)
    assert cq.is_explain and cq.linear_queries == []
    text = cq.explain()
    assert "race: Indicator  cells {White, Black}" in text
    assert "sex: Bucket(2×2)" in text
    rows, _ = cq.postprocess({})
    assert [r[0] for r in rows] == text.split("\n")


def test_schema_probe(catalog):
    cq = compile_sql("SELECT * FROM adult WHERE 1 = 0", catalog)
    assert cq.is_schema_probe and cq.linear_queries == []
    assert [c.name for c in cq.columns] == list(catalog["adult"].column_names)
    assert dict((c.name, c.type) for c in cq.columns)["age"] == "integer"
    assert cq.postprocess({}) == ([], None)


# --- post-processing -----------------------------------------------------------------

def test_quantile_from_noisy_histogram():
    v = np.array([1.0, 2.0, 3.0, 4.0, np.nan])
    h = np.array([2.0, -1.0, 2.0, 0.0, 50.0])  # the NULL cell and the negative count are ignored
    assert quantile_from_histogram(h, v, 0.5, "disc") == 1.0
    assert quantile_from_histogram(h, v, 0.75, "disc") == 3.0
    assert quantile_from_histogram(h, v, 0.0, "disc") == 1.0
    assert quantile_from_histogram(h, v, 1.0, "disc") == 3.0
    # Order statistics of [1, 1, 3, 3]: rank 1.5 lies between 1 and 3.
    assert quantile_from_histogram(h, v, 0.5, "cont") == pytest.approx(2.0)
    assert quantile_from_histogram(h, v, 1 / 3, "cont") == pytest.approx(1.0)
    assert quantile_from_histogram(np.zeros(5), v, 0.5, "cont") is None
    # Unsorted representative values (a CASE expression) are ordered by value.
    assert quantile_from_histogram(np.array([1.0, 1.0, 1.0]), np.array([9.0, 1.0, 5.0]), 0.5, "disc") == 5.0


def test_avg_and_ratio_standard_errors_by_delta_method(oracle, catalog):
    cq = compile_sql("SELECT AVG(age), 100.0 * COUNT(*) FILTER (WHERE sex = 'Male') / COUNT(*) FROM adult",
                     catalog)
    answers = exact(oracle, cq)
    stderrs = {name: np.full_like(a, 7.0) for name, a in answers.items()}
    rows, errs = cq.postprocess(answers, stderrs)
    by_desc = {lq.description: answers[lq.name][0] for lq in cq.linear_queries}
    s, n = by_desc["SUM(age)"], by_desc["COUNT(age)"]
    m = by_desc["COUNT(*) WHERE sex = 'Male'"]
    var = 49.0
    assert rows[0][0] == pytest.approx(s / n)
    assert errs[0][0] == pytest.approx(math.sqrt(var / n ** 2 + var * s ** 2 / n ** 4))
    assert errs[0][1] == pytest.approx(math.sqrt((100 / n) ** 2 * var + (100 * m / n ** 2) ** 2 * var))


def test_stderr_of_sum_adds_block_variances(oracle, catalog):
    cq = compile_sql("SELECT sex, COUNT(*), 'x' AS tag FROM adult WHERE age < 25 OR race = 'Black' GROUP BY sex",
                     catalog)
    (lq,) = cq.linear_queries
    answers = exact(oracle, cq)
    rows, errs = cq.postprocess(answers, {lq.name: np.full(lq.matrix.shape[0], 2.0)})
    assert [e[0] for e in errs] == [None, None]
    assert [e[2] for e in errs] == [None, None]
    assert errs[0][1] == pytest.approx(math.sqrt(lq.blocks * 4.0))


def test_noisy_avg_with_nonpositive_count_is_null(catalog):
    cq = compile_sql("SELECT AVG(age) FROM adult", catalog)
    answers = {lq.name: np.array([-5.0]) if "COUNT" in lq.description else np.array([100.0])
               for lq in cq.linear_queries}
    assert cq.postprocess(answers)[0] == [(None,)]


def test_answer_shape_is_checked(catalog):
    cq = compile_sql("SELECT sex, COUNT(*) FROM adult GROUP BY sex", catalog)
    with pytest.raises(errors.InterfaceError):
        cq.postprocess({cq.linear_queries[0].name: np.zeros(3)})


def test_duckdb_dialect_matches_postgres(oracle, catalog):
    a = compile_sql("SELECT age // 10 AS d, quantile_cont(age, 0.5) FROM adult GROUP BY 1", catalog,
                    dialect="duckdb")
    b = compile_sql("SELECT age / 10 AS d, percentile_cont(0.5) WITHIN GROUP (ORDER BY age) FROM adult GROUP BY 1",
                    catalog)
    assert a.postprocess(exact(oracle, a)) == b.postprocess(exact(oracle, b))


# --- brute force over a tiny full domain -----------------------------------------------

TINY = TableSchema("tiny", (Categorical("c", ["a", "b", "c"], nullable=True, closed=True),
                            IntegerRange("n", 0, 5),
                            IntegerRange("w", 0, 99, bin_width=10, nullable=True),
                            Numeric("x", [0.0, 0.5, 1.0, 2.0])), None)

TINY_QUERIES = [
    "SELECT COUNT(*) FROM tiny",
    "SELECT c, COUNT(*), SUM(n), AVG(w) FROM tiny GROUP BY c",
    "SELECT n, COUNT(*) FROM tiny WHERE c = 'a' OR w >= 50 GROUP BY n",
    "SELECT COUNT(*) FROM tiny WHERE NOT (c = 'b' AND (n < 2 OR w < 30))",
    "SELECT c, n / 2 AS h, COUNT(w) FROM tiny WHERE w IS NOT NULL OR c IS NULL GROUP BY 1, 2",
    "SELECT w, COUNT(*) FROM tiny GROUP BY w",
    "SELECT c, percentile_disc(0.5) WITHIN GROUP (ORDER BY n) FROM tiny WHERE n > 0 OR c = 'c' GROUP BY c",
    "SELECT n, median(n), AVG(n) FROM tiny GROUP BY n",
    "SELECT SUM(CASE WHEN c = 'a' THEN 10 ELSE 1 END) FROM tiny WHERE w < 60",
    "SELECT x, COUNT(*), AVG(n) FROM tiny GROUP BY x",
    "SELECT c, AVG(x), SUM(x) FROM tiny WHERE x >= 0.5 OR n = 3 GROUP BY c",
    "SELECT COUNT(*) FROM tiny WHERE x < 1 AND NOT (x < 0.5)",
    "SELECT CASE WHEN x < 1 THEN 'small' ELSE 'big' END AS s, median(x) FROM tiny GROUP BY 1",
]


@pytest.fixture(scope="module")
def tiny_data():
    rng = np.random.default_rng(7)
    rows = []
    for _ in range(400):
        c = [None, "a", "b", "c"][rng.integers(4)]
        w = None if rng.random() < 0.15 else int(rng.integers(0, 100))
        rows.append((c, int(rng.integers(0, 6)), w, float(rng.uniform(0, 2))))
    con = duckdb.connect()
    con.execute("CREATE TABLE tiny (c VARCHAR, n BIGINT, w DOUBLE, x DOUBLE)")
    wa, xa = TINY.attributes[2], TINY.attributes[3]
    binned = [(c, n, None if w is None else float(wa.cell_values()[wa.index_of(w)]),
               float(xa.cell_values()[xa.index_of(v)])) for c, n, w, v in rows]
    con.executemany("INSERT INTO tiny VALUES (?, ?, ?, ?)", binned)
    x = np.zeros(TINY.domain.size())
    for row in rows:
        cell = [a.index_of(v) for a, v in zip(TINY.attributes, row)]
        x[np.ravel_multi_index(cell, TINY.domain.shape)] += 1
    return con, x


@pytest.mark.parametrize("sql", TINY_QUERIES)
def test_full_domain_matrices_match_duckdb(tiny_data, sql):
    con, x = tiny_data
    cq = compile_sql(sql, {"tiny": TINY})
    answers = {lq.name: lq.matrix.dense() @ x for lq in cq.linear_queries}
    groups = compile_sql(_with_count(sql), {"tiny": TINY})
    g_answers = {lq.name: lq.matrix.dense() @ x for lq in groups.linear_queries}
    present = np.array([r[-1] > 0 for r in groups.postprocess(g_answers)[0]]) if cq.program.keys else None
    ours, _ = run_program(cq, answers, None, present=present)
    ours = [tuple(TINY_LABEL_MID.get(v, v) if isinstance(v, str) else v for v in r) for r in ours]
    assert rows_equal(ours, con.execute(sql.replace("n / 2", "n // 2")).fetchall(), ordered=False), ours


TINY_LABEL_MID = {lab: float(v) for a in TINY.attributes[2:] for lab, v in zip(a.labels(), a.cell_values())
                  if lab is not None}


def test_numeric_bins_refuse_split_boundaries():
    with pytest.raises(errors.UnsupportedQueryError) as info:
        compile_sql("SELECT COUNT(*) FROM tiny WHERE x < 0.7", {"tiny": TINY})
    assert "[0.5, 1.0)" in info.value.message and "0.5" in info.value.hint and "1.0" in info.value.hint


def _with_count(sql: str) -> str:
    head, rest = sql.split(" FROM ", 1)
    return f"{head}, COUNT(*) AS __n FROM {rest}"


@pytest.mark.parametrize("fn", ["var_samp", "var_pop", "stddev_samp", "stddev_pop"])
def test_moment_standard_errors_match_finite_differences(oracle, catalog, fn):
    cq = compile_sql(f"SELECT {fn}(age) FROM adult WHERE sex = 'Female'", catalog)
    answers = exact(oracle, cq)
    sigma = {lq.name: 3.0 + i for i, lq in enumerate(cq.linear_queries)}
    _, errs = cq.postprocess(answers, {k: np.full(1, s) for k, s in sigma.items()})
    total = 0.0
    for name, a in answers.items():
        h = 1e-6 * max(1.0, abs(a[0]))
        up = cq.postprocess(dict(answers, **{name: a + h}))[0][0][0]
        down = cq.postprocess(dict(answers, **{name: a - h}))[0][0][0]
        slope = (up - down) / (2 * h)
        total += (slope * sigma[name]) ** 2
    assert errs[0][0] == pytest.approx(math.sqrt(total), rel=1e-3)


def test_mangled_queries_only_raise_dpsql_errors(catalog):
    """Truncated and mutated fixture queries compile or fail with a dpsql error, never a crash."""
    import random

    from sql_oracle import load_fixtures

    rng = random.Random(5)
    cases = load_fixtures("accepted.sql")[::3] + load_fixtures("refused.sql")[::3]
    for case in cases:
        sql = case["sql"]
        variants = [sql[:k] for k in range(1, len(sql), max(1, len(sql) // 6))]
        for _ in range(4):
            i = rng.randrange(len(sql))
            variants.append(sql[:i] + rng.choice([" ", "(", ")", ",", "'", "*", "1", " OR ", " NOT "]) + sql[i + 1:])
        for v in variants:
            try:
                compile_sql(v, catalog)
            except errors.Error as err:
                assert err.message


def test_rounding_keeps_the_standard_error(oracle, catalog):
    cq = compile_sql("SELECT ROUND(AVG(age), 1), AVG(age) FROM adult", catalog)
    answers = exact(oracle, cq)
    _, errs = cq.postprocess(answers, {k: np.full(1, 5.0) for k in answers})
    assert errs[0][0] == pytest.approx(errs[0][1]) and errs[0][0] > 0


def _airports(n=1458, missing="SJU"):
    """``n`` three-letter codes in order, without ``missing`` (the FAA list's shape)."""
    import itertools
    import string
    codes = ("".join(t) for t in itertools.product(string.ascii_uppercase, repeat=3))
    return [c for c in codes if c != missing and c[0] >= "R"][:n]


def test_a_value_outside_a_long_open_domain_is_summarised_and_its_other_cell_explained():
    """Issue 33 item 7: ``dest = 'SJU'`` listed the first 50 of 1,458 labels with no "…"
    and no word that SJU is counted in the (other) cell."""
    catalog = {"flights": TableSchema("flights", (Categorical("dest", _airports()),))}
    with pytest.raises(errors.DomainViolationError) as info:
        compile_sql("SELECT COUNT(*) FROM flights WHERE dest = 'SJU'", catalog)
    e = info.value
    assert "'SJU'" in e.message and "open" in e.message and "(other) cell" in e.message
    assert "1,458 labels: 'RAA', 'RAB'" in e.detail and "… and 1,450 more" in e.detail
    assert "\\d flights dest" in e.hint                            # how to see them all
    assert "(close ones: 'SJA', 'SJB', 'SJC')" in e.hint                # near spellings first
    assert len(e.detail) + len(e.hint) < 300                     # a summary, not the list
    with pytest.raises(errors.DomainViolationError) as info:
        compile_sql("SELECT COUNT(*) FROM flights WHERE dest IN ('SJC', 'sju')", catalog)
    assert "'sju'" in info.value.message and "'SJC'" in info.value.hint


def test_a_closed_domain_says_so_and_lists_its_few_labels(catalog):
    closed = {"t": TableSchema("t", (Categorical("c", ["a", "b"], closed=True),))}
    with pytest.raises(errors.DomainViolationError) as info:
        compile_sql("SELECT COUNT(*) FROM t WHERE c = 'z'", closed)
    assert "closed" in info.value.message and "(other)" not in info.value.message
    assert info.value.hint == "allowed values: 'a', 'b'"
