"""A people schema: private tables linked by keys, protected per person (issue 32).

``[people]`` in dpsql.toml (``docs/config.md``, "People across tables") names the primary
private relation — the *person* table and its key — and, for every other private table, the
table it references (``parent``), the referencing column (``foreign_key``, equal to the
parent's ``primary_key``) and the most rows of its view one person may contribute
(``max_rows``).  Everything here is public configuration, checked when the configuration
loads: a private table with no path to the person, a cycle, a key that names nothing, or a
source the view cannot join is a :class:`~dpsql.errors.ConfigError` (SQLSTATE F0000) with a
hint, before any row is read.

Each private table is then served through its **view** (``dpsql.measure.views``): the join
from the person down to it, with the attributes of every table on the path (an ancestor's
attribute ``segment`` of ``customers`` is the view column ``customers__segment``), bounded
per person to ``max_rows`` rows by the keyed-hash truncation.  The view replaces the table
in the catalog under the table's name, so ``SELECT … FROM orders`` counts the orders that
reach a person, with the noise their bound calls for (``docs/privacy.md`` §2a).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from dpsql.config_schema import default
from dpsql.domain import Attribute, IntegerRange, TableSchema
from dpsql.errors import ConfigError, UnsupportedQueryError
from dpsql.measure.source import FILE_KINDS, Source
from dpsql.measure.views import EXISTS, PERSON, SEP, Hop, View
from dpsql.plan.views import GroupBound
from dpsql.sql.people import flag_column, flag_table
from dpsql.sql.syntax import exp

# [people]'s keys and their types are declared in dpsql.config_schema and checked when the
# configuration loads; what follows checks them against the declared tables.
GROUP_KEYS = ("group_by", "max_groups", "max_rows_per_group")
_GROUP_HINT = ('group_by = ["status"], max_groups = 2, max_rows_per_group = 2: each person keeps rows of at '
               'most 2 statuses, at most 2 in each (all three, beside max_rows)')


@dataclass(frozen=True)
class PeopleSchema:
    """The declared schema (public): the person table and its key, and each private table's
    view (its join path from the person and its per-person row bound)."""

    person: str
    key: str
    views: dict[str, View]
    # the share of each bounded view's budget that releases the rows its bound drops
    # (dpsql/engine/people_truncation.py); 0: not released
    truncation_share: Fraction = Fraction(0)
    # the most on-demand flag tables nothing has measured yet that an engine keeps at once
    # (``Engine._add_flag``): each statement with a new condition adds one, so a client of a
    # shared server could otherwise grow its memory without bound
    max_ad_hoc_flags: int = default("people", "max_ad_hoc_flags")

    def bound(self, table: str) -> int:
        """The most rows of ``table``'s view one person contributes (1 for the person)."""
        return self.views[table].max_rows

    def path(self, table: str) -> tuple[str, ...]:
        return self.views[table].path

    def column(self, table: str, owner: str, column: str) -> str:
        """The view column of ``owner``'s ``column`` in ``table``'s view."""
        return column if owner == table else f"{owner}{SEP}{column}"


def _renamed(att: Attribute, name: str) -> Attribute:
    """The same declared attribute under another name (attributes are frozen value types
    with their own constructors; only the name differs)."""
    out = copy.copy(att)
    object.__setattr__(out, "name", name)
    return out


def _name(value: Any, what: str, where: str, hint: str) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{where}: {what} must be a name", hint=hint)
    return value


def _engine(source: Source) -> str:
    return "duckdb" if source.kind in FILE_KINDS else source.kind


def _group_spec(link: Mapping, max_rows: int, where: str) -> tuple[tuple[str, ...], int, int] | None:
    """(group_by, max_groups, max_rows_per_group) of a table's link, all or none."""
    given = [k for k in GROUP_KEYS if k in link]
    if not given:
        return None
    if len(given) < len(GROUP_KEYS):
        lacking = [k for k in GROUP_KEYS if k not in link]
        raise ConfigError(f"{where}: {', '.join(given)} needs {' and '.join(lacking)} too: a person's rows "
                          "spread over at most max_groups groups of group_by, at most max_rows_per_group in "
                          "each, is what lowers the L2 sensitivity (max_groups alone does not)", hint=_GROUP_HINT)
    by = link["group_by"]
    by = [by] if isinstance(by, str) else by
    if not isinstance(by, list) or not by or not all(isinstance(c, str) and c for c in by) \
            or len(set(by)) != len(by):
        raise ConfigError(f"{where}: group_by must be a list of distinct column names of the view", hint=_GROUP_HINT)
    out = []
    for k in ("max_groups", "max_rows_per_group"):
        v = link[k]
        if not isinstance(v, int) or isinstance(v, bool) or v < 1:
            raise ConfigError(f"{where}: {k} must be an integer ≥ 1", hint=_GROUP_HINT)
        out.append(v)
    if out[1] > max_rows:
        raise ConfigError(f"{where}: max_rows_per_group = {out[1]} is above max_rows = {max_rows}",
                          hint="no group can hold more rows than the person keeps: lower it to at most max_rows")
    return tuple(by), out[0], out[1]


def people_views(spec: Any, tables: dict[str, TableSchema], sources: dict[str, Source],
                 base: Path, where: str) -> tuple[dict[str, TableSchema], dict[str, Source], PeopleSchema]:
    """Check ``[people]`` against the declared tables and build every private table's view:
    (the catalog with each table replaced by its view's schema, the view sources, the
    schema).  Public metadata only."""
    pw = f"{where}: [people]"
    if not isinstance(spec, Mapping):
        raise ConfigError(f"{pw} must be a table", hint='[people] person = "customers", key = "custkey"')
    person = _name(spec.get("person"), "person", pw, 'person = "customers" (the table with one row per person)')
    key = _name(spec.get("key"), "key", pw, 'key = "custkey" (the person table\'s primary key)')
    if person not in tables:
        raise ConfigError(f"{pw}: the person table {person!r} is not declared",
                          hint=f"declare [tables.{person}], or name one of: {', '.join(sorted(tables))}")
    links_spec = spec.get("tables", {})
    if not isinstance(links_spec, Mapping):
        raise ConfigError(f"{pw}: tables must be [people.tables.NAME] sections",
                          hint='[people.tables.orders] parent = "customers", foreign_key = "custkey", max_rows = 8')
    links: dict[str, dict] = {}
    for name, link in links_spec.items():
        lw = f"{where}: [people.tables.{name}]"
        if not isinstance(link, Mapping):
            raise ConfigError(f"{lw} must be a table",
                              hint='parent = "customers", foreign_key = "custkey", max_rows = 8')
        if name == person:
            raise ConfigError(f"{lw}: {name!r} is the person table; it references nobody",
                              hint="its key is [people] key; its view holds one row per person")
        if name not in tables:
            raise ConfigError(f"{lw}: no table {name!r} is declared", hint=f"declare [tables.{name}]")
        parent = _name(link.get("parent"), "parent", lw, 'parent = "customers" (the table this one references)')
        fk = _name(link.get("foreign_key"), "foreign_key", lw,
                   'foreign_key = "custkey" (this table\'s column equal to the parent\'s primary key)')
        rows = link.get("max_rows")
        if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
            raise ConfigError(f"{lw}: max_rows must be an integer ≥ 1 (the most rows of this table one "
                              "person may contribute; more are dropped by a keyed hash)",
                              hint="e.g. max_rows = 8: the noise of every count over this table grows with it")
        pk = link.get("primary_key")
        if pk is not None:
            pk = _name(pk, "primary_key", lw, 'primary_key = "orderkey"')
        links[name] = {"parent": parent, "foreign_key": fk, "max_rows": rows, "primary_key": pk,
                       "groups": _group_spec(link, rows, lw)}

    # every private table reaches the person, along parents that are declared and acyclic
    for name in tables:
        if name != person and name not in links:
            raise ConfigError(f"{where}: private table {name!r} has no path to the person table {person!r}",
                              hint=f"declare [people.tables.{name}] with parent, foreign_key and max_rows "
                                   "(every private table is protected per person)")
    paths: dict[str, list[str]] = {person: [person]}
    for name in links:
        path, at = [name], name
        while at != person:
            parent = links[at]["parent"]
            if parent not in tables:
                raise ConfigError(f"{where}: [people.tables.{at}] parent {parent!r} is not a declared table",
                                  hint=f"private tables: {', '.join(sorted(tables))}")
            if parent in path:
                raise ConfigError(f"{where}: the parents of {name!r} form a cycle ({' -> '.join(path + [parent])}) "
                                  f"and never reach the person table {person!r}",
                                  hint="each table references the table one step closer to the person")
            path.append(parent)
            at = parent
        paths[name] = path[::-1]
    primary = {person: key, **{n: link["primary_key"] for n, link in links.items()}}
    for name, link in links.items():
        if primary[link["parent"]] is None:
            raise ConfigError(f"{where}: {name!r} references {link['parent']!r}, which declares no primary_key",
                              hint=f"[people.tables.{link['parent']}] primary_key = \"...\"")

    key_text = None
    if spec.get("hash_key_file"):
        kp = Path(spec["hash_key_file"])
        kp = kp if kp.is_absolute() else base / kp
        if not kp.exists():
            raise ConfigError(f"{pw}: hash key file not found: {kp}",
                              hint="write the secret key (one line) to that file, or remove hash_key_file")
        key_text = kp.read_text().strip()

    for name in tables:
        src = sources[name]
        if src.id_column is not None:
            raise ConfigError(f"{where}: table {name!r} declares its own privacy unit, but [people] protects "
                              "it per person", hint="remove privacy_unit from the table: its rows "
                                                    "are bounded per person by [people.tables] max_rows")
        if src.dialect.max_record_lines != 1:
            # a record spanning lines is framed as one row per line, and a later line can be a
            # well-formed row with another person's key: removing one person could then change
            # other persons' rows, which the bound k does not cover (as for an id privacy unit)
            raise ConfigError(f"{where}: table {name!r}: source.max_record_lines is for privacy_unit = \"row\"; "
                              "in a people schema a record is one line",
                              hint="remove max_record_lines: each person's rows are bounded by "
                                   "[people.tables] max_rows")
    engines = {_engine(sources[n]) for n in tables}
    urls = {sources[n].url for n in tables}
    if len(engines) > 1 or ("postgres" in engines and len(urls) > 1):
        raise ConfigError(f"{pw}: the tables of a people schema must live in one engine "
                          "(one PostgreSQL database, one Spark master, or files DuckDB reads)",
                          hint="the join of a view runs inside that engine")

    def _hops(name: str) -> list[Hop]:
        path = paths[name]
        out = []
        for i, hop_table in enumerate(path):
            schema = tables[hop_table]
            view_names = [a.name if hop_table == name else f"{hop_table}{SEP}{a.name}" for a in schema.attributes]
            link = links.get(hop_table, {})
            out.append(Hop(hop_table, sources[hop_table], tuple(zip(schema.column_names, view_names)),
                           key=None if i == 0 else link["foreign_key"],
                           parent_key=None if i == 0 else primary[path[i - 1]]))
        return out

    views: dict[str, View] = {}
    out_tables, out_sources = dict(tables), dict(sources)
    for name, path in paths.items():
        hops = _hops(name)
        attrs: list[Attribute] = []
        for hop in hops:
            schema = tables[hop.table]
            attrs.extend(_renamed(a, n) for a, (_, n) in zip(schema.attributes, hop.columns))
        exists: tuple = ()
        if name == person:
            # the person's flags: 1 when they have a row of another table's view
            # (COUNT(DISTINCT person) of a join counts this view's rows; dpsql/sql/people.py)
            exists = tuple((other, tuple(_hops(other)[1:])) for other in paths if other != person)
            attrs.extend(IntegerRange(f"{other}{SEP}{EXISTS}", 0, 1) for other, _ in exists)
        names = [a.name for a in attrs]
        dup = sorted({n for n in names if names.count(n) > 1} | ({PERSON} & set(names)))
        if dup:
            raise ConfigError(f"{where}: the view of {name!r} would have two columns named {dup[0]!r}",
                              hint=f"rename the column in the domain file: ancestors' columns are named "
                                   f"TABLE{SEP}COLUMN in a view")
        groups = None
        if name != person and links[name]["groups"] is not None:
            by, g, r = links[name]["groups"]
            missing = [c for c in by if c not in names]
            if missing:
                raise ConfigError(f"{where}: [people.tables.{name}] group_by names {missing[0]!r}, which is not a "
                                  f"column of {name!r}'s view", hint=f"its columns: {', '.join(names)} "
                                                                     f"(ancestors' as TABLE{SEP}COLUMN)")
            groups = GroupBound(by, g, r)
        view = View(name, tuple(hops), key, 1 if name == person else links[name]["max_rows"], exists, groups)
        views[name] = view
        first = sources[path[0]]
        out_sources[name] = Source(kind=first.kind, url=first.url, conf=first.conf, id_column=PERSON,
                                   max_rows_per_id=view.max_rows, hash_key=key_text, view=view)
        out_tables[name] = TableSchema(name, tuple(attrs))
    share = spec.get("truncation_share", 0)
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share < 1:
        raise ConfigError(f"{pw}: truncation_share must be a number in [0, 1)",
                          hint="e.g. truncation_share = 0.05: 5% of each view's share releases how many rows its "
                               "bound drops, with noise")
    return out_tables, out_sources, PeopleSchema(person, key, views, Fraction(str(share)),
                                                 spec.get("max_ad_hoc_flags", default("people", "max_ad_hoc_flags")))


def with_flags(people: PeopleSchema, tables: dict[str, TableSchema], sources: dict[str, Source],
               flags) -> tuple[dict[str, TableSchema], dict[str, Source], PeopleSchema]:
    """The person's view with one more 0/1 column per (table, condition) of ``flags``
    (``dpsql.sql.people.person_flags`` of the workload): 1 when the person has a row of that
    table's view satisfying the condition, a function of that person's rows alone, so
    ``COUNT(DISTINCT person) … WHERE <condition>`` counts this view's rows, one per person
    (docs/privacy.md §2a).  Public: the workload's SQL and the schema."""
    if not flags:
        return tables, sources, people
    for table, cond in flags:
        _check_flag_columns(people.views[table], tables[table], cond)
    view = people.views[people.person]
    filters = tuple((flag_column(table, cond), people.views[table], cond) for table, cond in flags)
    view = replace(view, filters=view.filters + filters)
    schema = tables[people.person]
    schema = TableSchema(schema.name, schema.attributes + tuple(IntegerRange(c, 0, 1) for c, _, _ in filters))
    tables = {**tables, people.person: schema}
    sources = {**sources, people.person: replace(sources[people.person], view=view)}
    return tables, sources, replace(people, views={**people.views, people.person: view})


def flag_table_of(people: PeopleSchema, tables: dict[str, TableSchema], sources: dict[str, Source],
                  table: str, cond) -> tuple[str, TableSchema, Source]:
    """The table of one flag no workload statement declared, for an ad hoc ``COUNT(DISTINCT
    person) … WHERE <condition on table's rows>`` measured on demand: (its name,
    ``sql.people.flag_table``; its schema, the person's own columns and the 0/1 flag; its
    source, the person's view with that one flag, ``View.filters``).  One row per person,
    each a function of that person's rows alone, so it is bounded by k = 1 as the person's
    view is (docs/privacy.md §2a).  Public: the statement's SQL and the schema.  A condition
    the engine cannot evaluate on the rows' declared kinds is refused (0A000) here, before
    any row is read."""
    problem = _flag_column_problem(people.views[table], tables[table], cond)
    if problem is not None:
        raise UnsupportedQueryError(problem[0], hint=problem[1])
    column = flag_column(table, cond)
    name = flag_table(people.person, column)
    person = people.views[people.person]
    own = person.hops[0]
    schema = tables[people.person]
    attrs = tuple(schema.attribute(view_col) for _, view_col in own.columns) + (IntegerRange(column, 0, 1),)
    view = View(people.person, (own,), person.person_key, 1, filters=((column, people.views[table], cond),))
    return name, TableSchema(name, attrs), replace(sources[people.person], view=view)


def check_flag_types(table: str, cond, types: dict[str, str], dialect: str) -> None:
    """Refuse (0A000) a flag's condition on ``table``'s view that the engine could evaluate
    only by converting a column's values (``flag_types.flag_type_problem``), from the columns'
    source types (public metadata), before any row is read."""
    from dpsql.measure.flag_types import flag_type_problem
    from dpsql.measure.backend import constant_error   # DuckDB's, used on DuckDB's dialect only
    problem = flag_type_problem(table, cond, types, dialect, constant_error if dialect == "duckdb" else None)
    if problem is not None:
        raise UnsupportedQueryError(problem[0], hint=problem[1])


def _flag_column_problem(view: View[Source], schema: TableSchema, cond) -> tuple[str, str] | None:
    """A flag's condition runs inside the engine on the view's own columns, which a CSV hop
    holds as its records' text (``View.relation``): a categorical compares as text, but a
    declared number or date would be compared as text or refused by the engine's binder at
    every measurement.  (message, hint) of the first such column, from the declared kinds
    alone, before any row is read; None when there is none."""
    text = {view_col for hop in view.hops if hop.source.kind == "csv" for _, view_col in hop.columns}
    for col in cond.find_all(exp.Column):
        if col.name in text and schema.attribute(col.name).kind != "categorical":
            return (f"the condition '{cond.sql(dialect='postgres')}' on the persons' rows of {view.table!r} reads "
                    f"'{col.name}', a {schema.attribute(col.name).kind} column of a CSV file: such a condition is "
                    "evaluated on the file's text",
                    "condition COUNT(DISTINCT person) on categorical columns of CSV tables, or read the table "
                    "from Parquet, DuckDB, PostgreSQL or Spark")
    return None


def _check_flag_columns(view: View[Source], schema: TableSchema, cond) -> None:
    """``_flag_column_problem`` of a workload statement's flag: the configuration is refused."""
    problem = _flag_column_problem(view, schema, cond)
    if problem is not None:
        raise ConfigError(f"[workload]: {problem[0]}", hint=problem[1])


__all__ = ["PeopleSchema", "people_views", "with_flags", "flag_table_of", "check_flag_types"]
