"""Unbiased SUM/AVG over wide bins (issue 29 item 1, option a): the rows' offsets from their
bins' values are measured with the workload, so at a near-infinite budget the answers equal
DuckDB's SUM/AVG on the raw (unbinned) rows, their intervals are the noise alone (no
binning bound), and a SUM whose offsets were not measured at its granularity falls back to
the bound and says so."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.engine.variance import Z95
from dpsql.privacy import noise
from dpsql.testing import write_config

DOMAIN = """
[tables.t.columns.g]
type = "categorical"
labels = ["a", "b", "c"]
closed = true
[tables.t.columns.x]
type = "numeric"
edges = [0, 10, 100, 1000]
nullable = true
[tables.t.columns.y]
type = "integer"
lo = 0
hi = 99
bin_width = 25
"""

WORKLOAD = ["SELECT COUNT(*) FROM t",
            "SELECT SUM(x) FROM t",
            "SELECT g, AVG(x) FROM t GROUP BY g",
            "SELECT g, SUM(y) FROM t WHERE x >= 10 GROUP BY g",
            "SELECT AVG(y) FROM t",
            "SELECT g, x, COUNT(*) FROM t GROUP BY g, x"]


def _table(tmp: Path) -> Path:
    """400 rows, skewed x inside the declared range (binary fractions, so the lattice holds them
    exactly), NULLs."""
    rng = np.random.default_rng(29)
    with (tmp / "t.csv").open("w") as f:
        f.write("g,x,y\n")
        for i in range(400):
            x = "" if i % 17 == 0 else repr(min(float(np.round(rng.lognormal(3.5, 1.2), 2) // 0.25 * 0.25), 999.75))
            f.write(f"{'abc'[int(rng.integers(3))] if i % 5 else 'a'},{x},{int(rng.integers(0, 100))}\n")
    (tmp / "t.toml").write_text(DOMAIN)
    return tmp / "t.csv"


def _raw(csv: Path, sql: str) -> list[tuple]:
    """DuckDB on the raw rows: the truth the answers must equal."""
    con = duckdb.connect()
    con.execute(f"CREATE TABLE t AS SELECT * FROM read_csv('{csv}', header = true, "
                "columns = {'g': 'VARCHAR', 'x': 'DOUBLE', 'y': 'INTEGER'})")
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _connect(tmp: Path, **planner) -> dpsql.Connection:
    csv = _table(tmp)
    path = write_config(tmp, table="t", domain=tmp / "t.toml", source={"csv": str(csv)}, queries=WORKLOAD,
                        epsilon=None, rho=1e16, planner=planner or None)
    con = dpsql.connect(path, user="ana")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(noise, "_SYSTEM", noise.SeededBitSource(29))
        con.session.measure()
    return con


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("offsets")
    con = _connect(tmp)
    yield con, tmp / "t.csv"
    con.close()


CHECKS = ["SELECT SUM(x) FROM t", "SELECT g, AVG(x) FROM t GROUP BY g ORDER BY g",
          "SELECT g, SUM(y) FROM t WHERE x >= 10 GROUP BY g ORDER BY g", "SELECT AVG(y) FROM t",
          # coarser than measured: the offsets by g add up to the total's
          "SELECT AVG(x) FROM t"]


@pytest.mark.parametrize("sql", CHECKS)
def test_near_infinite_budget_answers_equal_duckdb_on_the_raw_rows(measured, sql):
    """On main these were the bins' midpoints' answers (SUM(x) off by thousands), with a
    binning bound as wide in the ±."""
    con, csv = measured
    cur = con.cursor()
    got = cur.execute(sql).fetchall()
    want = _raw(csv, sql)
    assert len(got) == len(want)
    for row, truth, err, bias in zip(got, want, cur.stderr, cur.bias):
        assert row[:-1] == truth[:-1]
        assert row[-1] == pytest.approx(truth[-1], rel=1e-7, abs=1e-6), (sql, row, truth)
        assert bias[-1] is None                       # the noise alone: no bound
        assert Z95 * err[-1] <= 1e-3 * max(1.0, abs(truth[-1]))


def test_the_bound_is_the_fallback_where_offsets_were_not_measured_and_is_marked(measured):
    """x's offsets were measured by g only under no predicate, and by g under x >= 10 for y:
    SUM(x) by its own bins has no offsets at that granularity, so its interval carries the
    binning bound (and is marked), while its counts part is as measured."""
    con, csv = measured
    cur = con.cursor()
    rows = cur.execute("SELECT g, SUM(x) FROM t WHERE x < 100 GROUP BY g ORDER BY g").fetchall()
    want = _raw(csv, "SELECT g, SUM(x) FROM t WHERE x < 100 GROUP BY g ORDER BY g")
    for row, truth, err, bias in zip(rows, want, cur.stderr, cur.bias):
        assert bias[-1] is not None and bias[-1] > 0
        assert abs(row[-1] - truth[-1]) <= Z95 * err[-1]
    from dpsql.display import BOUNDED_MARK, table_lines
    assert all(BOUNDED_MARK in line for line in table_lines(cur._result)[2:])
    cur.execute("SELECT SUM(x) FROM t")
    assert all(BOUNDED_MARK not in line for line in table_lines(cur._result)[2:])


def test_the_offsets_are_part_of_the_one_release_and_its_charge(measured):
    """One charge for counts and offsets together, the workload's ρ; the ledger says which
    blocks measured offsets (public structure), and a new process reads them back."""
    con, csv = measured
    engine = con.session.engine
    charges = [e for e in engine.ledger.entries() if e.kind == "charge"]
    assert len(charges) == 1
    assert charges[0].rho == engine.workload_rho()
    blocks = charges[0].mechanism["blocks"]
    assert {b.get("offsets") for b in blocks} == {None, "x", "y"}
    again = dpsql.connect(engine.config.path, user="ana")
    try:
        cur = again.cursor()
        assert cur.execute("SELECT SUM(x) FROM t").fetchall() == con.cursor().execute(
            "SELECT SUM(x) FROM t").fetchall()
        assert cur.bias[0][0] is None
    finally:
        again.close()


def test_under_binning_bound_the_same_workload_keeps_the_biased_answer_and_its_bound(tmp_path):
    con = _connect(tmp_path, binning="bound")
    try:
        cur = con.cursor()
        got = cur.execute("SELECT SUM(x) FROM t").fetchall()[0][0]
        truth = _raw(tmp_path / "t.csv", "SELECT SUM(x) FROM t")[0][0]
        assert abs(got - truth) > 100                       # the midpoints' sum
        assert cur.bias[0][0] is not None and abs(got - truth) <= Z95 * cur.stderr[0][0]
        charges = [e for e in con.session.engine.ledger.entries() if e.kind == "charge"]
        assert all("offsets" not in b for b in charges[0].mechanism["blocks"])
    finally:
        con.close()


def test_offset_noise_is_proportional_to_each_columns_bins_and_the_split_minimises_the_objective():
    """Calibrated together, a block of y (half bins of 12) must not get x's noise (half bins of
    450): each block's noise in its own units is proportional to its column's widest half bin.
    The share of ρ the offsets get minimises C/ρ_c + O/ρ_o (docs/engine.md)."""
    from fractions import Fraction

    from dpsql.engine.offsets import offset_blocks, offset_share
    from dpsql.measure import release as rel
    from dpsql.measure.offsets import offset_grid
    from dpsql.sql import compile as compile_sql

    schema = load_domain_text(DOMAIN)["t"]
    catalog = {"t": schema}
    queries = [(lq, i) for i, sql in enumerate(["SELECT SUM(x) FROM t", "SELECT g, SUM(y) FROM t GROUP BY g"])
               for lq in compile_sql(sql, catalog).offset_queries]
    blocks = offset_blocks(schema, queries)
    plan = rel.calibrate([b for b, _ in blocks], Fraction(1, 2))
    sd = {b.offsets: rel.stddev(b, p, "gaussian") for (b, _), p in zip(blocks, plan.params)}
    hx = offset_grid(schema.attribute("x")).bound * offset_grid(schema.attribute("x")).spacing
    hy = offset_grid(schema.attribute("y")).bound * offset_grid(schema.attribute("y")).spacing
    assert sd["x"] / sd["y"] == pytest.approx(hx / hy, rel=1e-6)
    assert plan.rho <= Fraction(1, 2)
    rho, c, scales = Fraction(1), 40.0, [1e-3, 2e-2]
    share = offset_share(rho, c, blocks, scales)
    d = sum(b.l2_sensitivity_sq() * (b.weight * b.scale) ** 2 for b, _ in blocks)
    o = sum(sum(scales[p] for p in parts) * b.rows() * d / b.weight ** 2 for b, parts in blocks)

    def objective(s: float) -> float:
        return c / (1 - s) + o / s
    s = float(share / rho)
    assert 0 < s < 1
    assert objective(s) <= min(objective(s * 0.9), objective(min(0.999, s * 1.1))) + 1e-9


def load_domain_text(text: str):
    import tempfile

    from dpsql.domain_file import load_domain
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "t.toml"
        path.write_text(text)
        return load_domain(path)


def test_the_plan_reports_the_errors_the_release_will_have(tmp_path):
    """`dpsql plan` reported the counts' errors at the whole rho and no offsets noise, while the
    release gives the counts rho - rho_o and adds the offsets' noise to the SUMs: on a seeded
    release, the reported standard errors are those the answers carry (to the ~8% by which the
    plan's joint least squares beats the answers' best single block, also without offsets;
    before, COUNT(*) was 24% and SUM(x) 51% below)."""
    csv = _table(tmp_path)
    path = write_config(tmp_path, table="t", domain=tmp_path / "t.toml", source={"csv": str(csv)},
                        queries=WORKLOAD, epsilon=1.0)
    con = dpsql.connect(path, user="ana")
    try:
        report = con.session.plan()
        assert 0 < report.offsets_rho < report.rho
        assert any("binning offsets" in line for line in report.unit_lines())
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(noise, "_SYSTEM", noise.SeededBitSource(7))
            con.session.measure()
        cur = con.cursor()
        cur.execute("SET dpsql.estimator = 'least_squares'")
        checked = 0
        for q in report.per_query:
            if q.aggregate in ("COUNT(*)", "SUM(x)") and "GROUP BY" not in q.sql:
                cur.execute(q.sql)
                got = cur.stderr[0][-1]
                assert got == pytest.approx(q.stderr, rel=0.15), (q.sql, q.aggregate, got, q.stderr)
                checked += 1
        assert checked == 2
    finally:
        con.close()


def test_a_sum_added_by_an_increment_falls_back_to_its_bound(tmp_path):
    """An increment measures no offsets; under binning = "offsets" the workload leaves the
    binning bound out, so a SUM added later had neither (its answer inferred, no interval):
    the increment now measures its bound, and the answer is bounded and marked."""
    csv = _table(tmp_path)
    base = ["SELECT COUNT(*) FROM t", "SELECT g, COUNT(*) FROM t GROUP BY g"]
    path = write_config(tmp_path, table="t", domain=tmp_path / "t.toml", source={"csv": str(csv)},
                        queries=base, epsilon=20.0, workload={"epsilon": 10.0})
    con = dpsql.connect(path, user="ana")
    try:
        con.session.measure()
        added = "SELECT g, SUM(x) FROM t GROUP BY g ORDER BY g"
        engine = con.session.engine
        # the increment's rows: the SUM's and its binning bound's (before: the SUM's only)
        from dpsql.sql import compile as compile_sql
        cq = compile_sql(added, engine.catalog)
        bound = next(lq for lq in cq.linear_queries if lq.description.startswith("SUM(half bin width"))
        missing = engine.unsupported_workload("t", base + [added])
        want = bound.matrix.dense()
        assert any(m.shape == want.shape and np.array_equal(m.dense(), want) for m in missing)
        assert engine.measure_increment("t", engine.workload_rho("t"), base + [added]) is not None
        cur = con.cursor()
        rows = cur.execute(added).fetchall()
        want = _raw(csv, added)
        assert not any(cur.inferred)
        for row, truth, err, bias in zip(rows, want, cur.stderr, cur.bias):
            assert bias[-1] is not None and abs(row[-1] - truth[-1]) <= Z95 * err[-1]
    finally:
        con.close()
