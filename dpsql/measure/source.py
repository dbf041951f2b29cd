"""Where a private table's rows live, how they are read, and which content was read.

A :class:`Source` is public configuration (``source = { csv = ... }`` in a domain file or
``dpsql.toml``, ``docs/config.md``).  Every reader option is *declared* here with a
documented default and never sniffed from the rows (``docs/privacy.md`` §8.1): a sniffed
option is a function of the data, so one row could change how every other row is read.

:meth:`Source.fingerprint` names the content that was read (size and SHA-256 of the file,
or the operator's declared ``data_version``); it is part of every release's identity
(``dpsql.measure.identity``), so a release never outlives the data it was measured on.
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from dpsql.domain import check_keys
from dpsql.errors import ConfigError

#: Bumped whenever the mapping from bytes to cells changes: releases measured by another
#: reader version are stale (their cells may mean something else).
READER_VERSION = 2

KINDS = ("csv", "parquet", "duckdb")
_COMMON_KEYS = ("data_version", "id_column", "max_rows")
_KIND_KEYS = {
    "csv": ("delimiter", "quote", "escape", "header", "encoding", "null", "columns", "max_record_bytes"),
    "parquet": (),
    "duckdb": ("table",),
}
ENCODINGS = {"utf-8": "utf-8", "utf8": "utf-8", "latin-1": "latin-1", "latin1": "latin-1",
             "iso-8859-1": "latin-1", "cp1252": "cp1252", "windows-1252": "cp1252"}


@dataclass(frozen=True)
class CsvDialect:
    """How a CSV file is split into records and fields (all declared, defaults below).

    Records are physical lines: they end at ``\\n``, ``\\r\\n`` or a lone ``\\r`` and a
    quoted field never spans lines, so one record can never swallow the next
    (``dpsql.measure.reader``)."""

    delimiter: str = ","
    quote: str = '"'          # "" disables quoting
    escape: str = '"'         # inside quoted fields; the quote itself = doubled quotes
    header: bool = True       # the first record names the fields
    encoding: str = "utf-8"   # utf-8 | latin-1 | cp1252; undecodable bytes read as U+FFFD
    null: tuple[str, ...] = ("",)   # unquoted field texts that mean NULL
    columns: tuple[str, ...] | None = None  # field names when header = false
    max_record_bytes: int = 4 << 20   # longer records are read as malformed

    @staticmethod
    def from_spec(spec: Mapping[str, Any], where: str) -> "CsvDialect":
        kw: dict[str, Any] = {}
        for key in ("delimiter", "quote", "escape"):
            if key in spec:
                v = spec[key]
                ok = isinstance(v, str) and (len(v) == 1 or (key != "delimiter" and v == "")) \
                    and v not in ("\n", "\r") and (v == "" or ord(v) < 128)
                if not ok:
                    raise ConfigError(f"{where}: source.{key} must be one ASCII character"
                                      + (" or \"\"" if key != "delimiter" else "") + f", got {v!r}",
                                      hint=f'e.g. {key} = "{CsvDialect.__dataclass_fields__[key].default}"')
                kw[key] = v
        if "quote" in kw and "escape" not in kw:
            kw["escape"] = kw["quote"]
        if "header" in spec:
            if not isinstance(spec["header"], bool):
                raise ConfigError(f"{where}: source.header must be true or false")
            kw["header"] = spec["header"]
        if "encoding" in spec:
            enc = ENCODINGS.get(str(spec["encoding"]).lower())
            if enc is None:
                raise ConfigError(f"{where}: source.encoding {spec['encoding']!r} is not supported",
                                  hint="use utf-8, latin-1 or cp1252")
            kw["encoding"] = enc
        if "null" in spec:
            v = spec["null"]
            v = [v] if isinstance(v, str) else v
            if not isinstance(v, list) or not all(isinstance(s, str) for s in v):
                raise ConfigError(f"{where}: source.null must be a string or a list of strings",
                                  hint='e.g. null = ["", "NA"]')
            kw["null"] = tuple(v)
        if "columns" in spec:
            v = spec["columns"]
            if not isinstance(v, list) or not v or not all(isinstance(s, str) and s for s in v) \
                    or len(set(v)) != len(v):
                raise ConfigError(f"{where}: source.columns must be a list of distinct field names",
                                  hint='e.g. columns = ["age", "sex"] (in file order)')
            kw["columns"] = tuple(v)
        if "max_record_bytes" in spec:
            v = spec["max_record_bytes"]
            if not isinstance(v, int) or isinstance(v, bool) or not 1024 <= v <= (64 << 20):
                raise ConfigError(f"{where}: source.max_record_bytes must be an integer in 1024 .. 67108864")
            kw["max_record_bytes"] = v
        d = CsvDialect(**kw)
        if not d.header and d.columns is None:
            raise ConfigError(f"{where}: source.header = false needs source.columns",
                              hint="list the field names in file order: columns = [...]")
        if d.header and d.columns is not None:
            raise ConfigError(f"{where}: source.columns is only for files without a header",
                              hint="remove columns, or set header = false")
        if d.quote and d.delimiter == d.quote or (d.escape and d.escape == d.delimiter):
            raise ConfigError(f"{where}: the delimiter must differ from quote and escape")
        return d

    def describe(self) -> dict:
        return {"delimiter": self.delimiter, "quote": self.quote, "escape": self.escape,
                "header": self.header, "encoding": self.encoding, "null": list(self.null),
                "columns": None if self.columns is None else list(self.columns),
                "max_record_bytes": self.max_record_bytes}


@dataclass(frozen=True)
class Source:
    """Where a private table's rows live (public configuration, never data)."""

    kind: str  # "csv" | "parquet" | "duckdb"
    path: Path
    table: str | None = None  # for kind == "duckdb"
    id_column: str | None = None  # privacy unit; None = one row
    max_rows_per_id: int = 1
    hash_key: str | None = field(default=None, repr=False)  # secret; never logged
    dialect: CsvDialect = field(default_factory=CsvDialect)
    data_version: str | None = None

    @staticmethod
    def from_config(spec: Mapping, base: Path, where: str = "source") -> "Source":
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where}: source must be a table", hint='e.g. source = { csv = "adult.csv" }')
        kinds = [k for k in KINDS if k in spec]
        if len(kinds) != 1:
            raise ConfigError(f"{where}: a source names exactly one of csv, parquet, duckdb; got {sorted(spec)}",
                              hint='e.g. source = { csv = "adult.csv" }')
        kind = kinds[0]
        check_keys(spec, (kind,) + _COMMON_KEYS + _KIND_KEYS[kind], f"{where}: source ({kind})")
        raw = spec[kind]
        if not isinstance(raw, str) or not raw:
            raise ConfigError(f"{where}: source.{kind} must be a non-empty path")
        path = Path(raw)
        if not path.is_absolute():
            path = (base / path).resolve()
        table = spec.get("table")
        if kind == "duckdb" and (not isinstance(table, str) or not table):
            raise ConfigError(f"{where}: a duckdb source needs table = \"NAME\"",
                              hint='source = { duckdb = "data.duckdb", table = "people" }')
        version = spec.get("data_version")
        if version is not None and (not isinstance(version, (str, int)) or isinstance(version, bool)
                                    or str(version) == ""):
            raise ConfigError(f"{where}: source.data_version must be a non-empty string or integer")
        id_column = spec.get("id_column")
        if id_column is not None and (not isinstance(id_column, str) or not id_column):
            raise ConfigError(f"{where}: source.id_column must be a column name")
        max_rows = spec.get("max_rows", 1)
        if "max_rows" in spec and id_column is None:
            raise ConfigError(f"{where}: source.max_rows needs source.id_column",
                              hint="max_rows bounds the rows kept per id_column value")
        if not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 1:
            raise ConfigError(f"{where}: source.max_rows must be a positive integer")
        dialect = CsvDialect.from_spec(spec, where) if kind == "csv" else CsvDialect()
        return Source(kind=kind, path=path, table=table, id_column=id_column,
                      max_rows_per_id=max_rows, dialect=dialect,
                      data_version=None if version is None else str(version))

    # -- identity of the content -------------------------------------------------------------
    def describe(self) -> dict:
        """How the rows are read (public): part of a release's identity."""
        out: dict[str, Any] = {"kind": self.kind, "path": str(self.path), "reader": READER_VERSION}
        if self.kind == "duckdb":
            out["table"] = self.table
        if self.kind == "csv":
            out["dialect"] = self.dialect.describe()
        return out

    def fingerprint(self) -> dict:
        """Which content would be read now: the declared ``data_version`` or the file's size
        and SHA-256 (recomputed only when its size, mtime, inode or ctime change)."""
        if self.data_version is not None:
            return {"data_version": self.data_version}
        return file_fingerprint(self.path)


_HASHES: dict[str, tuple[tuple, dict]] = {}
_HASH_LOCK = threading.Lock()


def _stat_key(path: Path) -> tuple:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"source file not found: {path}",
                          hint="fix the path in the configuration (relative paths are relative "
                               "to the file that declares them); to answer from releases after "
                               "removing the data, declare source.data_version") from None
    except OSError as exc:
        raise ConfigError(f"cannot read source file {path}: {exc.strerror}") from None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


def file_fingerprint(path: Path) -> dict:
    """``{"size", "sha256"}`` of a file, cached per (size, mtime, inode, ctime)."""
    path = Path(path)
    key = _stat_key(path)
    with _HASH_LOCK:
        cached = _HASHES.get(str(path))
        if cached is not None and cached[0] == key:
            return dict(cached[1])
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            h.update(chunk)
    fp = {"size": key[0], "sha256": h.hexdigest()}
    if _stat_key(path) == key:  # a file written while hashing is hashed again next time
        with _HASH_LOCK:
            _HASHES[str(path)] = (key, fp)
    return dict(fp)


def remember_fingerprint(path: Path, stat_key: tuple, fp: dict) -> None:
    """Record a hash computed elsewhere (the CSV reader hashes what it reads)."""
    with _HASH_LOCK:
        _HASHES[str(path)] = (stat_key, dict(fp))


__all__ = ["Source", "CsvDialect", "READER_VERSION", "file_fingerprint", "KINDS"]
