"""A table whose workload mixes fine ordered columns' CDF, range and quantile queries with
ordinary queries (issue 35 item 4): a strategy per part, one budget.

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
A table with several fine columns that have CDF/range queries gets one ordered part per
column and the rest (``split_columns``: k + 1 parts, k + 1 releases, the shares below over
all of them).
Both sub-workloads keep the whole workload's objective scales (``plan.objective``: each
query against the per-query baseline of the whole workload), so their unit-noise errors
E_v add up to the table's objective: measured with shares ρ_v of ρ, the expected error is
Σ_v k_v²·E_v / (2ρ_v) (k_v² the noise's squared row factor), minimised subject to
Σ_v ρ_v = ρ by ρ_v ∝ √(k_v²·E_v): ``dpsql.plan.views.split_budget``, the split the views
of a people schema get (``split_fractions``, with each part's least share).  The shares are
exact fractions adding up to ρ; the releases compose sequentially (docs/privacy.md, "Mixed
workloads").

``MixedPlanner`` plans the parts and their shares, and keeps the split only when its
expected error is lower than one strategy's for the whole workload (``Planner.strategy_for``
tries it).  Everything here is public (workload SQL, domains, configuration).  ``MixedStrategy`` is
told apart by its class name (``is_mixed_strategy``) so that a process that only answers
never imports the planner (issue 17).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsql.errors import ModelTooLargeError, ProgrammingError, UnsupportedQueryError

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["MixedPlanner", "MixedStrategy", "StrategyPart", "is_mixed_strategy", "range_attributes", "split_columns",
           "split_fractions", "split_parts", "sub_workload", "thin_above_baseline", "thin_split"]


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
    direct: bool = False     # thin statements over two fine columns (engine/direct.py)

    def share(self, rho: Fraction) -> Fraction:
        return Fraction(rho) * self.fraction


def rest_parts(other, keep, fraction: Fraction, sub) -> list[StrategyPart]:
    """``other``, a plan of the sub-workload ``sub`` (the whole workload's parts ``keep``) at
    ``fraction`` of the budget, as parts of the whole workload's mixed plan: a mixed plan's parts
    scaled to that fraction and re-indexed, or one part (ordered or the rest)."""
    from dpsql.engine.ordered import is_ordered_strategy

    if is_mixed_strategy(other):
        return [StrategyPart(p.name, p.strategy, p.fraction * fraction, tuple(keep[i] for i in p.parts),
                             p.workload, p.ordered, p.direct) for p in other.parts]
    ordered = is_ordered_strategy(other)
    return [StrategyPart(f"ordered {other.attribute}" if ordered else "rest", other, fraction,
                         tuple(keep), sub, ordered)]


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
        if any(p.fraction <= 0 for p in self.parts):
            # a part with no budget has no noise scale to measure at (and infinite error)
            raise ProgrammingError("every part of a split strategy needs a positive budget fraction",
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


def range_attributes(terms) -> list[int]:
    """The attributes some term of ``terms`` asks a CDF or range about (a ``RangeGram``), in
    the order ``plan.ordered.ordered_attribute`` meets them (its choice first)."""
    from dpsql.plan.gram import RangeGram

    out: list[int] = []
    for t in terms.terms:
        out += [i for i, g in enumerate(t.grams) if isinstance(g, RangeGram) and i not in out]
    return out


def split_columns(workload, labels, offsets) -> tuple[list[tuple[int, list[int]]], list[int]] | None:
    """([(fine attribute index, its ordered part's query part indices), …], rest indices) of
    a workload that mixes fine columns' CDF/range queries with other statements, or None
    when ``split_parts`` finds no such column.  ``split_parts`` is applied to the workload
    for its first range attribute, then to the rest for each further one, so that every
    fine column with ordered queries gets an ordered part of its own (a table with incomes
    to the dollar and timestamps to the minute: two trees and the rest).  A rest that asks
    about one fine column alone stays the rest (planned by ``Planner.optimize``, which gives
    it that column's ordered strategy)."""
    parts: list[tuple[int, list[int]]] = []
    rest = list(range(len(workload.parts)))
    for i in range_attributes(workload.terms):
        sub = workload if not parts else sub_workload(workload, rest)
        at = {j: k for k, j in enumerate(rest)}
        found = split_parts(sub, [labels[j] for j in rest], [(q, at[j]) for q, j in offsets if j in at], i)
        if found is None:
            continue
        parts.append((i, [rest[k] for k in found[1]]))
        rest = [rest[k] for k in found[2]]
    return (parts, rest) if parts else None


def split_parts(workload, labels, offsets, attribute: int | None = None) -> tuple[int, list[int], list[int]] | None:
    """(ordered attribute index, ordered part indices, rest part indices) of a workload
    that mixes a fine column's CDF/range queries with statements that do not ask about that
    column, or None when it does not (all of one kind: planned as before).  The column is
    ``attribute``, or the one ``plan.ordered.ordered_attribute`` picks.

    A statement goes to the ordered part when one of its terms asks about the column (with
    or without other columns: the ordered strategy measures it per group of those,
    ``plan.ordered.group_attributes``) or it is the bare total; to the rest otherwise, and
    also when it has binning offsets (``offsets``: the (offset query, part index) pairs of
    ``Planner._workload``; the model answers them).  ``labels[j][0]`` is query part j's
    statement."""
    from dpsql.plan.ordered import ordered_attribute

    terms = workload.terms
    i = ordered_attribute(terms) if attribute is None else attribute
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


def thin_above_baseline(workload, labels, indices, strategy) -> set[str]:
    """The statements of the ordered part (query parts ``indices`` of ``workload``, planned
    as ``strategy``) that are thin, no CDF or range row among their queries (a COUNT with
    ``x <= c`` or ``BETWEEN``), and that ``strategy`` leaves above their per-query baseline
    at the part's share.  The tree or root gives a single range an error polylogarithmic in
    n, and no weighting of it reaches the baseline of one row at its share ρ/m (bench/
    fine_mixed.py at n = 10⁴: 2.55× and 3.46×), so such a statement is planned with the rest
    instead, where its row is measured within its baseline."""
    from dpsql.engine.ordered import is_ordered_strategy
    from dpsql.plan.ordered import above_baseline, ordered_attribute

    if not is_ordered_strategy(strategy):
        return set()
    above = {indices[k] for k in above_baseline(strategy) if k < len(indices)}   # not a total appended
    thin: dict[str, bool] = {}
    for j in indices:
        sql = labels[j][0]
        own = workload.terms.select(list(workload.parts[j].terms))
        thin[sql] = thin.get(sql, True) and ordered_attribute(own) is None
    return {labels[j][0] for j in above if thin[labels[j][0]]}


def thin_split(workload, labels, offsets, strategy) -> tuple[int, list[int], list[int]] | None:
    """For a workload of a fine column alone (``split_parts`` found no rest) planned as one
    ordered ``strategy``: (ordered attribute index, ordered part indices, rest part indices)
    with the thin statements that strategy leaves above their per-query baselines as the
    rest, or None when there are none (or nothing with a CDF/range row would be left).  The
    tree or root costs such a count a prefix row's error (``bench/fine.py``'s SQL workload at
    n = 10⁴: 1.69× and 2.23× its baseline), the rest measures its row within the baseline,
    as in a mixed workload (``thin_above_baseline``).  A statement with binning offsets is
    never moved (``split_parts`` keeps those with the model already)."""
    from dpsql.plan.ordered import ordered_attribute

    i = ordered_attribute(workload.terms)
    if i is None:
        return None
    every = list(range(len(workload.parts)))
    with_offsets = {labels[j][0] for _, j in offsets}
    thin = thin_above_baseline(workload, labels, every, strategy) - with_offsets
    if not thin:
        return None
    ordered = [j for j in every if labels[j][0] not in thin]
    rest = [j for j in every if labels[j][0] in thin]
    if not any(ordered_attribute(workload.terms.select(list(workload.parts[j].terms))) is not None
               for j in ordered):
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


def split_fractions(costs: dict[str, float], least: dict[str, float] | None = None) -> dict[str, Fraction]:
    """Each part's exact fraction of the budget minimising Σ_v costs[v] / (2ρ_v)
    (``dpsql.plan.views.split_budget`` at ρ = 1: shares ∝ √cost), moved to the nearest
    fractions at or above ``least`` (the shares at which each part keeps every query within
    its per-query baseline, ``least_fraction``) when those add up to at most 1.  The
    objective is convex and separable, so the constrained optimum is f_v = max(l_v, √c_v/λ)
    with λ making them add up to 1 (KKT): the parts below their least are set to it and the
    others split what is left by ``split_budget``, again until none is below (a part once
    set stays set: λ only grows).  For two parts this is the clamp min(max(f_a, l_a),
    1 − l_b).  Exact fractions adding up to 1 either way; a part of positive cost always
    gets a positive share."""
    from dpsql.plan.views import split_budget

    for name, c in costs.items():
        if not math.isfinite(c):
            raise ProgrammingError(f"part {name!r} has no finite expected error",
                                   hint="plan each part before splitting the budget")
    best = out = split_budget(Fraction(1), costs)
    lo = {v: Fraction(least.get(v, 0.0)) for v in costs} if least else {}
    if not lo or sum(lo.values(), Fraction(0)) > 1:
        return out
    fixed: dict[str, Fraction] = {}
    while True:
        low = [v for v in out if v not in fixed and out[v] < lo[v]]
        if not low:
            break
        fixed.update((v, lo[v]) for v in low)
        free = {v: c for v, c in costs.items() if v not in fixed}
        left = 1 - sum(fixed.values(), Fraction(0))
        if free and left <= 0:
            # the parts set to their least take the whole budget (least shares adding up
            # to exactly 1, e.g. a part's clamped to 1): the others would get 0, a share no
            # measurement can use (the planner divides its error by it), so, as when the
            # least shares add up to over 1, no positive shares keep every baseline
            return best
        out = {**fixed, **(split_budget(left, free) if free else {})}
    assert sum(out.values(), Fraction(0)) == 1
    return {v: out[v] for v in costs}


def least_fraction(strategy, planned_at: Fraction, rows_ratio: float = 1.0) -> float:
    """The least fraction of the table's budget at which ``strategy`` (planned on a
    ``sub_workload``) keeps each of its queries within its per-query baseline: the largest
    tse_q·k²/(rows_q·b_q·k₀²) over its queries (variances scale as 1/f; b_q·f is the
    sub-workload's baseline at the share f = ``planned_at`` it was planned at, ``rows_ratio`` = k²/k₀² the
    part's squared rows factor against the baseline's), with a relative 10⁻⁹ above it."""
    from dpsql.plan.objective import part_values
    from dpsql.plan.error import term_errors

    terms = strategy.workload
    if terms is None or not terms.parts:
        return 0.0
    errs = (np.asarray(strategy.term_tse) if strategy.term_tse is not None else
            term_errors(terms, strategy.kron_blocks, strategy.noise, strategy.assignment))
    out = 0.0
    for part, value in zip(terms.parts, part_values(terms.parts, errs)):
        if part.baseline > 0:
            out = max(out, float(value) * rows_ratio * float(planned_at) / (part.rows * part.baseline))
    return min(1.0, out * (1 + 1e-9))


class MixedPlanner:
    """Plans one table's workload as a ``MixedStrategy`` (module docstring) or keeps one
    strategy for the whole of it, whichever has the lower total expected error
    (``Planner.strategy_for`` decides when a split is tried).

    Each part is planned against its queries' baselines at its share (``sub_workload``), and
    its share follows from its plan's error: a few rounds of that fixed point (``balance``;
    on bench/fine_mixed.py's workload the shares move by 5e-3 in the third round and by
    < 1e-3 in the fourth).  The rest is planned at its share for the lattice check too.  An
    ordered part is planned again only when its share moved by over 1% since (at 10⁶ cells
    each plan of it is seconds of CPU; its baselines then differ by under 1%).  A thin count
    an ordered plan leaves above its baseline at its share moves to the rest
    (``thin_above_baseline``), and that ordered part is planned again without it.

    ``planner`` is the engine's ``Planner``: its ``optimize``, ``optimize_counted`` and
    ``rows_sq`` are all this uses of it (public metadata only).  ``counts_rho(strategy)`` is
    the ρ one strategy for the whole workload gets for its blocks when measured (``rho``
    less its binning offsets' share)."""

    def __init__(self, planner: Any, table: str, workload, labels, offsets, rho: Fraction, unit_rows: int,
                 counts_rho: Callable[[Any], Fraction], index: Sequence[int] | None = None) -> None:
        self.planner = planner
        self.table = table
        self.workload = workload
        self.labels = labels
        self.offsets = offsets
        self.rho = rho
        self.unit_rows = unit_rows
        self.counts_rho = counts_rho
        # the whole workload's index of each of this workload's query parts (its offsets')
        self.index = list(range(len(workload.parts))) if index is None else list(index)
        self.moved: set[str] = set()             # thin statements moved from an ordered part to the rest
        # per ordered part (named "ordered <column>"): its column, query parts, sub-workload,
        # strategy and the fraction it was planned at; the rest's the same
        self.attributes: dict[str, str] = {}
        self.idx: dict[str, list[int]] = {}
        self.subs: dict[str, Any] = {}
        self.ordered: dict[str, Any] = {}
        self.planned_at: dict[str, Fraction] = {}
        self.rest_idx: list[int] = []
        self.rest: Any = None
        self.rest_w: Any = None
        self.rest_at = Fraction(1)
        self.f: dict[str, Fraction] = {}         # each part's fraction of ρ, "rest" last

    # -- the two entry points -------------------------------------------------------------
    def whole(self):
        """One strategy (HDMM's or an ordered one) for the whole workload."""
        return self.planner.optimize_counted(self.workload, self.rho, self.unit_rows, table=self.table,
                                             counts_rho=self.counts_rho)

    def split(self, columns: list[tuple[int, list[int]]], rest: list[int], alone=None):
        """The split of ``split_columns`` (``columns``: each fine attribute with its ordered
        part's query parts; ``rest``: the others), or ``whole`` when that is better.
        ``alone``: the workload of one fine column alone, already planned as one strategy
        whose thin counts ``thin_split`` made the rest (then ``rest`` names them)."""
        if alone is not None:
            # a workload of the fine column alone whose ordered strategy leaves thin counts
            # above their baselines: those counts are a rest of their own (thin_split)
            self.moved.update(self.labels[j][0] for j in rest)
        names = self.workload.domain.attributes
        self.attributes = {f"ordered {names[i]}": names[i] for i, _ in columns}
        self.idx = {name: list(ordered) for name, (_, ordered) in zip(self.attributes, columns)}
        self.rest_idx = list(rest)
        self.balance()
        self.keep_baselines()
        return self.choose(alone)

    # -- the shares -----------------------------------------------------------------------
    def balance(self) -> None:
        """Plan every part and set its share, in rounds until the shares settle (class
        docstring), moving the thin counts an ordered part leaves above their baselines."""
        self.f = {**{v: Fraction(1) for v in self.idx}, "rest": Fraction(1)}
        for v in self.idx:
            self._plan_ordered(v, Fraction(1))
        for round_ in range(6):
            moved_any = False
            for v in self.idx:
                if round_ and abs(float(self.f[v] - self.planned_at[v])) > 1e-2 * float(self.f[v]):
                    self._plan_ordered(v, self.f[v])
                thin = thin_above_baseline(self.workload, self.labels, self.idx[v], self.ordered[v])
                if thin:
                    self._move(v, thin)
                    moved_any = True
                    self._plan_ordered(v, self.planned_at[v])
            self._plan_rest(self.f["rest"])
            last, self.f = self.f, self._fractions()
            if not moved_any and all(abs(float(self.f[v] - last[v])) <= 1e-3 * float(self.f[v]) for v in self.f):
                break

    def keep_baselines(self) -> None:
        """At the error-minimising shares a part may still leave queries above their
        baselines (a rest of thin counts alone: 1.15× at n = 10⁴): the nearest shares at
        which every part keeps them, when such exist (``split_fractions``), each part planned
        again at its new share.  Only after ``balance``: a part balanced at its share is
        tight there, and clamping every round would ratchet its share up (the quantiles'
        RMSE tripled)."""
        k2 = self.unit_rows ** 2
        least = {**{v: least_fraction(self.ordered[v], self.planned_at[v], self._rows_sq(self.ordered[v]) / k2)
                    for v in self.idx},
                 "rest": max(least_fraction(self.rest, self.rest_at, self._rows_sq(self.rest) / k2),
                             # the rest's binning offsets are measured from its share too
                             self.planner.least_with_offsets(
                                 self.table, self.rest, self.rho, [self.index[j] for j in self.rest_idx],
                                 [self.workload.parts[j].baseline for j in self.rest_idx]))}
        if not any(least[v] > self.f[v] for v in self.f):
            return
        self.f = self._fractions(least)
        if self.f["rest"] != self.rest_at:
            self._plan_rest(self.f["rest"])
        for v in self.idx:
            if self.f[v] != self.planned_at[v]:
                self._plan_ordered(v, self.f[v])

    def _fractions(self, least: dict[str, float] | None = None) -> dict[str, Fraction]:
        # c_v = k_v²·E_v: every part in the whole workload's objective (module docstring)
        return split_fractions({**{v: self._rows_sq(self.ordered[v]) * self.ordered[v].expected_error
                                   for v in self.idx},
                                "rest": self._rows_sq(self.rest) * self.rest.expected_error}, least)

    def _plan_ordered(self, v: str, at: Fraction) -> None:
        self.subs[v] = sub_workload(self.workload, self.idx[v], at)
        # in closed form, budget-free
        self.ordered[v] = self.planner.optimize(self.subs[v], self.rho, self.unit_rows, table=self.table)
        self.planned_at[v] = at

    def _plan_rest(self, at: Fraction) -> None:
        self.rest_w = sub_workload(self.workload, self.rest_idx, at)
        self.rest = self.planner.optimize_counted(self.rest_w, self.rho * at, self.unit_rows, table=self.table)
        self.rest_at = at

    def _move(self, v: str, statements: set[str]) -> None:
        self.moved.update(statements)
        self.rest_idx = sorted(self.rest_idx + [j for j in self.idx[v] if self.labels[j][0] in statements])
        self.idx[v] = [j for j in self.idx[v] if self.labels[j][0] not in statements]

    def _rows_sq(self, strategy) -> float:
        return self.planner.rows_sq(self.table, strategy)

    # -- the choice -----------------------------------------------------------------------
    def split_error(self) -> float:
        """The split's total expected error at unit budget: Σ_v k_v²·E_v / f_v."""
        return (sum(self._rows_sq(self.ordered[v]) * self.ordered[v].expected_error / float(self.f[v])
                    for v in self.idx)
                + self._rows_sq(self.rest) * self.rest.expected_error / float(self.f["rest"]))

    def _whole_candidate(self, alone) -> tuple[Any, float, str]:
        """The other candidate (the ordered strategy per group of the other columns asked,
        when those are few: ``plan.ordered.group_attributes``), its total expected error and
        how the explanation names it; None and ∞ when it is refused or would leave the moved
        thin counts above their baselines."""
        from dpsql.engine.ordered import is_ordered_strategy

        try:
            whole = alone if alone is not None else self.whole()
            error = self._rows_sq(whole) * whole.expected_error
            text = f"{whole.operator} over the whole workload: expected error {error:.6g}"
        except (UnsupportedQueryError, ModelTooLargeError) as exc:    # the group caps, the model size
            return None, math.inf, f"one strategy over the whole workload is refused ({exc.message})"
        if self.moved and is_ordered_strategy(whole) and thin_above_baseline(
                self.workload, self.labels, list(range(len(self.workload.parts))), whole):
            # one ordered strategy would leave the moved thin counts above their baselines
            return None, error, text.replace(
                ": expected error", " (not a candidate: it leaves thin counts above their per-query baselines): "
                "expected error")
        return whole, error, text

    def choose(self, alone=None):
        """The split, or one strategy for the whole workload when its expected error is no
        higher; either explains the other's."""
        whole, whole_error, whole_text = self._whole_candidate(alone)
        split_error = self.split_error()
        names = " and ".join(repr(a) for a in self.attributes.values())
        if whole is not None and whole_error <= split_error:
            return replace(whole, explanation=whole.explanation + f" (lower than the split into the queries "
                           f"over {names} and the rest: expected error {split_error:.6g})")
        idx, several = self.idx, len(self.idx) > 1
        counts = ", ".join(f"{len(idx[v])} linear quer{'y' if len(idx[v]) == 1 else 'ies'} planned by the ordered "
                           f"strategy over {self.attributes[v]!r} ({self.ordered[v].operator})" for v in idx)
        return MixedStrategy((
            *(StrategyPart(v, self.ordered[v], self.f[v], tuple(idx[v]), self.subs[v], True) for v in idx),
            StrategyPart("rest", self.rest, self.f["rest"], tuple(self.rest_idx), self.rest_w)),
            explanation=(f"The workload mixes CDF/range/quantile queries over the fine column{'s' if several else ''} "
                         f"{names} with queries that do not ask about {'them' if several else 'it'}"
                         if alone is None else
                         f"The workload asks about the fine column {names} alone, and one ordered "
                         "strategy leaves its thin counts above their per-query baselines, so those are "
                         "planned apart") +
                        f": {counts}, {len(self.rest_idx)} by {self.rest.operator}; the budget is split between "
                        f"the {len(idx) + 1} releases to minimise the total expected error (shares "
                        "proportional to the square root of each part's error at unit noise): expected error "
                        f"{split_error:.6g}, against {whole_text}.")
