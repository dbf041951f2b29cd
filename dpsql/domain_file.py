"""The domain file: tables, their columns and sources declared in TOML, read into
:class:`~dpsql.domain.TableSchema` objects (docs/domains.md).

Above ``dpsql.domain`` (the column kinds) and ``dpsql.temporal`` (the time kinds, which
build on ``domain``), so the loader sees every kind and neither of those imports the other.
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from dpsql.domain import Attribute, Categorical, IntegerRange, Numeric, TableSchema, check_keys
from dpsql.errors import ConfigError
from dpsql.temporal import TEMPORAL_KEYS, build_temporal
from dpsql.timeofday import TIME_KEYS, build_time_of_day

_COLUMN_KEYS = {
    "categorical": {"type", "labels", "labels_from", "nullable", "closed"},
    "integer": {"type", "lo", "hi", "bin_width", "edges", "nullable"},
    "numeric": {"type", "edges", "nullable"},
}
_REQUIRED_KEYS = {"categorical": ("labels",), "integer": ("lo", "hi"), "numeric": ("edges",)}
_SOURCE_PATH_KEYS = ("csv", "parquet", "duckdb")


def _build_attribute(name: str, spec: Mapping[str, Any],
                     labels_from: Callable[[str], list[Any]] | None = None) -> Attribute:
    kind = spec.get("type")
    if kind == "time":
        check_keys(spec, TIME_KEYS, "a time column")
        return build_time_of_day(name, dict(spec))
    if kind in ("date", "timestamp"):
        check_keys(spec, TEMPORAL_KEYS[kind], f"a {kind} column")
        return build_temporal(name, dict(spec))
    if kind not in _COLUMN_KEYS:
        raise ConfigError(f"unknown or missing type {kind!r}",
                          hint='type must be "categorical", "integer", "numeric", "date", "timestamp" or "time"')
    check_keys(spec, _COLUMN_KEYS[kind], f"a {kind} column")
    if "labels_from" in spec:
        # labels = the distinct values of a public table's column (dpsql.public): declared
        # once, in the dimension table, however many labels it has
        if "labels" in spec:
            raise ConfigError("give either labels or labels_from, not both", hint="remove one of them")
        ref = spec["labels_from"]
        if not isinstance(ref, str) or ref.count(".") != 1:
            raise ConfigError(f"labels_from must be \"table.column\" of a public table, got {ref!r}",
                              hint='e.g. labels_from = "airports.faa"')
        if labels_from is None:
            raise ConfigError(f"labels_from = {ref!r} needs the public tables of a configuration",
                              hint="load the domain through dpsql.toml, which declares the public table")
        spec = {**spec, "labels": list(labels_from(ref))}
        del spec["labels_from"]
    missing = [k for k in _REQUIRED_KEYS[kind] if k not in spec]
    if missing:
        raise ConfigError(f"missing key(s) {missing} for a {kind} column",
                          hint="see docs/domains.md for the format")
    for key in ("labels", "edges"):
        if key in spec and not isinstance(spec[key], list):
            raise ConfigError(f"{key} must be a list", hint=f"e.g. {key} = [0, 1, 1000]")
    nullable = spec.get("nullable", False)
    if kind == "categorical":
        return Categorical(name, spec["labels"], nullable=nullable, closed=spec.get("closed", False))
    if kind == "integer":
        if "edges" in spec and "bin_width" in spec:
            raise ConfigError("give either bin_width or edges, not both", hint="remove one of them")
        return IntegerRange(name, spec["lo"], spec["hi"], bin_width=spec.get("bin_width", 1),
                            edges=spec.get("edges"), nullable=nullable)
    return Numeric(name, spec["edges"], nullable=nullable)


def _resolve_source(spec: Any, base: Path) -> dict[str, Any]:
    """Copy of the source table with file paths made absolute (relative to the TOML file)."""
    if not isinstance(spec, dict):
        raise ConfigError("source must be a table", hint='e.g. source = { csv = "adult.csv" }')
    out = dict(spec)
    for key in _SOURCE_PATH_KEYS:
        if key in out:
            if not isinstance(out[key], str) or not out[key]:
                raise ConfigError(f"source.{key} must be a non-empty path string",
                                  hint='e.g. source = { csv = "adult.csv" }')
            if "://" in out[key]:
                continue  # a URI (e.g. a Spark source's s3a:// files): not a local path
            path = Path(out[key]).expanduser()
            out[key] = str(path if path.is_absolute() else (base / path).resolve())
    return out


def _located(err: ConfigError, where: str) -> ConfigError:
    """The same error with its location prefixed (file, then table and column)."""
    return ConfigError(f"{where}: {err.message}", hint=err.hint, detail=err.detail)


def load_domain(path: str | Path, labels_from: Callable[[str], list[Any]] | None = None) -> dict[str, TableSchema]:
    """Read the tables declared in a TOML file (format: ``docs/domains.md``).

    ``labels_from("table.column")`` (from the configuration's public tables) gives the
    labels of a categorical declared with ``labels_from``.  Attributes keep their
    declaration order.  Every problem raises :class:`ConfigError`
    naming the file, the table and the column.
    """
    path = Path(path)
    try:
        with path.open("rb") as fh:
            document = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"{path}: domain file not found",
                          hint="check the path (relative paths are taken from the working directory)") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}", hint="fix the TOML syntax") from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read domain file: {exc.strerror}", hint="check permissions") from None

    check_keys(document, ("tables",), f"{path}")
    tables = document.get("tables")
    if not isinstance(tables, dict) or not tables:
        raise ConfigError(f"{path}: no tables declared", hint="add a [tables.<name>] section")

    schemas: dict[str, TableSchema] = {}
    for table_name, table_spec in tables.items():
        where = f"{path}: table '{table_name}'"
        if not isinstance(table_spec, dict):
            raise ConfigError(f"{where}: must be a table", hint=f"write [tables.{table_name}]")
        check_keys(table_spec, ("source", "columns"), where)
        columns = table_spec.get("columns")
        if not isinstance(columns, dict) or not columns:
            raise ConfigError(f"{where}: no columns declared",
                              hint=f"add [tables.{table_name}.columns.<column>] sections")
        attributes = []
        problems: list[ConfigError] = []  # every column's problem, reported at once
        for column_name, column_spec in columns.items():
            column_where = f"{where}, column '{column_name}'"
            if not isinstance(column_spec, dict):
                problems.append(ConfigError(f"{column_where}: must be a table",
                                            hint=f"write [tables.{table_name}.columns.{column_name}]"))
                continue
            try:
                attribute = _build_attribute(column_name, column_spec, labels_from)
            except ConfigError as exc:
                # Attribute constructors already name the column; drop the duplicate prefix.
                exc.message = exc.message.removeprefix(f"column '{column_name}': ")
                problems.append(_located(exc, column_where))
                continue
            attributes.append(attribute)
        if len(problems) == 1:
            raise problems[0]
        if problems:
            raise ConfigError(f"{where}: {len(problems)} columns need attention",
                              detail="\n".join(p.message.removeprefix(f"{where}, ") for p in problems),
                              hint=problems[0].hint)
        source = None
        if "source" in table_spec:
            try:
                source = _resolve_source(table_spec["source"], path.parent)
            except ConfigError as exc:
                raise _located(exc, where) from None
        schemas[table_name] = TableSchema(table_name, tuple(attributes), source)
    return schemas


# The engine loads schemas under this name; one loader, two spellings.
load_table_schemas = load_domain

__all__ = ["load_domain", "load_table_schemas"]
