"""The Spark backend: marginals counted by Spark SQL where the data lake is.

``source = { spark = "local[2]" | "spark://host:7077" | "sc://host", table = "db.t" }`` or
``{ spark = …, parquet = "path/or/glob" }`` (``docs/config.md``).  The only module importing
pyspark, an optional dependency: ``pip install 'dpsql[spark]'`` (a JDK 17 or 21 is needed
for a local master).

* The counting statement is the portable AST (``dpsql.measure.counting``) rendered by
  sqlglot's spark dialect and run by ``spark.sql``; the bounding key is a named parameter
  (``:dpsql_key``), never part of the SQL text.
* No option is detected from the data: Parquet schemas are merged by name (a column
  missing from a file reads as NULL), partition values are always text
  (``partitionColumnTypeInference`` off), a directory without ``hive_partitioning`` is read
  file by file (``recursiveFileLookup``, no partition discovery), only ``*.parquet`` files
  are read, and ANSI mode is off so that no cast can raise (every cast is guarded anyway).
* The content read is named by the files Spark resolves (``DataFrame.inputFiles``) with
  their sizes and modification times (or the declared ``data_version``); it is checked
  before the count and again after it.
* Spark's own log is off by default (it prints failing rows' values and the bound key);
  the operator gets a failure's message, key scrubbed, from ``dpsql``'s error.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import os
import re
from urllib.parse import unquote, urlsplit


from dpsql.errors import ConfigError
from dpsql.measure.counting import SqlBackend, changed_error, engine_error
from dpsql.measure.source import GLOB_CHARS, Source, listing_fingerprint
from dpsql.sql.syntax import exp

try:
    from pyspark.sql import SparkSession
    HAVE_PYSPARK = True
except ImportError:  # pragma: no cover - the optional extra is missing
    HAVE_PYSPARK = False

#: Settings dpsql always makes (totality, no sniffing, no UI); the operator's ``conf``
#: cannot change them.
ENFORCED = {
    "spark.sql.ansi.enabled": "false",
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
    "spark.sql.parquet.mergeSchema": "true",
    "spark.sql.session.timeZone": "UTC",
}
#: Defaults the operator's ``conf`` may override.
DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.log.level": "OFF",
    "spark.sql.shuffle.partitions": "8",
    "spark.ui.showConsoleProgress": "false",
}


class SparkBackend(SqlBackend):
    """Counts marginals of ``spark`` sources (module doc).  The session starts on first
    use (a local JVM takes 10-15 s) and is stopped by :meth:`close` if dpsql started it."""

    dialect = "spark"
    engine = "Spark"

    def __init__(self, sources) -> None:
        super().__init__(sources)
        if not HAVE_PYSPARK:
            raise ConfigError("a spark source needs pyspark",
                              hint="pip install 'dpsql[spark]' (and a JDK 17 or 21 for a local master)")
        for name, source in self._sources.items():
            if source.kind != "spark":
                raise ConfigError(f"table {name!r}: a {source.kind} source is not read by Spark")
        masters = {s.address for s in self._sources.values()}
        confs = {s.conf for s in self._sources.values()}
        if len(masters) > 1 or len(confs) > 1:
            raise ConfigError("every spark source of one configuration must name the same master and conf",
                              hint=f"masters: {', '.join(sorted(masters))}")
        self._master = masters.pop() if masters else None
        self._conf = dict(confs.pop()) if confs else {}
        for key in self._conf:
            if key in ENFORCED:
                raise ConfigError(f"source.conf may not set {key}: dpsql sets it ({ENFORCED[key]}) so that "
                                  "every row is read alike", hint=f"remove {key} from conf")
        self._spark: SparkSession | None = None
        self._owned = False
        self._views: dict[str, str] = {}

    # -- the session ---------------------------------------------------------------------------
    def _master_url(self) -> str:
        if self._master is None:
            raise ConfigError("this Spark backend reads no spark source, so it has no master URL")
        return self._master

    def session(self) -> SparkSession:
        if self._spark is None:
            master = self._master_url()
            remote = master.startswith("sc://")
            existing = None if remote else SparkSession.getActiveSession()
            builder = SparkSession.builder.appName("dpsql")
            builder = builder.remote(master) if remote else builder.master(master)
            for key, value in {**({} if remote else DEFAULTS), **self._conf, **ENFORCED}.items():
                builder = builder.config(key, value)
            try:
                spark = builder.getOrCreate()
                for key, value in ENFORCED.items():   # also on a session that already existed
                    spark.conf.set(key, value)
            except Exception as exc:  # noqa: BLE001 - py4j, PySpark and JVM start errors alike
                raise engine_error("Spark", "starting the Spark session", exc,
                                   hint="check source.spark (the master URL), that a JDK 17 or 21 is "
                                        "installed (JAVA_HOME) and source.conf") from None
            self._spark, self._owned = spark, existing is None and not remote
        return self._spark

    def close(self) -> None:
        if self._spark is not None:
            for view in self._views.values():
                with contextlib.suppress(Exception):
                    self._spark.catalog.dropTempView(view)
            if self._owned:
                self._spark.stop()
            self._spark = None

    # -- sources -------------------------------------------------------------------------------
    def _frame(self, source: Source):
        """The DataFrame of a source, its files resolved now (options in the module doc)."""
        spark = self.session()
        try:
            if source.table is not None:
                name = exp.to_table(source.table, dialect="spark").sql("spark")
                spark.catalog.refreshTable(name)   # see files written since the last read
                return spark.table(name), exp.to_table(source.table, dialect="spark")
            loc = source.location
            if loc is None:
                raise ConfigError("a spark source reads a table or parquet files; this one names neither",
                                  hint='source = { spark = "local[2]", table = "db.people" }')
            reader = spark.read.option("pathGlobFilter", "*.parquet")
            if source.hive_partitioning:
                reader = reader.option("basePath", _base_path(loc))
            else:
                reader = reader.option("recursiveFileLookup", "true")
            frame = reader.parquet(loc)
            view = self._views.setdefault(loc, "dpsql_src_" + hashlib.sha256(loc.encode()).hexdigest()[:16])
            frame.createOrReplaceTempView(view)
            return frame, exp.to_table(view)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise engine_error("Spark", "resolving the source", exc,
                               hint="check source.table / source.parquet; the operator sees Spark's message "
                                    "in operator_detail") from None

    def _describe(self, source: Source) -> dict[str, str]:
        frame, _ = self._frame(source)
        return {f.name: f.dataType.simpleString() for f in frame.schema.fields}

    def _files(self, frame) -> list[tuple[str, int, int]]:
        """(uri, size, mtime) of every file the DataFrame reads."""
        try:
            uris = sorted(frame.inputFiles())
        except Exception as exc:  # noqa: BLE001
            raise engine_error("Spark", "listing the source files", exc) from None
        if not uris:
            raise ConfigError("Spark lists no files for this source, so dpsql cannot tell when it changes",
                              hint="declare source.data_version (and bump it when the data changes)")
        out, remote = [], []
        for uri in uris:
            parts = urlsplit(uri)
            if parts.scheme in ("", "file"):
                try:
                    st = os.stat(unquote(parts.path))
                except OSError:
                    raise changed_error("(spark source)", while_reading=True) from None
                out.append((uri, st.st_size, st.st_mtime_ns))
            else:
                remote.append(uri)
        if remote:
            out.extend(self._remote_stat(remote))
        return out

    def _remote_stat(self, uris: list[str]) -> list[tuple[str, int, int]]:
        spark = self.session()
        jvm = (getattr(getattr(spark, "sparkContext", None), "_jvm", None)
               if not self._master_url().startswith("sc://") else None)
        if jvm is None:
            raise ConfigError("under Spark Connect dpsql cannot read the sizes and times of remote files",
                              hint="declare source.data_version (and bump it when the data changes)")
        conf = spark.sparkContext._jsc.hadoopConfiguration()
        out = []
        try:
            for uri in uris:
                path = jvm.org.apache.hadoop.fs.Path(uri)
                st = path.getFileSystem(conf).getFileStatus(path)
                out.append((uri, int(st.getLen()), int(st.getModificationTime()) * 1_000_000))
        except Exception as exc:  # noqa: BLE001
            raise engine_error("Spark", "listing the source files", exc) from None
        return out

    def _fingerprint(self, source: Source) -> dict:
        frame, _ = self._frame(source)
        return listing_fingerprint(self._files(frame))

    @contextlib.contextmanager
    def _read(self, table: str, source: Source, expect: dict | None):
        frame, scan = self._frame(source)
        files = self._files(frame) if source.data_version is None else None
        if files is not None and expect is not None and listing_fingerprint(files) != expect:
            raise changed_error(table, while_reading=False)
        yield _SparkRead(self.session(), scan, source.hash_key)
        if files is not None and self._files(frame) != files:
            raise changed_error(table, while_reading=True)


    # -- public tables (issue 31) ---------------------------------------------------------------
    def read_public(self, table: str) -> tuple[list[tuple[str, str]], list[tuple]]:
        """Columns (name, DuckDB type) and every row of the public table ``table`` (its
        content is public metadata, read in the clear once when the configuration is loaded;
        docs/privacy.md §7.4).  Types come from the DataFrame's schema
        (:func:`public_column`), never from the rows."""
        frame, _ = self._frame(self._source(table))
        columns, items, stamps = [], [], []
        for i, f in enumerate(frame.schema.fields):
            duck, item = public_column(f.name, f.dataType.simpleString())
            columns.append((f.name, duck))
            items.append(item)
            if item.startswith("CAST") and duck == "TIMESTAMP":
                stamps.append(i)
        try:
            rows = [tuple(r) for r in frame.selectExpr(*items).collect()]
        except Exception as exc:  # noqa: BLE001 - py4j, PySpark and Connect errors alike
            raise engine_error("Spark", f"reading public table {table!r}", exc) from None
        if stamps:       # a session-zone (UTC) timestamp, read as its text: not Python's local time
            rows = [tuple(_timestamp(table, v) if i in stamps else v for i, v in enumerate(r)) for r in rows]
        return columns, rows


_PUBLIC_TYPES = {"tinyint": "SMALLINT", "smallint": "SMALLINT", "int": "INTEGER", "bigint": "BIGINT",
                 "float": "FLOAT", "double": "DOUBLE", "boolean": "BOOLEAN", "string": "VARCHAR", "date": "DATE",
                 "timestamp_ntz": "TIMESTAMP"}


def public_column(name: str, spark_type: str) -> tuple[str, str]:
    """(DuckDB type, select expression) of a public table's column of Spark type
    ``spark_type`` (``simpleString``).  A TIMESTAMP (an instant) is read as its text in the
    session zone, UTC (``ENFORCED``): PySpark would convert it to the Python process's local
    time; a type DuckDB has no counterpart for (arrays, maps, structs, …) is read as Spark's
    text of it."""
    col = "`" + name.replace("`", "``") + "`"
    if spark_type in _PUBLIC_TYPES:
        return _PUBLIC_TYPES[spark_type], col
    if re.fullmatch(r"(var)?char\(\d+\)", spark_type):
        return "VARCHAR", col
    m = re.fullmatch(r"decimal\((\d+),(\d+)\)", spark_type)
    if m:
        return f"DECIMAL({m.group(1)},{m.group(2)})", col
    if spark_type == "timestamp":
        return "TIMESTAMP", f"CAST({col} AS STRING) AS {col}"
    return "VARCHAR", f"CAST({col} AS STRING) AS {col}"


def _timestamp(table: str, text: str | None) -> datetime.datetime | None:
    if text is None:
        return None
    try:
        return datetime.datetime.fromisoformat(text)
    except ValueError:       # public data: the value may be shown
        raise ConfigError(f"public table {table!r}: timestamp {text[:40]!r} is outside years 1..9999",
                          hint="filter or cast such timestamps in a view of the table") from None


def _base_path(location: str) -> str:
    """The directory above the first glob character (where partition directories start)."""
    cut = min([location.index(c) for c in GLOB_CHARS if c in location] or [len(location)])
    head = location[:cut]
    return head if cut == len(location) else head.rsplit("/", 1)[0] or "/"


class _SparkRead:
    def __init__(self, spark, scan: exp.Expr, secret: str | None) -> None:
        self.spark, self.scan, self.secret = spark, scan, secret

    def run(self, query: exp.Expr, key: str | None = None, what: str = "the measurement query") -> list[tuple]:
        try:
            frame = self.spark.sql(query.sql("spark"), args={"dpsql_key": key} if key is not None else None)
            return [tuple(r) for r in frame.collect()]
        except Exception as exc:  # noqa: BLE001 - py4j, PySpark and Connect errors alike
            raise engine_error("Spark", what, exc, self.secret) from None


__all__ = ["SparkBackend", "public_column"]
