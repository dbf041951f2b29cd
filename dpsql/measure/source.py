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

import glob
import hashlib
import json
import os
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from dpsql import config_schema
from dpsql.errors import ConfigError
from dpsql.files import atomic_write

if TYPE_CHECKING:
    from dpsql.measure.views import View

#: Bumped whenever the mapping from bytes to cells changes: releases measured by another
#: reader version are stale (their cells may mean something else).  3: the portable number
#: grammar (at most two exponent digits) and bounding by a SHA-256 of the row's cells.
READER_VERSION = 3
MAX_RECORD_LINES = 10_000

KINDS = config_schema.SOURCE_KINDS      # each kind's keys: config_schema.source_keys
FILE_KINDS = ("csv", "parquet", "duckdb")
GLOB_CHARS = "*?["
DEFAULT_STATEMENT_TIMEOUT: float = config_schema.default("source", "statement_timeout")
ENCODINGS = {"utf-8": "utf-8", "utf8": "utf-8", "latin-1": "latin-1", "latin1": "latin-1",
             "iso-8859-1": "latin-1", "cp1252": "cp1252", "windows-1252": "cp1252"}


def _default(key: str) -> Any:
    """A source key's declared default (dpsql.config_schema)."""
    return config_schema.default("source", key)


@dataclass(frozen=True)
class CsvDialect:
    """How a CSV file is split into records and fields (all declared, defaults below).

    Records are physical lines: they end at ``\\n``, ``\\r\\n`` or a lone ``\\r`` and a
    quoted field never spans lines, so one record can never swallow the next
    (``dpsql.measure.reader``).  Empty lines are not records (when there are two or more
    fields).  ``max_record_lines`` is the operator's bound on the physical lines one
    person's record may span (RFC 4180 line breaks inside quoted fields): with the row
    privacy unit every sensitivity is multiplied by it (``Source.unit_rows``,
    docs/privacy.md §2)."""

    delimiter: str = _default("delimiter")
    quote: str = _default("quote")          # "" disables quoting
    escape: str = _default("escape")        # inside quoted fields; the quote itself = doubled quotes
    header: bool = _default("header")       # the first record names the fields
    encoding: str = _default("encoding")    # utf-8 | latin-1 | cp1252; undecodable bytes read as U+FFFD
    null: tuple[str, ...] = _default("null")   # unquoted field texts that mean NULL
    columns: tuple[str, ...] | None = None  # field names when header = false
    max_record_bytes: int = _default("max_record_bytes")   # longer records are read as malformed
    max_record_lines: int = _default("max_record_lines")   # physical lines one person's record may span

    @property
    def field_names(self) -> tuple[str, ...]:
        """The declared field names of a CSV without a header line (``columns``)."""
        if self.columns is None:     # from_spec requires them with header = false
            raise ConfigError("a CSV source with header = false needs columns = [...]")
        return tuple(self.columns)

    @staticmethod
    def from_spec(spec: Mapping[str, Any], where: str) -> CsvDialect:
        """The dialect of a csv source whose keys' types ``Source.from_config`` has checked
        against dpsql.config_schema; what follows checks their values."""
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
            kw["header"] = spec["header"]
        if "encoding" in spec:
            enc = ENCODINGS.get(str(spec["encoding"]).lower())
            if enc is None:
                raise ConfigError(f"{where}: source.encoding {spec['encoding']!r} is not supported",
                                  hint="use utf-8, latin-1 or cp1252")
            kw["encoding"] = enc
        if "null" in spec:
            v = spec["null"]
            kw["null"] = (v,) if isinstance(v, str) else tuple(v)
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
        if "max_record_lines" in spec:
            v = spec["max_record_lines"]
            if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= MAX_RECORD_LINES:
                raise ConfigError(f"{where}: source.max_record_lines must be an integer in 1 .. {MAX_RECORD_LINES}",
                                  hint="the most physical lines one person's record spans (line breaks "
                                       "inside quoted fields); every count's noise grows with it")
            kw["max_record_lines"] = v
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
                "max_record_bytes": self.max_record_bytes,
                # what a record is: since issue 34 empty lines are skipped (counts of files
                # with empty lines changed, so their earlier releases are stale)
                "records": "lines, empty skipped",
                **({"max_record_lines": self.max_record_lines} if self.max_record_lines != 1 else {})}


@dataclass(frozen=True)
class Source:
    """Where a private table's rows live (public configuration, never data).

    ``kind`` is csv | parquet | duckdb (files DuckDB reads), postgres (a table read by
    PostgreSQL through psycopg) or spark (a table or Parquet files read by Spark SQL through
    pyspark); ``docs/config.md`` has an example of each."""

    kind: str
    path: Path | None = None   # csv/duckdb file; parquet file, glob or directory (local)
    table: str | None = None   # duckdb, postgres and spark tables (as the engine names them)
    id_column: str | None = None  # privacy unit; None = one row
    max_rows_per_id: int = 1
    hash_key: str | None = field(default=None, repr=False)  # secret; never logged
    dialect: CsvDialect = field(default_factory=CsvDialect)
    data_version: str | None = None
    url: str | None = None          # postgres connection URL (no password) / spark master
    location: str | None = None     # spark: Parquet path, glob or URI
    hive_partitioning: bool = False  # parquet/spark: key=value directories are columns
    statement_timeout: float = DEFAULT_STATEMENT_TIMEOUT   # postgres, seconds
    passfile: Path | None = None    # postgres: a libpq password file (never the password)
    version_query: str | None = None  # postgres: the operator's table statistic
    conf: tuple = ()                # spark: ((key, value), ...) session settings
    # a people schema's view: the join path from the person to this table, read from the
    # hops' own sources (dpsql.measure.views); kind is then the hops' kind
    view: View[Source] | None = None

    @staticmethod
    def from_config(spec: Mapping, base: Path, where: str = "source", public: bool = False) -> Source:
        """The source ``spec`` declares; ``public``: it holds a public table, read once when
        the configuration is loaded (``dpsql.engine.public``), whose content is part of no
        release's identity except through ``labels_from`` (then through the domain), so a
        postgres one needs no ``data_version`` or ``version_query``."""
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where}: source must be a table", hint='e.g. source = { csv = "adult.csv" }')
        if "spark" in spec:
            kind = "spark"
            others = [k for k in ("csv", "duckdb", "postgres") if k in spec]
            if others:
                raise ConfigError(f"{where}: a spark source reads a table or parquet files, not {others[0]}",
                                  hint='source = { spark = "local[2]", table = "db.people" }')
        else:
            kinds = [k for k in FILE_KINDS + ("postgres",) if k in spec]
            if len(kinds) != 1:
                raise ConfigError(f"{where}: a source names exactly one of csv, parquet, duckdb, postgres, "
                                  f"spark; got {sorted(spec)}",
                                  hint='e.g. source = { csv = "adult.csv" } or '
                                       '{ postgres = "postgresql://dpsql@db:5432/hr", table = "public.people" }')
            kind = kinds[0]
        if "id_column" in spec or "max_rows" in spec:
            # the privacy unit is declared in one place, under the table (issue 36 item 4)
            ident = spec.get("id_column", "COLUMN")
            raise ConfigError(f"{where}: source.id_column and source.max_rows no longer declare the privacy unit",
                              hint=f"declare it once, under [tables.NAME] in dpsql.toml: privacy_unit = "
                                   f"{{ id = {json.dumps(ident)}, max_rows = {spec.get('max_rows', 1)} }}")
        config_schema.check(spec, "source", where, kind=kind, label=f"{where}: source ({kind})")
        raw = spec[kind]
        if not isinstance(raw, str) or not raw:
            what = {"postgres": "connection URL", "spark": "master URL"}.get(kind, "path")
            raise ConfigError(f"{where}: source.{kind} must be a non-empty {what}")
        kw: dict[str, Any] = {}
        if kind in FILE_KINDS:
            kw["path"] = _local_path(raw, base)
        table = spec.get("table")
        if "table" in spec and (not isinstance(table, str) or not table.strip()):
            raise ConfigError(f"{where}: source.table must be a table name", hint='e.g. table = "public.people"')
        if kind in ("duckdb", "postgres") and table is None:
            example = ('source = { duckdb = "data.duckdb", table = "people" }' if kind == "duckdb" else
                       'source = { postgres = "postgresql://dpsql@db/hr", table = "public.people" }')
            raise ConfigError(f"{where}: a {kind} source needs table = \"NAME\"", hint=example)
        if kind == "postgres":
            kw["url"] = _postgres_url(raw, where)
            kw.update(_postgres_options(spec, base, where))
        if kind == "spark":
            kw["url"] = _spark_master(raw, where)
            if ("table" in spec) == ("parquet" in spec):
                raise ConfigError(f"{where}: a spark source reads either table = \"db.t\" or "
                                  "parquet = \"path/or/glob\"",
                                  hint='source = { spark = "local[2]", parquet = "data/*.parquet" }')
            if "parquet" in spec:
                loc = spec["parquet"]
                if not isinstance(loc, str) or not loc:
                    raise ConfigError(f"{where}: source.parquet must be a non-empty path or URI")
                kw["location"] = loc if "://" in loc else str(_local_path(loc, base))
            conf = spec.get("conf", {})
            if not isinstance(conf, Mapping) or not all(
                    isinstance(k, str) and isinstance(v, (str, int, float, bool)) for k, v in conf.items()):
                raise ConfigError(f"{where}: source.conf must be a table of Spark settings",
                                  hint='conf = { "spark.driver.memory" = "4g" }')
            kw["conf"] = tuple(sorted((k, str(v).lower() if isinstance(v, bool) else str(v))
                                      for k, v in conf.items()))
        if "hive_partitioning" in spec:
            kw["hive_partitioning"] = spec["hive_partitioning"]
        version = spec.get("data_version")
        if version is not None and (not isinstance(version, (str, int)) or isinstance(version, bool)
                                    or str(version) == ""):
            raise ConfigError(f"{where}: source.data_version must be a non-empty string or integer")
        if kind == "postgres" and version is None and kw.get("version_query") is None and not public:
            raise ConfigError(f"{where}: a postgres source needs data_version or version_query, so that "
                              "a changed table makes earlier releases stale",
                              hint='data_version = "2024-06-30" (bump it when the table changes), or '
                                   'version_query = "SELECT max(updated_at) FROM public.people"')
        dialect = CsvDialect.from_spec(spec, where) if kind == "csv" else CsvDialect()
        return Source(kind=kind, table=table, dialect=dialect,
                      data_version=None if version is None else str(version), **kw)

    def with_unit(self, unit: Any, base: Path, where: str = "privacy_unit") -> Source:
        """This source read under the privacy unit declared for its table, the one place a
        unit is declared: ``privacy_unit = "row"`` (None: the same) or ``{ id = COLUMN,
        max_rows = K, hash_key_file = PATH }`` (docs/config.md, "Privacy unit"; the path is
        relative to ``base``).  Its keys' types were checked against dpsql.config_schema."""
        if unit is None or unit == "row":
            return self
        if not isinstance(unit, Mapping) or "id" not in unit or "max_rows" not in unit:
            raise ConfigError(f"{where}: privacy_unit is \"row\" or {{ id = COLUMN, max_rows = K, "
                              "hash_key_file = PATH }", hint='e.g. privacy_unit = { id = "person_id", max_rows = 3 }')
        ident, max_rows = unit["id"], unit["max_rows"]
        if not isinstance(ident, str) or not ident:
            raise ConfigError(f"{where}: privacy_unit.id must be a column name")
        if not isinstance(max_rows, int) or isinstance(max_rows, bool) or max_rows < 1:
            raise ConfigError(f"{where}: privacy_unit.max_rows must be an integer ≥ 1")
        if self.dialect.max_record_lines != 1:
            # fragments of a multi-line record carry no readable id and are not counted; the
            # person's rows are bounded by max_rows alone (docs/privacy.md §2)
            raise ConfigError(f"{where}: source.max_record_lines is for privacy_unit = \"row\"",
                              hint="with an id column each person's rows are bounded by max_rows; "
                                   "remove max_record_lines")
        key = None
        key_file = unit.get("hash_key_file")
        if key_file:
            kp = Path(key_file) if Path(key_file).is_absolute() else base / key_file
            if not kp.exists():
                raise ConfigError(f"{where}: hash key file not found: {kp}")
            key = kp.read_text().strip()
        return replace(self, id_column=ident, max_rows_per_id=max_rows, hash_key=key)

    # -- identity of the content -------------------------------------------------------------
    @property
    def unit_rows(self) -> int:
        """Rows one privacy unit may add or remove, the factor of every sensitivity: ``max_rows``
        with an id column, else the lines one record may span (``max_record_lines``; 1 for
        typed sources, whose rows are records)."""
        return self.max_rows_per_id if self.id_column is not None else self.dialect.max_record_lines

    @property
    def file(self) -> Path:
        """The local path of a csv, duckdb or parquet source (a Parquet file, glob or
        directory); ``from_config`` gives every such source one."""
        if self.path is None:
            raise ConfigError(f"a {self.kind} source has no local file",
                              hint='name it, e.g. source = { csv = "adult.csv" }')
        return self.path

    @property
    def table_name(self) -> str:
        """The table a duckdb, postgres or spark (table) source reads."""
        if self.table is None:
            raise ConfigError(f"a {self.kind} source here needs table = \"NAME\"")
        return self.table

    @property
    def address(self) -> str:
        """The connection URL of a postgres source, the master URL of a spark source."""
        if self.url is None:
            raise ConfigError(f"a {self.kind} source has no URL",
                              hint="source = { postgres = \"postgresql://...\" } or { spark = \"local[2]\" }")
        return self.url

    @property
    def is_glob(self) -> bool:
        """A Parquet source naming several files (a glob or a directory)."""
        return self.kind == "parquet" and self.path is not None and (
            any(c in str(self.path) for c in GLOB_CHARS) or self.path.is_dir())

    def describe(self) -> dict:
        """How the rows are read (public): part of a release's identity."""
        if self.view is not None:
            return {"kind": "view", "reader": READER_VERSION, **self.view.describe()}
        out: dict[str, Any] = {"kind": self.kind, "reader": READER_VERSION}
        if self.path is not None:
            out["path"] = str(self.path)
        if self.kind in ("duckdb", "postgres", "spark") and self.table is not None:
            out["table"] = self.table
        if self.kind == "postgres":
            out["url"] = self.url
        if self.location is not None:
            out["location"] = self.location
        if self.kind in ("parquet", "spark") and self.hive_partitioning:
            out["hive_partitioning"] = True
        if self.kind == "csv":
            out["dialect"] = self.dialect.describe()
        return out

    def fingerprint(self, store: Path | None = None) -> dict:
        """Which content would be read now: the declared ``data_version``, the file's size
        and SHA-256 (recomputed only when its size, mtime, inode or ctime change; across
        processes too with a ``store`` file, see ``file_fingerprint``), or for a Parquet glob
        or directory the listing of its files with sizes and mtimes.  PostgreSQL and Spark
        sources need their engine: ``Backend.fingerprint``."""
        if self.data_version is not None:
            return {"data_version": self.data_version}
        if self.view is not None:
            return self.view.fingerprint(store)
        if self.kind in ("postgres", "spark"):
            raise ConfigError(f"the content of a {self.kind} source is named by its backend",
                              hint="call Backend.fingerprint(table)")
        if self.is_glob:
            return listing_fingerprint(parquet_files(self))
        return file_fingerprint(self.file, store)


def _local_path(raw: str, base: Path) -> Path:
    path = Path(raw).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def _postgres_url(raw: str, where: str) -> str:
    """A ``postgresql://`` URL with no password in it (credentials come from the environment
    or a passfile, never from dpsql.toml)."""
    parts = urlsplit(raw)
    if parts.scheme not in ("postgresql", "postgres"):
        raise ConfigError(f"{where}: source.postgres must be a postgresql:// URL",
                          hint='e.g. postgres = "postgresql://dpsql@db.example:5432/hr"')
    query = parse_qs(parts.query)
    if parts.password is not None or "password" in query:
        raise ConfigError(f"{where}: the postgres URL holds a password; dpsql.toml never stores credentials",
                          hint="remove it from the URL and set PGPASSWORD in the environment, or use a "
                               "passfile (source.passfile or PGPASSFILE, format of ~/.pgpass)")
    return raw


def _postgres_options(spec: Mapping, base: Path, where: str) -> dict:
    out: dict[str, Any] = {}
    if "statement_timeout" in spec:
        t = spec["statement_timeout"]
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not 0 < t <= 86400:
            raise ConfigError(f"{where}: source.statement_timeout must be a number of seconds in (0, 86400]")
        out["statement_timeout"] = float(t)
    if "passfile" in spec:
        pf = spec["passfile"]
        if not isinstance(pf, str) or not pf:
            raise ConfigError(f"{where}: source.passfile must be a path to a libpq password file")
        out["passfile"] = _local_path(pf, base)
    if "version_query" in spec:
        q = spec["version_query"]
        if not isinstance(q, str) or not q.strip().lower().startswith(("select", "with")):
            raise ConfigError(f"{where}: source.version_query must be a SELECT statement",
                              hint='e.g. version_query = "SELECT max(updated_at) FROM public.people"')
        out["version_query"] = q
    return out


def _spark_master(raw: str, where: str) -> str:
    if not (raw.startswith(("local", "spark://", "sc://", "yarn", "k8s://", "mesos://"))):
        raise ConfigError(f"{where}: source.spark must be a Spark master URL",
                          hint='e.g. spark = "local[2]", "spark://host:7077" or "sc://host:15002" (Spark Connect)')
    return raw


def parquet_files(source: Source) -> list[Path]:
    """The files of a Parquet glob or directory (a directory means every ``*.parquet``
    below it), sorted.  Below the glob's fixed prefix, names starting with ``.`` or ``_``
    (``_SUCCESS``, ``.crc``, ``_temporary/``) are skipped, as Spark and Hive skip them, so
    DuckDB and Spark read the same files.  DuckDB is given exactly this list."""
    pattern = str(source.file / "**" / "*.parquet") if source.file.is_dir() else str(source.file)
    cut = min([pattern.index(c) for c in GLOB_CHARS if c in pattern] or [len(pattern)])
    base = pattern[:cut].rsplit("/", 1)[0]
    files = sorted(Path(p) for p in glob.glob(pattern, recursive=True, include_hidden=True)
                   if os.path.isfile(p) and not any(part.startswith((".", "_"))
                                                    for part in Path(p).relative_to(base).parts))
    if not files:
        raise ConfigError(f"source parquet {source.path} matches no files",
                          hint="fix the path or glob (relative paths are relative to the file that "
                               "declares them); to answer from releases after removing the data, "
                               "declare source.data_version")
    return files


def listing_fingerprint(files) -> dict:
    """``{"files", "listing"}``: how many files and a SHA-256 of their (path, size, mtime)
    list.  ``files`` are local paths, or ``(name, size, mtime)`` triples listed by an engine."""
    rows = []
    for f in files:
        if isinstance(f, tuple):
            rows.append([str(f[0]), int(f[1]), int(f[2])])
            continue
        try:
            st = os.stat(f)
        except OSError:
            raise ConfigError(f"source file vanished while listing: {f}",
                              hint="retry once the source is complete") from None
        rows.append([str(f), st.st_size, st.st_mtime_ns])
    rows.sort()
    digest = hashlib.sha256(json.dumps(rows, separators=(",", ":")).encode()).hexdigest()
    return {"files": len(rows), "listing": digest}


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


def file_fingerprint(path: Path, store: Path | None = None) -> dict:
    """``{"size", "sha256"}`` of a file, cached per (size, mtime, inode, ctime): in this
    process, and with ``store`` (a JSON file beside the ledger, ``Engine``) across processes.
    Without it every new process read the whole source to name its content before answering
    from a saved model (~30 ms for adult's 5 MB, seconds for a large file; issue 17).  The
    store trusts the same stat key the in-process cache does; it holds hashes of files the
    operator's ledger already names, and is written like the ledger (0600, atomic rename)."""
    path = Path(path)
    key = _stat_key(path)
    fp: dict | None
    with _HASH_LOCK:
        cached = _HASHES.get(str(path))
    if cached is not None and cached[0] == key:
        fp = dict(cached[1])
    else:
        fp = _stored_fingerprint(store, path, key)
        if fp is None:
            h = hashlib.sha256()
            with open(path, "rb") as fh:
                while chunk := fh.read(1 << 22):
                    h.update(chunk)
            fp = {"size": key[0], "sha256": h.hexdigest()}
            if _stat_key(path) != key:  # a file written while hashing is hashed again next time
                return dict(fp)
        with _HASH_LOCK:
            _HASHES[str(path)] = (key, dict(fp))
    if store is not None:
        _store_fingerprint(store, path, key, fp)
    return dict(fp)


def _read_store(store: Path) -> dict:
    try:
        data = json.loads(Path(store).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _stored_fingerprint(store: Path | None, path: Path, key: tuple) -> dict | None:
    if store is None:
        return None
    entry = _read_store(store).get(str(path))
    if not isinstance(entry, dict):
        return None
    try:
        if tuple(entry["stat"]) == tuple(key) and set(entry["fingerprint"]) == {"size", "sha256"}:
            return dict(entry["fingerprint"])
    except (TypeError, KeyError):
        pass
    return None


def _store_fingerprint(store: Path, path: Path, key: tuple, fp: dict) -> None:
    """Record ``fp`` under ``path`` unless the store already has it (best effort: a store
    that cannot be written only costs a later process a hash)."""
    data = _read_store(store)
    entry = {"stat": list(key), "fingerprint": dict(fp)}
    if data.get(str(path)) == entry:
        return
    data[str(path)] = entry
    try:
        atomic_write(store, lambda fh: json.dump(data, fh), text=True, prefix=".sources-")
    except OSError:
        pass


def remember_fingerprint(path: Path, stat_key: tuple, fp: dict) -> None:
    """Record a hash computed elsewhere (the CSV reader hashes what it reads)."""
    with _HASH_LOCK:
        _HASHES[str(path)] = (stat_key, dict(fp))


__all__ = ["Source", "CsvDialect", "READER_VERSION", "file_fingerprint", "listing_fingerprint",
           "parquet_files", "KINDS", "FILE_KINDS"]
