"""The neighbouring-datasets property test (issue 15): no row can change whether a
measurement succeeds, and one row moves each counted marginal by at most the sensitivity.

For seeded single-row edits of a clean CSV table (a row appended, removed, or replaced by
hostile content: every case of issue 15, random bytes, huge numbers, NaN, empty lines, a
1 MB field, a quote that never closes, ...) the measurement always succeeds and every
marginal differs from the clean one by L1 ≤ 1 (append/remove) or ≤ 2 (replace = remove +
append), in LF, CRLF and no-final-newline files.  With a privacy unit (id, max_rows = k),
adding or removing every row of one person moves each marginal by at most k.

Run on both ends of the DuckDB range pyproject.toml allows: ``make test`` runs this file
again with the lowest supported DuckDB (see the Makefile).  ``DPSQL_NEIGHBOUR_EDITS`` sets
the number of random edits per file variant (bench/neighbours.py runs thousands).
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile  # noqa: E402
import reference  # noqa: E402

from dpsql.measure.backend import DuckDBBackend  # noqa: E402
from dpsql.measure.source import CsvDialect, Source  # noqa: E402

EDITS = int(os.environ.get("DPSQL_NEIGHBOUR_EDITS", "60"))
VARIANTS = {"lf": (b"\n", True), "crlf": (b"\r\n", True), "no_final_newline": (b"\n", False)}


def _measure(backend, path, data):
    path.write_bytes(data)
    return backend.count_marginals(hostile.SCHEMA, hostile.CLIQUES)


def _l1(a, b):
    return max(int(np.abs(a[c] - b[c]).sum()) for c in hostile.CLIQUES)


@pytest.fixture()
def setup(tmp_path):
    path = tmp_path / "t.csv"
    backend = DuckDBBackend({"t": Source("csv", path)}, threads=1)
    yield backend, path
    backend.close()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_random_single_row_edits(setup, variant):
    backend, path = setup
    newline, final = VARIANTS[variant]
    rng = random.Random(f"{variant}-{duckdb.__version__}")
    rows = hostile.clean_rows(40, seed=1)
    clean = _measure(backend, path, hostile.csv_bytes(rows, newline, final))
    assert int(clean[()].sum()) == 40
    for _ in range(EDITS):
        op, edited = hostile.edit(rows, rng)
        counts = _measure(backend, path, hostile.csv_bytes(edited, newline, final))  # never raises
        assert _l1(counts, clean) <= (2 if op == "replace" else 1), (op, edited)


@pytest.mark.slow
def test_every_hostile_record_appended_and_replaced(setup):
    backend, path = setup
    rows = hostile.clean_rows(30, seed=2)
    data = hostile.csv_bytes(rows)
    clean = _measure(backend, path, data)
    for c in hostile.CLIQUES:  # the SQL reader equals its Python twin on the clean file
        assert np.array_equal(clean[c], reference.counts(data, hostile.SCHEMA, c))
    for record in hostile.HOSTILE:
        for edited, bound in ((rows + [record], 1), ([record] + rows[1:], 2)):
            data = hostile.csv_bytes(edited)
            counts = _measure(backend, path, data)
            assert _l1(counts, clean) <= bound, record[:60]
            # every record counted exactly once; an empty line is no one's record
            assert int(counts[()].sum()) == sum(1 for r in edited if r != b"")
            ref = reference.counts_all(data, hostile.SCHEMA, hostile.CLIQUES)
            for c in hostile.CLIQUES:
                assert np.array_equal(counts[c], ref[c]), (record[:60], c)


def test_person_level_edits_move_counts_by_at_most_max_rows(tmp_path):
    """privacy_unit = { id, max_rows = 2 }: a person's rows (some hostile) added or removed."""
    path = tmp_path / "p.csv"
    schema = hostile.SCHEMA
    k = 2
    backend = DuckDBBackend({"t": Source("csv", path, id_column="pid", max_rows_per_id=k, hash_key="s")},
                            threads=1)
    rng = random.Random(f"persons-{duckdb.__version__}")
    base = [(f"p{rng.randrange(15)}".encode(), r) for r in hostile.clean_rows(40, seed=3)]

    def data(rows):
        return b"\n".join([b"pid," + hostile.HEADER] + [pid + b"," + r for pid, r in rows]) + b"\n"

    path.write_bytes(data(base))
    clean = backend.count_marginals(schema, hostile.CLIQUES)
    assert 0 < int(clean[()].sum()) <= 15 * k
    for i in range(max(10, EDITS // 3)):
        if i % 2:  # remove one person entirely
            victim = rng.choice(base)[0]
            edited = [r for r in base if r[0] != victim]
        else:  # add a new person with 1-4 rows, some hostile
            pid = f"new{i}".encode()
            edited = list(base)
            for _ in range(rng.randint(1, 4)):
                edited.insert(rng.randrange(len(edited) + 1), (pid, hostile.random_record(rng)))
        path.write_bytes(data(edited))
        counts = backend.count_marginals(schema, hostile.CLIQUES)
        assert _l1(counts, clean) <= k
    backend.close()


# -- issue 34 item 1: one person is one unit whatever their record holds ----------------------------

def _multiline_record(rng: random.Random, lines: int) -> bytes:
    """One person's record spanning ``lines`` physical lines: RFC 4180 line breaks inside a
    quoted free-text field, empty lines, CR/CRLF breaks, lines that look like rows, hostile
    fragments."""
    breaks = [rng.choice([b"\n", b"\r\n", b"\r"]) for _ in range(lines - 1)]
    kind = rng.randrange(4)
    if kind == 0:      # a quoted free-text field with line breaks (the race column)
        parts = [bytes(rng.choice(b"abc ,;") for _ in range(rng.randint(0, 8))) for _ in range(lines)]
        body = parts[0]
        for br, part in zip(breaks, parts[1:]):
            body += br + part
        return b'40,F,"' + body + b'",1,0.5,'
    if kind == 1:      # empty lines around a clean row
        row = hostile.clean_rows(1, rng.randrange(10**6))[0]
        pos = rng.randrange(lines)
        out = b""
        for i in range(lines):
            out += (row if i == pos else b"") + (breaks[i] if i < lines - 1 else b"")
        return out
    if kind == 2:      # every line a well-formed row (a record that injects rows)
        rows = hostile.clean_rows(lines, rng.randrange(10**6))
        out = rows[0]
        for br, row in zip(breaks, rows[1:]):
            out += br + row
        return out
    pieces = [hostile.random_record(rng) for _ in range(lines)]
    out = pieces[0]
    for br, piece in zip(breaks, pieces[1:]):
        out += br + piece
    return out


@pytest.mark.parametrize("max_lines", [1, 3])
def test_records_spanning_lines_move_counts_by_at_most_max_record_lines(tmp_path, max_lines):
    """A person's record may hold line breaks (RFC 4180 quoted fields) and empty lines.  With
    ``max_record_lines = L`` declared, adding or removing one record of at most L lines moves
    every marginal by at most L, the factor the noise is calibrated with (Source.unit_rows),
    and empty lines count for no one: a record "\\n<row>" is one unit (it was two)."""
    path = tmp_path / "m.csv"
    source = Source("csv", path, dialect=CsvDialect(max_record_lines=max_lines))
    assert source.unit_rows == max_lines
    backend = DuckDBBackend({"t": source}, threads=1)
    rng = random.Random(f"multiline-{max_lines}-{duckdb.__version__}")
    rows = hostile.clean_rows(30, seed=4)
    clean = _measure(backend, path, hostile.csv_bytes(rows))
    try:
        for _ in range(max(12, EDITS // 2)):
            record = _multiline_record(rng, rng.randint(1, max_lines))
            edited = list(rows)
            edited.insert(rng.randrange(len(edited) + 1), record)
            data = hostile.csv_bytes(edited, rng.choice([b"\n", b"\r\n"]))
            counts = _measure(backend, path, data)
            assert _l1(counts, clean) <= max_lines, record[:80]
            ref = reference.counts_all(data, hostile.SCHEMA, hostile.CLIQUES)
            for c in hostile.CLIQUES:
                assert np.array_equal(counts[c], ref[c]), (record[:60], c)
        for record in (b"", b"\n", b"\r\n\r\n"):    # empty lines alone: no one's record
            counts = _measure(backend, path, hostile.csv_bytes(rows[:10] + [record] + rows[10:]))
            assert _l1(counts, clean) == 0, record
        lone = hostile.clean_rows(1, seed=99)[0]
        counts = _measure(backend, path, hostile.csv_bytes(rows + [b"\n" + lone]))
        assert _l1(counts, clean) == 1          # an empty line followed by a row: one unit
    finally:
        backend.close()
