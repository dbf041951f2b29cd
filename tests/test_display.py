"""Issue 29 item 4: one display rule for private values (dpsql/display.py), the same in
`dpsql query`, the shell's tables, its CSV and the wire (tests/server/test_display_wire.py).

Reported: `2.23e-308 ± 42` and `2.17e-09 ± 26` in the demo, `1,050 ± 0.52` for an average
of 1,049.8 (the value cut to whole units whatever its error), and counts sent over the wire
as `58640.60093598821`."""

from __future__ import annotations

import io
import math

from dpsql import display
from dpsql.cli import print_result
from dpsql.engine.results import Column, Result
from dpsql.engine.variance import Z95
from repl import render


def se(half: float) -> float:
    """The standard error whose 95% half-width is ``half``."""
    return half / Z95


def test_a_value_far_inside_its_error_shows_as_zero_at_the_errors_precision():
    assert display.format_value(2.23e-308, se(42)) == "0 ± 42"
    assert display.format_value(2.17e-09, se(26)) == "0 ± 26"
    assert display.format_value(-0.3, se(20)) == "0 ± 20"          # never "-0"
    assert display.format_value(-0.004, se(0.5)) == "0.00 ± 0.50"
    assert display.round_value(2.23e-308, se(42)) == 0.0
    assert math.copysign(1.0, display.round_value(-0.3, se(20))) == 1.0


def test_values_round_at_the_second_significant_digit_of_their_error():
    assert display.format_value(1049.8347, se(0.52)) == "1,049.83 ± 0.52"
    assert display.format_value(12.20341, se(0.15)) == "12.20 ± 0.15"
    assert display.format_value(66573.2, se(810)) == "66,573 ± 810"   # never coarser than units
    assert display.format_value(16192.4, se(24)) == "16,192 ± 24"
    assert display.format_value(38.5816, 0.0102) == "38.582 ± 0.020"
    assert display.format_value(100.04, 5.0, "stderr") == "100.0 ± 5.0"  # value at the 95% precision
    assert display.format_value(12345.4, 107.2, "off") == "12,345"
    # an exact answer (zero error) keeps its digits and says so
    assert display.format_value(0.0, 0.0) == "0 ± 0"
    assert display.format_value(37.5, None) == "37.5"


def test_an_inferred_value_shows_its_range_rounded_outward():
    text = display.format_value(1136.4, math.nan, bound=(0.0, 48842.3))
    assert text == "1,136 in [0, 48,843]"
    assert display.round_range((0.04, 9.96)) == (0.0, 10.0)
    assert display.round_range((17.0, 90.0)) == (17.0, 90.0)


def _result():
    return Result([Column("origin", "text"), Column("n", "double"), Column("avg_delay", "double")],
                  [("EWR", 58640.60093598821, 2.23e-308), ("JFK", 1049.8347, 12.20341),
                   (None, 3.0, 7.5)],
                  [(None, se(31.0), se(42.0)), (None, se(0.52), se(0.15)), (None, math.nan, math.nan)],
                  [False, False, True],
                  bounds=[(), (), (None, (0.0, 336840.7), (-40.0, 900.0))])


def test_the_cli_and_the_shell_print_the_same_table():
    out = io.StringIO()
    print_result(_result(), out=out)
    lines = out.getvalue().splitlines()
    table = render.table_lines(_result(), "ci95")
    assert lines[:len(table)] == table
    body = "\n".join(table)
    assert "58,641 ± 31" in body and "0 ± 42" in body and "e-308" not in body
    assert "1,049.83 ± 0.52" in body and "12.20 ± 0.15" in body
    assert "3 in [0, 336,841] *" in body
    assert lines[-1] == display.INFERRED_NOTE


def test_programs_get_the_same_numbers_parseable():
    rows = display.rounded_rows(_result())
    assert rows[0] == ("EWR", 58641.0, 0.0)
    assert rows[1] == ("JFK", 1049.83, 12.2)
    assert rows[2] == (None, 3.0, 8.0)     # inferred: at its range's precision (whole units)
    buf = io.StringIO()
    render.write_csv(_result(), buf)
    lines = buf.getvalue().splitlines()
    assert lines[1] == "EWR,58641,16,,,0,21,,,false"
    assert lines[2] == "JFK,1049.83,0.27,,,12.2,0.077,,,false"
    assert lines[3] == ",3,,0,336841,8,,-40,900,true"


def test_error_columns_appended_by_set_are_rounded_as_errors_and_ranges():
    """The columns `SET dpsql.error_columns` appends (Result.appended): an error at two
    significant digits, a range outward."""
    base = _result()
    ci95 = Result(base.columns + [Column("n_ci95", "double"), Column("avg_delay_ci95", "double")],
                  [r + (31.0123, 42.0456) for r in base.rows[:2]],
                  [e + (None, None) for e in base.stderr[:2]], appended=2)
    assert display.rounded_rows(ci95)[0] == ("EWR", 58641.0, 0.0, 31.0, 42.0)
    bounds = Result(base.columns + [Column(f"{c}_{s}", "double") for c in ("n", "avg_delay")
                                    for s in ("ci95", "lower", "upper")],
                    [base.rows[2] + (None, 0.2, 336840.7, None, -40.3, 900.2)],
                    [base.stderr[2] + (None,) * 6], bounds=[base.bounds[2] + (None,) * 6], appended=6)
    assert display.rounded_rows(bounds)[0] == (None, 3.0, 8.0, None, 0.0, 336841.0, None, -41.0, 901.0)
