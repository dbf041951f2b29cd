"""The DuckDB backend (the embedded default; the only module importing duckdb).

DuckDB reads CSV files (through the total reader, ``dpsql.measure.reader``), Parquet files
(one file, a glob or a directory, optionally hive-partitioned) and tables of DuckDB
database files.  Typed sources (Parquet, DuckDB) are counted like every other engine's
(``dpsql.measure.counting.SqlBackend``: one portable GROUPING SETS statement per round,
in DuckDB's dialect).  CSV sources are framed and encoded to cell indices once per file
content into a temp table, and every round counts that table (1–3 s per round at 10M rows
instead of 6–8 s when framing and binning are repeated; ``scale_out.md`` §1).

PostgreSQL (``dpsql.measure.postgres``) and Spark (``dpsql.measure.spark``) implement the
same protocol; ``dpsql.measure.router`` picks the backend of each table.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from collections.abc import Mapping, Sequence

import duckdb
import numpy as np

from dpsql.domain import TableSchema
from dpsql.errors import ConfigError, OperationalError
from dpsql.measure import reader, sqlgen
from dpsql.measure.scratch import Scratch, sweep, sweep_legacy, user_root
from dpsql.measure.counting import (Backend, ColumnCheck, DataCheck, SqlBackend, changed_error, check_cliques,
                                    consistent_files, decode, decode_offsets, engine_error, offset_attributes,
                                    offset_columns, project_counts, reduce_cliques, spread)
from dpsql.measure.source import CsvDialect, Source, parquet_files, remember_fingerprint
from dpsql.sql.syntax import exp

Clique = tuple[str, ...]


class DuckDBBackend(SqlBackend):
    """Counts marginals in DuckDB (module doc).  Rows are read by the total reader; the
    encoded table of a CSV source is kept per table with the fingerprint of the content it
    was read from, and rebuilt when the source changes (``fingerprint``)."""

    dialect = "duckdb"
    engine = "DuckDB"

    def constant_error(self, sql: str, cast_to: str | None = None) -> str | None:
        return constant_error(sql, cast_to)

    def __init__(self, sources: Mapping[str, Source], *, threads: int | None = None,
                 memory_limit: str | None = None) -> None:
        self._framed: reader.Framed | None = None   # the framed copy of a CSV being read (_frame)
        super().__init__(sources)
        for name, source in self._sources.items():
            if source.kind not in ("csv", "parquet", "duckdb"):
                raise ConfigError(f"table {name!r}: a {source.kind} source is not read by DuckDB",
                                  hint="dpsql.measure.router.open_backend picks the backend of each table")
        self._con = duckdb.connect(":memory:")
        if threads:
            self._con.execute(f"SET threads = {int(threads)}")
        if memory_limit:
            self._con.execute("SET memory_limit = ?", [memory_limit])
        # per table: the temp table, the content and the schema it encodes (a direct part's
        # merged fine columns are another schema of the same table: engine/direct.py)
        self._encoded: dict[str, tuple[str, dict, TableSchema]] = {}
        self._sql_cache: dict[tuple, str] = {}
        # copies of private rows (the framed records, DuckDB's spills) only in a private
        # directory removed on exit; a start removes what crashed processes left (issue 34)
        self._scratch = Scratch()
        self._scratch_set: Path | None = None
        try:
            sweep(user_root())
        except OperationalError:
            pass      # an unsafe directory is reported when something is to be written there
        sweep_legacy()

    # -- sources ---------------------------------------------------------------------------
    def fingerprint(self, table: str) -> dict:
        """Which content of ``table``'s source would be read now (``Source.fingerprint``)."""
        return self._source(table).fingerprint()

    def _fingerprint(self, source: Source) -> dict:
        return source.fingerprint()

    def _tmp(self) -> Path:
        path = self._scratch.path
        if self._scratch_set != path:
            # DuckDB spills large temp tables (the encoded cells) to its temp_directory,
            # by default ./.tmp under whatever the working directory is
            self._run("SET temp_directory = ?", [str(path / "duckdb")], what="setting up the scratch directory")
            self._scratch_set = path
        return path

    def _typed_scan(self, source: Source, files: Sequence[Path] | None = None) -> exp.Expr:
        """The FROM expression of a typed source.  Every read_parquet option is given (none
        is detected from the files): ``union_by_name`` (a column missing from a file reads
        as NULL), ``hive_partitioning`` as declared, partition values always text."""
        if source.kind == "parquet":
            if source.is_glob:
                files = files if files is not None else parquet_files(source)
                target: exp.Expr = exp.Array(expressions=[exp.Literal.string(str(f)) for f in files])
            else:
                target = exp.Literal.string(str(source.file))

            def opt(name, value):
                return exp.EQ(this=exp.column(name), expression=value)
            return exp.func("read_parquet", target,
                            opt("hive_partitioning", exp.Boolean(this=source.hive_partitioning)),
                            opt("hive_types_autocast", exp.false()),
                            opt("union_by_name", exp.Boolean(this=source.is_glob)),
                            opt("filename", exp.false()), opt("file_row_number", exp.false()))
        alias = "src_" + hashlib.sha256(str(source.path).encode()).hexdigest()[:12]
        self._run(f"ATTACH IF NOT EXISTS '{_sql_text(str(source.path))}' AS {alias} (READ_ONLY)", (),
                  what="attaching the DuckDB database")
        return exp.table_(exp.to_identifier(source.table, quoted=True), db=alias)

    def _describe(self, source: Source) -> dict[str, str]:
        """Column names and SQL types, from metadata only (the CSV header, the Parquet
        footers, the DuckDB catalog); CSV fields are all VARCHAR."""
        if source.kind == "parquet" and source.is_glob:
            parquet_files(source)  # a glob that matches nothing is a ConfigError
        elif not source.file.exists():
            raise ConfigError(f"source file not found: {source.path}",
                              hint="fix the path in the configuration (relative paths are relative to the config file)")
        if source.kind == "csv":
            return {name: "VARCHAR" for name in read_header(source)}
        scan = self._typed_scan(source)
        rows = self._run("DESCRIBE " + exp.select(exp.Star()).from_(scan).sql(self.dialect), (),
                         what="reading the source schema").fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    @contextlib.contextmanager
    def _read(self, table: str, source: Source, expect: dict | None):
        if source.kind == "csv":
            with self._read_csv(table, source, expect) as rd:
                yield rd
            return
        files = parquet_files(source) if source.kind == "parquet" and source.is_glob else None
        with consistent_files(table, source.fingerprint, expect):
            yield _DuckRead(self, self._typed_scan(source, files))

    @contextlib.contextmanager
    def _read_csv(self, table: str, source: Source, expect: dict | None):
        """A CSV table read as a hop of a person view (a CSV table alone is encoded once,
        ``_encode``): the file framed into a private copy by the total reader, and each
        well-formed record's fields as text, unquoted, its declared null strings NULL — what
        the CSV path hands ``convert_text``, as the VARCHAR columns a typed source would
        have (the view's cells are then read by ``typed_column``, which converts VARCHAR
        text alike).  A malformed record has no key, so it reaches no person and is not
        counted, as a row without an id is not under ``max_rows``.  The framed copy is
        removed when the read ends."""
        with consistent_files(table, source.fingerprint, expect):
            framed = reader.normalise_csv(source, self._tmp())
            try:
                remember_fingerprint(source.file, framed.stat_key, framed.fingerprint)
                if source.data_version is None and framed.fingerprint != source.fingerprint():
                    raise changed_error(table, while_reading=True)
                d = source.dialect
                names = list(dict.fromkeys(framed.header))
                rel = reader.csv_fields(reader.line_scan(framed.path, d), d, framed.header, names)
                cols = []
                for name in names:
                    raw = exp.column(name, quoted=True)
                    text = reader.unquote_sql(raw, d)
                    if d.null:
                        text = exp.Case().when(exp.In(this=raw.copy(), expressions=[exp.Literal.string(v)
                                                                                     for v in d.null]),
                                               exp.Null()).else_(text)
                    cols.append(exp.alias_(text, name, quoted=True))
                scan = exp.select(*cols).from_(exp.alias_(exp.Subquery(this=rel), "__csv")).where(
                    exp.column("__ok"))
                yield _DuckRead(self, scan)
            finally:
                try:
                    os.unlink(framed.path)
                except OSError:
                    pass

    # -- CSV: frame and encode once ---------------------------------------------------------
    def _frame(self, schema: TableSchema):
        """The data-touching half of reading a CSV source: the schema check and the framing
        pass.  Returns (the framed file, the fingerprint of the content read)."""
        source = self._source(schema.name)
        self.check_schema(schema)
        framed = reader.normalise_csv(source, self._tmp())
        self._framed = framed
        remember_fingerprint(source.file, framed.stat_key, framed.fingerprint)
        fp = framed.fingerprint if source.data_version is None else {"data_version": source.data_version}
        return framed, fp

    def _csv_cells(self, schema: TableSchema, framed, bounded: bool = True, offsets: Sequence[str] = ()):
        """(SELECT of every record's cells, bounded per privacy unit when ``bounded``;
        {attribute: Converted}; raw value expressions; the fields relation) over the framed
        file.  Depends on public metadata only (schema, source, header, framed path)."""
        source = self._source(schema.name)
        names = [a.name for a in schema.attributes]
        d = source.dialect
        wanted = names + ([source.id_column] if source.id_column and source.id_column not in names else [])
        rel = reader.csv_fields(reader.line_scan(framed.path, d), d, framed.header, wanted)
        ok = exp.column("__ok")
        conv = {a.name: reader.convert_text(a, exp.column(a.name, quoted=True), ok, d, str(i), self.dialect)
                for i, a in enumerate(schema.attributes)}
        # a malformed record is shown whole (its fields are not defined)
        raws = {a.name: exp.Case().when(ok.copy(), exp.column(a.name, quoted=True)).else_(exp.column("line"))
                for a in schema.attributes}
        id_expr = None
        if source.id_column:
            raw_id = exp.column(source.id_column, quoted=True)
            has_id = exp.and_(ok.copy(), exp.Not(this=exp.In(this=raw_id.copy(),
                                                               expressions=[exp.Literal.string(v) for v in d.null]))
                              if d.null else exp.true())
            id_expr = exp.Case().when(has_id, raw_id)
        cells = sqlgen.cells_select(schema, rel, conv, id_expr, offsets)
        if source.id_column and bounded:
            cells = sqlgen.bounded(cells, len(schema.attributes), source.max_rows_per_id, self.dialect,
                                   offset_columns(schema, offsets))
        return cells, conv, raws, rel

    def _encode(self, schema: TableSchema, expect: dict | None = None) -> str:
        """Create (once per source content) the temp table of cell indices for ``schema``."""
        current = expect if expect is not None else self.fingerprint(schema.name)
        cached = self._encoded.get(schema.name)
        if cached is not None and cached[1] == current and cached[2] == schema:
            return cached[0]
        source = self._source(schema.name)
        if not _framed_csv(source):
            raise ConfigError("only CSV sources are encoded once")
        name = "cells_" + hashlib.sha256(schema.name.encode()).hexdigest()[:16]
        try:
            framed, fp = self._frame(schema)
            # the SQL depends only on public metadata: build it once (sqlglot generation was
            # 75% of a small measurement, issue 15)
            key = (schema, source, framed.header, str(framed.path))
            sql = self._sql_cache.get(key)
            if sql is None:
                cells, *_ = self._csv_cells(schema, framed)
                select = exp.select(*[
                    exp.alias_(exp.cast(exp.column(sqlgen.cell_column(i)),
                                        exp.DataType.build(sqlgen.cell_type(a.size), dialect="duckdb")),
                               sqlgen.cell_column(i)) for i, a in enumerate(schema.attributes)]).from_(
                    exp.alias_(exp.Subquery(this=cells), "__enc"))
                create = exp.Create(this=exp.to_table(name), kind="TABLE", expression=select, replace=True,
                                    properties=exp.Properties(expressions=[exp.TemporaryProperty()]))
                sql = self._sql_cache[key] = create.sql(self.dialect)
            self._run(sql, [source.hash_key or ""] if source.id_column else [],
                      what="encoding the rows", secret=source.hash_key)
        finally:
            self._drop_framed()
        if fp != current:
            self._encoded.pop(schema.name, None)
            raise changed_error(schema.name, while_reading=True)
        self._encoded[schema.name] = (name, fp, schema)
        return name

    def _drop_framed(self) -> None:
        framed = self._framed
        if framed is not None:
            try:
                os.unlink(framed.path)
            except OSError:
                pass
            self._framed = None

    def _run(self, sql: str, params=(), what: str = "the measurement query", secret: str | None = None):
        try:
            return self._con.execute(sql, list(params))
        except duckdb.Error as exc:
            # DuckDB messages can echo cell values ("Could not convert string 'X'…"); the
            # analyst only learns the class of failure (docs/privacy.md, "Errors").  With the
            # total reader this is an engine fault, never a property of one row.
            raise engine_error("DuckDB", what, exc, secret) from None

    # -- counting --------------------------------------------------------------------------
    def count_marginals(self, schema: TableSchema, cliques: Sequence[Clique],
                        expect: dict | None = None) -> dict[Clique, np.ndarray]:
        """Exact counts; with ``expect`` (a :meth:`fingerprint`), only from that content."""
        if not _framed_csv(self._source(schema.name)):
            return super().count_marginals(schema, cliques, expect)
        check_cliques(schema, cliques)
        if not cliques:
            return {}
        domain = schema.domain
        with self._lock:
            table = self._encode(schema, expect)
            maximal = reduce_cliques(cliques)
            col_of = {a: sqlgen.cell_column(i) for i, a in enumerate(domain.attributes)}
            used = sorted({a for c in maximal for a in c}, key=domain.attributes.index)
            columns = [col_of[a] for a in used]
            query = sqlgen.grouping_sets_select(table, columns, [[col_of[a] for a in c] for c in maximal])
            rows = self._run(query.sql(self.dialect)).fetchnumpy()
        return spread(_decode_numpy(rows, used, columns, maximal, domain), cliques, maximal)

    def sum_offsets(self, schema: TableSchema, requests: Sequence[tuple[Clique, str]],
                    expect: dict | None = None) -> dict[tuple[Clique, str], np.ndarray]:
        """``SqlBackend.sum_offsets``; a CSV source is framed again and read through the
        total reader with its values (the encoded table holds cells only)."""
        source = self._source(schema.name)
        if not _framed_csv(source):
            return super().sum_offsets(schema, requests, expect)
        check_cliques(schema, [c for c, _ in requests])
        if not requests:
            return {}
        current = expect if expect is not None else self.fingerprint(schema.name)
        with self._lock:
            try:
                framed, fp = self._frame(schema)
                cells, *_ = self._csv_cells(schema, framed, offsets=offset_attributes(schema, requests))
                query, used, maximal, summed = self.offsets_query(schema, requests, cells)
                rows = self._run(query.sql(self.dialect), [source.hash_key or ""] if source.id_column else [],
                                 what="the measurement query", secret=source.hash_key).fetchall()
            finally:
                self._drop_framed()
        if fp != current:
            raise changed_error(schema.name, while_reading=True)
        return decode_offsets(rows, used, maximal, summed, requests, schema.domain)

    # -- operator data check (local only: never reachable by analysts) ----------------------
    def data_check(self, schema: TableSchema, examples: int = 5) -> DataCheck:
        """Per column, how many values landed where (``reader.STATUSES``), with a few example
        values of each problem.  Reads raw rows: an operator tool (``dpsql check``)."""
        source = self._source(schema.name)
        if not _framed_csv(source):
            return super().data_check(schema, examples)
        with self._lock:
            try:
                framed, _ = self._frame(schema)
                _, conv, raws, rel = self._csv_cells(schema, framed, bounded=False)
                base = "__check_" + hashlib.sha256(schema.name.encode()).hexdigest()[:12]
                cols = [exp.alias_(conv[a.name].status, f"s{i}") for i, a in enumerate(schema.attributes)]
                cols += [exp.alias_(raws[a.name], f"v{i}") for i, a in enumerate(schema.attributes)]
                select = exp.select(*cols).from_(sqlgen.layered(rel, conv))
                create = exp.Create(this=exp.to_table(base), kind="TABLE", expression=select, replace=True,
                                    properties=exp.Properties(expressions=[exp.TemporaryProperty()]))
                self._run(create.sql(self.dialect), (), what="checking the rows")
                open_quotes = None
                if source.dialect.quote:
                    # a quoted field holding line breaks leaves lines with an odd number of
                    # quotes: each is a record, so the person is several units (docs/privacy.md §2)
                    q = _sql_text(source.dialect.quote)
                    lines = exp.select("line").from_(exp.alias_(exp.Subquery(this=rel), "__r")).sql(self.dialect)
                    open_quotes = int(self._run(
                        f"SELECT count(*) FROM ({lines}) "
                        f"WHERE (length(line) - length(replace(line, '{q}', ''))) % 2 = 1",
                        (), what="checking the rows").fetchone()[0])
            finally:
                self._drop_framed()
            total = int(self._run(f"SELECT count(*) FROM {base}").fetchone()[0])
            out = []
            for i, a in enumerate(schema.attributes):
                counts = dict(self._run(f"SELECT s{i}, count(*) FROM {base} GROUP BY 1").fetchall())
                problems = [s for s in reader.PROBLEMS if counts.get(s)]
                ex = {}
                for st in problems:
                    rows = self._run(f"SELECT v{i}, count(*) AS n FROM {base} WHERE s{i} = ? "
                                     f"GROUP BY 1 ORDER BY n DESC, 1 LIMIT {int(examples)}", [st]).fetchall()
                    ex[st] = [(v, int(n)) for v, n in rows]
                out.append(ColumnCheck(a.name, {k: int(v) for k, v in counts.items()}, ex))
            self._run(f"DROP TABLE {base}")
            dropped = None
            if source.id_column:
                try:
                    framed, _ = self._frame(schema)
                    cells, *_ = self._csv_cells(schema, framed, bounded=True)
                    query = exp.select(exp.Count(this=exp.Star())).from_(exp.alias_(exp.Subquery(this=cells), "__a"))
                    kept = int(self._run(query.sql(self.dialect), [source.hash_key or ""], what="checking the rows",
                                         secret=source.hash_key).fetchone()[0])
                finally:
                    self._drop_framed()
                dropped = total - kept
        return DataCheck(schema.name, total, out, dropped, open_quotes)

    # -- the exact oracle (dpsql.measure.exact: NON-private, public data only) --------------
    def create_cells_table(self, name: str, schema: TableSchema, select: Sequence[str]) -> None:
        """CREATE TABLE ``name`` AS SELECT ``select`` over the cell indices of ``schema``'s
        rows (columns ``sqlgen.cell_column(i)``), read like a measurement reads them."""
        source = self._source(schema.name)
        cols = ", ".join(select)
        if _framed_csv(source):
            self._con.execute(f'CREATE TABLE "{name}" AS SELECT {cols} FROM {self._encode(schema)}')
            return
        columns = self.check_schema(schema)
        with self._read_source(schema.name, source, None) as rd:
            query = self.cells_query(schema, columns, rd.scan).sql(self.dialect)
            self._con.execute(f'CREATE TABLE "{name}" AS SELECT {cols} FROM ({query}) AS __cells',
                              [source.hash_key or ""] if source.id_column else [])

    def create_rows_table(self, name: str, columns: Sequence[tuple[str, str]], rows: Sequence[tuple]) -> None:
        """CREATE TABLE ``name`` (column, PostgreSQL type …) holding ``rows``: a public table
        beside the exact oracle's cells tables, so its joins run as DuckDB runs them."""
        ident = '"' + name.replace('"', '""') + '"'
        cols = ", ".join('"' + c.replace('"', '""') + f'" {t}' for c, t in columns)
        self._con.execute(f"CREATE TABLE {ident} ({cols})")
        if rows:
            marks = ", ".join("?" for _ in columns)
            self._con.executemany(f"INSERT INTO {ident} VALUES ({marks})", [list(r) for r in rows])

    def fetch(self, sql: str, params: Sequence = ()) -> list[tuple]:
        """Every row of ``sql`` on this backend's connection: the exact oracle's queries over
        the tables ``create_cells_table`` made (the engine counts through count_marginals)."""
        return self._con.execute(sql, list(params)).fetchall()

    def close(self) -> None:
        self._con.close()
        self._scratch.close()


def constant_error(sql: str, cast_to: str | None = None) -> str | None:
    """DuckDB's error evaluating the constant expression ``sql`` alone, and converted to type
    ``cast_to`` if given, in an empty in-memory database (no table is read: public), or None
    (a per-person flag's constants, ``flag_types.flag_type_problem``)."""
    con = duckdb.connect()
    try:
        con.execute(f"SELECT {sql}").fetchall()
        if cast_to is not None:
            con.execute(f"SELECT CAST({sql} AS {cast_to})").fetchall()
    except duckdb.Error as exc:
        return str(exc).splitlines()[0]
    finally:
        con.close()
    return None


def _framed_csv(source: Source) -> bool:
    """A CSV table read on its own (framed and encoded once); a person view whose first
    table is a CSV file has kind csv too, but is read through its hops (``_read_csv``)."""
    return source.kind == "csv" and source.view is None


class _DuckRead:
    def __init__(self, backend: DuckDBBackend, scan: exp.Expr) -> None:
        self.backend, self.scan = backend, scan

    def run(self, query: exp.Expr, key: str | None = None, what: str = "the measurement query") -> list[tuple]:
        return self.backend._run(query.sql("duckdb"), [key] if key is not None else [], what=what,
                                 secret=key).fetchall()


def read_header(source: Source) -> tuple[str, ...]:
    """The field names of a CSV source from its first record only (metadata)."""
    d = source.dialect
    if not d.header:
        return d.field_names
    limit = d.max_record_bytes
    with open(source.file, "rb") as fh:
        head = fh.read(limit + 2)
    if not head:
        raise ConfigError(f"{source.path}: the file is empty but the source declares a header",
                          hint="write the header line, or set header = false with columns = [...]")
    cut = len(head)
    for sep in (b"\n", b"\r"):
        i = head.find(sep)
        if 0 <= i < cut:
            cut = i
    line = head[:cut]
    if len(line) > limit:
        raise ConfigError(f"{source.path}: the header line is longer than max_record_bytes")
    text = line.decode(d.encoding, errors="replace").replace("\x00", "\ufffd")
    return reader.parse_header(text, d, source)


def _sql_text(s: str) -> str:
    return s.replace("'", "''")


def _decode_numpy(rows: Mapping[str, np.ndarray], used: Sequence[str], columns: Sequence[str],
                  maximal: Sequence[Clique], domain) -> dict[Clique, np.ndarray]:
    """``counting.decode`` for DuckDB's ``fetchnumpy`` (masked arrays mark NULLs)."""
    n = np.asarray(rows["n"], dtype=np.int64)
    present, values = {}, {}
    for a, c in zip(used, columns):
        col = rows[c]
        mask = np.ma.getmaskarray(col) if np.ma.isMaskedArray(col) else np.zeros(len(n), bool)
        present[a] = ~mask
        values[a] = np.ma.getdata(col).astype(np.int64, copy=False)
    return decode(present, values, n, used, maximal, domain)


def describe_source(path: Path) -> list[tuple[str, str]]:
    """Column names and coarse types (integer, numeric, date, timestamp, time or text) of a data file, for
    ``dpsql init``.  The operator runs this on their own data; only the schema is printed
    and no domain is inferred (domains must come from public knowledge)."""
    path = Path(path)
    if not path.exists():
        raise ConfigError(f"file not found: {path}")
    reader = "read_parquet" if path.suffix.lower() == ".parquet" else "read_csv"
    con = duckdb.connect(":memory:")
    try:
        rows = con.execute(f"DESCRIBE SELECT * FROM {reader}(?)", [str(path)]).fetchall()
    except duckdb.Error:
        raise ConfigError(f"could not read the schema of {path}",
                          hint="dpsql init reads CSV files with a header row, or Parquet") from None
    finally:
        con.close()
    return [(str(name), _coarse_type(dtype)) for name, dtype, *_ in rows]


def _coarse_type(dtype) -> str:
    t = str(dtype).upper()
    if t == "DATE":
        return "date"
    if t.startswith("TIMESTAMP"):           # TIMESTAMP, _S, _MS, _NS, WITH TIME ZONE
        return "timestamp"
    if t == "TIME":                         # a time of day (TIME WITH TIME ZONE stays text)
        return "time"
    return ("integer" if "INT" in t and t != "INTERVAL" else
            "numeric" if any(k in t for k in ("DOUBLE", "FLOAT", "DECIMAL", "REAL")) else "text")


def describe_duckdb_table(path: Path, table: str | None) -> tuple[str, list[tuple[str, str]]]:
    """The table ``table`` (None: the file's only table) of a DuckDB database file, with its
    column names and coarse types, for ``dpsql init``: catalog metadata only, no rows."""
    try:
        con = duckdb.connect(str(path), read_only=True)
    except duckdb.Error as exc:
        raise ConfigError(f"cannot open DuckDB database {path}: {exc}") from None
    try:
        tables = [r[0] for r in con.execute(
            "SELECT table_name FROM information_schema.tables ORDER BY table_name").fetchall()]
        if table is None:
            if len(tables) != 1:
                raise ConfigError(f"{path} holds {len(tables)} tables; name one with --table",
                                  hint="tables: " + (", ".join(tables) or "(none)"))
            table = tables[0]
        if table not in tables:
            raise ConfigError(f"{path} has no table {table!r}", hint="tables: " + ", ".join(tables))
        rows = con.execute("SELECT column_name, data_type FROM information_schema.columns "
                           "WHERE table_name = ? ORDER BY ordinal_position", [table]).fetchall()
    finally:
        con.close()
    return table, [(str(name), _coarse_type(dtype)) for name, dtype in rows]


def csv_to_parquet(src: Path, columns: Sequence[tuple[str, str]], dest: Path) -> None:
    """Copy the CSV ``src`` (a header, NULL as an empty field) to the Parquet file ``dest``
    with the DuckDB types of ``columns`` = [(name, SQL type)] (``export.write_rows``)."""
    types = ", ".join(f"'{_sql_text(name)}': '{sql_type}'" for name, sql_type in columns)
    con = duckdb.connect()
    try:
        con.execute(
            f"COPY (SELECT * FROM read_csv('{_sql_text(os.fspath(src))}', header = true, "
            f"columns = {{{types}}}, nullstr = '', quote = '\"')) "
            f"TO '{_sql_text(os.fspath(dest))}' (FORMAT parquet)")
    finally:
        con.close()


def brute_force_counts(rows: Sequence[Mapping], schema: TableSchema,
                       clique: Clique) -> np.ndarray:
    """Reference counting in Python via ``Attribute.index_of`` (tests compare backends to it)."""
    shape = tuple(schema.domain[a] for a in clique)
    arr = np.zeros(shape, dtype=np.int64)
    attrs = [schema.attribute(a) for a in clique]
    for row in rows:
        arr[tuple(att.index_of(row.get(att.name)) for att in attrs)] += 1
    return arr


__all__ = ["Backend", "Source", "CsvDialect", "DuckDBBackend", "DataCheck", "ColumnCheck", "read_header",
           "reduce_cliques", "project_counts", "brute_force_counts", "describe_source"]


# --- public tables (issue 31) -------------------------------------------------------------

_PG_TYPES = (("BIGINT", "bigint"), ("HUGEINT", "numeric"), ("UBIGINT", "numeric"), ("INTEGER", "integer"),
             ("SMALLINT", "smallint"), ("TINYINT", "smallint"), ("UINTEGER", "bigint"), ("USMALLINT", "integer"),
             ("UTINYINT", "smallint"), ("DOUBLE", "double precision"), ("FLOAT", "real"), ("DECIMAL", "numeric"),
             ("BOOLEAN", "boolean"), ("TIMESTAMP", "timestamp"), ("DATE", "date"), ("TIME", "time"),
             ("VARCHAR", "text"))


def _quoted(s: str) -> str:
    return "'" + s.replace("'", "''") + "'"


def _pg_type(duck: str) -> str:
    t = duck.upper()
    for prefix, name in _PG_TYPES:
        if t.startswith(prefix):
            return name
    return "text"


class PublicDatabase:
    """The public tables of a configuration, read whole into an in-memory DuckDB database.

    Their content is public metadata (``dpsql.public``), so it is read with DuckDB's own
    readers and type detection, and plain SQL over them (``SELECT … FROM airports``, the
    subquery of ``IN (SELECT faa FROM airports …)``) runs here exactly.  After loading, the
    database may not reach any file or network (``enable_external_access = false``, the
    configuration locked): a statement run here sees the public tables and nothing else,
    whatever it names.
    """

    def __init__(self, sources: Mapping[str, Source],
                 contents: Mapping[str, tuple[Sequence[tuple[str, str]], Sequence[tuple]]] | None = None) -> None:
        """``contents``: the columns (name, DuckDB type) and rows of the tables another engine
        read (PostgreSQL, Spark: ``dpsql.measure.router.read_public``); the others are read
        here from their files."""
        import threading
        self._lock = threading.Lock()
        self._con = duckdb.connect(":memory:")
        self.tables: dict = {}
        from dpsql.public import PublicColumn, PublicTable
        contents = contents or {}
        for name, source in sources.items():
            ident = '"' + name.replace('"', '""') + '"'
            if name in contents:
                self._load(name, ident, *contents[name])
            else:
                self._copy(name, ident, source)
            described = self._con.execute(f"DESCRIBE {ident}").fetchall()
            rows = self._con.execute(f"SELECT * FROM {ident}").fetchall()
            columns = tuple(PublicColumn(str(r[0]), _pg_type(str(r[1]))) for r in described)
            self.tables[name] = PublicTable(name, columns, tuple(rows), source)
        # PostgreSQL clients qualify tables with schema public (DuckDB's is main)
        self._con.execute("CREATE SCHEMA public")
        for name in self.tables:
            ident = '"' + name.replace('"', '""') + '"'
            self._con.execute(f"CREATE VIEW public.{ident} AS SELECT * FROM main.{ident}")
        self._con.execute("SET enable_external_access = false")
        self._con.execute("SET lock_configuration = true")

    def _copy(self, name: str, ident: str, source: Source) -> None:
        scan = self._scan(name, source)
        try:
            self._con.execute(f"CREATE TABLE {ident} AS SELECT * FROM {scan}")
        except duckdb.Error as exc:
            raise ConfigError(f"public table {name!r}: cannot read {source.path}: {str(exc).splitlines()[0]}",
                              hint="a public table is read with DuckDB's readers (CSV with a header, "
                                   "Parquet, a DuckDB table)") from None
        finally:
            # a DuckDB file may hold private tables beside the public one: once copied it is
            # detached, so no statement run here can reach them, whatever it names (the
            # syntax check joins.reads_only_public is then not the only guard)
            if source.kind == "duckdb":
                self._con.execute(f"DETACH public_{len(self.tables)}")   # attached by _scan

    def _load(self, name: str, ident: str, columns: Sequence[tuple[str, str]], rows: Sequence[tuple]) -> None:
        """A table read by another engine, with the DuckDB types it declared for its columns
        (so DESCRIBE below gives a DATE column the type a DATE of a Parquet file has)."""
        cols = ", ".join('"' + c.replace('"', '""') + f'" {t}' for c, t in columns)
        try:
            self._con.execute(f"CREATE TABLE {ident} ({cols})")
            if rows:
                # one list parameter per column, unnested side by side (in order): 20,000 rows
                # of four columns take 0.09 CPU-s, against 7.4 s row by row with executemany
                items = ", ".join(f"UNNEST(CAST(? AS {t}[]))" for _, t in columns)
                self._con.execute(f"INSERT INTO {ident} SELECT {items}", [list(c) for c in zip(*rows)])
        except duckdb.Error as exc:
            raise ConfigError(f"public table {name!r}: cannot load its rows: {str(exc).splitlines()[0]}",
                              hint="its columns' types are read from the source's catalog") from None

    def _scan(self, name: str, source: Source) -> str:
        if source.kind == "csv":
            d = source.dialect
            opts = [f"delim = {_quoted(d.delimiter)}", f"header = {'true' if d.header else 'false'}"]
            if d.quote:
                opts.append(f"quote = {_quoted(d.quote)}")
            if not d.header and d.columns:
                opts.append("names = [" + ", ".join(_quoted(c) for c in d.columns) + "]")
            opts.append("nullstr = [" + ", ".join(_quoted(n) for n in d.null) + "]")
            return f"read_csv({_quoted(str(source.path))}, {', '.join(opts)})"
        if source.kind == "parquet":
            files = parquet_files(source) if source.path is not None else []
            listing = "[" + ", ".join(_quoted(str(f)) for f in files) + "]"
            hive = ", hive_partitioning = true" if source.hive_partitioning else ""
            return f"read_parquet({listing}, union_by_name = true{hive})"
        if source.kind == "duckdb":
            alias = f"public_{len(self.tables)}"
            self._con.execute(f"ATTACH {_quoted(str(source.path))} AS {alias} (READ_ONLY)")
            parts = ['"' + p.replace('"', '""') + '"' for p in (source.table or name).split(".")]
            return ".".join([alias, *parts])
        raise ConfigError(f"public table {name!r}: a {source.kind} source is read by its own engine",
                          hint="pass its rows as contents (dpsql.measure.router.read_public)")

    def query(self, sql: str) -> tuple[list[tuple[str, str]], list[tuple]]:
        """Columns (name, PostgreSQL type) and rows of ``sql`` over the public tables."""
        with self._lock:
            cur = self._con.cursor()
            try:
                cur.execute(sql)
                cols = [(str(d[0]), _pg_type(str(d[1]))) for d in cur.description or []]
                return cols, cur.fetchall()
            except duckdb.Error as exc:
                from dpsql.errors import ProgrammingError
                raise ProgrammingError(f"query over public tables failed: {str(exc).splitlines()[0]}",
                                       hint="the query reads public tables only; check its SQL") from None
            finally:
                cur.close()
