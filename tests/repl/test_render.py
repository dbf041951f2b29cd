"""Rendering of private answers, errors and CSV (hand-made results, no engine)."""

import csv
import io
import math

from dpsql import errors
from fakes import SEX_COUNTS, Column, Result
from repl import render


def _result():
    return Result(
        [Column("race", "text"), Column("income", "text"), Column("count", "double"), Column("avg_age", "double")],
        [("White", ">50K", 12345.4, 38.5816), ("Black", None, 987.2, 37.1), ("Other", "<=50K", 3.0, 40.0)],
        [(None, None, 107.2, 0.0102), (None, None, 15.9, 0.5), (None, None, float("nan"), float("nan"))],
        [False, False, True], seconds=2.5, cost=0.25)


def test_values_carry_their_95_percent_interval_and_keys_stay_plain():
    lines = render.table_lines(_result(), "ci95")
    assert lines[0].split("|")[0].strip() == "race"
    body = lines[2:]
    # 107.2 * 1.96 = 210.1 -> two significant digits at >= 10 means whole numbers
    assert "12,345 ± 210" in body[0]
    assert "38.582 ± 0.020" in body[0]
    assert body[1].split("|")[1].strip() == render.NULL_TEXT
    # inferred values: no bound, a mark instead
    assert body[2].rstrip().endswith("*") and "±" not in body[2]


def test_plus_minus_signs_line_up_within_a_column():
    lines = render.table_lines(_result(), "ci95")[2:4]
    assert len({line.index("±") for line in lines}) == 1
    widths = {len(line) for line in render.table_lines(_result(), "ci95")[1:]}
    assert len(widths) == 1  # every row as wide as the rule: the table is rectangular


def test_error_modes():
    r = _result()
    se = "".join(render.table_lines(r, "stderr"))
    assert "12,345 ± 107" in se
    off = render.table_lines(r, "off")
    assert "±" not in "".join(off) and "12,345" in off[2]


def test_cell_formatting_edge_cases():
    assert render.format_cell(None, None, "ci95") == (render.NULL_TEXT, "", False)
    assert render.format_cell("Male", None, "ci95") == ("Male", "", False)
    # a key (no error) as PostgreSQL prints it: EXTRACT(YEAR …) or an integer year column is
    # 2013, not 2,013 (issue 30's report); separators stay for values that carry an error
    assert render.format_cell(1234567, None, "ci95") == ("1234567", "", False)
    assert render.format_cell(2013, None, "ci95") == ("2013", "", False)
    assert render.format_cell(2013.0, None, "ci95") == ("2013", "", False)
    assert render.format_cell(1050.5, None, "ci95") == ("1050.5", "", False)
    assert render.format_cell(1234567, 10.0, "ci95")[0] == "1,234,567"
    assert render.format_cell(12.0, math.nan, "ci95") == ("12", "", True)
    text, err, _ = render.format_cell(21790.0000004, 1e-4, "ci95")
    assert float(text.replace(",", "")) == 21790.0 and err == "± 0.00020"


def test_footer_has_rows_time_cost_and_the_inferred_note():
    lines = render.result_lines(_result(), "ci95")
    assert lines[-2] == "(3 rows, 2.50 s, spent ρ = 0.25)"
    assert lines[-1] == render.INFERRED_NOTE
    lines = render.result_lines(SEX_COUNTS, "ci95", timing=False)
    assert lines[-1] == "(2 rows)"


def test_message_only_results():
    assert render.result_lines(Result([], [], message="SET")) == ["SET"]


def test_expanded_display():
    lines = render.expanded_lines(_result(), "ci95")
    assert lines[0].startswith("-[ RECORD 1 ]")
    assert "count   | 12,345 ± 210" in lines
    assert any(line.startswith("income  | (null)") for line in lines)
    assert "count   | 3 *" in lines


def test_error_with_caret_under_the_position():
    sql = "SELECT sex, COUNT(*)\nFROM adult\nWHERE sexx = 'Male'"
    exc = errors.UnknownColumnError("unknown column \"sexx\"", hint="did you mean sex?", position=sql.index("sexx") + 1)
    lines = render.error_lines(exc, sql)
    assert lines[0] == 'ERROR [42703]: unknown column "sexx"'
    assert lines[1] == "LINE 3: WHERE sexx = 'Male'"
    assert lines[2].index("^") == lines[1].index("sexx")
    assert lines[3] == "HINT: did you mean sex?"


def test_caret_stays_on_screen_for_long_lines():
    sql = "SELECT " + ", ".join(f"c{i}" for i in range(100)) + " FROM t"
    pos = sql.index("c77") + 1
    line, caret = render.caret_lines(sql, pos, width=60)
    assert len(line) <= 60
    assert line[caret.index("^"):].startswith("c77")


def test_error_without_position_or_sql():
    lines = render.error_lines(errors.BudgetExhaustedError("no budget left", hint="ask the operator"))
    assert lines == ["ERROR [53400]: no budget left", "HINT: ask the operator"]


def test_csv_has_rounded_values_errors_and_the_inferred_flag():
    buf = io.StringIO()
    assert render.write_csv(_result(), buf) == 3
    rows = list(csv.reader(io.StringIO(buf.getvalue())))
    assert rows[0] == ["race", "income", "count", "count_stderr", "count_lower", "count_upper",
                       "avg_age", "avg_age_stderr", "avg_age_lower", "avg_age_upper", "inferred"]
    # the numbers the wire sends (dpsql.display): values at their 95% half-width's second
    # significant digit (whole units at least), standard errors at two significant digits
    assert rows[1] == ["White", ">50K", "12345", "107", "", "", "38.582", "0.01", "", "", "false"]
    assert rows[2][1] == "" and rows[3][3] == "" and rows[3][-1] == "true"


def test_inferred_values_show_the_range_the_measurements_allow():
    r = _result()
    r.bounds = [(None,) * 4, (None,) * 4, (None, None, (0.0, 48842.0), (17.0, 90.0))]
    body = render.table_lines(r, "ci95")[2:]
    assert "3 in [0, 48,842] *" in body[2] and "40 in [17, 90] *" in body[2]
    buf = io.StringIO()
    render.write_csv(r, buf)
    rows = list(csv.reader(io.StringIO(buf.getvalue())))
    assert rows[3][4:6] == ["0", "48842"] and rows[3][8:10] == ["17", "90"]


def test_grid_lines():
    lines = render.grid_lines(["a", "bb"], [("x", "1"), ("yyy", "22")], right=(1,))
    assert lines == ["  a  | bb", "-----+----", " x   |  1", " yyy | 22"]


def test_numpy_values_format_like_python_numbers():
    import numpy as np
    assert render.format_cell(np.int64(1234), None, "ci95") == ("1234", "", False)
    assert render.format_cell(np.float64(12.0), np.float64(math.nan), "ci95") == ("12", "", True)
    assert render.format_cell(np.float32(100.0), np.float32(5.0), "stderr") == ("100.0", "± 5.0", False)


def test_explain_results_print_as_plain_lines():
    r = Result([Column("QUERY PLAN", "text")], [("Aggregate over adult",), ("  q0: supported",)], message="EXPLAIN")
    assert render.result_lines(r) == ["Aggregate over adult", "  q0: supported"]


def test_a_flagged_row_without_nan_errors_still_gets_a_mark():
    r = Result([Column("age", "integer"), Column("count", "double")], [(17, 660.1), (18, 12.0)],
               [(None, None), (None, 3.0)], [True, False])
    body = render.table_lines(r, "ci95")[2:]
    assert body[0].rstrip().endswith("*") and not body[1].rstrip().endswith("*")
    assert render.result_lines(r)[-1] == render.INFERRED_NOTE


def test_csv_flags_rows_whose_interval_holds_a_binning_bound():
    """The screen marks such values '(binned)'; the CSV lost the mark (issue 29 item 1): it
    gets a ``binned`` column when any value's interval holds a binning bound."""
    r = _result()
    r.bias = [(None, None, None, 0.004), (None, None, None, None), (None, None, None, None)]
    assert "(binned)" in render.table_lines(r, "ci95")[2]
    buf = io.StringIO()
    render.write_csv(r, buf)
    rows = list(csv.reader(io.StringIO(buf.getvalue())))
    assert rows[0][-1] == "binned" and [row[-1] for row in rows[1:]] == ["true", "false", "false"]
    plain = io.StringIO()
    render.write_csv(_result(), plain)
    assert "binned" not in plain.getvalue().splitlines()[0]
