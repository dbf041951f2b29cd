"""A differentially private choice of a view's bound ``max_rows`` (issue 32).

The operator picks each view's bound k before measuring: too small drops many rows (bias),
too large multiplies every noise standard deviation by k.  ``dpsql bound`` suggests one from
the data at a declared cost, as PipelineDP does: the exponential mechanism (thesis Def. 8)
over the candidates 1, 2, 4, …, cap, scored by how close each is to the ``quantile`` of the
persons' row counts:

    score(k) = −| #{persons with ≤ k rows} − q · #{persons} |.

Adding or removing one person (with all their rows) changes #{≤ k} by at most 1 and q·N by
q ≤ 1, and both move in the same direction, so each score changes by at most max(q, 1 − q)
≤ 1: sensitivity 1, cost ε²/8 in zCDP (``accountant.rho_exponential``).  The persons' row
counts are exact integers read from the view without its bound (``Backend.contributions``)
and never leave this function: only the chosen candidate does, after the ledger has
recorded the charge.  The choice is a release (``bound:<identity>:…``): asking again for the
same view, content, ε, quantile and cap returns it for free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpsql.engine.one_release import release_once
from dpsql.errors import ProgrammingError
from dpsql.privacy.accountant import rho_exponential
from dpsql.privacy.noise import exponential_mechanism

__all__ = ["BoundChoice", "candidates", "bound_scores", "choose_bound", "BOUND_PREFIX"]

BOUND_PREFIX = "bound:"


@dataclass(frozen=True)
class BoundChoice:
    table: str
    max_rows: int
    epsilon: Fraction
    rho: Fraction            # charged now (0 when re-used)
    quantile: Fraction
    candidates: tuple[int, ...]
    reused: bool


def candidates(cap: int) -> tuple[int, ...]:
    """1, 2, 4, … up to ``cap`` (and ``cap`` itself)."""
    if cap < 1:
        raise ProgrammingError("the largest candidate bound must be at least 1", hint="dpsql bound --max 1024")
    out, k = [], 1
    while k < cap:
        out.append(k)
        k *= 2
    return tuple(out + [cap])


def bound_scores(hist, cands, quantile: Fraction) -> list[Fraction]:
    """Exact scores −|#{n ≤ k} − q·N| of each candidate k (``hist[n]``: persons with n rows,
    capped at the last index)."""
    total = int(sum(int(h) for h in hist))
    out = []
    for k in cands:
        at_most = int(sum(int(h) for h in hist[1:k + 1]))
        out.append(-abs(Fraction(at_most) - Fraction(quantile) * total))
    return out


def choose_bound(engine: Any, table: str, epsilon: Fraction, quantile: Fraction = Fraction(9, 10),
                 cap: int = 1024, rng=None) -> BoundChoice:
    """Choose ``table``'s bound privately (see the module doc), charged to the workload."""
    people = engine.config.people
    if people is None or table not in people.views:
        raise ProgrammingError(f"{table!r} is not a table of a people schema",
                               hint="a bound is chosen for [people.tables.NAME] max_rows")
    if table == people.person:
        bounded = [t for t in people.views if t != people.person]
        raise ProgrammingError(f"{table!r} is the person table: one row per person, no bound to choose",
                               hint="choose the bound of a table that references it: --table "
                                    + " or --table ".join(bounded))
    epsilon, quantile = Fraction(epsilon), Fraction(quantile)
    if not (epsilon > 0 and 0 < quantile <= 1):
        raise ProgrammingError("epsilon must be positive and the quantile in (0, 1]",
                               hint="e.g. dpsql bound --table orders --epsilon 0.1 --quantile 0.9")
    cands = candidates(int(cap))
    ident = engine.identity(table)
    key = (f"{BOUND_PREFIX}{ident.key()}:"
           + json.dumps([str(epsilon), str(quantile), list(cands)], separators=(",", ":")))
    rho = rho_exponential(epsilon)
    mechanism = {"purpose": "bound", "table": table, "identity": ident.as_dict(), "epsilon": str(epsilon),
                 "quantile": str(quantile), "candidates": list(cands)}

    def choose(hist) -> bytes:
        index = exponential_mechanism(bound_scores(hist, cands, quantile), epsilon, 1, rng=rng)
        return json.dumps({"max_rows": cands[index]}).encode()

    payload, reused = release_once(
        engine.ledger, engine.WORKLOAD_PRINCIPAL, key, rho, mechanism, what="choosing this bound",
        hint="the operator grants a new budget (a new ledger), or declares max_rows",
        count=lambda: engine.backend.contributions(engine.catalog[table], cands[-1]), noisy=choose)
    return BoundChoice(table, int(json.loads(payload)["max_rows"]), epsilon, Fraction(0) if reused else rho,
                       quantile, cands, reused)
