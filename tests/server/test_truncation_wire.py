"""Over the wire, an analyst sees the rows a people view's bound drops, as released with noise
(issue 32: truncation bias beside noise; dpsql/engine/people_truncation.py): a NOTICE before
the rows of an answer that reads the view, carrying the released figures, never the exact
count.  Before, the figure reached the operator's command line only."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

import dpsql
from dpsql.engine.people_truncation import released_truncation
from dpsql.server.server import Server, ServerOptions, ServerThread

from test_bi import connect
from test_clients import bounded

psycopg = pytest.importorskip("psycopg", reason="psycopg not installed (pip install -e '.[dev]')")

SHOP = Path(__file__).resolve().parents[2] / "examples" / "shop"
FLAGS = ("SELECT l.returnflag, COUNT(*) FROM orders o JOIN lineitem l ON l.orderkey = o.orderkey "
         "GROUP BY l.returnflag")
SEGMENTS = "SELECT segment, COUNT(*) FROM customers GROUP BY segment"


@pytest.fixture(scope="module")
def shop_server(tmp_path_factory, users_file, shadow_cluster):
    tmp = tmp_path_factory.mktemp("truncation")
    for f in SHOP.iterdir():
        if f.suffix in (".toml", ".sql", ".parquet"):
            shutil.copy(f, tmp / f.name)
    config = tmp / "dpsql.toml"
    assert "\ntruncation_share = 0.05" in config.read_text()    # the example releases its bounds' drops
    admin = dpsql.connect(config, user="alice")
    engine = admin.session.engine
    for view in engine.view_shares(engine.workload_rho()):
        admin.session.measure(view)
    released = released_truncation(engine, "lineitem")
    admin.close()
    assert released is not None
    server = Server(config, users_file=users_file, options=ServerOptions(host="127.0.0.1", port=0),
                    shadow_cluster=shadow_cluster)
    thread = ServerThread(server).start()
    yield thread, released
    thread.stop()


def test_an_answer_over_a_bounded_view_carries_its_released_truncation_as_a_notice(shop_server):
    thread, released = shop_server
    conn = connect(thread.port, options="-c dpsql.error_columns=ci95")
    notices = []
    conn.add_notice_handler(lambda d: notices.append((d.severity, d.sqlstate, d.message_primary)))
    try:
        for prepare in (False, True):
            notices.clear()
            rows = bounded(lambda: conn.execute(FLAGS, prepare=prepare).fetchall())
            assert rows and len(rows[0]) == 4        # returnflag, count, count_ci95, inferred
            assert len(notices) == 1, notices
            severity, sqlstate, message = notices[0]
            assert severity == "NOTICE" and sqlstate == "00000"
            assert message.startswith("lineitem: truncation (released with noise")
            # the released (noisy) figures, as the ledger holds them
            assert f"about {released.dropped:,.0f} rows dropped" in message
            assert f"{released.kept:,.0f} kept" in message
            assert re.search(r"\d+\.\d% of the view's rows", message)
        # the person view has no bound to drop rows by: no notice
        notices.clear()
        bounded(lambda: conn.execute(SEGMENTS).fetchall())
        assert notices == []
    finally:
        conn.close()


def test_the_analysts_shell_prints_the_notice_under_the_answer(shop_server):
    """``dpsql shell --connect``: the wire client keeps the server's NOTICEs with the reply,
    they become the Result's notes, and the shell prints them under the table, as the
    operator's ``dpsql query`` does in process."""
    from repl.remote import connect as remote_connect
    from repl.render import result_lines

    from server_fakes import PASSWORD

    thread, released = shop_server
    conn = remote_connect(host="127.0.0.1", port=thread.port, user="alice", password=PASSWORD, dbname="dpsql",
                          sslmode="disable")
    try:
        result = bounded(lambda: conn.cursor().execute(FLAGS).result)
        assert len(result.notes) == 1 and f"about {released.dropped:,.0f} rows dropped" in result.notes[0]
        lines = result_lines(result, timing=False)
        assert lines[-1] == result.notes[0]
        # the next statement starts with no notice of its own
        assert bounded(lambda: conn.cursor().execute(SEGMENTS).result).notes == ()
    finally:
        conn.close()
