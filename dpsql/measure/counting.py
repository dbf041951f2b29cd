"""Counting marginals in an SQL engine: what every backend shares.

The boundary between dpsql and an engine (``docs/architecture.md``): dpsql sends one SQL
statement per measurement round — built once as a sqlglot AST (``dpsql.measure.sqlgen``
and the total conversions of ``dpsql.measure.reader``) and rendered in the engine's
dialect — and receives exact integer counts, one row per non-empty cell of every grouping
set.  Nothing else crosses: no noise, no budget, no model.  Noise is added afterwards by
``dpsql.privacy``; counts never leave the process un-noised.

:class:`SqlBackend` holds everything but the engine glue: the schema check (from the
engine's catalog, before anything is counted or charged), the measurement statement, the
decoding of its rows, and the operator's data check.  A subclass supplies

* ``_describe(source)``: column names and types from metadata only;
* ``_read(source, expect)``: a context manager giving one consistent read of the source —
  the FROM expression (``scan``) and ``run(ast, key)`` — that raises, before anything is
  counted, when the content is not the one ``expect`` names, and afterwards when it
  changed while it was read;
* ``_fingerprint(source)``: which content would be read now.

Engine errors are withheld from analysts (they can echo row values): the error raised is
:func:`engine_error`, whose message names only the step; the engine's own text, with the
bounding key scrubbed out, is kept in ``operator_detail`` (printed by the CLI, never sent
over the wire).
"""

from __future__ import annotations

import contextlib
import difflib
import logging
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from collections.abc import Iterator, Mapping, Sequence
from typing import Protocol

import numpy as np

from dpsql.domain import Categorical, TableSchema
from dpsql.errors import ConfigError, OperationalError
from dpsql.measure import reader, sqlgen
from dpsql.measure.flag_types import flag_type_problem
from dpsql.measure.source import Source
from dpsql.measure.views import EXISTS, PERSON, SEP
from dpsql.sql.syntax import exp

#: The integer type of a person view's flag columns, as each engine's catalog names it.
_INTEGER = {"duckdb": "INTEGER", "postgres": "integer", "spark": "int"}

Clique = tuple[str, ...]
log = logging.getLogger("dpsql.measure")


class Backend(Protocol):
    """What the engine needs from a SQL engine holding the private table."""

    def count_marginals(self, schema: TableSchema, cliques: Sequence[Clique],
                        expect: dict | None = None) -> dict[Clique, np.ndarray]: ...

    def sum_offsets(self, schema: TableSchema, requests: Sequence[tuple[Clique, str]],
                    expect: dict | None = None) -> dict[tuple[Clique, str], np.ndarray]:
        """Per (clique, binned attribute), the exact integer sums of the attribute's lattice
        offsets (``dpsql.measure.offsets``); optional: the engine measures binning offsets
        only with a backend that has it."""
        ...

    def fingerprint(self, table: str) -> dict: ...

    def add_source(self, name: str, source: Source) -> None:
        """Read table ``name`` from ``source`` from now on (an engine's table added at run time)."""
        ...

    def remove_source(self, name: str) -> None:
        """Forget table ``name`` (an added table the engine no longer keeps)."""
        ...

    def source_columns(self, table: str) -> dict[str, str]:
        """Column names and types of ``table``'s source, from metadata only."""
        ...

    def dialect_of(self, table: str) -> str:
        """The SQL dialect in which ``source_columns`` names ``table``'s types."""
        ...

    def close(self) -> None: ...


def reduce_cliques(cliques: Sequence[Clique]) -> list[Clique]:
    """Maximal cliques only, one per attribute set: a marginal contained in another is
    derived by summing (exact).  Two grouping sets over the same columns would share a NULL
    pattern in the result and be indistinguishable, so sets are deduplicated as sets."""
    by_set: dict[frozenset[str], Clique] = {}
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


def owner(clique: Clique, maximal: Sequence[Clique]) -> Clique:
    for m in maximal:
        if set(clique) <= set(m):
            return m
    raise AssertionError("every clique is contained in a maximal one")


def decode(present: Mapping[str, np.ndarray], values: Mapping[str, np.ndarray], n: np.ndarray,
           used: Sequence[str], maximal: Sequence[Clique], domain) -> dict[Clique, np.ndarray]:
    """Scatter GROUPING SETS rows into dense arrays, one per grouping set (by NULL pattern:
    cells are never NULL, so a NULL says the column is not in the row's grouping set)."""
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


def decode_rows(rows: Sequence[Sequence], used: Sequence[str], maximal: Sequence[Clique],
                domain) -> dict[Clique, np.ndarray]:
    """:func:`decode` for rows as tuples ``(cell of each used column or None, …, n)``,
    read by position."""
    k = len(used)
    table = np.array([tuple(r) for r in rows], dtype=object).reshape(len(rows), k + 1)
    n = table[:, k].astype(np.int64) if len(rows) else np.zeros(0, np.int64)
    present, values = {}, {}
    for j, a in enumerate(used):
        col = table[:, j]
        mask = np.array([v is not None for v in col], dtype=bool)
        present[a] = mask
        values[a] = np.where(mask, col, 0).astype(np.int64)
    return decode(present, values, n, used, maximal, domain)


def spread(counts: Mapping[Clique, np.ndarray], cliques: Sequence[Clique],
           maximal: Sequence[Clique]) -> dict[Clique, np.ndarray]:
    """Every requested clique's counts, summed down from the maximal clique holding it."""
    return {tuple(c): project_counts(counts[owner(c, maximal)], owner(c, maximal), tuple(c))
            for c in cliques}


def offset_attributes(schema: TableSchema, requests: Sequence[tuple[Clique, str]]) -> list[str]:
    """The attributes whose offsets ``requests`` sum, in declared order."""
    wanted = {a for _, a in requests}
    for a in wanted:
        if a not in schema.domain:
            raise OperationalError(f"no attribute {a!r} in table {schema.name!r}")
    return [a.name for a in schema.attributes if a.name in wanted]


def offset_columns(schema: TableSchema, attributes: Sequence[str]) -> list[str]:
    return [sqlgen.offset_column(schema.domain.attributes.index(a)) for a in attributes]


def decode_offsets(rows: Sequence[Sequence], used: Sequence[str], maximal: Sequence[Clique],
                   summed: Sequence[str], requests: Sequence[tuple[Clique, str]],
                   domain) -> dict[tuple[Clique, str], np.ndarray]:
    """The offsets statement's rows (cells of the used attributes or None, then one sum per
    summed attribute) as dense integer arrays per request.  A sum is NULL only over no rows."""
    k = len(used)
    out = {}
    for j, a in enumerate(summed):
        as_counts = [tuple(r[:k]) + (0 if r[k + j] is None else int(r[k + j]),) for r in rows]
        sums = spread(decode_rows(as_counts, used, maximal, domain), [c for c, b in requests if b == a], maximal)
        for c, b in requests:
            if b == a:
                out[(tuple(c), a)] = sums[tuple(c)]
    return out


def check_cliques(schema: TableSchema, cliques: Sequence[Clique]) -> None:
    for clique in cliques:
        for a in clique:
            if a not in schema.domain:
                raise ConfigError(f"clique {clique} names {a!r}, not a column of {schema.name!r}")


def scrub(text: str, secret: str | None) -> str:
    """An engine's message without the bounding key (engines echo bound parameters)."""
    return text.replace(secret, "***") if secret else text


def engine_error(engine: str, what: str, exc: BaseException | None, secret: str | None = None,
                 hint: str | None = None) -> OperationalError:
    """The analyst-safe error for a failure inside an engine: the step, never the engine's
    message (it can contain private values).  The operator finds that message (key
    scrubbed) in ``operator_detail`` and in the ``dpsql.measure`` log."""
    # Not even the exception's class reaches the analyst: a failure that depended on the data
    # would say more than that it failed (review of issue 32's flags).
    err = OperationalError(
        f"{what} failed inside {engine}; its message is withheld because it may contain private values",
        hint=hint or "nothing was charged; the operator sees the engine's message with `dpsql check` "
                     "or `dpsql measure` at the command line")
    if exc is not None:
        detail = scrub(f"{type(exc).__name__}: {exc}", secret)
        if len(detail) > 2000:   # a JVM stack trace: its head says what failed
            detail = detail[:2000] + " …"
        err.operator_detail = detail
        log.warning("%s failed inside %s: %s", what, engine, detail)
    return err


def changed_error(table: str, while_reading: bool) -> OperationalError:
    return OperationalError(
        f"the source of table {table!r} changed " + ("while it was being read" if while_reading
                                                     else "since its releases were checked"),
        hint="nothing was charged; retry once the source is complete")


class Read(Protocol):
    """One consistent read of a source (see the module doc)."""

    scan: exp.Expr

    def run(self, query: exp.Expr, key: str | None = None, what: str = "") -> list[tuple]: ...


class ViewRead:
    """A person view's read: the join relation as the scan, run where the first table is."""

    def __init__(self, first: Read, scan: exp.Expr) -> None:
        self._first, self.scan = first, scan

    def run(self, query: exp.Expr, key: str | None = None, what: str = "the measurement query") -> list[tuple]:
        return self._first.run(query, key, what)


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
    open_quotes: int | None = None   # CSV lines with an odd number of quote characters

    @property
    def ok(self) -> bool:
        return not any(c.problems for c in self.columns)


class SqlBackend(ABC):
    """Counts marginals of typed sources (a catalog gives every column's type) with one
    portable GROUPING SETS statement per round; subclasses supply the engine glue."""

    dialect = "duckdb"
    engine = "the engine"

    def __init__(self, sources: Mapping[str, Source]) -> None:
        self._sources = dict(sources)
        self._lock = threading.Lock()

    # -- engine glue (subclasses) -------------------------------------------------------------
    @abstractmethod
    def _describe(self, source: Source) -> dict[str, str]:
        ...

    @abstractmethod
    def _read(self, table: str, source: Source, expect: dict | None) -> contextlib.AbstractContextManager[Read]:
        ...

    @abstractmethod
    def _fingerprint(self, source: Source) -> dict:
        ...

    def close(self) -> None:  # noqa: B027 - optional hook: most backends hold nothing to release
        pass

    def constant_error(self, sql: str, cast_to: str | None = None) -> str | None:
        """The engine's error converting a constant alone (``flag_type_problem``), or None:
        an engine that converts constants before reading any row (PostgreSQL, Spark) has
        none to find here; DuckDB's backend evaluates them."""
        return None

    def add_source(self, name: str, source: Source) -> None:
        """Read ``name`` from ``source`` from now on (an engine's table added at run time: a
        people schema's on-demand flag, ``Engine.add_person_flags``)."""
        with self._lock:
            self._sources[name] = source

    def remove_source(self, name: str) -> None:
        """Forget ``name`` (an on-demand flag's table the engine dropped, ``Engine._add_flag``)."""
        with self._lock:
            self._sources.pop(name, None)

    # -- metadata -----------------------------------------------------------------------------
    def _source(self, table: str) -> Source:
        source = self._sources.get(table)
        if source is None:
            raise ConfigError(f"no source configured for table {table!r}")
        return source

    def fingerprint(self, table: str) -> dict:
        """Which content of ``table``'s source would be read now: the declared
        ``data_version``, else what the engine names (file listing, table statistic)."""
        return self._content(self._source(table))

    def _content(self, source: Source) -> dict:
        if source.data_version is not None:
            return {"data_version": source.data_version}
        if source.view is not None:      # a person view: the content of every table on its path
            return {h.table: self._content(h.source) for h in source.view.members}
        return self._fingerprint(source)

    def source_columns(self, table: str) -> dict[str, str]:
        """Column names and types of a source, from its catalog or file metadata only."""
        return self._columns(self._source(table))

    def dialect_of(self, table: str) -> str:
        return self.dialect

    def _columns(self, source: Source) -> dict[str, str]:
        view = source.view
        if view is None:
            return self._describe(source)
        # a person view's columns: each hop's declared columns under their view names, and
        # the person key; a key missing from its table is a schema error like a column
        out: dict[str, str] = {}
        for i, hop in enumerate(view.hops):
            cols = self._describe(hop.source)
            keys: list[tuple[str, str]] = [(view.person_key, "the person key")] if i == 0 else []
            if hop.key is not None:
                keys.append((hop.key, f"the key referencing {view.hops[i - 1].table!r}"))
            nxt = view.hops[i + 1] if i + 1 < len(view.hops) else None
            if nxt is not None and nxt.parent_key is not None:
                keys.append((nxt.parent_key, f"the key {nxt.table!r} references"))
            for name, what in keys:
                if name not in cols:
                    raise ConfigError(f"table {hop.table!r}: the source has no column {name!r} ({what})",
                                      hint="fix [people] in the configuration, or the source")
                if not reader.accepts_id(cols[name], self.dialect):
                    raise ConfigError(f"table {hop.table!r}: {what} {name!r} has type {cols[name]}; "
                                      "a key must be an integer, text or UUID",
                                      hint="keys are compared by their text, which is alike on every "
                                           "engine only for those types; cast it in a view")
            for src, name in hop.columns:
                if src not in cols:
                    close = difflib.get_close_matches(src, list(cols), n=1, cutoff=0.6)
                    raise ConfigError(f"table {hop.table!r}: the source has no column {src!r} (declared in "
                                      "the domain)", hint=(f"the source has {close[0]!r}" if close else
                                                           "the operator can list the source columns "
                                                           "with `dpsql init`"))
                out[name] = cols[src]
            if i == 0:
                out[PERSON] = cols[view.person_key]
        for table, hops in view.exists:
            for j, hop in enumerate(hops):
                # a hop's key is its own column; its parent_key is the previous hop's (TPC-H
                # names them apart: lineitem.l_orderkey = orders.o_orderkey)
                owned = [(hop, hop.key)] + ([(hops[j - 1], hop.parent_key)] if j else [])
                for holder, key in owned:
                    if key is not None and key not in self._describe(holder.source):
                        raise ConfigError(f"table {holder.table!r}: the source has no column {key!r} (a key)",
                                          hint="fix [people] in the configuration, or the source")
            out[f"{table}{SEP}{EXISTS}"] = _INTEGER[self.dialect]
        for column, _, _ in view.filters:   # the flags of conditions (their views' keys checked above)
            out[column] = _INTEGER[self.dialect]
        return out

    @contextlib.contextmanager
    def _read_source(self, table: str, source: Source, expect: dict | None) -> Iterator[Read]:
        """``_read``, and for a person view one read of every table on its path, the view's
        join relation as the scan (engines with one snapshot per read override it)."""
        view = source.view
        if view is None:
            with self._read(table, source, expect) as rd:
                yield rd
            return
        with contextlib.ExitStack() as stack:
            reads = [stack.enter_context(self._read_source(
                table, h.source, None if expect is None else expect.get(h.table, {"missing": True})))
                for h in view.members]
            yield ViewRead(reads[0], view.relation([r.scan for r in reads]).subquery("__view"))

    def check_schema(self, schema: TableSchema) -> dict[str, str]:
        """Refuse, before anything is counted, a source whose metadata does not fit the
        declared domain: a missing column, a type no total conversion exists for, or an id
        whose text differs between engines.  Messages name declared columns and catalog
        types only (never a value)."""
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
                          if close else "the operator can list the source columns with `dpsql init`"))
        for att in schema.attributes:
            if not reader.accepts(att, columns[att.name], self.dialect):
                raise ConfigError(
                    f"table {schema.name!r}: column {att.name!r} has type {columns[att.name]} in the "
                    f"source, which a {att.kind} column with "
                    f"{'text' if isinstance(att, Categorical) and att.python_type is str else 'numeric'} "
                    "values cannot read",
                    hint="declare the column with a matching kind, or convert it in the source "
                         "(CHAR(n), dates and other types: a view casting to text or a number)")
        if source.view is not None:
            # the person view's flags: each condition compares columns with constants their
            # source types take as they are (no row's value converted: flag_type_problem)
            for _, view, cond in source.view.filters:
                types = {}
                for hop in view.hops:
                    cols = self._describe(hop.source)
                    types.update({name: cols[src] for src, name in hop.columns if src in cols})
                problem = flag_type_problem(view.table, cond, types, self.dialect, self.constant_error)
                if problem is not None:
                    raise ConfigError(f"table {schema.name!r}: {problem[0]}", hint=problem[1])
        if source.id_column and not reader.accepts_id(columns[source.id_column], self.dialect):
            raise ConfigError(
                f"table {schema.name!r}: the id column {source.id_column!r} has type "
                f"{columns[source.id_column]}; a privacy unit id must be an integer, text or UUID",
                hint="its text is hashed alike on every engine only for those types; cast it in a view")
        return columns

    # -- the measurement statement -------------------------------------------------------------
    def cells_query(self, schema: TableSchema, columns: Mapping[str, str], scan: exp.Expr,
                    bounded: bool = True, offsets: Sequence[str] = ()) -> exp.Select:
        """Every record's cells (and the lattice offsets of the ``offsets`` attributes),
        bounded per privacy unit when ``bounded``."""
        source = self._source(schema.name)
        conv = sqlgen.typed_conversions(schema, columns, self.dialect)
        rel = sqlgen.typed_relation(schema, source.id_column, scan)
        id_expr = exp.column(source.id_column, quoted=True) if source.id_column else None
        cells = sqlgen.cells_select(schema, rel, conv, id_expr, offsets)
        if source.id_column and bounded:
            return sqlgen.bounded(cells, len(schema.attributes), source.max_rows_per_id, self.dialect,
                                  offset_columns(schema, offsets), group_cells(schema, source))
        return cells

    def measurement_query(self, schema: TableSchema, cliques: Sequence[Clique], columns: Mapping[str, str],
                          scan: exp.Expr) -> tuple[exp.Select, list[str], list[Clique]]:
        """(the one counting statement, the used attributes in result order, the maximal
        cliques it counts)."""
        domain = schema.domain
        maximal = reduce_cliques(cliques)
        col_of = {a: sqlgen.cell_column(i) for i, a in enumerate(domain.attributes)}
        used = sorted({a for c in maximal for a in c}, key=domain.attributes.index)
        query = sqlgen.measurement_select(self.cells_query(schema, columns, scan), [col_of[a] for a in used],
                                          [[col_of[a] for a in c] for c in maximal])
        return query, used, maximal

    def count_marginals(self, schema: TableSchema, cliques: Sequence[Clique],
                        expect: dict | None = None) -> dict[Clique, np.ndarray]:
        """Exact counts; with ``expect`` (a :meth:`fingerprint`), only from that content."""
        check_cliques(schema, cliques)
        if not cliques:
            return {}
        source = self._source(schema.name)
        with self._lock:
            columns = self.check_schema(schema)
            with self._read_source(schema.name, source, expect) as rd:
                query, used, maximal = self.measurement_query(schema, cliques, columns, rd.scan)
                rows = rd.run(query, (source.hash_key or "") if source.id_column else None,
                              what="the measurement query")
        return spread(decode_rows(rows, used, maximal, schema.domain), cliques, maximal)

    def offsets_query(self, schema: TableSchema, requests: Sequence[tuple[Clique, str]],
                      cells: exp.Expr) -> tuple[exp.Select, list[str], list[Clique], list[str]]:
        """(the statement summing the lattice offsets, the used attributes, the maximal
        cliques, the summed attributes in result order) over a cells relation with offsets."""
        domain = schema.domain
        maximal = reduce_cliques([c for c, _ in requests])
        col_of = {a: sqlgen.cell_column(i) for i, a in enumerate(domain.attributes)}
        used = sorted({a for c in maximal for a in c}, key=domain.attributes.index)
        summed = offset_attributes(schema, requests)
        query = sqlgen.offsets_select(cells, [col_of[a] for a in used], [[col_of[a] for a in c] for c in maximal],
                                      offset_columns(schema, summed))
        return query, used, maximal, summed

    def sum_offsets(self, schema: TableSchema, requests: Sequence[tuple[Clique, str]],
                    expect: dict | None = None) -> dict[tuple[Clique, str], np.ndarray]:
        """Per requested (clique, binned attribute), the exact integer sum of the attribute's
        lattice offsets in every cell of the clique's marginal (``dpsql.measure.offsets``),
        over the same rows ``count_marginals`` counts (bounded alike per privacy unit)."""
        check_cliques(schema, [c for c, _ in requests])
        if not requests:
            return {}
        source = self._source(schema.name)
        with self._lock:
            columns = self.check_schema(schema)
            # _read_source, as count_marginals: a person view's scan is its join (issue 32)
            with self._read_source(schema.name, source, expect) as rd:
                cells = self.cells_query(schema, columns, rd.scan, offsets=offset_attributes(schema, requests))
                query, used, maximal, summed = self.offsets_query(schema, requests, cells)
                rows = rd.run(query, (source.hash_key or "") if source.id_column else None,
                              what="the measurement query")
        return decode_offsets(rows, used, maximal, summed, requests, schema.domain)

    def contributions(self, schema: TableSchema, cap: int) -> np.ndarray:
        """Exact histogram of a person view's persons by their rows, capped: ``out[n]`` is
        the number of persons with min(rows, cap) = n (n ≥ 1).  Private counts: only the
        exponential mechanism reads them (``dpsql.engine.people_bound``)."""
        source = self._source(schema.name)
        if source.view is None:
            raise ConfigError(f"table {schema.name!r} is not a view of a people schema")
        with self._lock:
            columns = self.check_schema(schema)
            with self._read_source(schema.name, source, None) as rd:
                cells = self.cells_query(schema, columns, rd.scan, bounded=False)
                per = (exp.select(exp.alias_(exp.Count(this=exp.Star()), "n"))
                       .from_(exp.alias_(exp.Subquery(this=cells), "__rows"))
                       .where(exp.Not(this=exp.Is(this=exp.column(sqlgen.ID), expression=exp.Null())))
                       .group_by(exp.column(sqlgen.ID)))
                capped = exp.Least(this=exp.column("n"), expressions=[exp.Literal.number(int(cap))])
                query = (exp.select(exp.alias_(capped, "m"), exp.alias_(exp.Count(this=exp.Star()), "p"))
                         .from_(exp.alias_(exp.Subquery(this=per), "__per")).group_by(exp.column("m")))
                rows = rd.run(query, what="counting rows per person")
        out = np.zeros(int(cap) + 1, dtype=np.int64)
        for m, p in rows:
            out[int(m)] += int(p)
        return out

    def truncation(self, schema: TableSchema, cap: int) -> tuple[int, int]:
        """Exact (Σ_p min(rows p's bound drops, ``cap``), Σ_p rows p keeps) over a person
        view's persons.  Private counts: only ``dpsql.engine.people_truncation`` reads them,
        and releases them with noise."""
        source = self._source(schema.name)
        if source.view is None:
            raise ConfigError(f"table {schema.name!r} is not a view of a people schema")
        n = len(schema.attributes)
        with self._lock:
            columns = self.check_schema(schema)
            with self._read_source(schema.name, source, None) as rd:
                raw = self.cells_query(schema, columns, rd.scan, bounded=False)
                kept = sqlgen.bounded(raw.copy(), n, source.max_rows_per_id, self.dialect,
                                      groups=group_cells(schema, source), keep_id=True)
                pid, count = exp.column(sqlgen.ID), exp.Count(this=exp.Star())
                every = (exp.select(exp.alias_(pid.copy(), "pid"), exp.alias_(count.copy(), "n"))
                         .from_(exp.alias_(exp.Subquery(this=raw), "__every"))
                         .where(exp.Not(this=exp.Is(this=pid.copy(), expression=exp.Null()))).group_by(pid.copy()))
                mine = (exp.select(exp.alias_(pid.copy(), "pid"), exp.alias_(count.copy(), "m"))
                        .from_(exp.alias_(exp.Subquery(this=kept), "__kept")).group_by(pid.copy()))
                m = exp.Coalesce(this=exp.column("m", table="b"), expressions=[exp.Literal.number(0)])
                dropped = exp.Least(this=exp.Sub(this=exp.column("n", table="a"), expression=m.copy()),
                                    expressions=[exp.Literal.number(int(cap))])
                query = (exp.select(exp.alias_(exp.Sum(this=dropped), "d"), exp.alias_(exp.Sum(this=m), "k"))
                         .from_(exp.alias_(exp.Subquery(this=every), "a"))
                         .join(exp.alias_(exp.Subquery(this=mine), "b"),
                               on=exp.EQ(this=exp.column("pid", table="a"), expression=exp.column("pid", table="b")),
                               join_type="LEFT"))
                rows = rd.run(query, source.hash_key or "", what="counting the rows the bound drops")
        d, k = rows[0]
        return int(d or 0), int(k or 0)

    # -- operator data check (local only: never reachable by analysts) --------------------------
    def data_check(self, schema: TableSchema, examples: int = 5) -> DataCheck:
        """Per column, how many values landed where (``reader.STATUSES``), with a few example
        values of each problem.  Reads raw rows: an operator tool (``dpsql check``)."""
        source = self._source(schema.name)
        with self._lock:
            columns = self.check_schema(schema)
            conv = sqlgen.typed_conversions(schema, columns, self.dialect)
            with self._read_source(schema.name, source, None) as rd:
                rel = sqlgen.typed_relation(schema, source.id_column, rd.scan)
                statuses = exp.select(*[exp.alias_(conv[a.name].status, f"s{i}")
                                        for i, a in enumerate(schema.attributes)]).from_(
                    sqlgen.layered(rel, conv))
                names = [f"s{i}" for i in range(len(schema.attributes))]
                query = sqlgen.measurement_select(statuses, names, [[s] for s in names] + [[]])
                rows = rd.run(query, what="checking the rows")
                total = sum(int(r[-1]) for r in rows if all(v is None for v in r[:-1]))
                out = []
                for i, a in enumerate(schema.attributes):
                    counts = {r[i]: int(r[-1]) for r in rows if r[i] is not None}
                    ex = {}
                    for st in [s for s in reader.PROBLEMS if counts.get(s)]:
                        ex[st] = self._examples(rd, rel, conv, a.name, st, examples)
                    out.append(ColumnCheck(a.name, counts, ex))
                dropped = None
                if source.id_column:
                    kept = exp.select(exp.alias_(exp.Count(this=exp.Star()), "n")).from_(
                        exp.alias_(exp.Subquery(this=self.cells_query(schema, columns, rd.scan)), "__kept"))
                    dropped = total - int(rd.run(kept, source.hash_key or "", what="checking the rows")[0][0])
        return DataCheck(schema.name, total, out, dropped)

    def _examples(self, rd: Read, rel, conv, name: str, status: str, limit: int) -> list:
        raw = exp.cast(exp.column(name, quoted=True), "VARCHAR")
        inner = exp.select(exp.alias_(raw, "v"), exp.alias_(conv[name].status, "st")).from_(sqlgen.layered(rel, conv))
        query = (exp.select(exp.column("v"), exp.alias_(exp.Count(this=exp.Star()), "n"))
                 .from_(exp.alias_(exp.Subquery(this=inner), "__ex"))
                 .where(exp.EQ(this=exp.column("st"), expression=exp.Literal.string(status)))
                 .group_by(exp.column("v"))
                 .order_by(exp.Ordered(this=exp.column("n"), desc=True), exp.Ordered(this=exp.column("v")))
                 .limit(int(limit)))
        return [(v, int(n)) for v, n in rd.run(query, what="checking the rows")]


def group_cells(schema: TableSchema, source: Source) -> tuple[list[int], int, int] | None:
    """A view's group bound as ``sqlgen.bounded`` takes it: the group attributes' cell
    indices, g and r (None without one)."""
    groups = source.view.groups if source.view is not None else None
    if groups is None:
        return None
    names = [a.name for a in schema.attributes]
    return [names.index(a) for a in groups.attributes], groups.max_groups, groups.max_rows_per_group


@contextlib.contextmanager
def consistent_files(table: str, fingerprint, expect: dict | None) -> Iterator[None]:
    """For file sources: the content must be ``expect`` before the read and unchanged after."""
    before = fingerprint()
    if expect is not None and before != expect:
        raise changed_error(table, while_reading=False)
    yield
    if fingerprint() != before:
        raise changed_error(table, while_reading=True)


__all__ = ["Backend", "SqlBackend", "DataCheck", "ColumnCheck", "Read", "reduce_cliques", "project_counts",
           "decode", "decode_rows", "spread", "engine_error", "changed_error", "scrub", "consistent_files"]
