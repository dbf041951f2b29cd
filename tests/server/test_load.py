"""Bounded load through the wire server with the deterministic fake link: 50 concurrent
psycopg connections x 20 mixed queries (engine, catalog, session, refused) complete with no
error.  The engine-backed run, with the ledger check, is in test_engine_server.py."""

import importlib.util
from pathlib import Path

import pytest

from server_fakes import PASSWORD

pytestmark = pytest.mark.slow   # 50 connections x 20 queries (bench/server_load.py)

BENCH = Path(__file__).resolve().parents[2] / "bench" / "server_load.py"


def load_bench():
    spec = importlib.util.spec_from_file_location("dpsql_bench_server_load", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fifty_connections_twenty_queries(shadow_server):
    pytest.importorskip("psycopg")
    result = load_bench().run_load(shadow_server.port, 50, 20, user="load", password=PASSWORD)
    assert result["alive"] == 0, "clients still running after the bound"
    assert result["failures"] == []
    assert result["completed"] == 1000
