"""Issue 28 item 6: one error, one PEP 249 category, whether caught from the DB-API or from
psycopg talking to ``dpsql serve``.

Before: ``DomainViolationError`` (22023, class 22 "data exception") was a ProgrammingError
in the DB-API and a DataError in psycopg, ``ConfigError`` (F0000) an InterfaceError against
psycopg's OperationalError, ``LedgerCorruptError`` (XX001) an IntegrityError against
InternalError, and ``error_for_sqlstate("XX000")`` returned DatabaseError.
"""

from __future__ import annotations

import pytest

import dpsql
from dpsql import errors
from dpsql.server.server import serve

from server_fakes import ADULT_CONFIG, PASSWORD
from test_clients import bounded

psycopg = pytest.importorskip("psycopg")

PEP249 = ("Warning", "InterfaceError", "DataError", "OperationalError", "IntegrityError", "InternalError",
          "ProgrammingError", "NotSupportedError", "DatabaseError", "Error")

# statements that fail in the engine, each with the dpsql class it raises
FAILING = [
    ("SELECT * FROM adult", errors.PrivacyViolationError),
    ("SELECT sex, COUNT(*) FROM nosuch GROUP BY sex", errors.UnknownTableError),
    ("SELECT agee, COUNT(*) FROM adult GROUP BY agee", errors.UnknownColumnError),
    ("SELECT COUNT(*) FROM adult WHERE sex = 'Robot'", errors.DomainViolationError),
    ("SELECT COUNT(*) FROM adult WHERE", errors.SyntaxError),
    ("SELECT string_agg(sex, ',') FROM adult", errors.UnsupportedQueryError),
    ("SELECT sex, COUNT(*) FROM adult GROUP BY sex", errors.OperationalError),   # nothing measured yet
]


def category(cls: type) -> str:
    """The PEP 249 category a class belongs to: its nearest ancestor named like one."""
    return next(c.__name__ for c in cls.__mro__ if c.__name__ in PEP249)


def psycopg_class(sqlstate: str) -> type:
    """The class psycopg raises for a server error with this SQLSTATE."""
    try:
        return psycopg.errors.lookup(sqlstate)
    except KeyError:
        return psycopg.errors.get_base_exception(sqlstate)


def dpsql_classes():
    def walk(cls):
        yield cls
        for sub in cls.__subclasses__():
            yield from walk(sub)
    return [c for c in walk(errors.Error) if c.__module__.startswith("dpsql")]


@pytest.mark.parametrize("cls", [c for c in dpsql_classes() if c not in (errors.Error, errors.DatabaseError,
                                                                        errors.Warning, errors.InterfaceError)],
                         ids=lambda c: c.__name__)
def test_each_class_has_the_category_psycopg_gives_its_sqlstate(cls):
    """Every error the server may send: psycopg's class for its code is in the same category."""
    assert category(cls) == category(psycopg_class(cls.sqlstate)), (cls, cls.sqlstate)


def test_one_code_one_class_and_lookup_by_class():
    declared = [c for c in dpsql_classes() if "sqlstate" in c.__dict__ and c is not errors.Error]  # root: abstract
    codes = [c.sqlstate for c in declared]
    assert len(codes) == len(set(codes)), sorted(codes)
    for cls in declared:
        assert errors.error_for_sqlstate(cls.sqlstate) is cls
    assert errors.error_for_sqlstate("XX000") is errors.InternalError
    assert errors.error_for_sqlstate("22P02") is errors.DataError                # by the class "22"
    assert errors.error_for_sqlstate("F0001") is errors.OperationalError         # by the class "F"
    assert errors.error_for_sqlstate("ZZ999") is errors.DatabaseError
    with pytest.raises(TypeError, match="already belongs to"):
        type("Again", (errors.DataError,), {"sqlstate": "22023"})
    with pytest.raises(TypeError, match="does not derive from DataError"):
        type("Misfiled", (errors.ProgrammingError,), {"sqlstate": "22P99"})


@pytest.fixture(scope="module")
def server(users_file, tmp_path_factory):
    ledger = tmp_path_factory.mktemp("ledger") / "errors.ledger"
    overrides = {"ledger": str(ledger), "budget": {"epsilon": 1.0, "delta": 1e-6}}
    thread = serve(ADULT_CONFIG, overrides=overrides, users_file=users_file, shadow=False)
    yield thread, overrides
    thread.stop()


def test_the_same_error_is_the_same_class_for_dbapi_and_psycopg(server):
    thread, overrides = server
    con = dpsql.connect(ADULT_CONFIG, user="alice", **overrides)
    pg = bounded(lambda: psycopg.connect(host="127.0.0.1", port=thread.port, user="alice", password=PASSWORD,
                                         dbname="dpsql", connect_timeout=10, autocommit=True, sslmode="disable"))
    try:
        for sql, expected in FAILING:
            with pytest.raises(dpsql.Error) as local:
                con.cursor().execute(sql)
            assert type(local.value) is expected, (sql, local.value)
            with pytest.raises(psycopg.Error) as remote:
                bounded(lambda: pg.execute(sql))
            assert remote.value.sqlstate == local.value.sqlstate, sql
            assert category(type(remote.value)) == category(type(local.value)), (sql, type(remote.value))
            # what each side catches: the same PEP 249 name on both modules
            name = category(expected)
            assert isinstance(local.value, getattr(dpsql, name))
            assert isinstance(remote.value, getattr(psycopg, name))
    finally:
        pg.close()
        con.close()
