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
