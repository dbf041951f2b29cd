"""``repl.remote``: a wire reply with the ``bounds`` error columns becomes the Result the shell
renders in process (value columns, standard errors, inferred flags and ranges)."""

from __future__ import annotations

import math

from dpsql.display import Z95
from dpsql.measure.postgres import WireReply
from repl import render
from repl.remote import to_result

COLUMNS = [("sex", "text"), ("count", "double"), ("avg", "double"), ("count_ci95", "double"),
           ("count_lower", "double"), ("count_upper", "double"), ("avg_ci95", "double"), ("avg_lower", "double"),
           ("avg_upper", "double"), ("inferred", "boolean")]


def test_bounds_columns_become_errors_flags_and_ranges():
    reply = WireReply(COLUMNS, [("Female", 16192.0, 38.5, 24.0, None, None, 0.31, None, None, False),
                                ("Male", 32650.0, 39.0, None, 0.0, 48842.0, None, 17.0, None, True)], "SELECT 2")
    result = to_result(reply, 0.01)
    assert [c.name for c in result.columns] == ["sex", "count", "avg"]
    assert result.rows == [("Female", 16192.0, 38.5), ("Male", 32650.0, 39.0)]
    assert result.stderr[0][0] is None and math.isclose(result.stderr[0][1] * Z95, 24.0)
    assert result.inferred == [False, True] and math.isnan(result.stderr[1][1])
    assert result.bounds[1][1] == (0.0, 48842.0) and result.bounds[1][2] == (17.0, math.inf)
    lines = render.result_lines(result, "ci95", timing=False)
    assert any(line.startswith(" Female | 16,192 ± 24") for line in lines), lines
    assert any("in [0, 48,842] *" in line for line in lines) and lines[-1] == render.INFERRED_NOTE


def test_replies_without_error_columns_and_commands():
    plain = to_result(WireReply([("count_ci95", "double")], [(3.0,)], "SELECT 1"), 0.0)
    assert [c.name for c in plain.columns] == ["count_ci95"] and plain.rows == [(3.0,)]
    assert to_result(WireReply([], [], "SET"), 0.0).message == "SET"
    explain = to_result(WireReply([("QUERY PLAN", "text")], [("q0: supported",)], "EXPLAIN"), 0.0)
    assert render.result_lines(explain) == ["q0: supported"]
