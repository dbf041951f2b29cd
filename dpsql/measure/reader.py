"""The total reader: every physical record of a source lands in exactly one cell of every
attribute, whatever bytes it holds (``docs/privacy.md`` §8.1, ``docs/domains.md``).

CSV (declared dialect, never sniffed) in two stages:

1. *Framing* (:func:`normalise_csv`, Python, C-speed ``bytes``/``str`` operations on
   chunks).  Records end at ``\\n``, ``\\r\\n`` or a lone ``\\r``; bytes are decoded with
   the declared encoding, undecodable bytes become U+FFFD; NUL and U+FFFF become U+FFFD; a
   record longer than ``max_record_bytes`` becomes the one-character marker U+FFFF.  The
   header record is split off and parsed here.  The output is a UTF-8 file of LF-terminated
   lines containing no ``\\r``: DuckDB's CSV reader, run with every option explicit
   (:func:`line_scan`), can only return it one line per row.  DuckDB's own framing is not
   used because it is not local (a lone ``\\r`` starts records, an unclosed quote swallows
   the rest of the file, some bytes fail the latin-1 decoder; checked on 1.4 and 2.0).
2. *Fields* (SQL, :func:`csv_fields`).  An empty line is not a record when the header has
   two or more fields (it could not be one).  A line is well formed iff it matches the dialect's
   field grammar with exactly the header's number of fields: a quoted field is
   ``q([^q]|qq)*q`` (or ``q([^qe]|e.)*q`` with another escape), an unquoted field is empty
   or starts with a non-quote and holds no delimiter.  Fields are cut by one RE2 match;
   a line that is not well formed is *malformed* and every attribute takes its invalid
   place.  Numbers are parsed by a fixed grammar (no sniffed types, no locale) and a
   TRY_CAST that can only see text the grammar accepted.

Parquet and DuckDB tables are typed: the column types are read from metadata (never from
rows) and each declared attribute is converted by a total expression for its type, or the
source is refused before anything is counted (:func:`typed_column`).

The cell expressions come from ``dpsql.measure.cellsql.index_sql`` after this conversion, with
the unreadable cases sent to ``Attribute.invalid_index`` (``dpsql.domain``); typed columns take
shortcuts chosen from their catalog type (:func:`uniform_bins_sql`, :func:`label_index_sql`,
:func:`integer_value_sql`; ``docs/domains.md``, "Typed columns take shortcuts").  Each expression
also has a *status* twin for ``dpsql check`` (:data:`STATUSES`).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Sequence

import numpy as np

from dpsql.domain import Attribute, Categorical, IntegerRange
from dpsql.errors import ConfigError
from dpsql.measure.cellsql import (bins_sql, index_sql, is_nan, outside_range, time_index_sql, time_literal,
                                   time_of_day_index_sql, time_of_day_literal)
from dpsql.measure.source import CsvDialect, Source
from dpsql.sql.syntax import data_type, exp
from dpsql.temporal import Temporal
from dpsql.timeofday import TimeOfDayRange
from dpsql.timeaxis import DATE_PATTERN, TIME_PATTERN, TIMESTAMP_PATTERN

CHUNK = 8 << 20
OVERLONG = "\uffff"
OVERLONG_BYTES = OVERLONG.encode("utf-8")
# The number grammar, in the subset of regular-expression syntax that RE2 (DuckDB), POSIX
# AREs (PostgreSQL) and java.util.regex (Spark) read alike: no escapes (a literal tab,
# ``[.]``), no classes but explicit brackets.  The exponent has at most two digits and a
# number at most MAX_NUMBER_CHARS characters, so every accepted text is a finite, normal
# double (|x| < 1e200): PostgreSQL's float8 input raises on overflow and underflow where
# DuckDB and Java return inf or 0, and a text that is an error on one engine would be a
# number on another.
_NUMBER = "[ \t]*[+-]?(?:[0-9]+[.]?[0-9]*|[.][0-9]+)(?:[eE][+-]?[0-9]{1,2})?[ \t]*"
NUMBER_CHARS = "0123456789+-.eE \t"
MAX_NUMBER_CHARS = 100

#: Per-value outcomes reported by ``dpsql check``; the first three are expected, the rest
#: are values the declared domain does not hold (where each lands: docs/domains.md).
STATUSES = ("value", "other", "null", "null_not_nullable", "unreadable", "not_a_label",
            "below_range", "above_range", "not_integer", "malformed", "no_id")
PROBLEMS = STATUSES[3:]


# --- stage 1: framing ------------------------------------------------------------------------

@dataclass(frozen=True)
class Framed:
    path: Path            # normalised copy (UTF-8, LF lines, no header)
    header: tuple[str, ...]
    fingerprint: dict     # {"size", "sha256"} of the bytes read
    stat_key: tuple


def split_fields(line: str, dialect: CsvDialect) -> list[str] | None:
    """Python twin of the SQL field grammar: the raw fields, or None when malformed."""
    pattern = _field_regex(dialect, python=True)
    out, pos, n = [], 0, len(line)
    rx = re.compile(pattern, re.S)
    while True:
        m = rx.match(line, pos)
        if m is None:
            return None
        out.append(m.group(0))
        pos = m.end()
        if pos == n:
            return out
        if line[pos] != dialect.delimiter:
            return None
        pos += 1
        if pos == n:
            out.append("")
            return out


def unquote(field: str, dialect: CsvDialect) -> str:
    q, e = dialect.quote, dialect.escape
    if not q or not field.startswith(q):
        return field
    inner = field[1:-1]
    if e == q:
        return inner.replace(q + q, q)
    return re.sub(re.escape(e) + "(.)", r"\1", inner, flags=re.S)


def _field_regex(d: CsvDialect, python: bool = False) -> str:
    """One field (no groups): quoted, or unquoted (empty or not starting with the quote)."""
    esc = re.escape
    delim = esc(d.delimiter)
    if not d.quote:
        return f"[^{delim}]*"
    q, e = esc(d.quote), esc(d.escape or d.quote)
    if d.escape in ("", d.quote):
        quoted = f"{q}(?:[^{q}]|{q}{q})*{q}"
    else:
        quoted = f"{q}(?:[^{q}{e}]|{e}.)*{q}"
    return f"(?:{quoted}|(?:[^{delim}{q}][^{delim}]*)?)"


_FFFD = "\ufffd".encode("utf-8")


def _normalise(data: bytes, encoding: str) -> bytes:
    """Whole records (each ending in \n or \r) → UTF-8 with \n ends, NUL and U+FFFF as
    U+FFFD.  \r is never part of a multi-byte sequence in the supported encodings, so
    unifying record ends first and decoding per block equals decoding the whole file."""
    if b"\r" in data:  # the guards scan at memchr speed; most files need no rewrite
        data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
    try:
        if encoding != "utf-8":
            raise UnicodeDecodeError(encoding, b"", 0, 1, "not utf-8")
        data.decode("utf-8")          # valid UTF-8 (the common case): keep the bytes
    except UnicodeDecodeError:
        data = data.decode(encoding, errors="replace").encode("utf-8")
    if b"\x00" in data:
        data = data.replace(b"\x00", _FFFD)
    if OVERLONG_BYTES in data:
        data = data.replace(OVERLONG_BYTES, _FFFD)
    return data


def normalise_csv(source: Source, workdir: Path) -> Framed:
    """Stage 1 (module doc): frame, decode and hash the file; write the normalised copy (a
    copy of private rows: ``workdir`` is private, ``dpsql.measure.scratch``, and a partial
    copy is removed when framing fails)."""
    out_path = Path(workdir) / f"records-{os.getpid()}-{id(source)}.txt"
    try:
        return _normalise_csv(source, out_path)
    except BaseException:
        try:
            os.unlink(out_path)
        except OSError:
            pass
        raise


def _normalise_csv(source: Source, out_path: Path) -> Framed:
    d = source.dialect
    path = source.file
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ConfigError(f"source file not found: {path}",
                          hint="fix the path in the configuration") from None
    stat_key = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    digest = hashlib.sha256()
    limit = d.max_record_bytes
    header: list = [None if d.header else d.field_names]
    pending, overlong = b"", False
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(path, "rb") as fh, os.fdopen(fd, "wb") as out:
        def emit(records: bytes) -> None:
            data = _normalise(records, d.encoding)
            if header[0] is None and data:
                nl = data.index(b"\n")
                header[0] = parse_header(data[:nl].decode("utf-8"), d, source)
                data = data[nl + 1:]
            if data:
                out.write(_limit_lines(data, limit))

        while True:
            raw = fh.read(CHUNK)
            digest.update(raw)
            last = not raw
            buf = pending + raw
            if overlong:  # skip to the end of the overlong record
                nl, cr = buf.find(b"\n"), buf.find(b"\r")
                if cr == len(buf) - 1 and not last:
                    cr = -1   # a final \r may be half of \r\n: decide with the next chunk
                ends = [i for i in (nl, cr) if i >= 0]
                if not ends:
                    pending = b"\r" if buf.endswith(b"\r") else b""
                    if last:
                        emit(OVERLONG_BYTES + b"\n")
                        break
                    continue
                end = min(ends)
                if buf[end:end + 2] == b"\r\n":
                    end += 1
                emit(OVERLONG_BYTES + b"\n")
                buf, overlong = buf[end + 1:], False
            if last:
                if buf:
                    emit(buf if buf.endswith((b"\n", b"\r")) else buf + b"\n")
                break
            # complete records end at the last \n or \r, but a final \r may be half of \r\n
            cut = max(buf.rfind(b"\n"), buf.rfind(b"\r", 0, len(buf) - 1))
            complete, pending = buf[:cut + 1], buf[cut + 1:]
            if len(pending) > limit + 1:   # bytes of one unfinished record: surely overlong
                overlong, pending = True, b""
            if complete:
                emit(complete)
    if header[0] is None:
        raise ConfigError(f"{path}: the file is empty but the source declares a header",
                          hint="write the header line, or set header = false with columns = [...]")
    return Framed(out_path, header[0], {"size": stat_key[0], "sha256": digest.hexdigest()}, stat_key)


def _limit_lines(data: bytes, limit: int) -> bytes:
    """Replace every line longer than ``limit`` bytes by the overlong marker."""
    if len(data) <= limit:
        return data
    nl = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == 10)
    starts = np.concatenate(([0], nl[:-1] + 1))
    long = np.flatnonzero(nl - starts > limit)
    if long.size == 0:
        return data
    parts, prev = [], 0
    for i in long.tolist():
        parts.append(data[prev:int(starts[i])])
        parts.append(OVERLONG_BYTES)
        prev = int(nl[i])
    parts.append(data[prev:])
    return b"".join(parts)


def parse_header(line: str, d: CsvDialect, source: Source) -> tuple[str, ...]:
    if line == OVERLONG or "\ufffd" in line:
        raise ConfigError(f"{source.path}: the header line is too long or not valid {d.encoding}",
                          hint="check source.encoding and that the first line is the header")
    fields = split_fields(line, d)
    if fields is None:
        raise ConfigError(f"{source.path}: the header line does not parse with the declared "
                          f"dialect (delimiter {d.delimiter!r}, quote {d.quote!r})",
                          hint="declare source.delimiter / quote / escape to match the file")
    names = tuple(unquote(f, d) for f in fields)
    if len(set(names)) != len(names):
        raise ConfigError(f"{source.path}: the header names a field twice",
                          hint="rename the duplicate header fields")
    return names


def line_scan(path: Path, dialect: CsvDialect) -> exp.Expr:
    """DuckDB ``read_csv`` of a normalised file, one VARCHAR per line, every option given."""
    def opt(name, value):
        return exp.EQ(this=exp.column(name), expression=value)

    s = exp.Literal.string
    columns = exp.Struct(expressions=[exp.PropertyEQ(this=exp.Literal.string("line"),
                                                     expression=s("VARCHAR"))])
    return exp.func("read_csv", s(str(path)),
                    opt("columns", columns),
                    opt("delim", exp.func("chr", exp.Literal.number(13))),  # never present
                    opt("quote", s("")), opt("escape", s("")), opt("comment", s("")),
                    opt("header", exp.false()), opt("auto_detect", exp.false()),
                    opt("skip", exp.Literal.number(0)), opt("new_line", s("\\n")),
                    opt("strict_mode", exp.false()), opt("encoding", s("utf-8")),
                    opt("max_line_size", exp.Literal.number(dialect.max_record_bytes + 64)),
                    opt("parallel", exp.true()))


# --- stage 2: fields and cells (SQL) --------------------------------------------------------

def _s(text: str) -> exp.Literal:
    return exp.Literal.string(text)


def record_grammar(dialect: CsvDialect, nfields: int, wanted) -> tuple[str, str]:
    """(validity pattern, extraction pattern with a named group per wanted field)."""
    f = _field_regex(dialect)
    delim = re.escape(dialect.delimiter)
    valid = "^" + delim.join([f] * nfields) + "$"
    wanted = set(wanted)
    parts = [f"(?P<f{i}>{f})" if i in wanted else f for i in range(nfields)]
    return valid, "^" + delim.join(parts) + "$"


def csv_fields(scan: exp.Expr, dialect: CsvDialect, header: Sequence[str],
               names: Sequence[str]) -> exp.Select:
    """SELECT line, ``__ok`` (well formed), and one raw text column per wanted field name.

    A line without the quote character has only unquoted fields, so the grammar reduces to
    "exactly n−1 delimiters" and ``string_split`` cuts it (the fast path, ~40x cheaper than
    the RE2 extraction); only lines holding a quote take the full grammar."""
    n = len(header)
    idx = [header.index(x) for x in names]
    valid, extract = record_grammar(dialect, n, range(n))
    line = exp.column("line")
    split = exp.func("string_split", line.copy(), _s(dialect.delimiter))
    split_ok = exp.EQ(this=exp.func("len", split.copy()), expression=exp.Literal.number(n))
    if dialect.quote:
        quoted = exp.func("contains", line.copy(), _s(dialect.quote))
        # Anonymous: sqlglot would read a third argument as a position
        struct = exp.Anonymous(this="regexp_extract", expressions=[
            line.copy(), _s(extract), exp.Array(expressions=[_s(f"f{i}") for i in range(n)])])
        as_list = exp.Array(expressions=[exp.Dot(this=struct.copy(), expression=exp.to_identifier(f"f{i}"))
                                         for i in range(n)]) if n > 1 else None
        if as_list is None:
            as_list = exp.Array(expressions=[exp.Dot(this=struct, expression=exp.to_identifier("f0"))])
        ok: exp.Expr = exp.Case().when(quoted.copy(), exp.func("regexp_full_match", line.copy(),
                                                                _s(valid))).else_(split_ok)
        parts: exp.Expr = exp.Case().when(quoted, as_list).else_(split)
    else:
        ok, parts = split_ok, split
    well = exp.and_(exp.NEQ(this=line.copy(), expression=_s(OVERLONG)), ok)
    inner = exp.select(exp.alias_(exp.func("coalesce", exp.column("line"), _s("")), "line")).from_(scan)
    if n > 1:
        # an empty line is no one's record (with two or more fields it cannot be one): a
        # row-wise filter on the line alone, so a record "\n<row>" is one unit, not two
        # (issue 34, docs/privacy.md §2).  With one field it is a record whose field is empty.
        inner = inner.where(exp.func("coalesce", exp.column("line"), _s("")).neq(_s("")))
    mid = exp.select(exp.column("line"), exp.alias_(well, "__ok"), exp.alias_(parts, "__f")) \
        .from_(exp.alias_(exp.Subquery(this=inner), "__lines"))
    cols: list[exp.Expr] = [exp.column("line"), exp.column("__ok")]
    for name, i in zip(names, idx):
        item = exp.Anonymous(this="list_extract", expressions=[exp.column("__f"), exp.Literal.number(i + 1)])
        cols.append(exp.alias_(exp.Case().when(exp.column("__ok"), item).else_(_s("")), name, quoted=True))
    return exp.select(*cols).from_(exp.alias_(exp.Subquery(this=mid), "__fields"))


def unquote_sql(x: exp.Expr, d: CsvDialect) -> exp.Expr:
    """The text of a raw CSV field: outer quotes removed, escaped quotes undone."""
    if not d.quote:
        return x
    inner = exp.Substring(this=x.copy(), start=exp.Literal.number(2),
                          length=exp.Sub(this=exp.Length(this=x.copy()), expression=exp.Literal.number(2)))
    if d.escape in ("", d.quote):
        body = exp.func("replace", inner, _s(d.quote * 2), _s(d.quote))
    else:
        body = exp.func("regexp_replace", inner, _s(re.escape(d.escape) + "(.)"), _s("\\1"), _s("gs"))
    return exp.Case().when(exp.func("starts_with", x.copy(), _s(d.quote)), body).else_(x.copy())


def number_sql(text: exp.Expr) -> exp.Expr:
    """DOUBLE from text accepted by the number grammar, else NULL; never raises, on any
    engine.  ``translate`` first removes every character the grammar may use: whatever
    remains (a line break in particular, before which java.util.regex's ``$`` would also
    match) rejects the text, so the anchored pattern is a full match on every engine.  The
    cast only sees text the grammar accepted (CASE evaluates it only then); TRY_CAST is
    belt and braces where the engine has it (sqlglot renders a plain CAST elsewhere)."""
    ok = exp.and_(
        exp.LTE(this=exp.Length(this=text.copy()), expression=exp.Literal.number(MAX_NUMBER_CHARS)),
        exp.EQ(this=exp.func("translate", text.copy(), _s(NUMBER_CHARS), _s("")), expression=_s("")),
        exp.RegexpLike(this=text.copy(), expression=_s("^(?:" + _NUMBER + ")$")))
    # the cast skips the blanks the grammar allows (DuckDB 1.4 and 2.0, PostgreSQL's float8
    # input, Java's parseDouble; the property test compares with Python's float)
    value = exp.TryCast(this=text.copy(), to=exp.DataType.build("DOUBLE"))
    return exp.Case().when(ok, value)


def parse_number(text: str) -> float | None:
    """Python twin of :func:`number_sql`."""
    if len(text) > MAX_NUMBER_CHARS or not re.fullmatch(_NUMBER, text):
        return None
    return float(text.strip(" \t"))   # never inf or a subnormal (the grammar's exponent bound)


def _lit(n: int) -> exp.Expr:
    return exp.Literal.number(n)


def _bin_status(att: Attribute, x: exp.Expr) -> exp.Expr:
    """Status of a non-NULL, non-NaN number: below/above range, not an integer, or value."""
    bins = [b for b in att.bin_bounds() or [] if b is not None]   # the values' cells, not NULL's
    lo, hi = bins[0][0], bins[-1][1]
    xd = exp.cast(x.copy(), "DOUBLE")
    case = exp.Case().when(exp.LT(this=xd.copy(), expression=exp.cast(exp.Literal.number(repr(float(lo))), "DOUBLE")),
                           _s("below_range"))
    case = case.when(exp.GT(this=xd.copy(), expression=exp.cast(exp.Literal.number(repr(float(hi))), "DOUBLE")),
                     _s("above_range"))
    if att.kind == "integer":
        case = case.when(exp.NEQ(this=xd.copy(), expression=exp.func("floor", xd.copy())), _s("not_integer"))
    return case.else_(_s("value"))


@dataclass
class Converted:
    """A column's conversion in two SELECT layers: ``pre`` (alias, expression over the raw
    columns) are computed first, so that ``cell`` and ``status`` (over those aliases and
    the record's ``__ok``) never repeat the parsing inside every CASE branch."""

    pre: list
    cell: exp.Expr     # cell index, never NULL
    status: exp.Expr   # one of STATUSES
    pre2: list | None = None        # a second layer (over ``pre``'s aliases)


def convert_text(att: Attribute, raw: exp.Expr, ok: exp.Expr,
                 d: CsvDialect | None, tag: str, dialect: str) -> Converted:
    """Cell and status of a text value; ``raw`` is the field as read (NULL = SQL NULL),
    ``ok`` is False for a malformed record; ``d`` the CSV dialect (None: typed VARCHAR);
    ``dialect`` the engine the SQL is rendered for."""
    inv = _lit(att.invalid_index)
    is_null: exp.Expr
    if d is not None:
        is_null = exp.In(this=raw.copy(), expressions=[_s(v) for v in d.null]) if d.null else exp.false()
        text = unquote_sql(raw, d)
    else:
        is_null = exp.Is(this=raw.copy(), expression=exp.Null())
        text = raw.copy()
    z, t, x = (exp.column(f"__{c}{tag}") for c in "ztx")
    pre = [(z.name, exp.func("coalesce", is_null, exp.true())), (t.name, text)]
    null_status = _s("null" if att.nullable else "null_not_nullable")
    cell = exp.Case().when(exp.Not(this=ok.copy()), inv).when(z.copy(), _lit(att.null_place))
    status = exp.Case().when(exp.Not(this=ok.copy()), _s("malformed")).when(z.copy(), null_status)
    if isinstance(att, TimeOfDayRange):
        # microseconds since midnight from the text's digits: the same integer on every
        # engine (Spark has no TIME type), NULL for text that is not a time of day
        pre2 = [(x.name, time_of_day_text_sql(t.copy()))]
        missing = exp.Is(this=x.copy(), expression=exp.Null())
        cell = cell.when(missing.copy(), inv).else_(time_of_day_index_sql(att, x.copy(), "micros", False, dialect),
                                                    copy=False)
        status = status.when(missing, _s("unreadable")).else_(_time_of_day_status(att, x, "micros"))
        return Converted(pre, cell, status, pre2)
    if isinstance(att, Temporal):
        pre2 = [(x.name, time_text_sql(t.copy(), att.kind))]
        missing = exp.Is(this=x.copy(), expression=exp.Null())
        cell = cell.when(missing.copy(), inv).else_(time_index_sql(att, x.copy(), att.kind, nullable_input=False,
                                                                   dialect=dialect),
                                                    copy=False)     # fresh: no copy of its bin chain
        status = status.when(missing, _s("unreadable")).else_(_time_status(att, x, att.kind))
        return Converted(pre, cell, status, pre2)
    if isinstance(att, Categorical) and att.python_type is str:
        if d is None and dialect == "duckdb" and att.null_place == att.invalid_index:
            # typed text: the lookup sends NULL to invalid_index, which is NULL's place here
            # too, so the CASE (which splits every vector into NULL and non-NULL rows) goes
            label_cell = label_index_sql(att, raw, dialect)
        else:
            label_cell = cell.else_(label_index_sql(att, t, dialect))
        lab = exp.In(this=t.copy(), expressions=[_s(v) for v in att.labels_])
        unreadable = exp.Like(this=t.copy(), expression=_s("%\ufffd%"))
        status = (status.when(lab, _s("value")).when(unreadable, _s("unreadable"))
                  .else_(_s("other" if att.other_index is not None else "not_a_label")))
        return Converted(pre, label_cell, status)
    pre2 = [(x.name, number_sql(t.copy()))]
    missing = exp.Is(this=x.copy(), expression=exp.Null())
    arithmetic = text_bins_sql(att, x, dialect)
    cell = cell.when(missing.copy(), inv).else_(index_sql(att, x.copy()) if arithmetic is None
                                                else arithmetic)
    status = status.when(missing, _s("unreadable")).else_(_number_status(att, x))
    return Converted(pre, cell, status, pre2)


#: every character the ISO date and timestamp grammar may use (``translate`` removes them
#: first: whatever remains, a line break in particular, rejects the text on every engine)
TIME_CHARS = "0123456789-:. T"
MAX_TIME_CHARS = 26


def _int_at(text: exp.Expr, start: int, length: int) -> exp.Expr:
    return exp.TryCast(this=exp.Substring(this=text.copy(), start=_lit(start), length=_lit(length)),
                       to=exp.DataType.build("INT"))


def time_text_sql(text: exp.Expr, kind: str) -> exp.Expr:
    """DATE (``kind`` date) or naive TIMESTAMP from ISO 8601 text, else NULL; never raises,
    on any engine (the Python twin is ``dpsql.timeaxis.parse_date`` / ``parse_timestamp``).

    The text must match the grammar (``dpsql.timeaxis``: ``YYYY-MM-DD``, a timestamp adds
    ``[ T]HH:MM[:SS[.ffffff]]``) and name a real day (the day within its month, February
    29 in leap years, year 1 or later); only then is it cast (CASE evaluates the cast only
    for such text, so PostgreSQL, whose CAST has no TRY form, never sees a bad one)."""
    pattern = DATE_PATTERN if kind == "date" else f"{DATE_PATTERN}|{TIMESTAMP_PATTERN}"
    shape = exp.and_(
        exp.LTE(this=exp.Length(this=text.copy()), expression=_lit(MAX_TIME_CHARS)),
        exp.EQ(this=exp.func("translate", text.copy(), _s(TIME_CHARS), _s("")), expression=_s("")),
        exp.RegexpLike(this=text.copy(), expression=_s(pattern)))
    y, m, d = _int_at(text, 1, 4), _int_at(text, 6, 2), _int_at(text, 9, 2)

    def mod(a: exp.Expr, n: int) -> exp.Expr:
        return exp.EQ(this=exp.Paren(this=exp.Mod(this=a.copy(), expression=_lit(n))), expression=_lit(0))
    leap = exp.or_(exp.and_(mod(y, 4), exp.Not(this=mod(y, 100))), mod(y, 400))
    days = (exp.Case().when(exp.EQ(this=m.copy(), expression=_lit(2)),
                            exp.Case().when(leap, _lit(29)).else_(_lit(28)))
            .when(exp.In(this=m.copy(), expressions=[_lit(4), _lit(6), _lit(9), _lit(11)]), _lit(30))
            .else_(_lit(31)))
    real_day = exp.and_(exp.GTE(this=y, expression=_lit(1)), exp.LTE(this=d, expression=days))
    target = "DATE" if kind == "date" else "TIMESTAMPNTZ"
    value = exp.TryCast(this=exp.func("replace", text.copy(), _s("T"), _s(" ")), to=exp.DataType.build(target))
    return exp.Case().when(shape, exp.Case().when(real_day, value))


def _big_at(text: exp.Expr, start: int, length: int) -> exp.Expr:
    return exp.TryCast(this=exp.Substring(this=text.copy(), start=_lit(start), length=_lit(length)),
                       to=exp.DataType.build("BIGINT"))


def time_of_day_text_sql(text: exp.Expr) -> exp.Expr:
    """Microseconds since midnight (a BIGINT) of ``HH:MM[:SS[.ffffff]]`` text, else NULL;
    never raises, on any engine (the Python twin is ``dpsql.timeaxis.parse_time``): only text
    of the grammar reaches the arithmetic, whose parts are digits by then."""
    shape = exp.and_(
        exp.LTE(this=exp.Length(this=text.copy()), expression=_lit(15)),
        exp.EQ(this=exp.func("translate", text.copy(), _s("0123456789:."), _s("")), expression=_s("")),
        exp.RegexpLike(this=text.copy(), expression=_s(TIME_PATTERN)))
    n = exp.Length(this=text.copy())
    seconds = exp.Case().when(exp.GT(this=n.copy(), expression=_lit(5)), _big_at(text, 7, 2)).else_(_lit(0))
    frac = exp.Case().when(exp.GT(this=n.copy(), expression=_lit(8)), exp.TryCast(
        this=exp.func("rpad", exp.Substring(this=text.copy(), start=_lit(10), length=_lit(6)), _lit(6), _s("0")),
        to=exp.DataType.build("BIGINT"))).else_(_lit(0))

    def times(a: exp.Expr, k: int) -> exp.Expr:
        return exp.Mul(this=a, expression=_lit(k))
    total = exp.Add(this=exp.Add(this=exp.Add(this=times(_big_at(text, 1, 2), 3_600_000_000),
                                              expression=times(_big_at(text, 4, 2), 60_000_000)),
                                 expression=times(seconds, 1_000_000)), expression=frac)
    return exp.Case().when(shape, exp.Paren(this=total))


def _time_of_day_status(att: TimeOfDayRange, x: exp.Expr, family: str) -> exp.Expr:
    """Status of a non-NULL time of day: before the axis, after it, or a value."""
    return (exp.Case().when(exp.LT(this=x.copy(), expression=time_of_day_literal(att.lo, family)), _s("below_range"))
            .when(exp.GT(this=x.copy(), expression=time_of_day_literal(att.hi, family)), _s("above_range"))
            .else_(_s("value")))


def _time_status(att: Temporal, x: exp.Expr, family: str) -> exp.Expr:
    """Status of a non-NULL time value: before the axis, after it, or a value."""
    return (exp.Case().when(exp.LT(this=x.copy(), expression=time_literal(att, att.lo, family)), _s("below_range"))
            .when(exp.GTE(this=x.copy(), expression=time_literal(att, att.end, family)), _s("above_range"))
            .else_(_s("value")))


def label_index_sql(att: Categorical, text: exp.Expr, dialect: str) -> exp.Expr:
    """Cell of a non-NULL text value for a categorical with string labels.

    In DuckDB one hash lookup: ``TRY_CAST`` to an ENUM of the labels (exact byte equality,
    NULL for every other string, never an error) and the ENUM's code, which is the label's
    position; the rest go to :attr:`Attribute.invalid_index` like ``cellsql.index_sql``'s ELSE, and
    so does NULL (the DuckDB form only: the caller handles NULL first unless its place is
    that cell).
    ``cellsql.index_sql``'s CASE tests the labels one by one (41 comparisons for adult's
    native_country on every row that is not a listed country), which made these columns a
    large part of a measurement's time at 100M rows (bench/RESULTS.md, issue 19).  Other
    engines keep the portable CASE (equal cells: tests/measure/test_engines.py)."""
    if dialect != "duckdb":
        return index_sql(att, text.copy())
    enum = exp.DataType(this=exp.DataType.Type.ENUM, expressions=[_s(v) for v in att.labels_])
    code = exp.Anonymous(this="enum_code", expressions=[exp.TryCast(this=text.copy(), to=enum)])
    return exp.func("coalesce", code, _lit(att.invalid_index))


# Integer types every value of which is a BIGINT (sqlglot's names; DuckDB's unsigned types
# up to UINTEGER included, UBIGINT and the 128-bit types excluded).
_WITHIN_BIGINT = frozenset({"TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT",
                            "UTINYINT", "USMALLINT", "UMEDIUMINT", "UINT"})
_ARITHMETIC_BOUND = 1 << 62


def _within_bound(att: Attribute) -> bool:
    """Every bound or label of an integer attribute or integer-labelled categorical lies
    strictly inside ±2^62."""
    if isinstance(att, IntegerRange):
        return -_ARITHMETIC_BOUND < att.lo <= att.hi < _ARITHMETIC_BOUND
    return isinstance(att, Categorical) and all(-_ARITHMETIC_BOUND < v < _ARITHMETIC_BOUND for v in att.labels_)


def integer_value_sql(att: Attribute, x: exp.Expr, sql_type: str, dialect: str) -> exp.Expr | None:
    """A non-NULL value of an integer-typed column as an expression that lands in the same
    cell and every value of which is a BIGINT; None where there is none (``accepts``
    refuses such a column from its type, before anything is counted).

    Types within BIGINT (every PostgreSQL and Spark integer type) are returned as they are.
    DuckDB's UBIGINT, HUGEINT and UHUGEINT are first clamped to ±2^62 in their own type:
    an attribute whose bounds (integer) or labels (categorical) lie inside ±2^62 puts a
    value beyond in the same cell as the clamped one (an end bin; not a label).  Without
    the clamp a UHUGEINT above 2^63 made ``x < -3`` or ``x = -1`` a conversion error in
    DuckDB (1.4, 2.0): one row could fail the query.  Numeric attributes compare
    ``CAST(x AS DOUBLE)``, which is defined for every integer."""
    name = _type_name(sql_type, dialect)
    if name in _WITHIN_BIGINT or att.kind == "numeric":
        return x
    if name is None or not _within_bound(att):     # an unknown type: no conversion is known
        return None
    dtype = exp.DataType.build(sql_type, dialect=dialect)

    def bound(v: int) -> exp.Expr:
        return exp.cast(_lit(v), dtype.copy())
    clamped = exp.Anonymous(this="least", expressions=[x.copy(), bound(_ARITHMETIC_BOUND)])
    if not name.startswith("U"):
        clamped = exp.Anonymous(this="greatest", expressions=[clamped, bound(-_ARITHMETIC_BOUND)])
    return exp.cast(clamped, "BIGINT")


def uniform_bins_sql(att: Attribute, x: exp.Expr, dialect: str) -> exp.Expr | None:
    """The bin of ``x`` (never NULL, every value a BIGINT: :func:`integer_value_sql`) by
    arithmetic, for an integer attribute with uniform bins:
    ``(LEAST(GREATEST(CAST(x AS BIGINT), lo), hi) - lo) DIV w``; None for explicit edges
    or bounds outside ±2^62.

    It equals ``index_of``: values below ``lo`` clamp to bin 0, above ``hi`` to the last bin
    (``(hi - lo) DIV w``), and an integer ``v`` in between lands in ``(v - lo) DIV w``, the
    number of bin starts ``lo + k·w`` at or below it (``bisect_right`` over the thresholds).
    It cannot fail on any row: the cast is exact (every value is a BIGINT; it widens
    narrower types so that ``v - lo`` is computed in BIGINT); the clamped value lies in
    ``[lo, hi]`` and ``|lo|, |hi| < 2^62``, so ``v - lo`` cannot overflow; the dividend is
    never negative, so truncating and flooring division agree.  NULL is handled before
    (``GREATEST``/``LEAST`` skip NULLs on PostgreSQL and Spark).  One expression per row
    instead of a chain of up to ~17 comparisons (adult's 99-bin hours_per_week took six
    times a plain scan of the column)."""
    if not isinstance(att, IntegerRange) or att.edges is not None or not _within_bound(att):
        return None
    lo, hi, width = att.lo, att.hi, att.bin_width
    value = exp.cast(x.copy(), "BIGINT")
    clamped = exp.Anonymous(this="least", expressions=[
        exp.Anonymous(this="greatest", expressions=[value, _lit(lo)]), _lit(hi)])
    offset: exp.Expr
    if lo > 0:
        offset = exp.Paren(this=exp.Sub(this=clamped, expression=_lit(lo)))
    elif lo < 0:   # never "x - -5": PostgreSQL would read "--" as a comment without the space
        offset = exp.Paren(this=exp.Add(this=clamped, expression=_lit(-lo)))
    else:
        offset = clamped
    bin_: exp.Expr
    if width == 1:
        bin_ = offset
    elif dialect == "postgres":   # bigint / bigint truncates there (typed: sqlglot writes a
        bin_ = exp.Div(this=offset, expression=_lit(width), typed=True)   # plain "/"; DIV() is numeric)
    else:
        bin_ = exp.IntDiv(this=offset, expression=_lit(width))   # DuckDB //, Spark DIV
    # a join key's values outside lo..hi are not clamped (IntegerRange.clamp)
    return outside_range(att, value, bin_)


#: Integer bounds a DOUBLE holds exactly (text values are parsed to DOUBLE).
_DOUBLE_EXACT = 1 << 53


def text_bins_sql(att: Attribute, x: exp.Expr, dialect: str) -> exp.Expr | None:
    """The bin of a parsed text number ``x`` (a DOUBLE, never NULL, NaN or infinite: the
    number grammar has neither) by arithmetic, for an integer attribute with uniform bins and
    bounds inside ±2^53: x clamped to [lo, hi] in DOUBLE (exact comparisons: the bounds are
    exact doubles), floored, then :func:`uniform_bins_sql`.  Equal to ``index_of``: the bin
    starts lo + k·w are integers, so x reaches one exactly when floor(x) does, and the
    clamped, floored value is an integer in [lo, hi] that the BIGINT cast holds exactly.
    ``cellsql.index_sql``'s chain of comparisons instead has one branch per bin: a
    100,000-cell column's CASE took 170 s to build and render (issue 35), and ~17
    comparisons per row to run.  None where the chain is kept (explicit edges, huge
    bounds)."""
    if not isinstance(att, IntegerRange) or att.edges is not None or \
            not -_DOUBLE_EXACT < att.lo <= att.hi < _DOUBLE_EXACT:
        return None

    def bound(v: int) -> exp.Expr:
        return exp.cast(exp.Literal.number(repr(float(v))), "DOUBLE")
    clamped = exp.Anonymous(this="least", expressions=[
        exp.Anonymous(this="greatest", expressions=[x.copy(), bound(att.lo)]), bound(att.hi)])
    cell = uniform_bins_sql(att, exp.func("floor", clamped), dialect)
    # a join key's values outside lo..hi: compared before the clamp, as exact doubles
    return None if cell is None else outside_range(att, x, cell, bound)


def _number_status(att: Attribute, x: exp.Expr) -> exp.Expr:
    if isinstance(att, Categorical):  # integer labels
        lab = exp.In(this=exp.cast(x.copy(), "DOUBLE"),
                     expressions=[exp.cast(exp.Literal.number(v), "DOUBLE") for v in att.labels_])
        return exp.Case().when(lab, _s("value")).else_(
            _s("other" if att.other_index is not None else "not_a_label"))
    return _bin_status(att, x)


_FAMILIES = {
    "integer": ("TINYINT", "SMALLINT", "MEDIUMINT", "INT", "BIGINT", "INT128", "INT256", "UTINYINT",
                "USMALLINT", "UMEDIUMINT", "UINT", "UBIGINT", "UINT128", "UINT256"),
    "float": ("FLOAT", "DOUBLE"),
    "decimal": ("DECIMAL",),
    # CHAR(n) is not text here: engines pad and compare it differently (blank-padded)
    "text": ("TEXT", "VARCHAR", "NVARCHAR"),
    "boolean": ("BOOLEAN",),
    "uuid": ("UUID",),
    # time: calendar days; wall-clock timestamps (no zone); instants (a zone or an offset)
    "date": ("DATE", "DATE32"),
    "timestamp": ("TIMESTAMP", "TIMESTAMPNTZ", "TIMESTAMP_S", "TIMESTAMP_MS", "TIMESTAMP_NS", "DATETIME",
                  "DATETIME2", "DATETIME64"),
    "timestamptz": ("TIMESTAMPTZ", "TIMESTAMPLTZ"),
    "time": ("TIME",),                # a time of day, no zone (TIMETZ is not read)
}
#: the type families each time kind reads natively (a date axis has no zone, so it cannot
#: place an instant on a calendar day)
_TIME_FAMILIES = {"date": ("date", "timestamp"), "timestamp": ("date", "timestamp", "timestamptz"),
                  "time": ("time",)}
_FAMILY_OF = {t: fam for fam, types in _FAMILIES.items() for t in types}


def _type_name(sql_type: str, dialect: str) -> str | None:
    """sqlglot's name of a catalog type (``INT`` for PostgreSQL's ``integer``), or None."""
    dtype = data_type(sql_type, dialect)
    return None if dtype is None else dtype.this.name


def type_family(sql_type: str, dialect: str = "duckdb") -> str:
    """integer | float | decimal | text | boolean | uuid | date | timestamp | timestamptz | time |
    other, for a column type as the
    engine's catalog names it (``BIGINT``, ``double precision``, ``string``, …)."""
    name = _type_name(sql_type, dialect)
    return "other" if name is None else _FAMILY_OF.get(name, "other")


def accepts_id(sql_type: str, dialect: str = "duckdb") -> bool:
    """Whether a column can identify the privacy unit: its text form must be the same on
    every engine (the bounding hash reads it), so integers, text and UUIDs only."""
    return type_family(sql_type, dialect) in ("integer", "text", "uuid")


def accepts(att: Attribute, sql_type: str, dialect: str = "duckdb") -> bool:
    """Whether a typed source column can be converted totally for this attribute."""
    fam = type_family(sql_type, dialect)
    if fam == "text":
        return True
    if isinstance(att, Temporal):
        return fam in _TIME_FAMILIES[att.kind]
    if isinstance(att, Categorical) and att.python_type is str:
        return fam in ("integer", "boolean")
    if fam == "integer":
        return integer_value_sql(att, exp.column("x"), sql_type, dialect) is not None
    return fam in ("float", "decimal")


def typed_column(att: Attribute, col: exp.Expr, sql_type: str, tag: str,
                 dialect: str = "duckdb") -> Converted:
    """Cell and status of a typed column (Parquet, DuckDB, PostgreSQL, Spark); call only if
    :func:`accepts`.  Portable: the same AST is rendered for every engine."""
    fam = type_family(sql_type, dialect)
    if fam == "text":
        return convert_text(att, col, exp.true(), None, tag, dialect)
    if fam in ("integer", "boolean") and isinstance(att, Categorical) and att.python_type is str:
        return convert_text(att, exp.cast(col.copy(), "VARCHAR"), exp.true(), None, tag, dialect)
    x = exp.column(f"__x{tag}")
    pre = [(x.name, col.copy())]
    inv = _lit(att.invalid_index)
    is_null = exp.Is(this=x.copy(), expression=exp.Null())
    cell = exp.Case().when(is_null.copy(), _lit(att.null_place))
    status = exp.Case().when(is_null, _s("null" if att.nullable else "null_not_nullable"))
    if isinstance(att, TimeOfDayRange):
        value = time_of_day_index_sql(att, x, "time", nullable_input=False, dialect=dialect)
        return Converted(pre, cell.else_(value), status.else_(_time_of_day_status(att, x, "time")))
    if isinstance(att, Temporal):
        # compared with literals of the column's own type: no cast of the column, and an
        # instant (timestamptz) only with instants (docs/domains.md, "Time"); but DuckDB
        # compares a TIMESTAMP_NS with a TIMESTAMP literal by casting the literal to
        # nanoseconds, which fails outside 1677..2262 (once a row reaches that comparison:
        # a failure that depends on the rows), so such a column is read at microseconds
        # (every TIMESTAMP_NS is a TIMESTAMP; DuckDB floors the nanoseconds)
        if _type_name(sql_type, dialect) == "TIMESTAMP_NS":
            pre = [(x.name, exp.cast(col.copy(), "TIMESTAMP"))]
        value = time_index_sql(att, x, fam, nullable_input=False, dialect=dialect)
        return Converted(pre, cell.else_(value), status.else_(_time_status(att, x, fam)))
    if fam == "float":
        nan = is_nan(x)
        cell = cell.when(nan.copy(), inv)
        status = status.when(nan, _s("unreadable"))
    if fam == "integer":
        # an integer type holds neither NaN nor (past the branch above) NULL: the bins alone
        v = integer_value_sql(att, x, sql_type, dialect)
        assert v is not None                # typed_column is called only if accepts(): it checked
        if att.kind == "categorical":
            value = index_sql(att, v)
        else:
            uniform = uniform_bins_sql(att, v, dialect)
            value = uniform if uniform is not None else bins_sql(att, v.copy())
    else:
        value = index_sql(att, x.copy())
    return Converted(pre, cell.else_(value), status.else_(_number_status(att, x)))


__all__ = ["normalise_csv", "split_fields", "unquote", "unquote_sql", "line_scan", "csv_fields", "convert_text",
           "typed_column", "label_index_sql", "integer_value_sql", "uniform_bins_sql", "text_bins_sql",
           "accepts", "accepts_id",
           "type_family", "is_nan", "number_sql", "parse_number", "STATUSES",
           "PROBLEMS", "Framed", "record_grammar", "time_text_sql", "TIME_CHARS"]
