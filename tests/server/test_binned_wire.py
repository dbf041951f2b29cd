"""Over the wire, a value whose interval holds a binning bound is told apart from one whose
interval is the noise alone (issue 29: the bound was invisible in ``c_ci95``): a boolean
``binned`` column after ``inferred``, announced by Describe for statements with an aggregate
over wide bins, true where the answer fell back to the bound (offsets not measured at its
granularity), false where the measured offsets made it unbiased."""

from __future__ import annotations

import pytest

import dpsql
from dpsql.server.server import Server, ServerOptions, ServerThread
from dpsql.testing import write_config

from test_bi import connect, names
from test_clients import bounded

psycopg = pytest.importorskip("psycopg", reason="psycopg not installed (pip install -e '.[dev]')")

WORKLOAD = ["SELECT COUNT(*) FROM adult", "SELECT sex, SUM(fnlwgt) FROM adult GROUP BY sex",
            "SELECT fnlwgt, sex, COUNT(*) FROM adult GROUP BY fnlwgt, sex"]
OFFSETS = "SELECT sex, SUM(fnlwgt) FROM adult GROUP BY sex"                          # offsets measured
FALLBACK = "SELECT sex, SUM(fnlwgt) FROM adult WHERE fnlwgt < 100001 GROUP BY sex"    # the bound
COUNTS = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"


@pytest.fixture(scope="module")
def binned_server(tmp_path_factory, users_file, shadow_cluster):
    tmp = tmp_path_factory.mktemp("binned")
    config = write_config(tmp, queries=WORKLOAD, epsilon=50.0, dpsql={"error_columns": "ci95"})
    admin = dpsql.connect(config, user="alice")
    admin.session.measure()
    admin.close()
    server = Server(config, users_file=users_file, options=ServerOptions(host="127.0.0.1", port=0),
                    shadow_cluster=shadow_cluster)
    thread = ServerThread(server).start()
    yield thread
    thread.stop()


def test_binned_column_tells_bounded_intervals_from_pure_ones(binned_server):
    conn = connect(binned_server.port, options="-c dpsql.error_columns=ci95")
    try:
        for binary in (False, True):
            cur = conn.cursor(binary=binary)
            rows = bounded(lambda: cur.execute(OFFSETS).fetchall())
            assert names(cur) == ["sex", "sum", "sum_ci95", "inferred", "binned"]
            assert cur.description[4].type_code == 16
            assert len(rows) == 2 and all(r[3] is False and r[4] is False and r[2] > 0 for r in rows)
            rows = bounded(lambda: cur.execute(FALLBACK.replace("100001", "%s"), (100001,)).fetchall())
            assert names(cur) == ["sex", "sum", "sum_ci95", "inferred", "binned"]
            assert len(rows) == 2 and all(r[3] is False and r[4] is True for r in rows)
            # a statement without an aggregate over wide bins keeps its columns
            bounded(lambda: cur.execute(COUNTS).fetchall())
            assert names(cur) == ["sex", "count", "count_ci95", "inferred"]
    finally:
        conn.close()


def test_binned_column_is_announced_by_describe(binned_server):
    """A prepared statement's Describe lists the same columns as its rows."""
    conn = connect(binned_server.port, options="-c dpsql.error_columns=ci95")
    try:
        cur = conn.cursor()
        bounded(lambda: cur.execute(FALLBACK.replace("100001", "%s"), (100001,), prepare=True).fetchall())
        assert names(cur) == ["sex", "sum", "sum_ci95", "inferred", "binned"]
        rows = bounded(lambda: cur.execute(FALLBACK.replace("100001", "%s"), (100001,), prepare=True).fetchall())
        assert all(r[4] is True for r in rows)
    finally:
        conn.close()
