"""Issue 29 (items 1, 3 and 5): intervals and ranges that are honest on real tables.

Each test reproduces a reported failure on the adult example or a synthetic table."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import dpsql
from dpsql.engine.variance import Z95
from dpsql.privacy import noise
from dpsql.testing import write_config

# -- item 5: never-measured values are not answered as if informed ------------------------------

COARSE = ["SELECT sex, COUNT(*) FROM adult GROUP BY sex",
          "SELECT COUNT(*) FROM adult WHERE hours_per_week >= 40"]


@pytest.fixture(scope="module")
def coarse(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("coarse")
    con = dpsql.connect(write_config(tmp, queries=COARSE), user="ana")
    con.session.measure()
    yield con
    con.close()


def test_an_attribute_measured_only_through_a_threshold_is_refused_value_by_value(coarse):
    """hours_per_week is in a measured clique only through `>= 40`: its values one by one were
    answered "inferred" with ~300 rows each (the model's even spread) and the range [0, N]."""
    cur = coarse.cursor()
    with pytest.raises(dpsql.UnsupportedQueryError) as info:
        cur.execute("SELECT hours_per_week, COUNT(*) FROM adult GROUP BY hours_per_week")
    assert "hours_per_week was measured only through coarser queries" in info.value.message
    assert "GROUP BY hours_per_week" in info.value.hint
    # the measured threshold itself is answered, with a standard error
    cur.execute("SELECT COUNT(*) FROM adult WHERE hours_per_week >= 40")
    assert cur.inferred == [False] and cur.stderr[0][0] > 0
    # and 'infer' still shows the model's guess, flagged, with its range
    cur.execute("SET dpsql.policy = 'infer'")
    try:
        rows = cur.execute("SELECT hours_per_week, COUNT(*) FROM adult GROUP BY hours_per_week").fetchall()
        assert len(rows) == 99 and all(cur.inferred)
    finally:
        cur.execute("RESET dpsql.policy")
    assert "measured only through coarser queries" in coarse.session.explain(
        "SELECT hours_per_week, COUNT(*) FROM adult GROUP BY hours_per_week")


# -- item 3: coverage on a sparse categorical ---------------------------------------------------

LABELS = [f"L{i:04d}" for i in range(1500)]


def _sparse_table(tmp: Path) -> tuple[Path, dict[str, int]]:
    """1,500 declared labels, 100 of which occur (counts from 1 to ~2,000, a third of them
    small), 60,000-odd rows; the domain is declared, the rows are synthetic."""
    rng = np.random.default_rng(29)
    used = rng.choice(len(LABELS), 100, replace=False)
    counts = np.concatenate([rng.integers(1, 30, 34), rng.integers(30, 3000, 66)])
    truth = {LABELS[i]: int(c) for i, c in zip(used, counts)}
    with (tmp / "sparse.csv").open("w") as f:
        f.write("cat,flag\n")
        for label, c in truth.items():
            for k in range(c):
                f.write(f"{label},{k % 2}\n")
    (tmp / "sparse.toml").write_text(
        "[tables.sparse.columns.cat]\ntype = \"categorical\"\nclosed = true\nlabels = ["
        + ", ".join(f'"{x}"' for x in LABELS) + "]\n"
        "[tables.sparse.columns.flag]\ntype = \"integer\"\nlo = 0\nhi = 1\n")
    return tmp, truth


@pytest.fixture(scope="module")
def sparse_releases(tmp_path_factory):
    """Three seeded releases of (total, GROUP BY cat, GROUP BY flag) at ε = 1: per cell the
    answer, its standard error and the truth."""
    tmp, truth = _sparse_table(tmp_path_factory.mktemp("sparse"))
    out = []
    for seed in (1, 2, 3):
        d = tmp / f"r{seed}"
        d.mkdir()
        cfg = write_config(d, table="sparse", domain=tmp / "sparse.toml",
                           source={"csv": str(tmp / "sparse.csv")}, cache_dir=tmp / "cache",
                           queries=["SELECT COUNT(*) FROM sparse",
                                    "SELECT cat, COUNT(*) FROM sparse GROUP BY cat",
                                    "SELECT flag, COUNT(*) FROM sparse GROUP BY flag"])
        con = dpsql.connect(cfg, user="ana")
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(noise, "_SYSTEM", noise.SeededBitSource(seed))
            con.session.measure()
        cur = con.cursor()
        cur.execute("SELECT cat, COUNT(*) FROM sparse GROUP BY cat")
        out += [(v, err[1], truth.get(cat, 0)) for (cat, v), err in zip(cur.fetchall(), cur.stderr)]
        con.close()
    return out


def _coverage_floor(n: int) -> float:
    """95% nominal coverage less three binomial standard deviations over n cells."""
    return 0.95 - 3 * math.sqrt(0.95 * 0.05 / n)


@pytest.mark.parametrize("kind", ["populated", "small", "empty"])
def test_sparse_categorical_intervals_cover_populated_small_and_empty_cells(sparse_releases, kind):
    """The model's projection onto non-negative tables of the released total clips the negative
    noise of the 1,400 empty cells and takes that mass from the populated ones: they came back
    ~τ low and ~20% of their 95% intervals missed (issue 29: 24 of 101 flight destinations).
    Each kind of cell must now cover at least 95% less three binomial sds."""
    pick = {"populated": lambda t: t > 0, "small": lambda t: 0 < t < 30, "empty": lambda t: t == 0}[kind]
    cells = [(v, se, t) for v, se, t in sparse_releases if pick(t)]
    covered = [abs(v - t) <= Z95 * se for v, se, t in cells]
    assert len(cells) >= 100
    assert np.mean(covered) >= _coverage_floor(len(cells)), (kind, len(cells), np.mean(covered))


# -- item 1: the binning error of SUM/AVG/STDDEV over wide bins is inside the interval ------------

BINNED = ["SELECT COUNT(*) FROM adult", "SELECT SUM(capital_gain) FROM adult",
          "SELECT sex, AVG(capital_gain) FROM adult GROUP BY sex", "SELECT STDDEV(fnlwgt) FROM adult",
          "SELECT AVG(age) FROM adult"]


def _raw_truths() -> dict:
    """The answers on the raw rows (not on the bins' midpoints)."""
    import csv
    import statistics
    from dpsql.testing import ADULT
    with (ADULT / "adult.csv").open() as f:
        rows = list(csv.DictReader(f))
    gain = {s: [float(r["capital_gain"]) for r in rows if r["sex"] == s] for s in ("Male", "Female")}
    return {BINNED[1]: {(): sum(float(r["capital_gain"]) for r in rows)},
            BINNED[2]: {(s,): statistics.mean(v) for s, v in gain.items()},
            BINNED[3]: {(): statistics.stdev(float(r["fnlwgt"]) for r in rows)},
            BINNED[4]: {(): statistics.mean(float(r["age"]) for r in rows)}}


def test_intervals_over_wide_bins_hold_the_raw_truth_and_say_they_are_bounded(tmp_path):
    """At ε = 100 the noise is small and the bins' midpoints are not: AVG(capital_gain) by sex
    was 617 ± 10 against a raw truth of 581 (the issue: AVG(distance) 1,050 ± 0.52, truth
    1,039.9).  Every interval now holds the raw truth, and says it includes a binning bound;
    a unit-bin column (age) keeps a pure interval.  (Under ``binning = "bound"``: by default
    the offsets are measured instead, tests/engine/test_offsets.py.)"""
    con = dpsql.connect(write_config(tmp_path, queries=BINNED, epsilon=100.0, planner={"binning": "bound"}),
                        user="ana")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(noise, "_SYSTEM", noise.SeededBitSource(29))
        con.session.measure()
    cur = con.cursor()
    for sql, truth in _raw_truths().items():
        cur.execute(sql)
        rows = cur.fetchall()
        for row, err in zip(rows, cur.stderr):
            t = truth[tuple(row[:-1])]
            assert abs(row[-1] - t) <= Z95 * err[-1], (sql, row, err, t)
        for err, bias in zip(cur.stderr, cur.bias):
            if sql == BINNED[4]:
                assert bias[-1] is None
            else:
                assert bias[-1] is not None and 0 < bias[-1] <= Z95 * err[-1]
    # the binning bound of an average is at most the widest half bin (capital_gain: 24,999.5)
    cur.execute(BINNED[2])
    assert all(b[-1] <= 24999.5 for b in cur.bias)
    from dpsql.display import BOUNDED_MARK, table_lines
    assert all(BOUNDED_MARK in line for line in table_lines(cur._result)[2:])
