"""Measurement backends: run measurement SQL, return exact marginal counts.

A backend is the only place private rows are read.  Its whole job is
``count_marginals(schema, cliques)``: exact int64 count arrays aligned to the declared
domain (axis order = clique order).  Noise is added afterwards by ``dpsql.privacy``; counts
never leave the process un-noised.

``DuckDBBackend`` is the default (the only module importing duckdb).  A distributed engine
(Spark SQL via sqlglot transpilation) implements the same protocol by rendering the ASTs of
``dpsql.measure.sqlgen`` in its dialect; nothing above this layer changes.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import shutil
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Protocol, Sequence

import duckdb
import numpy as np
from sqlglot import exp

from dpsql.domain import TableSchema
from dpsql.errors import ConfigError, OperationalError
from dpsql.measure import reader, sqlgen
from dpsql.measure.source import CsvDialect, Source, remember_fingerprint

Clique = tuple[str, ...]


class Backend(Protocol):
    """What the engine needs from a SQL engine holding the private table."""

    dialect: str

    def count_marginals(self, schema: TableSchema,
                        cliques: Sequence[Clique]) -> dict[Clique, np.ndarray]: ...

    def close(self) -> None: ...


def reduce_cliques(cliques: Sequence[Clique]) -> list[Clique]:
    """Maximal cliques only, one per attribute set: a marginal contained in another is
    derived by summing (exact).  Two grouping sets over the same columns would share a NULL
    pattern in the result and be indistinguishable, so sets are deduplicated as sets."""
    by_set = {}
    for c in cliques:
        by_set.setdefault(frozenset(c), tuple(c))
    unique = list(by_set.values())
    return [c for c in unique if not any(set(c) < set(d) for d in unique)]


def project_counts(counts: np.ndarray, source: Clique, target: Clique) -> np.ndarray:
    """Sum a clique's count array down to ``target`` (in target's axis order)."""
    keep = [source.index(a) for a in target]
    drop = tuple(i for i in range(len(source)) if i not in keep)
    reduced = counts.sum(axis=drop) if drop else counts
    remaining = [i for i in range(len(source)) if i in keep]
    order = [remaining.index(source.index(a)) for a in target]
    return np.transpose(reduced, order) if order != sorted(order) else reduced


class DuckDBBackend:
    """Counts marginals in DuckDB: encode every row to cell indices once, then one
    GROUPING SETS scan per measurement round (1–3 s per round at 10M rows instead of 6–8 s
    when binning is repeated; ``scale_out.md`` §1).

    Rows are read by the total reader (``dpsql.measure.reader``); the encoded table is kept
    per table together with the fingerprint of the content it was read from, and rebuilt
    when the source changes (``fingerprint``)."""

    dialect = "duckdb"

    def __init__(self, sources: Mapping[str, Source], *, threads: int | None = None,
                 memory_limit: str | None = None) -> None:
        self._sources = dict(sources)
        self._con = duckdb.connect(":memory:")
        if threads:
            self._con.execute(f"SET threads = {int(threads)}")
        if memory_limit:
            self._con.execute("SET memory_limit = ?", [memory_limit])
        self._encoded: dict[str, tuple[str, dict]] = {}
        self._sql_cache: dict[tuple, tuple[str, list]] = {}
        self._lock = threading.Lock()
        self._workdir: str | None = None

    # -- sources ---------------------------------------------------------------------------
    def _source(self, table: str) -> Source:
        source = self._sources.get(table)
        if source is None:
            raise ConfigError(f"no source configured for table {table!r}")
        return source

    def fingerprint(self, table: str) -> dict:
        """Which content of ``table``'s source would be read now (``Source.fingerprint``)."""
        return self._source(table).fingerprint()

    def _tmp(self) -> Path:
        if self._workdir is None or not os.path.isdir(self._workdir):
            self._workdir = tempfile.mkdtemp(prefix="dpsql-reader-")  # mode 0700
        return Path(self._workdir)

    def _typed_scan(self, source: Source) -> exp.Expression:
        if source.kind == "parquet":
            return exp.func("read_parquet", exp.Literal.string(str(source.path)))
        alias = "src_" + hashlib.sha256(str(source.path).encode()).hexdigest()[:12]
        self._run(f"ATTACH IF NOT EXISTS '{_sql_text(str(source.path))}' AS {alias} (READ_ONLY)", (),
                  what="attaching the DuckDB database")
        return exp.table_(exp.to_identifier(source.table, quoted=True), db=alias)

    def source_columns(self, table: str) -> dict[str, str]:
        """Column names and SQL types of a source, from metadata only (the CSV header, the
        Parquet footer, the DuckDB catalog); CSV fields are all VARCHAR."""
        source = self._source(table)
        if not source.path.exists():
            raise ConfigError(f"source file for table {table!r} not found: {source.path}",
                              hint="fix the path in the configuration (relative paths are relative to the config file)")
        if source.kind == "csv":
            return {name: "VARCHAR" for name in read_header(source)}
        scan = self._typed_scan(source)
        rows = self._run("DESCRIBE " + exp.select(exp.Star()).from_(scan).sql(self.dialect), (),
                         what="reading the source schema").fetchall()
        return {str(r[0]): str(r[1]) for r in rows}

    def check_schema(self, schema: TableSchema) -> dict[str, str]:
        """Refuse, before anything is counted, a source whose metadata does not fit the
        declared domain: a missing column or a type no total conversion exists for.  The
        message names declared columns and metadata only (never a value)."""
        source = self._source(schema.name)
        columns = self.source_columns(schema.name)
        needed = [a.name for a in schema.attributes] + ([source.id_column] if source.id_column else [])
        for name in needed:
            if name not in columns:
                close = difflib.get_close_matches(name, list(columns), n=1, cutoff=0.6)
                raise ConfigError(
                    f"table {schema.name!r}: the source has no column {name!r}"
                    + (" (declared as the privacy unit id)" if name == source.id_column else
                       " (declared in the domain)"),
                    hint=(f"the source has {close[0]!r}; rename the declaration or the column"
                          if close else "the operator can list the source columns with `dpsql check`"))
        for att in schema.attributes:
            if not reader.accepts(att, columns[att.name]):
                raise ConfigError(
                    f"table {schema.name!r}: column {att.name!r} has type {columns[att.name]} in the "
                    f"source, which a {att.kind} column with "
                    f"{'text' if att.python_type is str else 'numeric'} values cannot read",
                    hint="declare the column with a matching kind, or convert it in the source")
        return columns

    def _read(self, schema: TableSchema) -> tuple:
        """The data-touching half of :meth:`_relation`: the schema check and, for CSV, the
        framing pass.  Returns (column types, header, normalised path, fingerprint)."""
        source = self._source(schema.name)
        columns = self.check_schema(schema)
        if source.kind != "csv":
            return columns, None, None, None
        framed = reader.normalise_csv(source, self._tmp())
        remember_fingerprint(source.path, framed.stat_key, framed.fingerprint)
        self._framed = framed
        fp = framed.fingerprint if source.data_version is None else {"data_version": source.data_version}
        return columns, framed.header, framed.path, fp

    def _relation(self, schema: TableSchema, bounded: bool = True, read: tuple | None = None):
        """(FROM expression, {attribute: Converted}, raw value expressions, parameters,
        fingerprint of the content read or None); ``bounded=False`` skips contribution
        bounding (the data check looks at every record)."""
        source = self._source(schema.name)
        columns, header, path, fp = read if read is not None else self._read(schema)
        names = [a.name for a in schema.attributes]
        if source.kind == "csv":
            d = source.dialect
            wanted = names + ([source.id_column] if source.id_column and source.id_column not in names else [])
            rel = reader.csv_fields(reader.line_scan(path, d), d, header, wanted)
            ok = exp.column("__ok")
            conv = {a.name: reader.convert_text(a, exp.column(a.name, quoted=True), ok, d, str(i))
                    for i, a in enumerate(schema.attributes)}
            # a malformed record is shown whole (its fields are not defined)
            raws = {a.name: exp.Case().when(ok.copy(), exp.column(a.name, quoted=True)).else_(exp.column("line"))
                    for a in schema.attributes}
            content = exp.column("line")
            if source.id_column:
                raw_id = exp.column(source.id_column, quoted=True)
                has_id = exp.and_(ok.copy(), exp.Not(this=exp.In(this=raw_id.copy(),
                                                                   expressions=[exp.Literal.string(v) for v in d.null]))
                                  if d.null else exp.true())
                rel = exp.select(exp.Star(), exp.alias_(has_id, "__has_id")).from_(exp.alias_(exp.Subquery(this=rel), "__r"))
        else:
            scan = self._typed_scan(source)
            rel = exp.select(*[exp.column(n, quoted=True) for n in dict.fromkeys(
                names + ([source.id_column] if source.id_column else []))]).from_(scan)
            conv = {a.name: reader.typed_column(a, exp.column(a.name, quoted=True), columns[a.name], str(i))
                    for i, a in enumerate(schema.attributes)}
            raws = {a.name: exp.cast(exp.column(a.name, quoted=True), "VARCHAR") for a in schema.attributes}
            content = exp.Anonymous(this="concat_ws", expressions=[exp.Literal.string("|"),
                               *[exp.Coalesce(this=exp.cast(exp.column(n, quoted=True), "VARCHAR"),
                                              expressions=[exp.Literal.string("\u2400")]) for n in names]])
            if source.id_column:
                has_id = exp.Not(this=exp.Is(this=exp.column(source.id_column, quoted=True), expression=exp.Null()))
                rel = exp.select(exp.Star(), exp.alias_(has_id, "__has_id")).from_(exp.alias_(exp.Subquery(this=rel), "__r"))
        params: list = []
        if source.id_column and bounded:
            rel = sqlgen.contribution_bounded(rel, source.id_column, source.max_rows_per_id,
                                              exp.Placeholder(), content)
            params = [source.hash_key or ""]
        return rel, conv, raws, params, fp

    @staticmethod
    def _layered(rel: exp.Expression, conv: dict, extra=()) -> exp.Expression:
        """FROM expression with every conversion's ``pre`` columns computed once."""
        pre = [exp.alias_(e, n) for c in conv.values() for n, e in c.pre]
        first = exp.select(exp.Star(), *pre, *extra).from_(exp.alias_(exp.Subquery(this=rel), "__rel"))
        pre2 = [exp.alias_(e, n) for c in conv.values() for n, e in (c.pre2 or [])]
        second = exp.select(exp.Star(), *pre2).from_(exp.alias_(exp.Subquery(this=first), "__pre1"))
        return exp.alias_(exp.Subquery(this=second), "__pre")

    def _encode(self, schema: TableSchema, expect: dict | None = None) -> str:
        """Create (once per source content) the temp table of cell indices for ``schema``."""
        current = expect if expect is not None else self.fingerprint(schema.name)
        cached = self._encoded.get(schema.name)
        if cached is not None and cached[1] == current:
            return cached[0]
        source = self._source(schema.name)
        name = "cells_" + hashlib.sha256(schema.name.encode()).hexdigest()[:16]
        try:
            read = self._read(schema)
            fp = read[3]
            # the SQL depends only on public metadata: build it once (sqlglot is the slow part)
            key = (schema, source, tuple(sorted(read[0].items())), read[1], str(read[2]))
            cached_sql = self._sql_cache.get(key)
            if cached_sql is None:
                rel, conv, _, params, _ = self._relation(schema, read=read)
                select = exp.select(*[
                    exp.alias_(exp.cast(conv[a.name].cell,
                                        exp.DataType.build(sqlgen.cell_type(a.size), dialect="duckdb")),
                               sqlgen.cell_column(i)) for i, a in enumerate(schema.attributes)]).from_(
                    self._layered(rel, conv))
                create = exp.Create(this=exp.to_table(name), kind="TABLE", expression=select, replace=True,
                                    properties=exp.Properties(expressions=[exp.TemporaryProperty()]))
                cached_sql = self._sql_cache[key] = (create.sql(self.dialect), params)
            self._run(cached_sql[0], cached_sql[1], what="encoding the rows")
        finally:
            self._drop_framed()
        if fp is None:  # typed sources: the content must not have changed while it was read
            fp = source.fingerprint()
        if fp != current:
            self._encoded.pop(schema.name, None)
            raise OperationalError(
                f"the source of table {schema.name!r} changed while it was being read",
                hint="nothing was charged; retry once the source file is complete")
        self._encoded[schema.name] = (name, fp)
        return name

    def _drop_framed(self) -> None:
        framed = getattr(self, "_framed", None)
        if framed is not None:
            try:
                os.unlink(framed.path)
            except OSError:
                pass
            self._framed = None

    def _run(self, sql: str, params=(), what: str = "the measurement query"):
        try:
            return self._con.execute(sql, list(params))
        except duckdb.Error as exc:
            # DuckDB messages can echo cell values ("Could not convert string 'X'…"); the
            # analyst only learns the class of failure (docs/privacy.md, "Errors").  With the
            # total reader this is an engine fault, never a property of one row.  The
            # operator's own front end (the command line) shows ``operator_detail``.
            err = OperationalError(
                f"{what} failed inside DuckDB; its message is withheld because it may "
                "contain private values",
                hint="the operator can run `dpsql check` to inspect the source "
                     f"(error class: {type(exc).__name__})")
            err.operator_detail = str(exc)
            raise err from None

    # -- counting --------------------------------------------------------------------------
    def count_marginals(self, schema: TableSchema, cliques: Sequence[Clique],
                        expect: dict | None = None) -> dict[Clique, np.ndarray]:
        """Exact counts; with ``expect`` (a :meth:`fingerprint`), only from that content."""
        domain = schema.domain
        for clique in cliques:
            for a in clique:
                if a not in domain:
                    raise ConfigError(f"clique {clique} names {a!r}, not a column of {schema.name!r}")
        with self._lock:
            table = self._encode(schema, expect)
            maximal = reduce_cliques(cliques)
            col_of = {a: sqlgen.cell_column(i) for i, a in enumerate(domain.attributes)}
            used = sorted({a for c in maximal for a in c}, key=domain.attributes.index)
            columns = [col_of[a] for a in used]
            query = sqlgen.grouping_sets_select(table, columns, [[col_of[a] for a in c] for c in maximal])
            rows = self._run(query.sql(self.dialect)).fetchnumpy()
        counts = _decode(rows, used, columns, maximal, domain)
        return {tuple(c): project_counts(counts[_owner(c, maximal)], _owner(c, maximal), tuple(c))
                for c in cliques}

    # -- operator data check (local only: never reachable by analysts) ----------------------
    def data_check(self, schema: TableSchema, examples: int = 5) -> "DataCheck":
        """Per column, how many values landed where (``reader.STATUSES``), with a few example
        values of each problem.  Reads raw rows: an operator tool (``dpsql check``)."""
        with self._lock:
            rel, conv, raws, params, _ = self._relation(schema, bounded=False)
            try:
                base = "__check_" + hashlib.sha256(schema.name.encode()).hexdigest()[:12]
                cols = [exp.alias_(conv[a.name].status, f"s{i}") for i, a in enumerate(schema.attributes)]
                cols += [exp.alias_(raws[a.name], f"v{i}") for i, a in enumerate(schema.attributes)]
                select = exp.select(*cols).from_(self._layered(rel, conv))
                create = exp.Create(this=exp.to_table(base), kind="TABLE", expression=select, replace=True,
                                    properties=exp.Properties(expressions=[exp.TemporaryProperty()]))
                self._run(create.sql(self.dialect), params, what="checking the rows")
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
        source = self._source(schema.name)
        if source.id_column:
            dropped = self._unattributed(schema)
        return DataCheck(schema.name, total, out, dropped)

    def _unattributed(self, schema: TableSchema) -> int:
        """Records not counted under the privacy unit (no readable id, or over max_rows)."""
        counts = []
        for bounded in (False, True):
            rel, _, _, params, _ = self._relation(schema, bounded=bounded)
            try:
                query = exp.select(exp.Count(this=exp.Star())).from_(exp.alias_(exp.Subquery(this=rel), "__a"))
                counts.append(int(self._run(query.sql(self.dialect), params if bounded else [],
                                            what="checking the rows").fetchone()[0]))
            finally:
                self._drop_framed()
        return counts[0] - counts[1]

    def close(self) -> None:
        self._con.close()
        if self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)


@dataclass(frozen=True)
class ColumnCheck:
    name: str
    counts: dict          # status -> number of records
    examples: dict        # problem status -> [(raw value, count), ...]

    @property
    def problems(self) -> dict:
        return {s: self.counts[s] for s in reader.PROBLEMS if self.counts.get(s)}


@dataclass(frozen=True)
class DataCheck:
    table: str
    records: int
    columns: list
    dropped: int | None = None   # records over max_rows per id or without an id

    @property
    def ok(self) -> bool:
        return not any(c.problems for c in self.columns)


def read_header(source: Source) -> tuple[str, ...]:
    """The field names of a CSV source from its first record only (metadata)."""
    d = source.dialect
    if not d.header:
        return tuple(d.columns)
    limit = d.max_record_bytes
    with open(source.path, "rb") as fh:
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


def _owner(clique: Clique, maximal: Sequence[Clique]) -> Clique:
    for m in maximal:
        if set(clique) <= set(m):
            return m
    raise AssertionError("every clique is contained in a maximal one")


def _decode(rows: Mapping[str, np.ndarray], used: Sequence[str], columns: Sequence[str],
            maximal: Sequence[Clique], domain) -> dict[Clique, np.ndarray]:
    """Scatter GROUPING SETS rows into dense arrays, one per grouping set (by NULL pattern)."""
    n = np.asarray(rows["n"], dtype=np.int64)
    present = {}
    values = {}
    for a, c in zip(used, columns):
        col = rows[c]
        mask = np.ma.getmaskarray(col) if np.ma.isMaskedArray(col) else np.zeros(len(n), bool)
        present[a] = ~mask
        values[a] = np.ma.getdata(col).astype(np.int64, copy=False)
    out = {}
    for clique in maximal:
        sel = np.ones(len(n), bool)
        for a in used:
            sel &= present[a] if a in clique else ~present[a]
        shape = tuple(domain[a] for a in clique)
        arr = np.zeros(shape, dtype=np.int64)
        if clique:
            idx = tuple(values[a][sel] for a in clique)
            np.add.at(arr, idx, n[sel])
        else:
            arr = np.asarray(n[sel].sum(), dtype=np.int64)
        out[clique] = arr
    return out


def describe_source(path: Path) -> list[tuple[str, str]]:
    """Column names and coarse types ("integer" | "numeric" | "text") of a data file, for
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
    out = []
    for name, dtype, *_ in rows:
        t = str(dtype).upper()
        kind = ("integer" if any(k in t for k in ("INT",)) else
                "numeric" if any(k in t for k in ("DOUBLE", "FLOAT", "DECIMAL", "REAL")) else "text")
        out.append((name, kind))
    return out


def brute_force_counts(rows: Sequence[Mapping], schema: TableSchema,
                       clique: Clique) -> np.ndarray:
    """Reference counting in Python via ``Attribute.index_of`` (tests compare backends to it)."""
    shape = tuple(schema.domain[a] for a in clique)
    arr = np.zeros(shape, dtype=np.int64)
    attrs = [schema.attribute(a) for a in clique]
    for row in rows:
        arr[tuple(att.index_of(row.get(att.name)) for att in attrs)] += 1
    return arr


__all__ = ["Backend", "Source", "CsvDialect", "DuckDBBackend", "DataCheck", "ColumnCheck", "read_header", "reduce_cliques", "project_counts",
           "brute_force_counts", "describe_source"]
