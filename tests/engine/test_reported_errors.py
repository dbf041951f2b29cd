"""The plan's promise holds for the numbers users see (issue 35 item 6).

Reproduced on the adult dashboard (ε = 1): the plan keeps every count within its per-query
baseline (the error of the query measured on its own with the budget split evenly), but 20
of 31 counts came back with a *reported* standard error above it (up to 48 against 25.2):
the least-squares error was each block's one-at-a-time estimate combined (29.2 for
``GROUP BY sex`` where the plan's joint least squares promised 22.5), and the interval of the
model's answer was widened to contain that noisier estimate's interval.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpsql
from dpsql.engine.variance import Z95, cap_stderr, interval_stderr
from dpsql.testing import ADULT, write_config
from dpsql.sql.split import split_statements

DASHBOARD = split_statements((ADULT / "dashboard.sql").read_text())
QUERIES = [q for q in DASHBOARD if "GROUP BY sex" in q or "GROUP BY race" in q or "WHERE" in q][:9]


def test_cap_keeps_the_widening_within_the_baseline():
    s = np.array([10.0, 10.0, 10.0, 30.0])
    wide = interval_stderr(np.array([100.0, 130.0, 104.0, 100.0]), np.array([100.0, 100.0, 100.0, 100.0]),
                           s, np.ones(4, bool))
    assert wide[0] == pytest.approx(10.0) and wide[2] == pytest.approx(10.0 + 4.0 / Z95)
    got = cap_stderr(wide, s, 12.0)
    # never above the baseline by widening where the least-squares error is within it; where
    # it is not (the plan promised nothing there), the widening is kept whole
    assert got == pytest.approx([10.0, 12.0, min(12.0, 10.0 + 4.0 / Z95), wide[3]], rel=1e-12)
    assert np.array_equal(cap_stderr(wide, s, None), wide)
    biased = interval_stderr(np.array([100.0]), np.array([160.0]), np.array([30.0]), np.ones(1, bool))
    assert cap_stderr(biased, np.array([30.0]), 12.0)[0] == pytest.approx(30.0 + 60.0 / Z95)


def test_cap_holds_at_the_baseline_to_the_plans_own_tolerance():
    """A query planned exactly at its baseline (the per-query mechanism when its blocks' union
    sensitivity is 1) computes its least-squares error a rounding error either side of b: one
    1e-15 above it kept the model's whole widening (12 → 20 here).  Within the plan's relative
    1e-9 the cut holds, at s itself (never below the least-squares error); beyond it nothing
    changes."""
    b = 12.0
    s = np.array([b * (1 + 1e-15), b * (1 - 1e-15), b * (1 + 1e-6)])
    wide = np.array([20.0, 20.0, 20.0])
    got = cap_stderr(wide, s, b)
    assert got[0] == s[0] and got[1] == b and got[2] == 20.0
    other = np.array([3.0, 3.0, 3.0])
    room = np.sqrt(b * b - 9.0)
    s = np.array([room * (1 + 1e-15), room * (1 - 1e-15), room * (1 + 1e-6)])
    got = cap_stderr(wide, s, b, other)
    assert got[0] == s[0] and got[1] == room and got[2] == 20.0


@pytest.mark.slow      # measures and fits the adult table (~5 CPU-s)
def test_no_reported_count_error_is_above_its_baseline(tmp_path):
    assert len(QUERIES) == 9 and any("GROUP BY sex" in q and "WHERE" not in q for q in QUERIES)
    config = write_config(tmp_path, queries=QUERIES, planner={"restarts": 1, "seed": 0})
    con = dpsql.connect(config, user="alice")
    try:
        report = con.session.plan()
        assert not report.flagged            # the plan keeps every query within its baseline
        con.session.measure()
        cur = con.cursor()
        for q in report.per_query:
            cur.execute(q.sql)
            rows = cur.fetchall()
            se = np.array([e[-1] for e in cur.stderr], dtype=float)
            assert len(rows) and np.all(np.isfinite(se)), q.sql
            assert np.all(se <= q.baseline * (1 + 1e-9)), (q.sql, se.max(), q.baseline, q.stderr)
    finally:
        con.close()
        dpsql.dbapi._engines.clear()


def test_cap_leaves_room_for_the_offsets_part_of_a_sum():
    """A SUM over wide bins is its bins' midpoint sum plus its measured offsets, and its reported
    error √(se² + offsets²): capping the midpoint sum at the baseline left the statement above it
    (TPC-H Q1's price sums: 478.4 M against 477.5 M, bench/fit_stop.py)."""
    s, other = np.array([10.0, 10.0, 11.9]), np.array([3.0, 3.0, 3.0])
    wide = np.array([11.0, 40.0, 40.0])
    got = cap_stderr(wide, s, 12.0, other)
    room = np.sqrt(12.0 ** 2 - 3.0 ** 2)
    # within the room: unchanged; widened past it: cut to it; s² + other² over b²: no promise
    assert got == pytest.approx([11.0, room, 40.0], rel=1e-12)
    assert np.all(np.sqrt(got[:2] ** 2 + other[:2] ** 2) <= 12.0 * (1 + 1e-12))
    assert np.array_equal(cap_stderr(wide, s, 12.0, None), cap_stderr(wide, s, 12.0))


@pytest.mark.slow      # measures and fits the adult table (~3 CPU-s)
def test_a_sum_with_offsets_stays_within_its_baseline_however_wide_the_model_interval(tmp_path, monkeypatch):
    """The widening is forced past every baseline (as a model answer far from least squares'
    would be); a SUM whose offsets are measured must still be reported within its baseline."""
    import dpsql.engine.results as results_module

    queries = ["SELECT sex, SUM(capital_gain) FROM adult GROUP BY sex",
               "SELECT sex, COUNT(*) FROM adult GROUP BY sex"]
    config = write_config(tmp_path, queries=queries, planner={"restarts": 1, "seed": 0})
    con = dpsql.connect(config, user="alice")
    try:
        report = con.session.plan()
        con.session.measure()
        monkeypatch.setattr(results_module, "interval_stderr",
                            lambda answer, estimate, stderr, nonneg: 100.0 * np.asarray(stderr))
        cur = con.cursor()
        cur.execute(queries[0])
        assert cur.fetchall()
        assert con.session._compile(queries[0]).offset_queries     # the offsets are measured
        sql_parts = [q for q in report.per_query if q.sql == queries[0]]
        assert sql_parts and sql_parts[0].stderr <= sql_parts[0].baseline
        base = sql_parts[0].baseline
        noise = np.array([e[-1] - (b[-1] or 0.0) / Z95 for e, b in zip(cur.stderr, cur.bias)])
        assert np.all(noise <= base * (1 + 1e-9)), (noise, base)
        assert np.all(noise >= 0.99 * base)        # the forced widening does reach the cut
    finally:
        con.close()
        dpsql.dbapi._engines.clear()


OR_QUERIES = ["SELECT COUNT(*) FROM adult WHERE sex = 'Female' OR income = '>50K'",
              "SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income",
              "SELECT sex, COUNT(*) FROM adult GROUP BY sex",
              "SELECT income, COUNT(*) FROM adult GROUP BY income",
              "SELECT COUNT(*) FROM adult",
              "SELECT race, COUNT(*) FROM adult GROUP BY race"]


@pytest.mark.slow      # measures and fits the adult table (~3 CPU-s)
def test_a_count_over_an_or_has_the_error_of_its_blocks_sum(tmp_path):
    """``WHERE sex = 'Female' OR income = '>50K'`` is two disjoint boxes (``predicates.py``),
    estimated from the same releases: the error of the one number the statement shows is
    that of their sum, covariance included.  Their variances were added as if independent
    (9.07 here where the sum's least-squares error is 8.33; on the NIST taxi trips
    ``payment_type = 1 OR tips > 0`` came back 27.9 against its baseline 25.6, the sum's
    error being 24.5: bench/reported_errors.py)."""
    from dpsql.linalg import Sum

    config = write_config(tmp_path, queries=OR_QUERIES, planner={"restarts": 1, "seed": 0})
    con = dpsql.connect(config, user="alice")
    try:
        report = con.session.plan()
        con.session.measure()
        _, variance, _ = con.session.engine.model("adult")
        lq = con.session.compile(OR_QUERIES[0]).linear_queries[0]
        assert lq.blocks == 2
        per_block, _ = variance.analyse(lq.matrix)
        joint, _ = variance.analyse(Sum(lq.matrix.blocks))
        # the blocks are correlated here: the case the independent sum gets wrong
        assert abs(joint[0] - np.sqrt(np.sum(per_block ** 2))) > 0.03 * joint[0]
        cur = con.cursor()
        cur.execute("SET dpsql.estimator = 'least_squares'")
        cur.execute(OR_QUERIES[0])
        assert cur.stderr[0][-1] == pytest.approx(joint[0], rel=1e-9)
        cur.execute("SET dpsql.estimator = 'pgm'")
        cur.execute(OR_QUERIES[0])
        # the model's answer: that error, widened no further than the baseline
        base = report.per_query[0].baseline
        assert joint[0] * (1 - 1e-9) <= cur.stderr[0][-1] <= max(base, joint[0]) * (1 + 1e-9)
    finally:
        con.close()
        dpsql.dbapi._engines.clear()
