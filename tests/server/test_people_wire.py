"""An ad hoc COUNT(DISTINCT person) with a condition on a child table's rows over the wire
(issue 32): Describe compiles it (the engine adds its flag's table first) and charges nothing;
without SET dpsql.allow_spend it is refused with nothing spent; with it, it is measured on
demand for the authenticated user and a repeat is free."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from dpsql.server import codec
from dpsql.server.server import serve

from server_fakes import PASSWORD
from server_pgclient import RawClient, error_fields
from test_clients import bounded

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

SQL = ("SELECT c.nation, COUNT(DISTINCT c.custkey) AS buyers FROM customers c JOIN orders o "
       "ON o.custkey = c.custkey WHERE o.priority = 2 GROUP BY c.nation")


@pytest.fixture(scope="module")
def people_server(users_file, tmp_path_factory):
    import dpsql
    tmp = tmp_path_factory.mktemp("people")
    files = shop.write_parquet(shop.shop_rows(customers=40), tmp / "data")
    spec = shop.config(tmp, {t: {"parquet": str(p)} for t, p in files.items()},
                       workload={"queries": ["SELECT nation, COUNT(*) FROM customers GROUP BY nation"]},
                       policy={"unsupported": "measure", "epsilon": 1.0},
                       budget={"epsilon": 100.0, "delta": 1e-6, "per_user": {"epsilon": 10.0}})
    thread = serve(spec, users_file=users_file, shadow=False)
    ledger = dpsql.connect(spec).session.engine.ledger      # the server's ledger
    yield thread, ledger
    thread.stop()


def test_describe_compiles_an_ad_hoc_person_count_and_spends_nothing(people_server):
    thread, ledger = people_server
    before = ledger.spent(None)
    c = RawClient(thread.port)
    try:
        c.startup("alice", PASSWORD)
        c.send(codec.encode_parse("s", SQL) + codec.encode_describe("S", "s") + codec.SYNC)
        msgs = c.until()
        assert [k for k, _ in msgs] == [b"1", b"t", b"T", b"Z"], error_fields(msgs)
    finally:
        c.close()
    assert ledger.spent(None) == before


def test_an_ad_hoc_person_count_spends_only_once_allowed(people_server):
    psycopg = pytest.importorskip("psycopg")
    thread, ledger = people_server
    conn = bounded(lambda: psycopg.connect(host="127.0.0.1", port=thread.port, user="bob", password=PASSWORD,
                                           dbname="dpsql", connect_timeout=10, autocommit=True, sslmode="disable"))
    try:
        with pytest.raises(psycopg.errors.InsufficientPrivilege, match="nothing was spent"):
            bounded(lambda: conn.execute(SQL).fetchall(), timeout=120)
        assert ledger.spent("bob") == 0
        conn.execute("SET dpsql.allow_spend = 'on'")
        rows = bounded(lambda: conn.execute(SQL).fetchall(), timeout=120)
        assert sorted(r[0] for r in rows) == [0, 1, 2, 3, 4]
        spent = ledger.spent("bob")
        assert spent > 0
        assert bounded(lambda: conn.execute(SQL).fetchall(), timeout=120) == rows
        assert ledger.spent("bob") == spent
    finally:
        bounded(conn.close)


def test_another_analysts_flag_table_is_not_listed_in_hints(people_server):
    """Alice's ad hoc condition adds a flag table to the shared engine; Bob, connecting after,
    must not find it among the private tables a 42P01 hint lists (on main it was: its name
    is a hash of her condition's text, and a connection's private tables were read from the
    engine's catalog when it started)."""
    thread, ledger = people_server
    c = RawClient(thread.port)
    try:
        c.startup("alice", PASSWORD)
        c.send(codec.encode_parse("s", SQL.replace("o.priority = 2", "o.priority = 4"))
               + codec.encode_describe("S", "s") + codec.SYNC)
        msgs = c.until()
        assert [k for k, _ in msgs] == [b"1", b"t", b"T", b"Z"], error_fields(msgs)
    finally:
        c.close()
    c = RawClient(thread.port)
    try:
        c.startup("bob", PASSWORD)
        c.send(codec.encode_query("SELECT COUNT(*) FROM nosuch"))
        fields = error_fields(c.until())
    finally:
        c.close()
    assert fields.get("C") == "42P01" and "customers" in fields.get("H", ""), fields
    assert "__has_" not in fields.get("H", "") + fields.get("M", ""), fields


def test_the_catalogs_ddl_leaves_out_flag_tables(tmp_path):
    """The shadow catalog's DDL (pg_catalog, information_schema, psql's \\d) is made from the
    engine's catalog: an on-demand flag table, another analyst's condition, is not in it, nor
    in the copy the server makes of that catalog."""
    import dpsql
    from dpsql.public import StarCatalog
    from dpsql.server.shadow import schema_ddl
    files = shop.write_parquet(shop.shop_rows(customers=20), tmp_path / "data")
    spec = shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                       policy={"unsupported": "measure", "epsilon": 1.0})
    con = dpsql.connect(spec)
    con.session.compile(SQL)
    catalog = con.session.engine.catalog
    assert [n for n in con.session.engine.tables if "__has_" in n]      # added, by name
    copy = StarCatalog(catalog, catalog.public, catalog.references)
    for ddl in ("\n".join(schema_ddl(catalog)), "\n".join(schema_ddl(copy))):
        assert "customers" in ddl and "__has_" not in ddl
    con.close()
