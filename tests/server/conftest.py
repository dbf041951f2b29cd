"""Fixtures: servers on 127.0.0.1 port 0 with a users file holding known SCRAM verifiers.

``fake_server`` serves the deterministic FakeLink without the shadow catalog (fast protocol
tests); ``shadow_server`` adds the schema-only PostgreSQL (skipped when its binaries are not
installed); ``engine_server`` serves the real DP engine over the adult example with a temp
ledger and a large budget, measured once (``engine_overrides`` lets a test start another
server on that ledger); ``measured_server(config)`` measures a configuration in process
and serves it, for the wire tests that compare psycopg's answers with the DB-API's."""

from __future__ import annotations

import pytest

from dpsql.server import scram
from dpsql.server.server import Server, ServerOptions, ServerThread, serve
from dpsql.server.shadow import ShadowCluster, find_bindir

from server_fakes import ADULT_CONFIG, PASSWORD, FakeLink
from test_clients import bounded


@pytest.fixture(scope="session")
def users_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("users") / "dpsql.users.json"
    for name in ("alice", "bob", "load"):
        scram.add_user(path, name, PASSWORD)
    return path


def _start(users_file, link_factory, catalog, cluster=None, **options):
    opts = ServerOptions(host="127.0.0.1", port=0, **options)
    server = Server(ADULT_CONFIG, users_file=users_file, link_factory=link_factory, catalog=catalog, options=opts,
                    shadow_cluster=cluster)
    return ServerThread(server).start()


@pytest.fixture(scope="session")
def shadow_cluster():
    """One schema-only PostgreSQL shared by every server of the session (initdb is the slow part)."""
    if find_bindir() is None:
        pytest.skip("PostgreSQL server binaries (initdb/pg_ctl) not installed: apt-get install postgresql")
    cluster = ShadowCluster(FakeLink.catalog, "dpsql")
    cluster.start()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def fake_server(users_file):
    thread = _start(users_file, FakeLink, FakeLink.catalog, shadow=False, auth_failure_delay=0.05,
                    auth_timeout=2.0, max_message=1 << 20, max_connections=20,
                    max_user_connections=20)
    yield thread
    thread.stop()


@pytest.fixture(scope="session")
def shadow_server(users_file, shadow_cluster):
    thread = _start(users_file, FakeLink, FakeLink.catalog, shadow_cluster, auth_failure_delay=0.05)
    yield thread
    thread.stop()


@pytest.fixture(scope="session")
def engine_overrides(tmp_path_factory):
    """A temp ledger with a large budget on which the adult workload was measured once."""
    import dpsql
    ledger = tmp_path_factory.mktemp("ledger") / "wire.ledger"
    overrides = {"ledger": str(ledger), "budget": {"epsilon": 1e6, "delta": 1e-6}}
    admin = dpsql.connect(ADULT_CONFIG, user="alice", **overrides)
    admin.session.measure()
    yield overrides, admin
    admin.close()


@pytest.fixture(scope="session")
def engine_server(users_file, engine_overrides, shadow_cluster):
    overrides, admin = engine_overrides
    server = Server(ADULT_CONFIG, users_file=users_file, overrides=overrides, options=ServerOptions(port=0),
                    shadow_cluster=shadow_cluster)
    thread = ServerThread(server).start()
    yield thread, admin
    thread.stop()


@pytest.fixture(scope="module")
def measured_server(users_file):
    """``measured_server(config) -> (conn, local)``: the configuration's workload measured
    in process by ``local`` (a DB-API connection as alice), served by ``dpsql serve`` on a
    free port without the shadow catalog, and ``conn`` a psycopg connection to it as alice
    (autocommit), so a test compares the wire's answers with the in-process driver's on
    the same release.  Everything started is closed at the end of the test module."""
    import dpsql
    closers = []

    def start(config):
        local = dpsql.connect(str(config), user="alice")
        closers.append(local.close)
        local.session.measure()
        thread = serve(str(config), users_file=users_file, shadow=False)
        closers.append(thread.stop)
        psycopg = pytest.importorskip("psycopg")
        conn = bounded(lambda: psycopg.connect(host="127.0.0.1", port=thread.port, user="alice", password=PASSWORD,
                                               dbname="dpsql", connect_timeout=10, autocommit=True,
                                               sslmode="disable"))
        closers.append(lambda: bounded(conn.close))
        return conn, local
    yield start
    for close in reversed(closers):
        close()
