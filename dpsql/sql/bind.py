"""Name binding: tables and columns of a statement → declared schemas and attributes.

The catalog maps table names to :class:`dpsql.domain.TableSchema` (public metadata only).
Binding follows PostgreSQL's folding of unquoted identifiers (case-insensitive) and keeps
quoted identifiers exact.  Unknown names raise 42P01 / 42703 with the statement position
and a "did you mean" drawn from the declared names (public, so the hint leaks nothing).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Any, Mapping

from sqlglot import exp

from dpsql.errors import UnknownColumnError, UnknownTableError, UnsupportedQueryError
from dpsql.sql.parse import Statement

__all__ = ["Catalog", "Scope", "bind_table", "suggest"]

Catalog = Mapping[str, Any]


def suggest(name: str, candidates) -> str | None:
    """The closest declared name, for hints."""
    pool = list(candidates)
    lowered = {c.lower(): c for c in pool}
    hit = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    return lowered[hit[0]] if hit else None


@dataclass(frozen=True)
class Scope:
    """The one table a statement reads, under its name and optional alias."""

    stmt: Statement
    schema: Any
    names: frozenset[str]

    def attribute(self, column: exp.Column):
        """The declared attribute a column reference names."""
        ident = column.this
        if isinstance(ident, exp.Star):
            raise UnsupportedQueryError("qualified '*' is not supported here", position=self.stmt.pos(column))
        name = ident.name
        qualifier = column.table
        if qualifier and qualifier.lower() not in self.names:
            raise UnknownTableError(f"missing FROM-clause entry for table \"{qualifier}\"",
                                    position=self.stmt.pos(column, qualifier),
                                    hint=f"the query reads only {self.schema.name!r}")
        columns = list(self.schema.column_names)
        if name in columns:
            return self.schema.attribute(name)
        if not ident.args.get("quoted"):
            folded = [c for c in columns if c.lower() == name.lower()]
            if len(folded) == 1:
                return self.schema.attribute(folded[0])
        guess = suggest(name, columns)
        hint = f"did you mean \"{guess}\"?" if guess else f"columns of {self.schema.name}: {', '.join(columns)}"
        raise UnknownColumnError(f"column \"{name}\" does not exist in table \"{self.schema.name}\"",
                                 position=self.stmt.pos(column, name), hint=hint)


def _lookup_table(catalog: Catalog, name: str):
    if name in catalog:
        return catalog[name]
    folded = [k for k in catalog if k.lower() == name.lower()]
    if len(folded) == 1:
        return catalog[folded[0]]
    return None


def bind_table(stmt: Statement, catalog: Catalog) -> Scope:
    """Resolve the FROM clause to one private table (joins and subqueries were refused)."""
    from_ = stmt.tree.args.get("from_") or stmt.tree.args.get("from")
    if from_ is None:
        raise UnsupportedQueryError("a query must read a private table (FROM is missing)",
                                    position=stmt.offset + 1,
                                    hint=f"add FROM {next(iter(catalog), '<table>')}")
    source = from_.this
    if not isinstance(source, exp.Table) or not isinstance(source.this, exp.Identifier):
        raise UnsupportedQueryError("only a single table can appear in FROM",
                                    position=stmt.pos(source), hint="read the private table directly")
    name = source.name
    schema = _lookup_table(catalog, name)
    if schema is None:
        guess = suggest(name, catalog.keys())
        hint = f"did you mean \"{guess}\"?" if guess else f"tables: {', '.join(catalog) or '(none)'}"
        raise UnknownTableError(f"relation \"{source.sql()}\" does not exist",
                                position=stmt.pos(source, name), hint=hint)
    names = {name.lower(), schema.name.lower()}
    if source.alias:
        names = {source.alias.lower()}
    return Scope(stmt=stmt, schema=schema, names=frozenset(names))
