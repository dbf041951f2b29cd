"""The rows a view's bound drops, released with noise (issue 32: truncation bias).

A view keeps at most k = ``max_rows`` rows per person (and, with a group bound, at most g
groups of r rows): a person with more loses some, and every count over the view is biased
low by them.  How many is data, so it is never computed and shown in the clear: with
``[people] truncation_share = f`` each bounded view's share ρ_v of the workload budget is
split, ρ_v·(1 − f) for its counts and ρ_v·f for this release, made by ``dpsql measure`` right
after the counts and charged in the ledger before anything is drawn.

What is released, for view v (persons p, n_p their rows in the view, m_p ≤ k the rows kept):

    D = Σ_p min(n_p − m_p, k)     the rows dropped, counted up to k per person,
    K = Σ_p m_p                   the rows kept,

each plus independent discrete noise (``dpsql.privacy.noise``).  Adding or removing one
person with all their rows changes only that person's terms (their kept rows depend on their
rows alone, docs/privacy.md §2a), each by at most k: the vector (D, K) moves by at most
√2·k in L2 and 2k in L1.  The Gaussian mechanism with σ² = 2k²/(2ρ) = k²/ρ costs exactly ρ
in zCDP; the Laplace one with scale b ≥ 2k/√(2ρ) is √(2ρ)-DP, ρ in zCDP.  The share
D/(D + K) (clamped to [0, 1]) is post-processing.  Clipping at k per person makes D a lower
bound on the rows dropped: a person with more than 2k rows counts as k of them (said beside
the figure).  The release is keyed ``truncation:<identity>:…``: asking again re-uses it, a
process that died between charge and release completes it under that charge.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.engine.one_release import release_once
from dpsql.errors import ProgrammingError
from dpsql.privacy import noise

__all__ = ["TRUNCATION_PREFIX", "Truncation", "noise_param", "truncation_key", "release_truncation",
           "released_truncation", "truncation_cost"]

TRUNCATION_PREFIX = "truncation:"


@dataclass(frozen=True)
class Truncation:
    """A released truncation figure: noisy D and K (module doc) with their noise's sd."""

    table: str
    dropped: float
    kept: float
    stddev: float
    max_rows: int
    rho: Fraction       # charged now (0 when re-used)
    reused: bool

    @property
    def share(self) -> float | None:
        """D/(D + K) clamped to [0, 1]; None when the noisy total is not positive."""
        d, k = max(self.dropped, 0.0), max(self.kept, 0.0)
        return d / (d + k) if d + k > 0 else None

    def line(self) -> str:
        share = self.share
        pct = "unknown share" if share is None else f"{100 * share:.1f}% of the view's rows"
        return (f"truncation (released with noise, sd {self.stddev:,.1f} each): about {self.dropped:,.0f} rows dropped "
                f"by the bound and {self.kept:,.0f} kept ({pct}; drops counted up to {self.max_rows} per person, "
                "so at least this many)")


def noise_param(max_rows: int, rho: Fraction, family: str) -> Fraction:
    """σ² (Gaussian) or the scale b (Laplace) releasing (D, K) at exactly ≤ ``rho``."""
    k, rho = int(max_rows), Fraction(rho)
    if rho <= 0:
        raise ProgrammingError("a truncation release needs a positive rho")
    if family == "gaussian":
        return Fraction(2 * k * k) / (2 * rho)      # cost (√2·k)²/(2σ²) = rho exactly
    b = Fraction(2 * k / math.sqrt(2 * float(rho)) * (1 + 1e-9))
    while (Fraction(2 * k) / b) ** 2 / 2 > rho:     # ε = 2k/b, cost ε²/2 ≤ rho exactly
        b *= Fraction(1000001, 1000000)
    return b


def _stddev(param: Fraction, family: str) -> float:
    if family == "gaussian":
        return math.sqrt(float(param))
    q = math.exp(-1.0 / float(param))
    return math.sqrt(2 * q) / (1 - q)


def truncation_key(engine: Any, table: str, rho: Fraction) -> str:
    family = engine.config.noise
    k = engine.config.people.bound(table)
    return (f"{TRUNCATION_PREFIX}{engine.identity(table).key()}:"
            + json.dumps([str(Fraction(rho)), family, str(noise_param(k, rho, family))], separators=(",", ":")))


def _decode(table: str, payload: bytes, rho: Fraction, reused: bool) -> Truncation:
    d = json.loads(payload)
    return Truncation(table, float(d["dropped"]), float(d["kept"]), float(d["stddev"]), int(d["max_rows"]),
                      Fraction(0) if reused else rho, reused)


def truncation_cost(engine: Any, table: str, rho: Fraction) -> Fraction:
    """ρ ``release_truncation`` would charge now: 0 when released (or charged) already."""
    key = truncation_key(engine, table, rho)
    ledger = engine.ledger
    done = ledger.release(key) is not None or ledger.unreleased_charge(key) is not None
    return Fraction(0) if done else Fraction(rho)


def released_truncation(engine: Any, table: str) -> Truncation | None:
    """The figure released for ``table`` at its configured slice, if any (public: noisy)."""
    rho = engine.truncation_rho(table)
    if rho <= 0:
        return None
    found = engine.ledger.release(truncation_key(engine, table, rho))
    return None if found is None else _decode(table, found, rho, True)


def release_truncation(engine: Any, table: str, rho: Fraction, rng=None) -> Truncation:
    """Charge ``rho`` to the workload principal, then count and release (D, K) with noise."""
    people = engine.config.people
    if people is None or table not in people.views or table == people.person:
        raise ProgrammingError(f"{table!r} is not a bounded view of a people schema",
                               hint="the rows a bound drops are released for [people.tables.NAME] tables only")
    rho = Fraction(rho)
    family = engine.config.noise
    k = people.bound(table)
    param = noise_param(k, rho, family)
    key = truncation_key(engine, table, rho)
    mechanism = {"purpose": "truncation", "table": table, "identity": engine.identity(table).as_dict(),
                 "family": family, "param": str(param), "max_rows": k}

    def noisy(exact) -> bytes:
        z = noise.discrete_gaussian(param, 2, rng=rng) if family == "gaussian" else \
            noise.discrete_laplace(param, 2, rng=rng)
        values = noise.add_exact(np.array(exact, dtype=np.int64), z)
        return json.dumps({"dropped": int(values[0]), "kept": int(values[1]), "stddev": _stddev(param, family),
                           "max_rows": k}).encode()

    payload, reused = release_once(
        engine.ledger, engine.WORKLOAD_PRINCIPAL, key, rho, mechanism,
        what=f"releasing the rows {table!r}'s bound drops",
        hint="the operator grants a new budget (a new ledger), or sets [people] truncation_share = 0",
        count=lambda: engine.backend.truncation(engine.catalog[table], k), noisy=noisy)
    return _decode(table, payload, rho, reused)
