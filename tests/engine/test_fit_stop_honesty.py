"""Reported standard errors are honest whatever the model's size (issue 35 item 6).

Exact models over ``FitLimits.discrepancy_above`` cells (10⁶) stopped at the discrepancy principle
(loss ≤ number of noisy values), which nothing certifies: on TPC-H SF 0.1's 1.4 M-cell line-item
model the realised MSE of Q1's counts was 1.7 times their reported se² over 6 releases (0.5 fitted
to the gap; bench/RESULTS.md, "Where the fit stops").  Here the same stop is put on a small
adult model by lowering the threshold to 0, so a few seeded releases show it in seconds.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

import dpsql
from dpsql.engine.config import load_config
from dpsql.measure.exact import ExactOracle
from dpsql.pgm.limits import FitLimits
from dpsql.privacy import noise
from dpsql.testing import write_config

QUERIES = ["SELECT education, income, COUNT(*) FROM adult GROUP BY education, income",
           "SELECT relationship, sex, COUNT(*) FROM adult GROUP BY relationship, sex"]
SEEDS = tuple(range(1, 9))


@pytest.mark.slow      # eight seeded releases of the adult table (~1 CPU-s each)
def test_answers_of_a_model_over_the_discrepancy_threshold_are_within_their_errors(tmp_path):
    """Realised squared errors over reported se², pooled over 44 rows × 8 seeded releases.

    If every reported se were exact for an unbiased answer, each z = error / se would be
    N(0, 1), z² a χ²₁ (mean 1, variance 2), and their mean over n = 352 values would have
    variance 2/n.  The rows of one release share its strategy's noise (ResidualPlanner: a
    total, one-way and two-way residual blocks), which the tolerance allows for by doubling
    that variance (the spread of the per-release means measured 1.5 times the independent
    one's variance); three such standard deviations: 1 + 3·√(4/352) = 1.32.  At the
    discrepancy stop the mean was 1.83 (the stopped model's small cells stay near the
    maximum-entropy start: 7th-8th × >50K, truth 62, came back with z² ≈ 5; the mean was
    above 1.25 in each of the 8 releases); fitted to its gap tolerance it is 1.09."""
    cfg_path = write_config(tmp_path, queries=QUERIES, epsilon=1.0, cache_dir=tmp_path / "cache")
    cfg = load_config(cfg_path)
    oracle = ExactOracle(cfg.tables, cfg.sources)
    truth = [{tuple(r[:-1]): r[-1] for r in oracle.query(q)} for q in QUERIES]
    oracle.close()
    z2: list[float] = []
    for seed in SEEDS:
        con = dpsql.connect(cfg_path, user="ana", ledger=str(tmp_path / f"{seed}.ledger"))
        engine = con.session.engine
        # every model is "large": the threshold the 1.4 M-cell TPC-H model is over
        engine.config = engine.models.config = replace(engine.config,
                                                       fit_base_limits=FitLimits(discrepancy_above=0))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(noise, "_SYSTEM", noise.SeededBitSource(seed))
            con.session.measure()
        cur = con.cursor()
        for sql, exact in zip(QUERIES, truth):
            cur.execute(sql)
            for row, err in zip(cur.fetchall(), cur.stderr):
                assert err[-1] is not None and err[-1] > 0, (sql, row, err)
                z2.append(((row[-1] - exact.get(tuple(row[:-1]), 0)) / err[-1]) ** 2)
        con.close()
    n = len(z2)
    assert n == 44 * len(SEEDS)
    tolerance = 1 + 3 * math.sqrt(2 * 2 / n)
    assert sum(z2) / n <= tolerance, (sum(z2) / n, tolerance)
