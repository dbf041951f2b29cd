"""Value types shared by the protocol state machine and the statement dispatcher.

An ``Outcome`` is one statement's reply already encoded as backend messages, whichever path
produced it (engine, shadow catalog or the connection itself), so the state machine can
send it through the simple or the extended protocol, and page it with ``max_rows``,
without knowing where it came from.  ``QueryError`` carries an ErrorResponse's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpsql.server import codec
from dpsql.server.router import Route


class QueryError(Exception):
    """A statement failed; ``fields`` are the ErrorResponse fields (C, M, H, P, D …)."""

    def __init__(self, sqlstate: str, message: str, *, hint: str | None = None,
                 position: int | None = None, detail: str | None = None, fields: dict | None = None) -> None:
        super().__init__(message)
        if fields is None:
            fields = codec.error_fields(sqlstate, message, hint=hint, position=position, detail=detail)
        self.fields = fields

    @classmethod
    def relayed(cls, fields: dict) -> QueryError:
        """An error reported by the shadow catalog, passed on field by field."""
        return cls(fields.get("C", "XX000"), fields.get("M", ""), fields=dict(fields))

    @property
    def sqlstate(self) -> str:
        return self.fields.get("C", "XX000")

    def encode(self) -> bytes:
        return codec.encode_notice_fields(b"E", self.fields)


@dataclass
class Outcome:
    """A statement's reply: RowDescription (or None), DataRows, command tag."""

    description: bytes | None = None
    rows: list[bytes] = field(default_factory=list)
    tag: str = ""
    empty: bool = False            # EmptyQueryResponse instead of CommandComplete
    before: list[bytes] = field(default_factory=list)   # e.g. ParameterStatus after SET
    status: str | None = None      # new transaction status ("I", "T", "E") if it changed

    @property
    def is_select(self) -> bool:
        return self.description is not None

    @property
    def nbytes(self) -> int:
        return len(self.description or b"") + sum(map(len, self.rows)) + sum(map(len, self.before))


@dataclass
class Prepared:
    """A parsed statement: its SQL, route and (once described) parameter and row types."""

    sql: str
    route: Route
    param_oids: tuple[int, ...]
    description: bytes | None = None     # RowDescription with text formats, or None (NoData)
    described: bool = False

    @property
    def nbytes(self) -> int:
        return len(self.sql.encode("utf-8")) + len(self.description or b"")


@dataclass
class Portal:
    statement: Prepared
    params: tuple
    param_formats: tuple[int, ...]
    result_formats: tuple[int, ...]
    outcome: Outcome | None = None
    sent: int = 0
    row_types: list[str] | None = None   # engine column types announced at Describe
    nbytes: int = 0                      # accounted in ``Held``: parameters, then also the outcome

    def __post_init__(self) -> None:
        self.nbytes = sum(len(p) for p in self.params if p is not None)


class Held(dict):
    """Prepared statements or portals by name, keeping the total of their ``nbytes`` (the
    per-connection memory cap, ``max_session_memory``, is checked against it)."""

    def __init__(self) -> None:
        super().__init__()
        self.total = 0

    def __setitem__(self, key, value) -> None:
        old = super().get(key)
        if old is not None:
            self.total -= old.nbytes
        super().__setitem__(key, value)
        self.total += value.nbytes

    def __delitem__(self, key) -> None:
        self.total -= self[key].nbytes
        super().__delitem__(key)

    def pop(self, key, *default):
        if key in self:
            value = super().pop(key)
            self.total -= value.nbytes
            return value
        if default:
            return default[0]
        raise KeyError(key)

    def clear(self) -> None:
        super().clear()
        self.total = 0

    def resize(self, key, nbytes: int) -> None:
        value = self[key]
        self.total += nbytes - value.nbytes
        value.nbytes = nbytes


def out_of_memory(needed: int, limit: int, what: str) -> QueryError:
    """53200, as PostgreSQL reports a request its memory limits refuse."""
    return QueryError("53200", f"out of memory: {what} would hold {needed} bytes, over this connection's limit "
                      f"of {limit} bytes",
                      hint="fetch results to the end, close portals and prepared statements no longer needed, "
                           "or narrow the query; the operator sets [server] max_session_memory")
