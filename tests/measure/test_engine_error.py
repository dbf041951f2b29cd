"""The analyst's error for a failure inside an engine says which step failed and nothing of
the engine's exception: not its message (it can quote private values) and not its class (a
data-dependent failure would tell more than that it failed); the operator gets both."""

from dpsql.measure.counting import engine_error


class SecretConversionError(Exception):
    pass


def test_the_analyst_sees_neither_message_nor_class_and_the_operator_sees_both():
    err = engine_error("DuckDB", "counting", SecretConversionError("could not convert 'Alice Smith'"))
    shown = f"{err.message} {err.hint}"
    assert "Alice" not in shown and "SecretConversionError" not in shown
    assert "counting failed inside DuckDB" in err.message and "nothing was charged" in err.hint
    assert "SecretConversionError" in err.operator_detail and "Alice Smith" in err.operator_detail
