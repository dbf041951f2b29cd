"""Router classification table and value encoders (no sockets)."""

import struct
from decimal import Decimal

import pytest

from dpsql.server import pgtypes
from dpsql.server.gucs import parse_command
from dpsql.server.results import QueryError
from dpsql.server.router import budget_sql, qmark_parameters, route

PRIVATE = ["adult"]


@pytest.mark.parametrize("sql, kind, sqlstate", [
    ("SELECT sex, COUNT(*) FROM adult GROUP BY sex", "engine", ""),
    ("select count(*) from public.adult where age > 30", "engine", ""),
    ("SELECT * FROM adult", "engine", ""),  # the engine refuses it with 42501
    ("WITH a AS (SELECT 1) SELECT * FROM a", "catalog", ""),
    ("SELECT c.relname FROM pg_catalog.pg_class c", "catalog", ""),
    ("SELECT * FROM information_schema.columns WHERE table_name = 'adult'", "catalog", ""),
    ("SELECT 1", "catalog", ""),
    ("SELECT pg_backend_pid()", "local", ""),
    ("select pg_catalog.version()", "local", ""),
    ("SELECT current_schema(), session_user", "local", ""),
    ("SELECT * FROM adult JOIN pg_class ON true", "error", "0A000"),
    ("SELECT * FROM secrets", "error", "42P01"),
    ("DELETE FROM adult", "error", "25006"),
    ("CREATE TEMP TABLE t (a int)", "error", "25006"),
    ("COPY adult TO STDOUT", "error", "0A000"),
    ("DECLARE c CURSOR FOR SELECT 1", "error", "0A000"),
    ("SAVEPOINT _pg3_1", "session", ""),
    ('RELEASE "_pg3_1"', "session", ""),
    ("SET extra_float_digits = 3", "session", ""),
    ("show transaction isolation level", "session", ""),
    ("DISCARD ALL", "session", ""),
    ("-- only a comment", "empty", ""),
    ("EXPLAIN SELECT COUNT(*) FROM adult", "engine", ""),
])
def test_routes(sql, kind, sqlstate):
    r = route(sql, PRIVATE)
    assert r.kind == kind
    assert r.sqlstate == sqlstate


def test_string_literals_do_not_route():
    # a private table name inside a string literal must not make a catalog query private
    r = route("SELECT relname FROM pg_class WHERE relname = 'adult'", PRIVATE)
    assert r.kind == "catalog"


def test_budget_statements_are_rewritten_with_the_connections_rows():
    """``dpsql_budget`` / ``dpsql_budget()``: a catalog statement flagged ``budget``, whose
    relation becomes the connection's rows as a typed VALUES list (the shadow's view is empty)."""
    rows = [("user_remaining", 0.0153, 0.8123, 1e-06), ("next_measurement", None, None, 1e-06)]
    for sql in ("SELECT * FROM dpsql_budget()", "SELECT epsilon FROM public.dpsql_budget WHERE budget = $1"):
        r = route(sql, ["adult"])
        assert (r.kind, r.budget) == ("catalog", True), sql
    out = budget_sql(route("SELECT b.epsilon FROM dpsql_budget() AS b WHERE b.budget = $1", ["adult"]).tree, rows)
    assert out == ("SELECT b.epsilon FROM (VALUES (CAST('user_remaining' AS TEXT), CAST(0.0153 AS DOUBLE PRECISION), "
                   "CAST(0.8123 AS DOUBLE PRECISION), CAST(1e-06 AS DOUBLE PRECISION)), "
                   "(CAST('next_measurement' AS TEXT), CAST(NULL AS DOUBLE PRECISION), "
                   "CAST(NULL AS DOUBLE PRECISION), CAST(1e-06 AS DOUBLE PRECISION))) "
                   "AS b(budget, rho, epsilon, delta) WHERE b.budget = $1")
    # a CTE of that name is the client's own; with a private table, refused like any catalog relation
    assert route("WITH dpsql_budget AS (SELECT 1 AS x) SELECT x FROM dpsql_budget", ["adult"]).budget is False
    assert route("SELECT COUNT(*) FROM adult, dpsql_budget()", ["adult"]).sqlstate == "0A000"
    # never sent to the shadow unrewritten (its view has no rows)
    assert route("SELECT * FROM dpsql_budget() WHERE (", ["adult"]).sqlstate == "42601"


def test_dollar_parameters_become_qmarks_in_binding_order():
    r = route("SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN $2 AND $1 GROUP BY sex", PRIVATE)
    sql, order = qmark_parameters(r.tree)
    assert "$" not in sql and order == [1, 0]
    assert qmark_parameters(route("SELECT COUNT(*) FROM adult", PRIVATE).tree) is None


def test_text_encodings():
    assert pgtypes.encode_text(3.0, pgtypes.FLOAT8) == b"3"
    assert pgtypes.encode_text(0.1, pgtypes.FLOAT8) == b"0.1"
    assert pgtypes.encode_text(float("inf"), pgtypes.FLOAT8) == b"Infinity"
    assert pgtypes.encode_text(float("nan"), pgtypes.FLOAT8) == b"NaN"
    assert pgtypes.encode_text(41.6, pgtypes.INT8) == b"42"
    assert pgtypes.encode_text(True, pgtypes.BOOL) == b"t"
    assert pgtypes.encode_text(None, pgtypes.TEXT) is None


def test_binary_encodings():
    assert pgtypes.encode_binary(7, pgtypes.INT8) == struct.pack("!q", 7)
    assert pgtypes.encode_binary(1.5, pgtypes.FLOAT8) == struct.pack("!d", 1.5)
    assert pgtypes.encode_binary("Ünï", pgtypes.TEXT) == "Ünï".encode()


@pytest.mark.parametrize("value", ["0", "1", "-1", "12345.678", "0.0001", "100000000", "-0.5", "9999.9999", "1E+5"])
def test_numeric_binary_roundtrip(value):
    dec = Decimal(value)
    data = pgtypes.encode_binary(dec, pgtypes.NUMERIC)
    assert pgtypes.decode_param(data, pgtypes.NUMERIC, 1) == dec


def test_numeric_binary_matches_psycopg():
    psycopg = pytest.importorskip("psycopg", reason="psycopg not installed (dev extra)")
    from psycopg.adapt import PyFormat
    from psycopg.postgres import types as _  # noqa: F401
    conn_ctx = psycopg.adapt.Transformer()
    loader = conn_ctx.get_loader(pgtypes.NUMERIC, psycopg.pq.Format.BINARY)
    for value in ["3.14159", "-42", "0.000123", "98765432.1"]:
        assert loader.load(pgtypes.encode_binary(Decimal(value), pgtypes.NUMERIC)) == Decimal(value)
    dumper = conn_ctx.get_dumper(Decimal("1.5"), PyFormat.BINARY)
    assert pgtypes.decode_param(bytes(dumper.dump(Decimal("-1234.5678"))), pgtypes.NUMERIC, 1) == Decimal("-1234.5678")


def test_parameters_by_oid():
    assert pgtypes.decode_param(b"30", pgtypes.INT2, 0) == 30
    assert pgtypes.decode_param(struct.pack("!i", -5), pgtypes.INT4, 1) == -5
    assert pgtypes.decode_param(b"Male", 0, 0) == "Male"
    assert pgtypes.decode_param(None, pgtypes.INT8, 0) is None
    with pytest.raises(pgtypes.ParameterError):
        pgtypes.decode_param(b"abc", pgtypes.INT4, 0)


@pytest.mark.parametrize("sql, kind, name, value", [
    ("SET TIME ZONE 'UTC'", "set", "timezone", "UTC"),
    ("SET extra_float_digits TO 3", "set", "extra_float_digits", "3"),
    ("SET SESSION timezone = 'UTC'", "set", "timezone", "UTC"),
    ('set search_path = "public"', "set", "search_path", "public"),
    ("SET application_name TO DEFAULT", "reset", "application_name", None),
    ("SET SESSION CHARACTERISTICS AS TRANSACTION ISOLATION LEVEL READ COMMITTED", "ack", "", None),
    ("SHOW transaction isolation level", "show", "transaction_isolation", None),
    ("SHOW TIME ZONE", "show", "timezone", None),
    ("RESET ALL", "reset", "all", None),
    ("ROLLBACK TO SAVEPOINT s", "rollback_to", "", None),
])
def test_session_command_parsing(sql, kind, name, value):
    cmd = parse_command(route(sql, PRIVATE))
    assert (cmd.kind, cmd.name, cmd.value) == (kind, name, value)


@pytest.mark.parametrize("sql", ["SET ROLE bob", "SET SESSION AUTHORIZATION bob"])
def test_identity_switch_refused(sql):
    with pytest.raises(QueryError) as info:
        parse_command(route(sql, PRIVATE))
    assert info.value.sqlstate == "0A000"
