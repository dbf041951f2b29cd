"""Public tables and declared keys in ``dpsql.toml`` (issue 31; format in docs/config.md).

``[tables.NAME] public = true`` with a ``source`` (any kind: a file, a PostgreSQL table, a
Spark table or Parquet files) declares a public dimension table: read whole when the
configuration is loaded (``dpsql.measure.backend.PublicDatabase``), shown exactly, never
charged.  ``keys = { column = "table.column" }`` (``"a, b" = "t.x, t.y"`` for a composite
key; on a private or a public
table; a list for several targets) declares a reference that queries may join on, and a
categorical's ``labels_from = "table.column"`` (in the domain file) takes its labels from a
public column.  Every check here reads the configuration and the public tables only.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from dpsql.domain import IntegerRange, TableSchema
from dpsql.errors import ConfigError
from dpsql.measure.source import Source
from dpsql.public import Reference

__all__ = ["PRIVATE_ONLY", "is_public", "load_public", "labels_resolver", "declared_references", "unclamp_keys",
           "public_apart"]

#: Keys of a private table that a public one may not have (it has no domain, budget or unit).
PRIVATE_ONLY = ("domain", "domain_table", "privacy_unit", "rows")


def is_public(spec: Mapping, where: str) -> bool:
    # true or false (dpsql.config_schema); anything else would be private, never public
    return spec.get("public", False) is True


def load_public(tables_spec: Mapping, base: Path, where: str):
    """The configuration's public tables, read (a ``PublicDatabase``), or None without any."""
    sources = {}
    for name, spec in tables_spec.items():
        twhere = f"{where}: table {name!r}"
        if not isinstance(spec, Mapping) or not is_public(spec, twhere):
            continue
        wrong = [k for k in PRIVATE_ONLY if k in spec]
        if wrong:
            raise ConfigError(f"{twhere}: a public table has no {wrong[0]}",
                              hint="its content is public metadata: it has a source and, optionally, keys")
        if "source" not in spec:
            raise ConfigError(f"{twhere}: missing source", hint='source = { csv = "carriers.csv" }')
        sources[name] = Source.from_config(spec["source"], base, twhere, public=True)
    if not sources:
        return None
    from dpsql.measure.backend import PublicDatabase
    from dpsql.measure.router import read_public
    # files are read by DuckDB's own readers; a PostgreSQL or Spark table by its engine, once,
    # its rows then held beside the others (public metadata: read in the clear)
    contents = {name: read_public(name, s) for name, s in sources.items() if s.kind in ("postgres", "spark")}
    return PublicDatabase(sources, contents)


def _place(source: Source) -> tuple | None:
    """Where a source's rows live, as far as the configuration says: a file (resolved path
    and, for a DuckDB file, its table), a PostgreSQL table (host, port, database, table) or a
    Spark table or location; None when it cannot tell."""
    if source.path is not None:
        return ("file", str(Path(source.path).resolve()), source.table)
    if source.kind == "postgres" and source.url is not None and source.table is not None:
        u = urlsplit(source.url)
        return ("postgres", u.hostname, u.port, u.path, source.table.lower())
    if source.kind == "spark":
        return ("spark", source.location, source.table)
    return None


def public_apart(tables_spec: Mapping, private: Mapping[str, Source], base: Path, where: str) -> None:
    """Refuse a public table read from the very place a private table is read from: its
    rows would be shown exactly to every analyst (a copy-paste of a source is all it takes).
    Public configuration only; a place the configuration cannot tell apart is not compared."""
    places: dict[tuple, str] = {}
    for name, source in private.items():
        place = _place(source)
        if place is not None:
            places.setdefault(place, name)
    for name, spec in tables_spec.items():
        if not isinstance(spec, Mapping) or not is_public(spec, name) or "source" not in spec:
            continue
        place = _place(Source.from_config(spec["source"], base, f"{where}: table {name!r}", public=True))
        if place is not None and place in places:
            raise ConfigError(f"{where}: public table {name!r} is read from the source of private table "
                              f"{places[place]!r}: its rows would be shown to analysts exactly",
                              hint=f"remove public = true from [tables.{name}], or give it its own source")


def _split(ref, where: str) -> tuple[str, str]:
    if not isinstance(ref, str) or ref.count(".") != 1 or not all(ref.split(".")):
        raise ConfigError(f"{where}: {ref!r} is not \"table.column\"", hint='e.g. "airports.faa"')
    table, column = ref.split(".")
    return table, column


def _public_column(db, ref, where: str):
    table, column = _split(ref, where)
    tables = db.tables if db is not None else {}
    if table not in tables:
        raise ConfigError(f"{where}: {table!r} is not a public table",
                          hint=f"public tables: {', '.join(tables) or '(none)'}; "
                               f"declare [tables.{table}] public = true")
    if column not in tables[table].column_names:
        raise ConfigError(f"{where}: public table {table!r} has no column {column!r}",
                          hint=f"its columns: {', '.join(tables[table].column_names)}")
    return tables[table], column


def labels_resolver(db, where: str):
    """``labels_from`` for ``load_domain``: the distinct non-NULL values of a public column,
    in the table's row order (a file's; a PostgreSQL or Spark table's rows sorted by their
    columns, ``dpsql.measure.router.read_public``)."""
    def labels(ref: str) -> list:
        table, column = _public_column(db, ref, f"{where}: labels_from")
        values = list(dict.fromkeys(v for v in table.values(column) if v is not None))
        if not values:
            raise ConfigError(f"{where}: labels_from = {ref!r}: the column has no values",
                              hint="point labels_from at the public table's key column")
        if not all(isinstance(v, str) for v in values) and \
                not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            raise ConfigError(f"{where}: labels_from = {ref!r}: labels must be text or integers",
                              hint="use a text or integer key column")
        return values
    return labels


def declared_references(tables_spec: Mapping, schemas: Mapping, db, where: str) -> tuple[Reference, ...]:
    """Every ``keys`` entry, checked: the column exists, the target is a public table's
    column whose values the key's declared cells can hold (an open categorical must list
    every public key among its labels: an undeclared key would fall in the "(other)" cell,
    whose rows a join could not place)."""
    out = []
    for name, spec in tables_spec.items():
        if not isinstance(spec, Mapping) or "keys" not in spec:
            continue
        twhere = f"{where}: table {name!r}: keys"
        keys = spec["keys"]
        if not isinstance(keys, Mapping):
            raise ConfigError(f"{twhere} must be a table", hint='keys = { origin = "airports.faa" }')
        for key, targets in keys.items():
            cwhere = f"{twhere}: {key}"
            columns = _columns(key, cwhere)
            for ref in targets if isinstance(targets, list) else [targets]:
                table, target_columns = _targets(db, ref, len(columns), cwhere)
                for column, target_column in zip(columns, target_columns):
                    values = [v for v in table.values(target_column) if v is not None]
                    if name in schemas:
                        _check_key(schemas[name], column, values, f"{table.name}.{target_column}", cwhere)
                    else:
                        source = db.tables.get(name) if db is not None else None
                        if source is None or column not in source.column_names:
                            raise ConfigError(f"{cwhere}: table {name!r} has no column {column!r}",
                                              hint="keys name a column of the table they are declared in")
                out.append(Reference(name, columns, table.name, target_columns))
    return tuple(out)


def _columns(key, where: str) -> tuple[str, ...]:
    """A key's columns: ``origin``, or ``"origin, month"`` for a composite key."""
    columns = tuple(c.strip() for c in str(key).split(","))
    if not all(columns) or len(set(columns)) != len(columns):
        raise ConfigError(f"{where}: {key!r} does not name distinct columns",
                          hint='a composite key names its columns separated by commas: "origin, month"')
    return columns


def _targets(db, ref, n: int, where: str):
    """The public table and its ``n`` columns a reference names: ``"airports.faa"``, or
    ``"weather.origin, weather.month"`` (one ``table.column`` per key column, one table)."""
    if not isinstance(ref, str):
        raise ConfigError(f"{where}: {ref!r} is not \"table.column\"", hint='e.g. "airports.faa"')
    parts = [_public_column(db, p.strip(), where) for p in ref.split(",")]
    if len(parts) != n:
        raise ConfigError(f"{where}: {n} key column(s) but {len(parts)} target column(s) in {ref!r}",
                          hint='name one target per key column, in order: "origin, month" = '
                               '"weather.origin, weather.month"')
    if len({t.name for t, _ in parts}) != 1:
        raise ConfigError(f"{where}: {ref!r} names columns of several tables",
                          hint="a composite key references the columns of one public table")
    return parts[0][0], tuple(c for _, c in parts)


def _check_key(schema, column: str, values: list, ref: str, where: str) -> None:
    names = [a.name for a in schema.attributes]
    if column not in names:
        raise ConfigError(f"{where}: table {schema.name!r} declares no column {column!r}",
                          hint=f"declared columns: {', '.join(names)}")
    attr = schema.attribute(column)
    if attr.kind == "categorical":
        labels = set(attr.labels_)
        text = isinstance(attr.labels_[0], str)
        if any(isinstance(v, str) != text for v in values):
            raise ConfigError(f"{where}: {ref} holds {'numbers' if text else 'text'} but '{column}' is declared "
                              f"with {'text' if text else 'integer'} labels", hint="join columns of one type")
        missing = [v for v in dict.fromkeys(values) if v not in labels]
        if missing and attr.other_index is not None:
            shown = ", ".join(repr(v) for v in missing[:5]) + (" …" if len(missing) > 5 else "")
            raise ConfigError(f"{where}: {len(missing)} key(s) of {ref} are not labels of the open column "
                              f"'{column}' ({shown}): rows with them would share its (other) cell",
                              hint=f'declare labels_from = "{ref}" for \'{column}\', or list those labels')
        if attr.invalid_index < len(attr.labels_):
            # closed and not nullable: NULL and undeclared values land in the first label's
            # cell and would join that label's dimension rows; the NULL cell joins none
            raise ConfigError(f"{where}: the closed categorical join key '{column}' must be nullable: its NULL "
                              f"and undeclared values would land in the cell of {attr.labels_[0]!r} and join "
                              f"{ref} = {attr.labels_[0]!r}, where SQL joins them with no row",
                              hint=f"declare nullable = true for '{column}' in the domain file (they then land "
                                   "in its NULL cell, which joins no dimension row), or drop closed = true")
        return
    bounds = attr.bin_bounds()
    if attr.kind != "integer" or any(b is not None and b[0] != b[1] for b in bounds):
        raise ConfigError(f"{where}: column '{column}' cannot be a join key: its cells hold several values",
                          hint="declare the key categorical, or integer with one-value bins")
    if any(isinstance(v, bool) or not isinstance(v, int) for v in values):
        raise ConfigError(f"{where}: {ref} holds values that are not integers but '{column}' is an integer",
                          hint="join columns of one type")
    outside = [v for v in dict.fromkeys(values) if not attr.lo <= v <= attr.hi]
    if outside:
        # a private row holding such a value lands in the NULL cell (unclamp_keys) and could
        # not join the public rows SQL joins it with, as for an open categorical's labels
        shown = ", ".join(repr(v) for v in outside[:5]) + (" …" if len(outside) > 5 else "")
        raise ConfigError(f"{where}: {len(outside)} key(s) of {ref} lie outside '{column}''s declared range "
                          f"{attr.lo}..{attr.hi} ({shown}): rows holding them could not be joined",
                          hint=f"widen lo/hi of '{column}' to cover the public keys")
    if not attr.nullable:
        # its values outside lo..hi need a cell that joins no row (unclamp_keys)
        raise ConfigError(f"{where}: the integer join key '{column}' must be nullable: values outside "
                          f"{attr.lo}..{attr.hi} land in its NULL cell, which joins no dimension row",
                          hint=f"declare nullable = true for '{column}' in the domain file")


def unclamp_keys(tables: Mapping, references) -> dict:
    """The private tables with every integer column declared as a key ``clamp = False``:
    a value outside ``lo..hi`` lands in the NULL cell (``_check_key`` requires one), which
    joins no dimension row, instead of the end bin, which would join the end key's row.
    Decided from the declared keys alone, so the same on every backend; the rule is part of
    the domain's fingerprint (docs/privacy.md §7.4)."""
    keyed = {(r.table, c) for r in references for c in r.columns}
    out = {}
    for name, schema in tables.items():
        attrs = tuple(a.unclamped() if isinstance(a, IntegerRange) and (name, a.name) in keyed else a
                      for a in schema.attributes)
        out[name] = schema if attrs == schema.attributes else TableSchema(schema.name, attrs, schema.source)
    return out
