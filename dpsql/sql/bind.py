"""Name binding: tables and columns of a statement → declared schemas and attributes.

The catalog maps table names to :class:`dpsql.domain.TableSchema` (public metadata only).
Binding follows PostgreSQL's folding of unquoted identifiers (case-insensitive) and keeps
quoted identifiers exact.  Unknown names raise 42P01 / 42703 with the statement position
and a "did you mean" drawn from the declared names (public, so the hint leaks nothing).
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from sqlglot import exp

from dpsql.errors import PrivacyViolationError, UnknownColumnError, UnknownTableError, UnsupportedQueryError
from dpsql.sql.cells import snippet
from dpsql.sql.parse import Statement, call_position, written

__all__ = ["Catalog", "Scope", "bind_table", "suggest", "table_schema"]

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
    names: frozenset[str]    # qualifiers that name it (folded unless quoted)
    alias: str | None = None

    def attribute(self, column: exp.Column):
        """The declared attribute a column reference names."""
        ident = column.this
        if isinstance(ident, exp.Star):
            raise UnsupportedQueryError("qualified '*' is not supported here", position=self.stmt.pos(column))
        name = ident.name
        qual = column.args.get("table")
        if qual is not None:
            q = qual.name if qual.args.get("quoted") else qual.name.lower()
            db = column.args.get("db")
            db_ok = db is None or (db.name if db.args.get("quoted") else db.name.lower()) in _SCHEMAS
            if q not in self.names or not db_ok or column.args.get("catalog") is not None:
                shown = ".".join(p.name for p in (db, qual) if p is not None)
                raise UnknownTableError(f"missing FROM-clause entry for table \"{shown}\"",
                                        position=self.stmt.pos(db if db is not None else qual),
                                        hint=f"the query reads only {self.schema.name!r}"
                                             + (f" (as {self.alias!r})" if self.alias else ""))
        exact, folded = _column_maps(self.schema)
        if name in exact:
            return exact[name]
        if not ident.args.get("quoted"):
            hit = folded.get(name.lower())
            if hit is not None:
                return hit
        columns = list(self.schema.column_names)
        guess = suggest(name, columns)
        hint = f"did you mean \"{guess}\"?" if guess else f"columns of {self.schema.name}: {', '.join(columns)}"
        raise UnknownColumnError(f"column \"{name}\" does not exist in table \"{self.schema.name}\"",
                                 position=self.stmt.pos(column, name), hint=hint)


_MAPS: dict[int, tuple] = {}


def _column_maps(schema) -> tuple[dict, dict]:
    """name → attribute, and lower-cased name → attribute for names that fold uniquely."""
    key = id(schema)
    hit = _MAPS.get(key)
    if hit is None or hit[0] is not schema:
        exact = {a.name: a for a in schema.attributes}
        lowered: dict[str, list] = {}
        for a in schema.attributes:
            lowered.setdefault(a.name.lower(), []).append(a)
        folded = {k: v[0] for k, v in lowered.items() if len(v) == 1}
        hit = _MAPS[key] = (schema, exact, folded)
    return hit[1], hit[2]


def table_schema(catalog: Catalog, table: exp.Table):
    """The declared schema a FROM table names (None when it names none)."""
    if not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier) \
            or table.args.get("catalog") is not None:
        return None
    schema = _lookup_table(catalog, table.this)
    db = table.args.get("db")
    if db is not None and schema is not None:
        if (db.name if db.args.get("quoted") else db.name.lower()) not in _SCHEMAS:
            return None
    return schema


def _lookup_table(catalog: Catalog, ident: exp.Identifier):
    """PostgreSQL's name resolution: a quoted name matches exactly; an unquoted one is folded
    to lower case (and, for declared names with capitals, matched case-insensitively when
    that is unambiguous)."""
    name = ident.name
    if ident.args.get("quoted"):
        return catalog.get(name)
    if name.lower() in catalog:
        return catalog[name.lower()]
    # over a snapshot of the names: an engine adds tables at run time (a people schema's
    # on-demand flags) while other sessions compile
    folded = [k for k in list(catalog) if k.lower() == name.lower()]
    if len(folded) == 1:
        return catalog[folded[0]]
    return None


# Schemas a private table is found in: PostgreSQL's default search path (and DuckDB's).
_SCHEMAS = ("public", "main")


def bind_table(stmt: Statement, catalog: Catalog, tree: exp.Expr | None = None) -> Scope:
    """Resolve the FROM clause of ``tree`` (default: the statement's) to one private table
    (subqueries and joins were handled before)."""
    tree = stmt.tree if tree is None else tree
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is None:
        raise UnsupportedQueryError("a query must read a private table (FROM is missing)",
                                    position=stmt.offset + 1,
                                    hint=f"add FROM {next(iter(catalog), '<table>')}")
    source = from_.this
    if isinstance(source, exp.Table) and not isinstance(source.this, exp.Identifier):
        fn = source.this
        word = written(stmt, fn) if isinstance(fn, exp.Func) else snippet(fn, 40)
        raise PrivacyViolationError(f"table function {word}(…) cannot be used in FROM: dpsql reads only its "
                                    "declared private tables", position=call_position(stmt, fn) or stmt.pos(source),
                                    hint=f"read a declared table: {', '.join(catalog) or '(none)'}")
    if not isinstance(source, exp.Table):
        what = "VALUES lists" if isinstance(source, exp.Values) else \
            "LATERAL" if isinstance(source, exp.Lateral) else snippet(source, 40)
        raise UnsupportedQueryError(f"{what} cannot appear in FROM", position=stmt.pos(source),
                                    hint="read the private table directly")
    name = source.name
    catalog_part = source.args.get("catalog")
    if catalog_part is not None:
        raise UnsupportedQueryError(f"cross-database references are not implemented: \"{snippet(source, 60)}\"",
                                    position=stmt.pos(catalog_part),
                                    hint=f"write the table as {name} or public.{name}")
    schema = _lookup_table(catalog, source.this)
    db = source.args.get("db")
    if db is not None and schema is not None:
        db_name = db.name if db.args.get("quoted") else db.name.lower()
        if db_name not in _SCHEMAS:
            schema = None
    public = getattr(catalog, "public", {})
    if schema is None and _lookup_table(public, source.this) is not None:
        raise UnsupportedQueryError(f"\"{name}\" is a public table, and this statement also reads a private table "
                                    "outside a join", position=stmt.pos(source, name),
                                    hint="join the private table with it on a declared key, or query the public "
                                         "tables alone")
    if schema is None:
        guess = suggest(name, catalog.keys())
        hint = f"did you mean \"{guess}\"?" if guess else f"tables: {', '.join(catalog) or '(none)'}"
        if db is not None and guess is not None:
            hint = f"private tables live in schema public: did you mean \"{guess}\"?"
        shown = ".".join(p.name for p in (db, source.this) if p is not None)
        raise UnknownTableError(f"relation \"{shown}\" does not exist",
                                position=stmt.pos(db if db is not None else source, name), hint=hint)
    names = {schema.name, name if source.this.args.get("quoted") else name.lower()}
    alias = source.args.get("alias")
    if alias is not None and alias.this is not None:
        a = alias.this
        names = {a.name if a.args.get("quoted") else a.name.lower()}
        return Scope(stmt=stmt, schema=schema, names=frozenset(names), alias=a.name)
    return Scope(stmt=stmt, schema=schema, names=frozenset(names))
