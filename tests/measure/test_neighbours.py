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
from dpsql.measure.source import Source  # noqa: E402

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
            assert int(counts[()].sum()) == len(edited)  # every record counted exactly once
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
