"""pgcli's `\\d` (its pgspecial library, the code pgcli runs for backslash commands) sees the
declared numeric columns as numbers, binned ones included (issue 33's acceptance: a BI tool
or a SQL client offers AVG/SUM on fnlwgt and capital_gain, whose bins are wide)."""

from __future__ import annotations

import pytest

from dpsql.server.server import serve
from dpsql.testing import ADULT

from server_fakes import PASSWORD
from test_clients import bounded


def test_pgcli_describes_binned_numeric_columns_as_numbers(users_file, tmp_path):
    pgspecial = pytest.importorskip("pgspecial.main")
    psycopg = pytest.importorskip("psycopg")
    thread = serve(ADULT / "dpsql.toml", users_file=users_file,
                   overrides={"ledger": str(tmp_path / "l.ledger"), "cache_dir": str(tmp_path / "cache")})
    try:
        if thread.server.shadow is None:
            pytest.skip("no PostgreSQL binaries for the catalog")
        conn = bounded(lambda: psycopg.connect(host="127.0.0.1", port=thread.port, user="alice",
                                               password=PASSWORD, dbname="dpsql", sslmode="disable",
                                               autocommit=True))
        try:
            results = bounded(lambda: list(pgspecial.PGSpecial().execute(conn.cursor(), "\\d adult")))
        finally:
            bounded(conn.close)
    finally:
        thread.stop()
    types = {row[0]: row[1] for row in results[0][1]}
    # fnlwgt, capital_gain and capital_loss have wide bins; age and hours_per_week narrow ones
    assert {c: types[c] for c in ("age", "fnlwgt", "capital_gain", "capital_loss", "hours_per_week")} == \
        dict.fromkeys(("age", "fnlwgt", "capital_gain", "capital_loss", "hours_per_week"), "bigint")
    assert types["sex"] == "text" and types["income"] == "text"
