"""Session fixtures: one real PostgreSQL cluster and one Spark ``local[2]`` session for every
cross-engine test.  Locally they are skipped when PostgreSQL's server binaries or pyspark
and a JDK are missing; in CI (``CI`` set, as ``.ci/run`` runs) a missing engine fails."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import engines  # noqa: E402


def _missing(what: str):
    if os.environ.get("CI"):
        pytest.fail(f"{what} is required in CI (.ci/run installs it)")
    pytest.skip(f"{what} not installed")


@pytest.fixture(scope="session")
def pg_server():
    if engines.pg_bindir() is None:
        _missing("PostgreSQL server (initdb)")
    server = engines.PgServer().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    if not engines.spark_available():
        _missing("pyspark with a JDK")
    session = engines.spark_session(tmp_path_factory.mktemp("spark-warehouse"))
    yield session
    session.stop()
