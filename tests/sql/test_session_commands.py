"""SET/SHOW/RESET are read by one parser, for the engine session and the wire server
(dpsql/sql/session_commands.py; issue 36 item 4).  The server parsed the router's tokens and
the engine sqlglot's tree: ``SET dpsql.error_columns = DEFAULT`` was a reset on the wire, then
the invalid value 'default' in the engine the wire forwarded it to; ``SHOW TIME ZONE`` named
``timezone`` on the wire and ``time zone`` in the engine."""

from __future__ import annotations

import pytest

import dpsql
from dpsql.server.gucs import parse_command
from dpsql.server.router import route
from dpsql.sql.session_commands import parse_session_command
from dpsql.testing import write_config

STATEMENTS = ["SET dpsql.error_columns = 'ci95'", "SET dpsql.error_columns TO ci95", "SET dpsql.policy = DEFAULT",
              "SET dpsql.policy TO DEFAULT", "SET SESSION dpsql.policy = 'infer'", "SET LOCAL dpsql.policy = infer",
              'SET "dpsql.policy" = \'infer\'', "set dpsql.policy='infer';", "SET dpsql.allow_spend = true",
              "SET dpsql.policy = 'a', 'b'", "SET TIME ZONE 'UTC'", "SET search_path TO public",
              "SHOW dpsql.error_columns", "SHOW DPSQL.Error_Columns;", "SHOW TIME ZONE", "SHOW ALL",
              "SHOW transaction isolation level", "SHOW dpsql.budget_remaining", "RESET dpsql.policy", "RESET ALL",
              "BEGIN", "START TRANSACTION", "COMMIT", "END", "ROLLBACK", "ABORT", "SET TRANSACTION READ ONLY"]


def test_the_engine_and_the_server_read_a_session_command_alike():
    for sql in STATEMENTS:
        assert parse_session_command(sql) == parse_command(route(sql, {"adult"})), sql


def test_set_to_default_resets_the_setting(tmp_path):
    con = dpsql.connect(write_config(tmp_path, queries=["SELECT sex, COUNT(*) FROM adult GROUP BY sex"]))
    cur = con.cursor()
    for set_default in ("SET dpsql.error_columns = DEFAULT", "SET dpsql.error_columns TO default"):
        cur.execute("SET dpsql.error_columns = 'ci95'")
        cur.execute(set_default)          # was: invalid value for dpsql.error_columns: 'default'
        cur.execute("SHOW dpsql.error_columns")
        assert cur.fetchone() == ("off",)
    with pytest.raises(dpsql.ProgrammingError, match="invalid value"):
        cur.execute("SET dpsql.error_columns = 'DEFAULT'")   # quoted, a value, as in PostgreSQL
