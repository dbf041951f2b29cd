"""Issue 29 item 4 over the wire: values go out at their error's precision (dpsql.display),
the same number in text and binary formats, parseable by any client; never float noise such
as `58640.60093598821` or `2.23e-308` for a value far inside its ±42."""

from __future__ import annotations

import math

import pytest

from dpsql.engine.results import Column, Result
from dpsql.engine.variance import Z95
from dpsql.server.server import Server, ServerOptions, ServerThread

from server_fakes import ADULT_CONFIG, PASSWORD, FakeLink
from test_clients import bounded

SQL = "SELECT sex, SUM(hours_per_week) AS hours, AVG(capital_gain) AS gain FROM adult GROUP BY sex"


class NoisyLink(FakeLink):
    """Answers SQL with the shapes the engine produced in the report: a sum whose float
    carries 14 decimals and an average far inside its error."""

    def execute(self, sql, params):
        if "SUM(hours_per_week)" not in sql:
            return super().execute(sql, params)
        return Result([Column("sex", "text"), Column("hours", "double"), Column("gain", "double")],
                      [("Female", 58640.60093598821, 2.23e-308), ("Male", 1049.8347, -2.17e-09)],
                      [(None, 31.0 / Z95, 42.0 / Z95), (None, 0.52 / Z95, 26.0 / Z95)], [False, False])


@pytest.fixture(scope="module")
def noisy_server(users_file):
    server = Server(ADULT_CONFIG, users_file=users_file, link_factory=NoisyLink, catalog=NoisyLink.catalog,
                    options=ServerOptions(host="127.0.0.1", port=0, shadow=False))
    thread = ServerThread(server).start()
    yield thread
    thread.stop()


def test_values_go_out_rounded_to_their_errors_precision(noisy_server):
    psycopg = pytest.importorskip("psycopg")
    conn = bounded(lambda: psycopg.connect(host="127.0.0.1", port=noisy_server.port, user="alice",
                                           password=PASSWORD, dbname="dpsql", connect_timeout=10,
                                           autocommit=True, sslmode="disable"))
    try:
        for binary in (False, True):
            cur = conn.cursor(binary=binary)
            rows = bounded(lambda: cur.execute(SQL).fetchall())
            assert rows == [("Female", 58641.0, 0.0), ("Male", 1049.83, 0.0)], (binary, rows)
            assert all(math.copysign(1.0, r[2]) == 1.0 for r in rows)   # no "-0"
        # the simple protocol's text, as psql prints it
        raw = conn.pgconn.exec_(SQL.encode())
        assert [raw.get_value(i, 1) for i in range(raw.ntuples)] == [b"58641", b"1049.83"]
        assert [raw.get_value(i, 2) for i in range(raw.ntuples)] == [b"0", b"0"]
    finally:
        bounded(conn.close)
