"""``dpsql init`` from a PostgreSQL table, a Spark table and Parquet globs: columns and types
from the catalog, no value of the rows in the draft, and the draft loads once its domains are
filled in."""

from __future__ import annotations

import tomllib

import duckdb
import pytest

from dpsql.cli import main
from dpsql.engine.config import load_config

# distinctive values: a draft may hold public placeholders such as "e.g. 2013-12-31", which
# a secret "31" would match by accident
SECRET_VALUES = ("Ann", "Bob", "83", "45", "2.5", "9.75", "1987-04-09")


def _draft(tmp_path, capsys, *args):
    out = tmp_path / "dpsql.toml"
    assert main(["init", *args, "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    config = tomllib.loads(out.read_text())
    domain_path = next(tmp_path.glob("*.domain.toml"))
    domain_text = domain_path.read_text()
    # The temporary directory's name is public and may hold digits ("pytest-451" holds 45).
    texts = [t.replace(str(tmp_path), "<tmp>") for t in (domain_text, out.read_text(), printed)]
    for value in SECRET_VALUES:
        assert all(value not in t for t in texts), value
    return config, tomllib.loads(domain_text), printed


def test_init_from_a_postgres_table(pg_server, tmp_path, capsys):
    pg_server.execute("DROP TABLE IF EXISTS people",
                      "CREATE TABLE people (age integer, name text, score numeric(5,2), ok boolean, born date)",
                      "INSERT INTO people VALUES (83, 'Ann', 2.5, true, '1987-04-09'), (45, 'Bob', 9.75, false, NULL)")
    config, domain, printed = _draft(tmp_path, capsys, "--postgres", pg_server.url, "--table", "public.people")
    assert config["tables"]["people"]["domain"] == "people.domain.toml"
    table = domain["tables"]["people"]
    assert table["source"] == {"postgres": pg_server.url, "table": "public.people", "data_version": "1"}
    cols = table["columns"]
    assert cols["age"]["type"] == "integer" and cols["name"]["type"] == "categorical"
    assert cols["score"]["type"] == "numeric" and cols["ok"]["labels"] == ["true", "false"]
    # a DATE column is drafted as a date axis (issue 30) with its bounds and bin left to the
    # operator: nothing read from the rows (the secret date is checked absent above)
    assert cols["born"]["type"] == "date" and "lo" not in cols["born"] and "hi" not in cols["born"]


def test_init_refuses_a_password_in_the_url(tmp_path, capsys):
    assert main(["init", "--postgres", "postgresql://u:pw@db/hr", "--table", "t", "-o", str(tmp_path / "x.toml")]) == 2
    assert "holds a password" in capsys.readouterr().err
    assert not (tmp_path / "x.toml").exists()


def test_init_from_a_parquet_glob_with_hive_partitions(tmp_path, capsys):
    con = duckdb.connect()
    for year in (2020, 2021):
        (tmp_path / "lake" / f"year={year}").mkdir(parents=True)
        con.execute(f"COPY (SELECT 83 AS age, 'Ann' AS name, 2.5::DOUBLE AS score) "
                    f"TO '{tmp_path / 'lake' / f'year={year}' / 'p.parquet'}' (FORMAT parquet)")
    config, domain, _ = _draft(tmp_path, capsys, str(tmp_path / "lake"), "--hive", "--name", "people")
    source = domain["tables"]["people"]["source"]
    assert source == {"parquet": "lake", "hive_partitioning": True}   # relative to the domain file
    cols = domain["tables"]["people"]["columns"]
    assert [c for c in cols] == ["age", "name", "score", "year"]
    assert cols["year"]["type"] == "categorical"   # partition values are text
    # with its domains declared, the draft is a working configuration
    domain_path = tmp_path / "people.domain.toml"
    domain_path.write_text(domain_path.read_text()
                           .replace("# lo = ?   (TO FILL: public lower bound)", "lo = 0")
                           .replace("# hi = ?   (TO FILL: public upper bound)", "hi = 120")
                           .replace("# labels = ?   (TO FILL: the published list of values)", 'labels = ["x"]')
                           .replace("# edges = ?   (TO FILL: public bin edges)", "edges = [0, 10]"))
    cfg = load_config(tmp_path / "dpsql.toml")
    assert cfg.sources["people"].hive_partitioning and cfg.sources["people"].is_glob


@pytest.mark.slow
def test_init_from_a_spark_table(spark, tmp_path, capsys):
    con = duckdb.connect()
    path = tmp_path / "people.parquet"
    con.execute(f"COPY (SELECT 83 AS age, 'Ann' AS name, 2.5::DOUBLE AS score) TO '{path}' (FORMAT parquet)")
    spark.sql("DROP TABLE IF EXISTS init_people")
    spark.sql(f"CREATE TABLE init_people USING parquet LOCATION '{path}'")
    config, domain, _ = _draft(tmp_path, capsys, "--spark", "local[2]", "--table", "init_people")
    assert domain["tables"]["init_people"]["source"] == {"spark": "local[2]", "table": "init_people"}
    cols = domain["tables"]["init_people"]["columns"]
    assert cols["age"]["type"] == "integer" and cols["score"]["type"] == "numeric"
    assert cols["name"]["type"] == "categorical"
    assert spark.sql("SELECT 1").collect()[0][0] == 1   # the shared session is still running
