"""PEP 249 (DB-API 2.0) driver over an engine session.

    import dpsql
    con = dpsql.connect("examples/adult/dpsql.toml", user="alice")
    cur = con.cursor()
    cur.execute("SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN ? AND ? GROUP BY sex", (30, 40))
    cur.fetchall()      # noisy answers
    cur.stderr          # standard error of every value, aligned with the rows

Parameters (``qmark``) are bound as literals into the parsed AST by the SQL compiler, never
spliced into text.  ``commit`` is a no-op (nothing is written by queries); ``rollback``
raises NotSupportedError because a released answer cannot be taken back.
"""

from __future__ import annotations

import collections
import datetime
import threading
import weakref
from fractions import Fraction
from pathlib import Path
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from dpsql import errors
from dpsql import errors as errors_mod
from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
from dpsql.engine.results import Result
from dpsql.engine.session import Session

apilevel = "2.0"
threadsafety = 1  # threads may share the module, not connections
paramstyle = "qmark"


class _TypeCode(frozenset):
    """PEP 249 type object: compares equal to every type name it groups."""

    def __eq__(self, other):
        if isinstance(other, str):
            return other in self
        return frozenset.__eq__(self, other)

    def __ne__(self, other):
        return not self.__eq__(other)

    __hash__ = frozenset.__hash__


STRING = _TypeCode({"text"})
NUMBER = _TypeCode({"integer", "double"})
DATETIME = _TypeCode({"timestamp", "date", "time"})
BINARY = _TypeCode({"bytea"})
ROWID = _TypeCode({"rowid"})

Date = datetime.date
Time = datetime.time
Timestamp = datetime.datetime


def DateFromTicks(ticks):  # noqa: N802 - PEP 249 names
    return datetime.date.fromtimestamp(ticks)


def TimeFromTicks(ticks):  # noqa: N802
    return datetime.datetime.fromtimestamp(ticks).time()


def TimestampFromTicks(ticks):  # noqa: N802
    return datetime.datetime.fromtimestamp(ticks)


def Binary(value):  # noqa: N802
    return bytes(value)


_engines: weakref.WeakValueDictionary[str, Engine] = weakref.WeakValueDictionary()
_engines_lock = threading.Lock()
# The engines used last stay alive between connections (a server's clients come and go):
# their fitted models are reused instead of being loaded again for each new connection.
_recent: collections.OrderedDict[str, Engine] = collections.OrderedDict()
_RECENT = 4


def _engine_for(config, overrides) -> Engine:
    """One engine per ledger in a process, so every connection sees every release."""
    cfg = load_config(config, **overrides)
    key = str(Path(cfg.ledger_path).resolve())
    with _engines_lock:
        engine = _engines.get(key)
        if engine is None or engine.declared_config != cfg:
            engine = Engine(cfg)
            # a connection binds its budget to the ledger at once, so a server or shell whose
            # configuration does not match its ledger fails at start (only planning is ledger-free)
            engine.ledger  # noqa: B018 - opens the ledger
            _engines[key] = engine
        _recent[key] = engine
        _recent.move_to_end(key)
        while len(_recent) > _RECENT:
            _recent.popitem(last=False)
        return engine


def read_sql(sql: str, con: Connection, params: Sequence[Any] | None = None, *,
             errors: str = "stderr"):
    """A pandas DataFrame of the answer with what is known about each value.

    Beside every value column ``c`` (one with a standard error): ``c_stderr`` (or ``c_ci95``,
    the 95% half-width, with ``errors="ci95"``), and ``c_lower``/``c_upper``, the range the
    released measurements allow for an inferred value (NaN for supported ones); and one
    boolean column ``inferred`` per row.  pandas is imported only here (``pip install
    'dpsql[pandas]'``).  ``pandas.read_sql`` works too but sees the values alone.
    """
    try:
        import pandas as pd
    except ModuleNotFoundError:
        raise errors_mod.InterfaceError("dpsql.read_sql needs pandas, which is not installed",
                                        hint="pip install 'dpsql[pandas]' (or pip install pandas)") from None
    if errors not in ("stderr", "ci95"):
        raise errors_mod.ProgrammingError(f"errors must be 'stderr' or 'ci95', not {errors!r}")
    import math

    from dpsql.engine.variance import Z95
    cur = con.cursor()
    cur.execute(sql, params)
    result = cur.result
    if result is None or not result.columns:
        raise errors_mod.ProgrammingError("read_sql needs a statement that returns rows")
    # the columns SET dpsql.error_columns appended are left out: the frame carries the errors
    # and ranges in its own columns, named by ``errors``
    names = [c.name for c in result.columns[:len(result.columns) - result.appended]]
    scale = Z95 if errors == "ci95" else 1.0
    data: dict[str, list] = {}
    valued = [j for j in range(len(names)) if any(r[j] is not None for r in result.stderr)]
    for j, name in enumerate(names):
        data[name] = [row[j] for row in result.rows]
        if j not in valued:
            continue
        data[f"{name}_{errors}"] = [math.nan if e[j] is None else float(e[j]) * scale for e in result.stderr]
        bounds = [b[j] if b else None for b in result.bounds] or [None] * len(result.rows)
        data[f"{name}_lower"] = [math.nan if b is None else b[0] for b in bounds]
        data[f"{name}_upper"] = [math.nan if b is None else b[1] for b in bounds]
    data["inferred"] = list(result.inferred) or [False] * len(result.rows)
    return pd.DataFrame(data)


def connect(config: str | Path | Mapping, user: str | None = None, **overrides: Any) -> Connection:
    """Open a connection; ``config`` is a ``dpsql.toml`` path or an equivalent dict."""
    return Connection(_engine_for(config, overrides), user)


class Connection:
    Error = errors.Error
    Warning = errors.Warning
    InterfaceError = errors.InterfaceError
    DatabaseError = errors.DatabaseError
    DataError = errors.DataError
    OperationalError = errors.OperationalError
    IntegrityError = errors.IntegrityError
    InternalError = errors.InternalError
    ProgrammingError = errors.ProgrammingError
    NotSupportedError = errors.NotSupportedError

    def __init__(self, engine: Engine, user: str | None) -> None:
        self._engine = engine  # keeps the shared engine alive while connections exist
        self._session: Session | None = Session(engine, user)

    @property
    def session(self) -> Session:
        """Session commands (plan, measure, budget, explain) for shells and tools."""
        if self._session is None:
            raise errors.InterfaceError("connection is closed", hint="open a new one with dpsql.connect")
        return self._session

    @property
    def closed(self) -> bool:
        return self._session is None

    def cursor(self) -> Cursor:
        return Cursor(self)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def commit(self) -> None:
        _ = self.session  # raises on a closed connection

    def rollback(self) -> None:
        raise errors.NotSupportedError("rollback is not supported: released answers cannot be taken back",
                                       hint="queries never write, so there is nothing to roll back")

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Cursor:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection
        self.arraysize = 1
        self._result: Result | None = None
        self._pos = 0
        self._closed = False

    # -- PEP 249 ------------------------------------------------------------------------------
    @property
    def description(self):
        if self._result is None or not self._result.columns:
            return None
        return [(c.name, c.type, None, None, None, None, None) for c in self._result.columns]

    @property
    def rowcount(self) -> int:
        return -1 if self._result is None or not self._result.columns else len(self._result.rows)

    @property
    def stderr(self) -> list[tuple]:
        """Standard error of each value, aligned with the rows (None for keys)."""
        return [] if self._result is None else self._result.stderr

    @property
    def inferred(self) -> list[bool]:
        """Per row: True when a value of the row was inferred by the model without a
        supporting measurement (its standard error is NaN and ``bounds`` gives its range)."""
        return [] if self._result is None else self._result.inferred

    @property
    def bounds(self) -> list[tuple]:
        """Per row and column: the ``(lower, upper)`` range the released measurements imply
        for an inferred value (None for keys, supported values, or no finite range)."""
        return [] if self._result is None else self._result.bounds

    @property
    def bias(self) -> list[tuple]:
        """Per row and column: the bound on the binning error of a SUM/AVG/VARIANCE/STDDEV over
        wide bins that ``stderr`` already includes (stderr = σ + bias/1.96, so the 95%
        half-width 1.96·stderr is widened by it: a bounded interval, not a pure CI); None
        elsewhere."""
        return [] if self._result is None else self._result.bias

    @property
    def cost(self) -> Fraction:
        """ρ spent by the last statement, exact (0 when answered from existing measurements)."""
        return Fraction(0) if self._result is None else self._result.cost

    @property
    def statusmessage(self) -> str | None:
        return None if self._result is None else self._result.message

    @property
    def result(self) -> Result | None:
        return self._result

    def execute(self, operation: str, parameters: Sequence[Any] | None = None) -> Cursor:
        self._check()
        self._result = None
        self._result = self.connection.session.execute(operation, parameters)
        self._pos = 0
        return self

    def executemany(self, operation: str, seq_of_parameters) -> Cursor:
        for params in seq_of_parameters:
            self.execute(operation, params)
        return self

    def fetchone(self):
        rows = self._rows()
        if self._pos >= len(rows):
            return None
        row = rows[self._pos]
        self._pos += 1
        return row

    def fetchmany(self, size: int | None = None):
        rows = self._rows()
        n = self.arraysize if size is None else size
        out = rows[self._pos:self._pos + n]
        self._pos += len(out)
        return out

    def fetchall(self):
        rows = self._rows()
        out = rows[self._pos:]
        self._pos = len(rows)
        return out

    def close(self) -> None:
        self._closed = True
        self._result = None

    def setinputsizes(self, sizes) -> None:
        pass

    def setoutputsize(self, size, column=None) -> None:
        pass

    def __iter__(self) -> Iterator[tuple]:
        while (row := self.fetchone()) is not None:
            yield row

    def __enter__(self) -> Cursor:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- internals ----------------------------------------------------------------------------
    def _check(self) -> None:
        if self._closed:
            raise errors.InterfaceError("cursor is closed", hint="create a new cursor")
        if self.connection.closed:
            raise errors.InterfaceError("connection is closed", hint="open a new one with dpsql.connect")

    def _rows(self) -> list[tuple]:
        self._check()
        if self._result is None or not self._result.columns:
            raise errors.InterfaceError("no result set to fetch from",
                                        hint="execute a SELECT first")
        return self._result.rows
