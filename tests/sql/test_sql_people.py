"""Refusals over a people schema (``tests/fixtures/sql/people_refused.sql``, the shop schema of
``tests/measure/shop.py``): each has its SQLSTATE, a message with the fixture's words, a hint
saying what to change and the position of the SQL it refuses — decided from the SQL and the
declared schema alone (no data is read: the catalog's sources are never opened)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import dpsql.errors as errors
from dpsql.engine.config import load_config
from dpsql.public import StarCatalog
from dpsql.sql import compile as compile_sql
from sql_oracle import load_fixtures

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

REFUSED = load_fixtures("people_refused.sql")


@pytest.fixture(scope="module")
def catalog(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("people")
    # sources that do not exist: a refusal must not need them
    config = load_config(shop.config(tmp, {t: {"parquet": str(tmp / f"{t}.parquet")} for t in shop.TYPES}))
    return StarCatalog(config.tables, people=config.people)


def test_fixture_count():
    assert len(REFUSED) >= 25


@pytest.mark.parametrize("case", REFUSED, ids=[f"p{i:03d}" for i in range(len(REFUSED))])
def test_refused_with_sqlstate_hint_and_position(catalog, case):
    with pytest.raises(errors.Error) as info:
        compile_sql(case["sql"], catalog)
    err = info.value
    assert err.sqlstate == case["sqlstate"], f"{type(err).__name__}: {err}"
    if case.get("contains") is not None:
        assert case["contains"] in err.message, err.message
    assert err.hint, f"no hint: {err.message}"
    assert err.position is not None, f"no position: {err.message}"
