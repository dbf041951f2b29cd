"""Public tables and the declared keys that join a private table to them (issue 31).

A *public table* (``[tables.carriers] public = true``) is a dimension table whose content is
public metadata, like a declared domain: the carriers' names, the airports' states, a
calendar.  dpsql reads it whole when the configuration is loaded, shows it to analysts
exactly and never charges for it.  A *reference* declares that a column of a (private or
public) table holds keys of a public table's column (``[tables.flights.keys] origin =
"airports.faa"``); only declared references may be joined on.

Why joining costs nothing: a join of the private table with public tables on declared keys
is a public function of each private row's key cell (the matching dimension rows), so every
query over the join is a linear query W·x of the private histogram x with W read from the
public tables; answering it from released measurements is post-processing
(``docs/privacy.md``, "Joins with public tables").  This module holds only the public side:
the tables' content and the references.  ``dpsql.sql.joins`` compiles joins; the content is
read by ``dpsql.measure.backend.PublicDatabase``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import Any

from dpsql.errors import ConfigError

__all__ = ["PublicColumn", "PublicTable", "Reference", "StarCatalog", "public_fingerprint"]


@dataclass(frozen=True)
class PublicColumn:
    """One column of a public table: its name and PostgreSQL type name (``text``,
    ``bigint``, ``double precision``, ``boolean``, ``date``, …)."""

    name: str
    type: str


@dataclass(frozen=True)
class PublicTable:
    """A public table's whole content: columns and rows (Python values, None for NULL)."""

    name: str
    columns: tuple[PublicColumn, ...]
    rows: tuple[tuple, ...] = field(repr=False)
    source: Any = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        if len(set(names)) != len(names):
            raise ConfigError(f"public table '{self.name}': duplicate column names",
                              hint="give every column its own name (a view can rename them)")
        width = len(self.columns)
        if any(len(r) != width for r in self.rows):
            raise ConfigError(f"public table '{self.name}': rows do not all have {width} values")

    @property
    def column_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns)

    def index(self, name: str) -> int:
        return self.column_names.index(name)

    def column(self, name: str) -> PublicColumn:
        return self.columns[self.index(name)]

    def values(self, name: str) -> list:
        i = self.index(name)
        return [r[i] for r in self.rows]


@dataclass(frozen=True)
class Reference:
    """``table.columns`` hold keys of ``target.target_columns`` (a public table), column i
    referencing target column i; a composite key (several columns) is joined on all of its
    columns at once."""

    table: str
    columns: tuple[str, ...]
    target: str
    target_columns: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.columns) != len(self.target_columns) or not self.columns:
            raise ConfigError(f"reference {self}: {len(self.columns)} column(s) against "
                              f"{len(self.target_columns)} target column(s)",
                              hint='name as many target columns as key columns: "a, b" = "t.x, t.y"')

    @property
    def pairs(self) -> frozenset[tuple[str, str]]:
        """The (column, target column) equalities the reference stands for."""
        return frozenset(zip(self.columns, self.target_columns))

    def __str__(self) -> str:
        def side(table: str, cols: tuple[str, ...]) -> str:
            return f"{table}.{cols[0]}" if len(cols) == 1 else f"{table}.({', '.join(cols)})"
        return f"{side(self.table, self.columns)} → {side(self.target, self.target_columns)}"


def public_fingerprint(table: PublicTable) -> str:
    """SHA-256 of a public table's columns and rows: names the content a release's
    post-processing read (a dimension that changes changes the answers)."""
    body = json.dumps([[c.name, c.type] for c in table.columns] + [list(map(repr, r)) for r in table.rows])
    return hashlib.sha256(body.encode()).hexdigest()


class StarCatalog(dict):
    """The private tables (name → ``TableSchema``, as every consumer of a catalog expects)
    with the public tables and the declared references beside them.

    Iterating it lists the private tables only, so code that knows nothing of joins is
    unchanged; ``public`` and ``references`` are read by the SQL front end and the wire
    server's catalog.  The tables an engine adds for one statement (a people schema's
    on-demand flags, ``add_unlisted``) are found by name (``[]``, ``get``, ``in``) but never
    listed: iterating, ``items()`` and ``len`` leave them out, so no listing, table hint or
    wire catalog shows one analyst the conditions another analyst asked.  ``query``
    (optional) runs SQL over the public tables alone (the measure layer's
    ``PublicDatabase``): plain ``SELECT … FROM dim`` and ``IN (SELECT key FROM dim …)`` are
    answered by it, exactly.
    """

    def __init__(self, private: Mapping[str, Any], public: Mapping[str, PublicTable] | None = None,
                 references: Sequence[Reference] = (), query=None, people: Any = None) -> None:
        super().__init__(private)
        self.public: dict[str, PublicTable] = dict(public or {})
        self.references: tuple[Reference, ...] = tuple(references)
        self.query = query
        # the people schema (dpsql.engine.people.PeopleSchema): joins of private tables along
        # its keys are compiled over the deepest table's view (dpsql/sql/people.py)
        self.people = people
        self.unlisted: dict[str, Any] = {}

    def add_unlisted(self, name: str, schema: Any) -> None:
        """Add table ``name``, found by name but never listed (an on-demand flag)."""
        self.unlisted[name] = schema

    def remove_unlisted(self, name: str) -> None:
        self.unlisted.pop(name, None)

    def __missing__(self, name: str) -> Any:
        # dict.__getitem__ calls this for a name it does not hold
        try:
            return self.unlisted[name]
        except KeyError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return super().__contains__(name) or name in self.unlisted

    def get(self, name: str, default: Any = None) -> Any:
        return self[name] if name in self else default

    def reference(self, table: str, column: str, target: str, target_column: str) -> Reference | None:
        """The declared one-column reference between the two columns, in either direction."""
        for pairs, r in self.references_between(table, target):
            if pairs == frozenset({(column, target_column)}):
                return r
        return None

    def references_between(self, table: str, other: str) -> list[tuple[frozenset[tuple[str, str]], Reference]]:
        """Every declared reference between two tables, in either direction, with its column
        pairs oriented (column of ``table``, column of ``other``)."""
        out = []
        for r in self.references:
            if (r.table, r.target) == (table, other):
                out.append((r.pairs, r))
            elif (r.target, r.table) == (table, other):
                out.append((frozenset((b, a) for a, b in r.pairs), r))
        return out
