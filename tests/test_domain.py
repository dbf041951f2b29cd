"""Unit tests for dpsql.domain: Domain algebra, attribute mappings, predicates, TOML loading.

The predicate tests use a brute-force oracle: every integer of the declared domain (or a
dense set of sample reals per bin) is compared with the literal directly.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dpsql.domain import OTHER_LABEL, Categorical, Domain, IntegerRange, Numeric, TableSchema
from dpsql.domain_file import load_domain, load_table_schemas
from dpsql.errors import ConfigError, DomainViolationError, UnknownColumnError, UnsupportedQueryError

ADULT_TOML = Path(__file__).resolve().parent.parent / "examples" / "adult" / "adult.toml"
OPS = ("=", "!=", "<", "<=", ">", ">=")


def _compare(x, op, v) -> bool:
    return {"=": x == v, "!=": x != v, "<": x < v, "<=": x <= v, ">": x > v, ">=": x >= v}[op]


# --- Domain --------------------------------------------------------------------------------

def test_domain_basics():
    d = Domain.from_sizes({"a": 3, "b": 4, "c": 5})
    assert d.attributes == ("a", "b", "c") and d.shape == (3, 4, 5)
    assert len(d) == 3 and "b" in d and "z" not in d and d["c"] == 5
    assert d.size() == 60 and d.size(["a", "c"]) == 15 and d.size([]) == 1
    assert d.project(["c", "a"]) == Domain(["c", "a"], [5, 3])
    assert d.axes(["c", "a"]) == (2, 0)
    assert d.canonical(["c", "a", "c"]) == ("a", "c")
    assert list(d) == ["a", "b", "c"]


def test_domain_merge_and_equality():
    d1 = Domain.from_sizes({"a": 3, "b": 4})
    d2 = Domain.from_sizes({"b": 4, "c": 2})
    assert d1.merge(d2) == Domain(["a", "b", "c"], [3, 4, 2])
    assert hash(d1) == hash(Domain(("a", "b"), (3, 4)))
    assert d1 != Domain.from_sizes({"b": 4, "a": 3})
    with pytest.raises(ValueError):
        d1.merge(Domain.from_sizes({"b": 5}))


def test_domain_is_frozen_and_validated():
    d = Domain.from_sizes({"a": 3})
    with pytest.raises(AttributeError):
        d._shape = (4,)
    with pytest.raises(ValueError):
        Domain(["a", "a"], [1, 2])
    with pytest.raises(ValueError):
        Domain(["a"], [0])
    with pytest.raises(ValueError):
        Domain(["a", "b"], [1])
    with pytest.raises(UnknownColumnError):
        d["nope"]


def test_huge_domain_size_is_exact():
    d = Domain.from_sizes({f"x{i}": 1000 for i in range(8)})
    assert d.size() == 1000 ** 8


# --- Categorical ---------------------------------------------------------------------------

def test_categorical_layout_open_nullable():
    a = Categorical("race", ["White", "Black"], nullable=True)
    assert a.size == 4 and a.labels() == ["White", "Black", OTHER_LABEL, None]
    assert a.other_index == 2 and a.null_index == 3
    assert a.index_of("Black") == 1
    assert a.index_of("black") == 2 and a.index_of(" Black") == 2  # exact matching
    assert a.index_of(None) == 3 and a.index_of(7) == 2
    assert a.sql_type == "VARCHAR" and a.python_type is str
    assert a.cell_values() is None and a.bin_bounds() is None


def test_categorical_closed_and_not_nullable_fallbacks():
    closed = Categorical("sex", ["F", "M"], closed=True)
    assert closed.size == 2 and closed.other_index is None and closed.null_index is None
    assert closed.index_of("X") == 0 and closed.index_of(None) == 0
    open_ = Categorical("sex", ["F", "M"])
    assert open_.index_of(None) == open_.other_index == 2


def test_categorical_integer_labels():
    a = Categorical("code", [10, 20, 30], nullable=True)
    assert a.python_type is int and a.sql_type == "INTEGER"
    assert a.index_of(20) == 1 and a.index_of(np.int64(30)) == 2 and a.index_of("20") == 3
    assert a.index_of(True) == 3  # a boolean is not the label 1
    assert a.contains_value(10) and not a.contains_value(11) and a.contains_value(None)


@pytest.mark.parametrize("attr", [
    Categorical("c", ["a", "b", "c"], nullable=True),
    Categorical("c", ["a", "b"], closed=True),
    IntegerRange("i", -5, 20, bin_width=4, nullable=True),
    IntegerRange("i", 0, 99999, edges=[0, 1, 1000, 99999]),
    Numeric("x", [-1.0, 0.0, 0.1, 5.0], nullable=True),
])
def test_labels_round_trip(attr):
    labels = attr.labels()
    assert len(labels) == attr.size
    assert len(set(map(repr, labels))) == attr.size  # unambiguous
    for i, label in enumerate(labels):
        assert attr.cell_of_label(label) == i
    with pytest.raises(DomainViolationError):
        attr.cell_of_label("no such label")
    # a value of every value cell maps back to that cell
    bounds = attr.bin_bounds()
    for i, label in enumerate(labels):
        if label is None:
            assert attr.index_of(None) == i
        elif bounds is not None:
            lo, hi = bounds[i]
            assert attr.index_of(lo) == i
            last_value_cell = attr.size - 1 - attr.nullable
            # a numeric bin is half-open except the last: its top edge starts the next bin
            expected = i + 1 if attr.kind == "numeric" and i < last_value_cell else i
            assert attr.index_of(hi) == expected
        elif label != OTHER_LABEL:
            assert attr.index_of(label) == i


def test_categorical_predicates():
    a = Categorical("c", ["a", "b", "c"], nullable=True)
    assert a.cells_for_predicate("=", "b") == (frozenset({1}), True)
    assert a.cells_for_predicate("<>", "b") == (frozenset({0, 2, 3}), True)  # other cell: all != 'b'
    assert a.cells_for_predicate("=", "zz") == (frozenset(), False)  # may hide in the other cell
    assert a.cells_for_predicate("!=", "zz") == (frozenset({0, 1, 2}), False)
    assert a.cells_for_predicate("=", None) == (frozenset(), True)
    closed = Categorical("c", ["a", "b"], closed=True)
    assert closed.cells_for_predicate("=", "zz") == (frozenset(), True)
    with pytest.raises(UnsupportedQueryError):
        a.cells_for_predicate("<", "b")
    with pytest.raises(UnsupportedQueryError):
        a.cells_for_predicate("LIKE", "b")


@pytest.mark.parametrize("kwargs, fragment", [
    ({"labels": []}, "non-empty"),
    ({"labels": ["a", "a"]}, "duplicate"),
    ({"labels": ["a", 1]}, "all strings or all integers"),
    ({"labels": [OTHER_LABEL]}, "reserved"),
    ({"labels": ["a"], "nullable": "yes"}, "nullable"),
    ({"labels": ["a"], "closed": 1}, "closed"),
])
def test_categorical_validation(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Categorical("c", **kwargs)


# --- IntegerRange --------------------------------------------------------------------------

def test_integer_unit_bins():
    a = IntegerRange("age", 17, 90)
    assert a.size == 74 and a.labels()[:2] == ["17", "18"] and a.labels()[-1] == "90"
    assert a.index_of(17) == 0 and a.index_of(90) == 73
    assert a.index_of(-3) == 0 and a.index_of(1000) == 73  # clamped
    assert a.index_of(None) == 0  # not nullable: first bin
    assert a.index_of(29.5) == a.index_of(29)
    # NaN and wrong types go to the invalid place: cell 0 when not nullable
    assert a.index_of(float("nan")) == 0 and a.index_of("17") == 0 and a.invalid_index == 0
    assert a.cell_values()[:3].tolist() == [17.0, 18.0, 19.0]
    assert a.sql_type == "INTEGER" and a.python_type is int


def test_integer_wide_and_edge_bins():
    a = IntegerRange("t", -10, 10, bin_width=4, nullable=True)
    assert a.bin_bounds() == [(-10, -7), (-6, -3), (-2, 1), (2, 5), (6, 9), (10, 10), None]
    assert a.labels() == ["[-10, -7]", "[-6, -3]", "[-2, 1]", "[2, 5]", "[6, 9]", "10", None]
    assert a.index_of(-7) == 0 and a.index_of(-6) == 1 and a.index_of(None) == 6
    assert np.allclose(a.cell_values()[:-1], [-8.5, -4.5, -0.5, 3.5, 7.5, 10])
    assert math.isnan(a.cell_values()[-1])
    g = IntegerRange("gain", 0, 99999, edges=[0, 1, 1000, 99999])
    assert g.labels() == ["0", "[1, 999]", "[1000, 99998]", "99999"]
    assert g.index_of(0) == 0 and g.index_of(1) == 1 and g.index_of(999) == 1 and g.index_of(10 ** 9) == 3


def test_integer_contains_value():
    a = IntegerRange("age", 17, 90, nullable=False)
    assert a.contains_value(17) and a.contains_value(90.0) and a.contains_value(np.int32(40))
    assert not a.contains_value(16) and not a.contains_value(29.5) and not a.contains_value(None)
    assert not a.contains_value("40") and not a.contains_value(True) and not a.contains_value(math.inf)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"lo": 5, "hi": 1}, "greater than hi"),
    ({"lo": 0.5, "hi": 1}, "lo must be an integer"),
    ({"lo": 0, "hi": 9, "bin_width": 0}, "bin_width"),
    ({"lo": 0, "hi": 9, "edges": [1, 5]}, "first edge"),
    ({"lo": 0, "hi": 9, "edges": [0, 5, 5]}, "strictly increasing"),
    ({"lo": 0, "hi": 9, "edges": [0, 5, 10]}, "above hi"),
    ({"lo": 0, "hi": 9, "edges": [0, 5], "bin_width": 2}, "not both"),
])
def test_integer_validation(kwargs, fragment):
    with pytest.raises(ConfigError, match=fragment):
        IntegerRange("i", **kwargs)


@pytest.mark.parametrize("attr", [
    IntegerRange("t", -10, 10, bin_width=4, nullable=True),
    IntegerRange("t", 0, 50, edges=[0, 1, 7, 20]),
    IntegerRange("t", 3, 9),
])
def test_integer_predicates_match_brute_force(attr):
    bounds = [b for b in attr.bin_bounds() if b is not None]
    literals = [attr.lo - 3, attr.hi + 2, 0, -6.5, 1.5, 6.999]
    literals += [x for lo, hi in bounds for x in (lo, hi, lo - 1, hi + 1, (lo + hi) / 2)]
    for op in OPS:
        for v in literals:
            cells, exact = attr.cells_for_predicate(op, v)
            split = False
            for i, (lo, hi) in enumerate(bounds):
                sat = [_compare(x, op, v) for x in range(lo, hi + 1)]
                assert (i in cells) == all(sat), (op, v, i)
                split |= any(sat) and not all(sat)
            assert exact == (not split), (op, v)
            assert attr.null_index not in cells


def test_predicate_literal_checks():
    a = IntegerRange("age", 17, 90, nullable=True)
    assert a.cells_for_predicate("=", None) == (frozenset(), True)
    with pytest.raises(DomainViolationError):
        a.cells_for_predicate("<", "30")
    with pytest.raises(DomainViolationError):
        a.cells_for_predicate("<", float("nan"))
    lo, hi = 30, 40  # BETWEEN 30 AND 40 = (>= 30) ∩ (<= 40)
    ge, e1 = a.cells_for_predicate(">=", lo)
    le, e2 = a.cells_for_predicate("<=", hi)
    assert e1 and e2 and sorted(a.labels()[i] for i in ge & le) == [str(x) for x in range(30, 41)]


# --- Numeric -------------------------------------------------------------------------------

def test_numeric_bins():
    x = Numeric("x", [-1.5, 0, 0.1, 2], nullable=True)
    assert x.size == 4 and x.labels() == ["[-1.5, 0)", "[0, 0.1)", "[0.1, 2]", None]
    assert x.bin_bounds() == [(-1.5, 0.0), (0.0, 0.1), (0.1, 2.0), None]
    assert x.index_of(0) == 1 and x.index_of(0.1) == 2 and x.index_of(0.09999) == 1
    assert x.index_of(-100) == 0 and x.index_of(2.0) == 2 and x.index_of(1e300) == 2
    assert x.index_of(float("nan")) == 3 and x.index_of(-math.inf) == 0 and x.index_of(None) == 3
    assert Numeric("y", [0, 1]).index_of(None) == 0
    assert x.contains_value(2.0) and x.contains_value(-1.5) and not x.contains_value(2.0001)
    assert not x.contains_value(math.nan) and x.contains_value(None)
    assert x.sql_type == "DOUBLE" and x.python_type is float
    assert np.allclose(x.cell_values()[:3], [-0.75, 0.05, 1.05])


@pytest.mark.parametrize("edges, fragment", [
    ([1.0], "at least two"),
    ([0, 0], "strictly increasing"),
    ([0, math.inf], "finite"),
    ("0,1", "at least two"),
])
def test_numeric_validation(edges, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Numeric("x", edges)


def test_numeric_predicates_match_samples():
    x = Numeric("x", [-1.5, 0, 0.1, 2])
    bounds = x.bin_bounds()
    literals = [-2.0, -1.5, -0.3, 0.0, 0.05, 0.1, 2.0, 3.0]
    for op in OPS:
        for v in literals:
            cells, exact = x.cells_for_predicate(op, v)
            split = False
            for i, (lo, hi) in enumerate(bounds):
                top = hi if i == len(bounds) - 1 else np.nextafter(hi, -np.inf)
                samples = {lo, top, (lo + hi) / 2}
                samples |= {s for s in (v, np.nextafter(v, -np.inf), np.nextafter(v, np.inf)) if lo <= s <= top}
                sat = [_compare(s, op, v) for s in samples]
                assert (i in cells) == all(sat), (op, v, i)
                split |= any(sat) and not all(sat)
            assert exact == (not split), (op, v)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.none(), st.integers(-10 ** 12, 10 ** 12),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=5), st.booleans()))
def test_index_of_is_total(value):
    for attr in (Categorical("c", ["a", "b"]), Categorical("c", ["a"], closed=True),
                 IntegerRange("i", -5, 5, bin_width=3, nullable=True), Numeric("x", [0, 1, 2])):
        assert 0 <= attr.index_of(value) < attr.size


# --- TableSchema and the TOML loader --------------------------------------------------------

def test_adult_declaration():
    schemas = load_table_schemas(ADULT_TOML)
    adult = schemas["adult"]
    assert adult.column_names[0] == "age" and adult.column_names[-1] == "income"
    assert len(adult.column_names) == 15
    assert adult.domain["age"] == 74 and adult.domain["hours_per_week"] == 99
    assert adult.domain["workclass"] == 9  # 8 labels, closed, plus NULL
    assert adult.domain["income"] == 2 and adult.domain["fnlwgt"] == 30
    assert Path(adult.source["csv"]) == ADULT_TOML.parent / "adult.csv"
    assert adult.attribute("capital_gain").index_of(99999) == adult.domain["capital_gain"] - 1
    with pytest.raises(UnknownColumnError, match="salary"):
        adult.attribute("salary")


def test_table_schema_rejects_duplicate_columns():
    with pytest.raises(ConfigError):
        TableSchema("t", (IntegerRange("a", 0, 1), IntegerRange("a", 0, 2)))


def _write(tmp_path, text: str) -> Path:
    path = tmp_path / "domain.toml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("body, fragment", [
    ('[tables.t.columns.a]\ntype = "text"\n', "unknown or missing type"),
    ('[tables.t.columns.a]\ntype = "integer"\nlo = 1\nhi = 0\n', "greater than hi"),
    ('[tables.t.columns.a]\ntype = "integer"\nlo = 1\n', "missing key"),
    ('[tables.t.columns.a]\ntype = "categorical"\nlabels = ["x"]\nnulable = true\n', "unknown key"),
    ('[tables.t.columns.a]\ntype = "categorical"\nlabels = "x"\n', "labels must be a list"),
    ('[tables.t.columns.a]\ntype = "numeric"\nedges = [1, 0]\n', "strictly increasing"),
    ('[tables.t.columns.a]\ntype = "integer"\nlo = 0\nhi = 9\nbin_width = 1\nedges = [0]\n', "not both"),
])
def test_loader_errors_name_file_table_column(tmp_path, body, fragment):
    path = _write(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        load_domain(path)
    message = info.value.message
    assert str(path) in message and "table 't'" in message and "column 'a'" in message
    assert fragment in message and info.value.hint


@pytest.mark.parametrize("body, fragment", [
    ("tables = 3\n", "no tables"),
    ("[other]\nx = 1\n", "unknown key 'other'"),
    ("[tables.t]\n", "no columns"),
    ('[tables.t]\nsource = "a.csv"\n[tables.t.columns.a]\ntype = "integer"\nlo = 0\nhi = 1\n',
     "source must be a table"),
    ('[tables.t]\nrows = 5\n[tables.t.columns.a]\ntype = "integer"\nlo = 0\nhi = 1\n', "unknown key"),
    ("[tables.t\n", "not valid TOML"),
])
def test_loader_file_and_table_errors(tmp_path, body, fragment):
    path = _write(tmp_path, body)
    with pytest.raises(ConfigError, match=fragment) as info:
        load_domain(path)
    assert str(path) in info.value.message


def test_loader_missing_file(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_domain(tmp_path / "absent.toml")


def test_loader_several_tables_and_order(tmp_path):
    path = _write(tmp_path, """
[tables.b]
source = { parquet = "data/b.parquet", data_version = "v1" }
[tables.b.columns.z]
type = "numeric"
edges = [0, 0.5, 1]
nullable = true
[tables.b.columns.y]
type = "integer"
lo = -3
hi = 3
edges = [-3, 0]
[tables.a.columns.x]
type = "categorical"
labels = [1, 2]
closed = true
""")
    schemas = load_domain(path)
    assert list(schemas) == ["b", "a"]
    assert schemas["b"].column_names == ("z", "y")
    assert schemas["b"].domain == Domain(["z", "y"], [3, 2])
    assert schemas["b"].source == {"parquet": str(tmp_path / "data" / "b.parquet"), "data_version": "v1"}
    assert schemas["a"].source is None and schemas["a"].domain["x"] == 2


def test_pickle_and_copy_round_trip():
    import copy
    import pickle
    schema = load_domain(ADULT_TOML)["adult"]
    for obj in (schema.domain, *schema.attributes, Numeric("x", [0, 1], nullable=True)):
        clone = pickle.loads(pickle.dumps(obj))
        assert clone == obj and hash(clone) == hash(obj) and copy.deepcopy(obj) == obj
        if hasattr(obj, "labels"):
            assert clone.labels() == obj.labels() and clone.index_of(None) == obj.index_of(None)
