"""The people schema is checked when the configuration loads (issue 32 item 1): every
mistake is a ConfigError (SQLSTATE F0000) with a hint, before any row is read."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

from dpsql.engine.config import load_config  # noqa: E402
from dpsql.errors import ConfigError  # noqa: E402


@pytest.fixture
def spec(tmp_path):
    files = shop.write_parquet(shop.shop_rows(customers=5), tmp_path)
    return shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()})


def _refused(spec, *words):
    with pytest.raises(ConfigError) as info:
        load_config(spec)
    err = info.value
    assert err.sqlstate == "F0000" and err.hint, err
    for w in words:
        assert w in err.message, (w, err.message)
    return err


def test_views_replace_tables_with_their_join_path_and_bound(spec):
    cfg = load_config(spec)
    assert cfg.people.path("lineitem") == ("customers", "orders", "lineitem")
    assert cfg.tables["lineitem"].column_names == (
        "customers__segment", "customers__nation", "orders__status", "orders__priority", "flag", "qty")
    # the person's view: one row per person, with a flag per table (has a row of its view)
    assert cfg.tables["customers"].column_names == ("segment", "nation", "orders__exists", "lineitem__exists")
    assert [t for t, _ in cfg.people.views["customers"].exists] == ["orders", "lineitem"]
    assert [cfg.sources[t].unit_rows for t in ("customers", "orders", "lineitem")] == [1, 3, 5]
    # the view and its bound are part of the release identity
    assert cfg.sources["orders"].describe()["hops"][1]["key"] == "custkey"


def test_a_private_table_with_no_path_to_the_person_is_an_error(spec):
    del spec["people"]["tables"]["lineitem"]
    err = _refused(spec, "'lineitem'", "no path to the person")
    assert "[people.tables.lineitem]" in err.hint


def test_a_cycle_never_reaches_the_person(spec):
    spec["people"]["tables"]["orders"]["parent"] = "lineitem"
    spec["people"]["tables"]["lineitem"]["primary_key"] = "linenumber"
    _refused(spec, "cycle")


@pytest.mark.parametrize("change, words", [
    (lambda p: p.update(person="shoppers"), ("person table 'shoppers'",)),
    (lambda p: p["tables"]["orders"].update(parent="nations"), ("'nations'",)),
    (lambda p: p["tables"]["orders"].update(max_rows=0), ("max_rows",)),
    (lambda p: p["tables"]["orders"].pop("primary_key"), ("declares no primary_key",)),
    (lambda p: p["tables"]["orders"].update(foreign_keys="custkey"), ("unknown key 'foreign_keys'",)),
    (lambda p: p["tables"].update(customers={"parent": "orders", "foreign_key": "x", "max_rows": 1}),
     ("person table",)),
    (lambda p: p.update(hash_key_file="no-such.key"), ("hash key file not found",)),
])
def test_schema_mistakes_are_refused_with_a_hint(spec, change, words):
    change(spec["people"])
    _refused(spec, *words)


def test_a_table_with_its_own_privacy_unit_is_refused_and_a_csv_source_is_not(spec, tmp_path):
    spec["tables"]["orders"]["privacy_unit"] = {"id": "custkey", "max_rows": 2}
    _refused(spec, "its own privacy unit")
    del spec["tables"]["orders"]["privacy_unit"]
    # CSV files are read by the total reader inside a view (tests/measure/test_people_csv.py)
    (tmp_path / "orders.csv").write_text("orderkey,custkey,status,priority\n")
    spec["tables"]["orders"]["source"] = {"csv": str(tmp_path / "orders.csv")}
    assert load_config(spec).people.views["orders"].path == ("customers", "orders")


def test_a_missing_key_column_is_a_schema_error_before_counting(spec):
    from dpsql.measure.router import open_backend
    spec["people"]["tables"]["orders"]["foreign_key"] = "customer"
    cfg = load_config(spec)
    backend = open_backend(cfg.sources)
    try:
        with pytest.raises(ConfigError, match="no column 'customer'"):
            backend.check_schema(cfg.tables["orders"])
    finally:
        backend.close()
