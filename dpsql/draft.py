"""``dpsql init``: draft a configuration from a data file's *schema* or public metadata.

Sources it understands:

* a CSV file (header row) or a Parquet file: column names and coarse types, read by
  DuckDB (the schema only: no domain is ever read off the rows);
* a DuckDB database file with ``--table``: that table's columns;
* SmartNoise SQL metadata (YAML): the declared type of every column and, for numbers,
  its declared ``lower``/``upper`` bounds;
* a ``*-domain.json`` file (the Private-PGM / hd-datasets convention, ``{"column": k}``
  for integer codes ``0 … k-1``): a complete domain.

Whatever public metadata does not say (the labels of a text column, the bounds of a
number) is left for the operator, listed all at once in the output and in comments of
the drafted file.  Column names are written as quoted TOML keys when they need it, so
``capital gain`` or ``income>50K`` give a valid file.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from dpsql.errors import ConfigError


@dataclass
class ColumnDraft:
    name: str
    kind: str                  # "integer" | "numeric" | "categorical" | "date" | "timestamp"
    spec: dict = field(default_factory=dict)   # known keys (lo, hi, labels, ...)
    missing: list[str] = field(default_factory=list)  # keys the operator must add
    confirm: str = ""          # a guess the operator must confirm (e.g. a CSV's text read as dates)


@dataclass
class TableDraft:
    name: str
    source: dict | None        # e.g. {"csv": "adult.csv"}; None: the operator adds it
    columns: list[ColumnDraft]
    origin: str                # where the schema came from, for the header comment


_BARE = re.compile(r"^[A-Za-z0-9_-]+$")


def toml_key(name: str) -> str:
    """A TOML key for any column or table name (quoted when it is not bare)."""
    return name if _BARE.fullmatch(name) else toml_value(name)  # match() would let "x\n" through bare


def toml_value(value) -> str:
    """A TOML value: strings, numbers (``inf``/``nan`` too), booleans, paths, lists, tuples and
    inline tables.  The one TOML writer of the project (``dpsql init`` and ``dpsql.testing``;
    issue 36 item 4: two writers disagreed on paths, tuples, non-finite floats and DEL)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)  # repr of a float is a TOML float: 1e-06, inf, nan
    if isinstance(value, (str, os.PathLike)):
        # a JSON string is a TOML basic string except that TOML also forbids a raw DEL
        return json.dumps(os.fspath(value), ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"cannot write {value!r} as TOML")


def table_name(stem: str) -> str:
    """A SQL-friendly table name from a file stem (``adult-domain`` → ``adult``)."""
    stem = re.sub(r"-domain$", "", stem)
    name = re.sub(r"\W+", "_", stem).strip("_").lower() or "data"
    return name if not name[0].isdigit() else "t_" + name


def _typed(name: str, kind: str) -> ColumnDraft:
    if kind == "integer":
        return ColumnDraft(name, "integer", {}, ["lo", "hi"])
    if kind == "numeric":
        return ColumnDraft(name, "numeric", {}, ["edges"])
    if kind in ("date", "timestamp"):
        return ColumnDraft(name, kind, {"timezone": "UTC"} if kind == "timestamp" else {}, ["lo", "hi", "bin"])
    if kind == "time":              # a time of day: lo and hi default to the whole day
        return ColumnDraft(name, kind, {}, ["bin"])
    return ColumnDraft(name, "categorical", {}, ["labels"])


def _from_text(column: ColumnDraft, source: str) -> ColumnDraft:
    """A CSV column whose text DuckDB's reader took for dates: drafted as a time column, to
    be confirmed (dpsql itself reads the text by the ISO grammar only, never by a guess)."""
    if column.kind in ("date", "timestamp"):
        form = "YYYY-MM-DD" if column.kind == "date" else "YYYY-MM-DD HH:MM[:SS]"
        column.confirm = (f"the {source} text looked like {column.kind}s: confirm it is ISO 8601 ({form}); "
                          "any other text lands in the invalid place")
    return column


# -- readers ---------------------------------------------------------------------------------

def from_file(path: Path, table: str | None = None) -> TableDraft:
    """The draft for ``path``, by its kind (see the module docstring)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"file not found: {path}", hint="give the path of a CSV, Parquet, DuckDB, "
                          "SmartNoise metadata (.yaml) or *-domain.json file")
    suffix = path.suffix.lower()
    if suffix == ".json":
        return _from_domain_json(path, table)
    if suffix in (".yaml", ".yml"):
        return _from_smartnoise(path, table)
    if suffix in (".duckdb", ".db", ".ddb"):
        return _from_duckdb(path, table)
    if suffix == ".parquet":
        return _from_data(path, "parquet", table)
    return _from_data(path, "csv", table)


def _rel(path: Path) -> str:
    return str(path)


def _from_data(path: Path, kind: str, table: str | None) -> TableDraft:
    from dpsql.measure.backend import describe_source
    cols = [_typed(n, k) for n, k in describe_source(path)]
    if kind == "csv":
        cols = [_from_text(c, "CSV") for c in cols]
    return TableDraft(table or table_name(path.stem), {kind: str(path.resolve())}, cols,
                      f"the {kind.upper() if kind == 'csv' else 'Parquet'} header of {path.name}")


def _from_duckdb(path: Path, table: str | None) -> TableDraft:
    from dpsql.measure.backend import describe_duckdb_table
    table, described = describe_duckdb_table(path, table)
    cols = [_typed(name, kind) for name, kind in described]
    return TableDraft(table_name(table), {"duckdb": str(path.resolve()), "table": table}, cols,
                      f"table {table} of {path.name}")


def _from_domain_json(path: Path, table: str | None) -> TableDraft:
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"{path}: not a readable JSON domain file ({exc})") from None
    if not isinstance(spec, dict) or not spec or not all(
            isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in spec.values()):
        raise ConfigError(f"{path}: expected {{\"column\": number of values, ...}}",
                          hint="a *-domain.json maps each column to its domain size k (codes 0..k-1)")
    cols = [ColumnDraft(str(name), "integer", {"lo": 0, "hi": int(k) - 1}, []) for name, k in spec.items()]
    stem = re.sub(r"-domain$", "", path.stem)
    data = path.with_name(stem + ".csv")
    source = {"csv": str(data.resolve())} if data.exists() else None
    return TableDraft(table or table_name(stem), source, cols,
                      f"{path.name} (integer codes 0..k-1 per column)")


def _from_smartnoise(path: Path, table: str | None) -> TableDraft:
    doc = parse_yaml_mapping(path.read_text(), str(path))
    # SmartNoise metadata: {collection: {schema: {table: {column: {type: ...}, rows: n, ...}}}}
    found = []

    def walk(node, trail):
        if not isinstance(node, dict):
            return
        cols = {k: v for k, v in node.items() if isinstance(v, dict) and "type" in v}
        if cols:
            found.append((trail, cols))
            return
        for k, v in node.items():
            walk(v, trail + [k])

    walk(doc, [])
    if not found:
        raise ConfigError(f"{path}: no table with typed columns (SmartNoise metadata: "
                          "collection → schema → table → column: {type: ...})")
    if table is not None:
        found = [f for f in found if f[0] and f[0][-1] == table] or found
    if len(found) > 1:
        raise ConfigError(f"{path} describes {len(found)} tables; name one with --table",
                          hint="tables: " + ", ".join(".".join(t) for t, _ in found))
    trail, cols = found[0]
    out = []
    for name, spec in cols.items():
        kind = str(spec.get("type", "")).lower()
        lower, upper = spec.get("lower"), spec.get("upper")
        if kind == "int":
            c = ColumnDraft(name, "integer")
            for key, v in (("lo", lower), ("hi", upper)):
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    c.spec[key] = int(v)
                else:
                    c.missing.append(key)
        elif kind == "float":
            c = ColumnDraft(name, "numeric")
            if (isinstance(lower, (int, float)) and not isinstance(lower, bool)
                    and isinstance(upper, (int, float)) and not isinstance(upper, bool)):
                c.spec["edges"] = [float(lower), float(upper)]
                c.missing.append("edges (finer bins between lower and upper, if wanted)")
            else:
                c.missing.append("edges")
        elif kind == "boolean":
            c = ColumnDraft(name, "categorical", {"labels": ["false", "true"]}, [])
        else:
            c = ColumnDraft(name, "categorical", {}, ["labels"])
        if spec.get("nullable") is True:
            c.spec["nullable"] = True
        out.append(c)
    name = table or (trail[-1] if trail else path.stem)
    return TableDraft(table_name(name), None, out, f"the SmartNoise metadata {path.name} (table {'.'.join(trail)})")


def parse_yaml_mapping(text: str, where: str = "YAML") -> dict:
    """The nested ``key: value`` mappings of a YAML document (the subset SmartNoise metadata
    uses: indentation, scalars, comments); anything else is a ConfigError."""
    root: dict = {}
    stack: list[tuple[int, dict]] = [(-1, root)]
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line.strip() or line.strip() == "---":
            continue
        indent = len(line) - len(line.lstrip(" "))
        body = line.strip()
        if ":" not in body or body.startswith("- "):
            raise ConfigError(f"{where}, line {lineno}: expected 'key: value'",
                              hint="only nested key: value mappings are read")
        key, _, value = body.partition(":")
        key = key.strip().strip("'\"")
        while stack and indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        value = value.strip()
        if value == "":
            child: dict = {}
            parent[key] = child
            stack.append((indent, child))
        else:
            parent[key] = _scalar(value)
    return root


def _scalar(text: str):
    if text[:1] in ("'", '"') and text[-1:] == text[:1]:
        return text[1:-1]
    low = text.lower()
    if low in ("true", "yes"):
        return True
    if low in ("false", "no"):
        return False
    if low in ("null", "~"):
        return None
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


# -- writing -----------------------------------------------------------------------------------

def missing_items(draft: TableDraft) -> list[str]:
    items = [] if draft.source is not None else [f"table {draft.name}: source (the data file or table)"]
    for c in draft.columns:
        for key in c.missing:
            items.append(f"column {c.name!r} ({c.kind}): {key}")
        if c.confirm:
            items.append(f"column {c.name!r} ({c.kind}): {c.confirm}")
    return items


def write(draft: TableDraft, out: Path, force: bool = False) -> tuple[Path, Path, list[str]]:
    """Write ``out`` (the configuration) and ``<table>.domain.toml`` beside it."""
    domain_file = out.with_name(f"{draft.name}.domain.toml")
    if (out.exists() or domain_file.exists()) and not force:
        raise ConfigError(f"{out} or {domain_file} exists", hint="use --force to overwrite")
    base = out.resolve().parent
    t = toml_key(draft.name)
    lines = [f"# Domain of table {draft.name}, drafted by `dpsql init` from {draft.origin}.",
             "# Fill every domain from PUBLIC knowledge (documentation, codebooks, law), never from",
             "# the rows: a domain read off the data would itself leak private information.",
             f"[tables.{t}]"]
    if draft.source is not None:
        src = {k: (os.path.relpath(v, base) if k in ("csv", "parquet", "duckdb") and "://" not in str(v) else v)
               for k, v in draft.source.items()}   # a URI (spark: s3a://…) stays as it is
        lines.append(f"source = {toml_value(src)}")
    else:
        lines.append('# source = { csv = "data.csv" }   (TO FILL: where the rows are)')
    lines.append("")
    for c in draft.columns:
        lines.append(f"[tables.{t}.columns.{toml_key(c.name)}]")
        lines.append(f"type = {toml_value(c.kind)}")
        for k, v in c.spec.items():
            lines.append(f"{k} = {toml_value(v)}")
        if c.confirm:
            lines.append(f"# TO CONFIRM: {c.confirm}")
        time = c.kind in ("date", "timestamp")
        for key in c.missing:
            hint = {"lo": "first day of the public period, e.g. 2013-01-01" if time else "public lower bound",
                    "hi": "last day of the public period, e.g. 2013-12-31" if time else "public upper bound",
                    "bin": '"second", "minute" or "hour"' if c.kind == "time" else
                           '"day", "week", "month", "quarter" or "year"' + (' (or "hour", "minute", "second")'
                                                                            if c.kind == "timestamp" else ""),
                    "labels": "the published list of values", "edges": "public bin edges"}.get(key.split()[0], "")
            lines.append(f"# {key} = ?   (TO FILL{': ' + hint if hint else ''})")
        lines.append("")
    domain_file.write_text("\n".join(lines), encoding="utf-8")
    out.write_text("\n".join([
        "# dpsql configuration drafted by `dpsql init` (docs/config.md).",
        "[dpsql]", f"ledger = {toml_value(draft.name + '.ledger')}", 'noise = "gaussian"',
        'policy = "informed"   # unsupported values: informed | infer | measure | refuse', "",
        "[budget]", "epsilon = 1.0", "delta = 1e-6", "",
        f"[tables.{t}]", f"domain = {toml_value(domain_file.name)}", 'privacy_unit = "row"', "",
        "[workload]", "queries = []", ""]), encoding="utf-8")
    return out, domain_file, missing_items(draft)


__all__ = ["ColumnDraft", "TableDraft", "from_file", "write", "missing_items", "toml_key",
           "parse_yaml_mapping", "table_name"]
