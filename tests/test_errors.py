import pickle

import pytest

import dpsql
from dpsql import errors


def test_single_root_and_pep249_categories():
    for name in ["Warning", "InterfaceError", "DatabaseError", "DataError", "OperationalError",
                 "IntegrityError", "InternalError", "ProgrammingError", "NotSupportedError"]:
        cls = getattr(errors, name)
        assert issubclass(cls, dpsql.Error)
    assert issubclass(errors.BudgetExhaustedError, errors.OperationalError)
    assert issubclass(errors.UnsupportedQueryError, errors.NotSupportedError)
    # the category of the SQLSTATE's class (issue 28): 22023 is a data exception, F0000 a
    # configuration-file error (operational), XX001 data corruption (internal)
    assert issubclass(errors.DomainViolationError, errors.DataError)
    assert not issubclass(errors.DomainViolationError, errors.ProgrammingError)
    assert issubclass(errors.ConfigError, errors.OperationalError)
    assert issubclass(errors.LedgerCorruptError, errors.InternalError)
    assert issubclass(errors.ModelTooLargeError, errors.OperationalError)


def test_every_class_has_a_five_character_sqlstate():
    def walk(cls):
        yield cls
        for sub in cls.__subclasses__():
            yield from walk(sub)
    for cls in walk(errors.Error):
        assert len(cls.sqlstate) == 5, cls


def test_message_hint_position_survive_pickling():
    e = errors.UnknownColumnError("column \"agee\" does not exist", hint="did you mean \"age\"?",
                                  position=8)
    e2 = pickle.loads(pickle.dumps(e))
    assert (e2.message, e2.hint, e2.position, e2.sqlstate) == (e.message, e.hint, 8, "42703")
    assert "HINT" in str(e2)


@pytest.mark.parametrize("state,cls", [("53400", errors.BudgetExhaustedError),
                                       ("42P01", errors.UnknownTableError),
                                       ("22999", errors.DataError),
                                       ("22023", errors.DomainViolationError),
                                       ("XX000", errors.InternalError),
                                       ("XX999", errors.InternalError),
                                       ("0A000", errors.UnsupportedQueryError),
                                       ("ZZ999", errors.DatabaseError)])
def test_error_for_sqlstate(state, cls):
    assert errors.error_for_sqlstate(state) is cls
