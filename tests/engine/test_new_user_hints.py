"""What a new user hits on a table no example uses (bench/reported_errors.py's corpora).

The SQL a refusal's hint suggests runs as written, whatever the columns are called: a new
user's CSV (the Maryland salary table, /work/shared/data/salary) names its columns
``pay-rate`` and ``organization-name``; a query over two never measured together was refused
with the hint ``add a query such as `SELECT pay-rate, organization-name, COUNT(*) FROM salary
GROUP BY pay-rate, organization-name```, which SQL reads as ``pay - rate``.

A configuration's relative domain path is taken from the configuration's directory, and the
error says so (it said "relative paths are taken from the working directory")."""

from __future__ import annotations

import pytest
from sqlglot import exp, parse_one

import dpsql
from dpsql.engine.session import _example_query
from dpsql.errors import ConfigError
from dpsql.testing import write_config


def _grouped(sql: str) -> list[str]:
    tree = parse_one(sql, read="postgres")
    group = tree.args["group"].expressions
    assert all(isinstance(g, exp.Column) for g in group), sql
    return [g.name for g in group]


def test_the_example_query_quotes_names_that_are_not_plain_identifiers():
    sql = _example_query("salary", [("pay-rate", "organization-name")])
    assert _grouped(sql) == ["pay-rate", "organization-name"]
    assert parse_one(sql, read="postgres").find(exp.Table).name == "salary"
    # plain names stay as the user wrote them (the adult hint the shell tests read)
    assert _example_query("adult", [("age",)]) == "SELECT age, COUNT(*) FROM adult GROUP BY age"
    assert _grouped(_example_query("t", [("a b",), ('say "x"',)])) == ["a b", 'say "x"']


def test_a_missing_domain_file_names_the_directory_its_path_is_taken_from(tmp_path, monkeypatch):
    work = tmp_path / "work"
    (work / "cfg").mkdir(parents=True)
    (work / "salary.toml").write_text("[tables.salary.columns.system]\ntype = \"integer\"\nlo = 0\nhi = 2\n")
    monkeypatch.chdir(work)
    # the path is right from the working directory, not from the configuration's
    config = write_config(work / "cfg", table="salary", domain="salary.toml", queries=[])
    with pytest.raises(ConfigError) as err:
        dpsql.connect(config, user="alice")
    assert "working directory" not in err.value.hint
    assert "configuration's directory" in err.value.hint and str(work / "cfg") in err.value.hint
    assert str(work / "cfg" / "salary.toml") in str(err.value)
