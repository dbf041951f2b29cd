"""Value types shared by the protocol state machine and the statement dispatcher.

An ``Outcome`` is one statement's reply already encoded as backend messages, whichever path
produced it (engine, shadow catalog or the connection itself), so the state machine can
send it through the simple or the extended protocol, and page it with ``max_rows``,
without knowing where it came from.  ``QueryError`` carries an ErrorResponse's fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpsql.server import codec


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


@dataclass
class Prepared:
    """A parsed statement: its SQL, route and (once described) parameter and row types."""

    sql: str
    route: object
    param_oids: tuple[int, ...]
    description: bytes | None = None     # RowDescription with text formats, or None (NoData)
    described: bool = False


@dataclass
class Portal:
    statement: Prepared
    params: tuple
    param_formats: tuple[int, ...]
    result_formats: tuple[int, ...]
    outcome: Outcome | None = None
    sent: int = 0
    row_types: list[str] | None = None   # engine column types announced at Describe
