"""Interval coverage over independent releases, for the ordered columns' honesty tests.

Each trial is a new ledger (its own engine, one release at the trial's ρ): answers of one
engine over successive releases are not independent (a model part is refitted lazily, so one
noisy fit answers several releases, and later fits pool earlier releases), and a coverage
rate over them has far more spread than a binomial one.  Within a trial the answers share
one release's noise and may be correlated; the checks below hold however strong that
correlation is, so their false-alarm rate is that of T independent draws.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
from scipy import optimize, stats

import dpsql
from dpsql.sql.postprocess import Z95

__all__ = ["check_coverage", "coverage_floor", "independent_trials"]

#: Each bound below is exceeded by chance with probability at most ALPHA when a trial's
#: answers are fully correlated (the χ² bounds: below 2.7e-5 each for any correlation,
#: Markov's inequality on the convex order; tests/test_coverage_check.py for the rate's).
ALPHA = 1e-5


def independent_trials(config: dict, tmp: Path, trials: int, rho: Fraction) -> Iterator[tuple]:
    """(connection, plan report) of ``trials`` fresh engines on ``config``, each with its own
    ledger and one release of the planned strategy at ``rho``; plans share the cache."""
    for i in range(trials):
        cfg = dict(config, dpsql=dict(config["dpsql"], ledger=str(tmp / f"trial{i}.ledger")))
        con = dpsql.connect(cfg, user="tester")
        try:
            engine = con.session.engine
            report = con.session.plan()
            table = next(iter(cfg["tables"]))
            engine.measure_strategy(table, engine._state(table).strategy, rho,
                                    engine.WORKLOAD_PRINCIPAL, f"coverage trial {i}")
            yield con, report
        finally:
            con.close()
            dpsql.dbapi._engines.clear()


def coverage_floor(trials: int, coverage: float = 0.95) -> float:
    """The rate q below which the mean of ``trials`` independent values in [0, 1], each of
    mean at least ``coverage``, falls with probability at most ALPHA: Hoeffding's (1963,
    Theorem 1) bound P(mean <= q) <= exp(-T·KL(q || coverage)), which holds for any
    distribution on [0, 1], so for a trial's share of hits however correlated its answers.

    The normal approximation used before, 0.95 - z·sqrt(0.95·0.05/T), is exceeded with
    probability 1.6e-4 at T = 80 when a trial's answers all hit or miss together (the exact
    binomial tail: the binomial is skewed where p = 0.95), 16 times ALPHA."""
    def kl(q: float) -> float:
        return q * math.log(q / coverage) + (1 - q) * math.log((1 - q) / (1 - coverage))
    return float(optimize.brentq(lambda q: trials * kl(q) - math.log(1 / ALPHA), 1e-9, coverage - 1e-12))


def check_coverage(trials: list[dict[str, list[tuple[float, float]]]],
                   exact_kinds: frozenset[str] = frozenset({"count"})) -> None:
    """``trials``: per trial, per kind of answer, its (error, reported se) pairs.

    Every kind: the 95% intervals hold the truth at least as often as 95% coverage over T
    independent trials allows (:func:`coverage_floor`: a trial's answers may be fully
    correlated).
    Kinds in ``exact_kinds`` (linear answers whose se is the estimator's exact standard
    deviation) also have the mean of z² = (error/se)² per trial, summed over trials, within
    the χ²_T bounds: neither too narrow nor too wide (the mean of k correlated χ²₁ values has
    a mean 1 and tails no heavier than one χ²₁'s, by convexity)."""
    T = len(trials)
    for kind in sorted({k for t in trials for k in t}):
        per = [t[kind] for t in trials if t.get(kind)]
        hits = np.mean([np.mean([abs(e) <= Z95 * s for e, s in answers]) for answers in per])
        low = coverage_floor(len(per))
        assert hits >= low, (kind, float(hits), low, len(per))
        if kind in exact_kinds:
            z2 = sum(np.mean([(e / s) ** 2 for e, s in answers]) for answers in per)
            lo, hi = stats.chi2.ppf(ALPHA, len(per)), stats.chi2.isf(ALPHA, len(per))
            assert lo <= z2 <= hi, (kind, z2 / len(per), lo / len(per), hi / len(per), T)
