"""Shared fixtures for the SQL front-end tests: one catalog and one DuckDB oracle per session."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sql_oracle import Oracle  # noqa: E402


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    return Oracle()


@pytest.fixture(scope="session")
def catalog(oracle):
    return oracle.catalog


@pytest.fixture(scope="session")
def toracle():
    """The oracle over tests/fixtures/sql/flights.toml (date and timestamp columns)."""
    from time_oracle import TimeOracle
    return TimeOracle()
