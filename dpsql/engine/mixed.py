"""A table whose workload mixes a fine ordered column's CDF, range and quantile queries with
ordinary queries (issue 35 item 4): two strategies, one budget.

The ordered strategy (``dpsql.plan.ordered``: a tree or the Toeplitz root) measures one
column alone, and HDMM or ResidualPlanner cannot plan a prefix over 10⁵ cells, so a
workload holding both kinds was refused ("plan the queries over 'income' in a workload
of their own").  Here it is split by statement:

* the **ordered part**: every statement whose linear queries ask about that column alone
  (the other attributes summed out, e.g. a quantile, a CDF count, ``BETWEEN``, a bare
  ``COUNT(*)``), planned by ``opt_ordered`` and answered from the ordered release
  (``engine.ordered.answer_ordered``, which the session tries first);
* the **rest**, planned as any workload (the fine column absent or kept thin, as the
  planner's rules for large attributes say) and answered from the model.

A statement goes whole to one part, since a statement is answered whole from one release.
Both sub-workloads keep the whole workload's objective scales (``plan.objective``: each
query against the per-query baseline of the whole workload), so their unit-noise errors
E_v add up to the table's objective: measured with shares ρ_v of ρ, the expected error is
Σ_v k_v²·E_v / (2ρ_v) (k_v² the noise's squared row factor), minimised subject to
Σ_v ρ_v = ρ by ρ_v ∝ √(k_v²·E_v): ``dpsql.plan.views.split_budget``, the split the views
of a people schema get.  The shares are exact fractions adding up to ρ; the two releases
compose sequentially (docs/privacy.md, "Mixed workloads").

Everything here is public (workload SQL, domains, configuration).  ``MixedStrategy`` is
told apart by its class name (``is_mixed_strategy``) so that a process that only answers
never imports the planner (issue 17).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import Any

from dpsql.errors import ProgrammingError

__all__ = ["MixedStrategy", "StrategyPart", "is_mixed_strategy", "split_parts", "sub_workload"]


def is_mixed_strategy(strategy) -> bool:
    """A ``MixedStrategy``, told without importing it by name elsewhere."""
    return type(strategy).__name__ == "MixedStrategy"


@dataclass(frozen=True, eq=False)
class StrategyPart:
    """One part of a mixed plan: its strategy, the exact ``fraction`` of the table's budget it
    gets, the indices of the workload's query parts it plans, and its sub-workload."""

    name: str
    strategy: Any
    fraction: Fraction
    parts: tuple[int, ...]
    workload: Any
    ordered: bool = False

    def share(self, rho: Fraction) -> Fraction:
        return Fraction(rho) * self.fraction


@dataclass(frozen=True, eq=False)
class MixedStrategy:
    """The ordered part and the rest of one table's workload (module docstring), with the
    views of ``plan.Strategy`` the engine's front ends read."""

    parts: tuple[StrategyPart, ...]
    explanation: str = ""
    operator: str = "split"

    def __post_init__(self) -> None:
        if sum((p.fraction for p in self.parts), Fraction(0)) != 1:
            raise ProgrammingError("the parts' budget fractions must add up to exactly 1",
                                   hint="build a MixedStrategy from split_fractions")

    def shares(self, rho: Fraction) -> list[Fraction]:
        """Each part's exact share of ``rho`` (they add up to ``rho``)."""
        return [p.share(rho) for p in self.parts]

    @property
    def blocks(self) -> list:
        return [b for p in self.parts for b in p.strategy.blocks]

    @property
    def cliques(self) -> list[tuple[str, ...]]:
        return list(dict.fromkeys(c for p in self.parts for c in p.strategy.cliques))

    @property
    def noise(self) -> str:
        return self.parts[0].strategy.noise

    @property
    def expected_error(self) -> float:
        """The unit-noise error of the whole workload at unit budget split by the fractions:
        Σ_v E_v / f_v (part v's noise variance is 1/f_v times the whole budget's)."""
        return sum(float(p.strategy.expected_error) / float(p.fraction) for p in self.parts)


def split_parts(workload, labels, offsets) -> tuple[int, list[int], list[int]] | None:
    """(ordered attribute index, ordered part indices, rest part indices) of a workload
    that mixes a fine column's CDF/range queries with statements that do not ask about that
    column, or None when it does not (all of one kind: planned as before).

    A statement goes to the ordered part when one of its terms asks about the column (with
    or without other columns: the ordered strategy measures it per group of those,
    ``plan.ordered.group_attributes``) or it is the bare total; to the rest otherwise, and
    also when it has binning offsets (``offsets``: the (offset query, part index) pairs of
    ``Planner._workload``; the model answers them).  ``labels[j][0]`` is query part j's
    statement."""
    from dpsql.plan.ordered import ordered_attribute

    terms = workload.terms
    i = ordered_attribute(terms)
    if i is None:
        return None
    with_offsets = {labels[j][0] for _, j in offsets}
    column: dict[str, bool] = {}       # some term asks about the column
    empty: dict[str, bool] = {}        # every term is the bare total
    for j, part in enumerate(workload.parts):
        sql = labels[j][0]
        supports = [terms.terms[t].support for t in part.terms]
        column[sql] = column.get(sql, False) or any(i in s for s in supports)
        empty[sql] = empty.get(sql, True) and all(not s for s in supports)
    touches = {sql: column[sql] or empty[sql] for sql in column}
    ordered = [j for j in range(len(workload.parts))
               if touches[labels[j][0]] and labels[j][0] not in with_offsets]
    rest = [j for j in range(len(workload.parts)) if j not in set(ordered)]
    # a prefix over the column must be in the ordered part (else nothing needs splitting)
    has_range = any(ordered_attribute(workload.terms.select(list(workload.parts[j].terms))) is not None
                    for j in ordered)
    if not ordered or not rest or not has_range:
        return None
    return i, ordered, rest


def sub_workload(workload, indices, fraction: Fraction = Fraction(1)):
    """The query parts ``indices`` of ``workload`` as a workload of their own, each with its
    scale in the whole workload's objective (so that errors of the parts add up), and its
    per-query baseline (the whole workload's: each query alone at ρ/k) in the unit noise of a
    part measured with ``fraction`` of ρ: b_q·f, so that the planner's balance keeps each
    query within its baseline at the part's share, not at the whole budget."""
    from dpsql import linalg
    from dpsql.plan import Workload

    mats = workload.matrix.blocks
    parts, first = [], 0
    for j in indices:
        p = workload.parts[j]
        parts.append(replace(p, first_term=first, baseline=p.baseline * float(fraction)))
        first += p.num_terms
    return Workload(workload.domain, linalg.Union([mats[j] for j in indices]), tuple(parts))


def split_fractions(costs: dict[str, float]) -> dict[str, Fraction]:
    """Each part's exact fraction of the budget minimising Σ_v costs[v] / (2ρ_v)
    (``dpsql.plan.views.split_budget`` at ρ = 1: shares ∝ √cost)."""
    from dpsql.plan.views import split_budget

    for name, c in costs.items():
        if not math.isfinite(c):
            raise ProgrammingError(f"part {name!r} has no finite expected error",
                                   hint="plan each part before splitting the budget")
    return split_budget(Fraction(1), costs)
