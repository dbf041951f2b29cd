"""The analyst's shell over the wire reads the server's ``binned`` flag (issue 29): a row whose
interval holds a binning bound is marked ``(binned)`` as in process, and its error columns are
still read (before, the trailing flag hid them: no ± at all)."""

from types import SimpleNamespace

from dpsql.display import BOUNDED_MARK, table_lines
from dpsql.engine.variance import Z95
from repl.remote import to_result

COLUMNS = [("sex", "text"), ("count", "double"), ("sum", "double"), ("count_ci95", "double"),
           ("count_lower", "double"), ("count_upper", "double"), ("sum_ci95", "double"), ("sum_lower", "double"),
           ("sum_upper", "double"), ("inferred", "boolean")]


def test_binned_rows_are_marked_and_their_errors_read():
    reply = SimpleNamespace(columns=COLUMNS + [("binned", "boolean")], status="SELECT 2",
                            rows=[("Female", 100.0, 5000.0, 3.92, None, None, 1960.0, None, None, False, True),
                                  ("Male", 200.0, 9000.0, 3.92, None, None, 19.6, None, None, False, False)])
    result = to_result(reply, 0.1)
    assert [c.name for c in result.columns] == ["sex", "count", "sum"]
    assert result.stderr[0][2] == 1960.0 / Z95 and result.stderr[1][2] == 19.6 / Z95
    lines = table_lines(result)[2:]
    assert BOUNDED_MARK in lines[0] and BOUNDED_MARK not in lines[1]


def test_replies_without_the_flag_are_unchanged():
    reply = SimpleNamespace(columns=COLUMNS, status="SELECT 1",
                            rows=[("Female", 100.0, 5000.0, 3.92, None, None, 19.6, None, None, False)])
    result = to_result(reply, 0.1)
    assert [c.name for c in result.columns] == ["sex", "count", "sum"]
    assert all(b is None for b in result.bias[0])
    assert BOUNDED_MARK not in table_lines(result)[2]
