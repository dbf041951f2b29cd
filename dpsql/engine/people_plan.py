"""Planning across the views of a people schema (issue 32 item 3).

The workload is split by view (each query compiles to the view of the table it reads), every
view's strategy is planned by HDMM as for any table, and the workload budget is divided
across the views to minimise their total expected error in the planner's objective
(``dpsql.plan.views``: ρ_v ∝ √c_v, ``ViewCost.cost``).  ``people_plan`` is what ``dpsql
plan`` prints for such a configuration: each view's path, bound, share, expected errors,
and what public metadata says about the rows its bound drops.  Everything here is public:
configuration, workload, domains, and the tables' declared public sizes (``[tables.NAME]
rows``); nothing reads the data.

Truncation bias (rows a bound drops) is reported only from public metadata: with declared
sizes N_T of a table and P of the person table, at least max(0, N_T − k_T·P) of T's rows
cannot be in its view (each of the P persons keeps at most k_T).  It is never computed from
the rows in the clear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpsql.engine.reports import PlanReport
from dpsql.errors import ProgrammingError

# the planner calls view_costs (Planner.view_shares, with itself: config, workload_for,
# optimize_counted, rows_sq) and people_plan is given the engine: typed Any here, since
# this module may not import either (tests/test_layout.py: no two files import each other)
Engine = Any

__all__ = ["ViewCost", "ViewPlan", "PeoplePlan", "view_costs", "people_plan", "increment_shares"]


@dataclass(frozen=True)
class ViewCost:
    """A view's planning inputs: its bound k, its strategy's unit-noise expected error E in
    the planner's objective, the number n of its workload queries, its noise's squared row
    factor (k², or ``rows_sq`` under a group bound: ``Planner.rows_sq``), and its cost c, the
    factor of 1/(2ρ_v) in the whole workload's objective (``dpsql.plan.views``).

    Under ``objective = "absolute"`` E sums the queries' squared errors at unit noise, and
    the view's row factor multiplies every noise variance: c = k²·E (``rows_sq``·E).  Under
    ``"relative"`` (the default) E sums each query's error over its baseline b_q = n·Δ_q²
    (one of the view's n queries alone at 1/n of its budget, ``plan.objective``), but the
    workload's objective measures every query against the baseline of the whole workload:
    one of its Q queries alone at ρ/Q, with noise for the view's row factor, as the plan's
    baselines carry it (``Planner.plan``).  The row factor then cancels — a query over line
    items is as well answered at k times the σ of a count of persons as its own baseline
    is — and the sum over the view is (ρ/ρ_v)·(n/Q)·E: c = n·E (the constant 1/Q is the
    same for every view).  Weighting it by k² instead (before) gave a view of 128 rows per
    person 128 times the share of a person view of the same structure, whose queries then
    came out at 4× their baseline (bench/people_tpch.py).  Under a group bound the baseline
    keeps k (a query alone at the view's bound) while the strategy's noise carries
    ``rows_sq`` ≤ k², so c = n·E·rows_sq/k²: the factor the planner chose the strategy by
    (``Planner.row_factor``) is the one the split sees."""

    table: str
    max_rows: int
    expected_error: float
    rows_sq: float | None = None
    queries: int = 1
    objective: str = "absolute"

    @property
    def cost(self) -> float:
        k2 = self.max_rows ** 2 if self.rows_sq is None else self.rows_sq
        if self.objective == "relative":
            # the baselines carry the view's bound k; a group bound lowers the strategy's
            # noise below it by rows_sq/k² (the figure the planner chose the strategy by)
            return self.queries * self.expected_error * k2 / self.max_rows ** 2
        return k2 * self.expected_error


def view_costs(engine: Engine, rho: Fraction) -> dict[str, ViewCost]:
    """Each view with workload queries, planned at the even share of ``rho`` (the strategy
    HDMM picks does not depend on the share, except for the lattice check at tiny budgets)
    as its own plan will be (``Planner.strategy_for``): a view whose workload mixes fine
    columns' CDF/range/quantile queries with others is split into parts (dpsql/engine/
    mixed.py) there too, and its cost is the split's.  Before, the view was priced by one
    strategy for its whole workload, which over two fine columns is refused, so the whole
    people schema could not be planned."""
    people = engine.config.people
    if people is None:
        return {}
    planner: Any = getattr(engine, "planning", engine)      # given the Engine or its Planner
    planned = {}
    for table in people.views:
        try:
            planned[table] = planner._workload(table)
        except ProgrammingError:        # no workload query reads this view
            continue
    out = {}
    for table, (workload, _, _, labels, offsets) in planned.items():
        k = people.bound(table)
        strategy = planner.strategy_for(table, workload, labels, offsets, Fraction(rho) / len(planned), k)
        error, rows_sq = _unit_error(planner, table, strategy, k)
        out[table] = ViewCost(table, k, error, rows_sq, len(workload.parts), engine.config.planner.objective)
    return out


def _unit_error(planner: Any, table: str, strategy: Any, k: int) -> tuple[float, float]:
    """(E, rows_sq) of a view's strategy for ``ViewCost``: its unit-noise error and squared
    row factor, or for a mixed strategy Σ_v (rows_sq_v/k²)·E_v/f_v with k² (each part's noise
    at its fraction f_v of the view's share, with its own row factor: ``Planner.rows_sq``,
    which reads an ordered part's factor from its shape), so that ``ViewCost.cost`` is the
    parts' total in either objective."""
    from dpsql.engine.mixed import is_mixed_strategy

    if not is_mixed_strategy(strategy):
        return float(strategy.expected_error), float(planner.rows_sq(table, strategy))
    k2 = float(k * k)
    return (sum(planner.rows_sq(table, p.strategy) / k2 * float(p.strategy.expected_error) / float(p.fraction)
                for p in strategy.parts), k2)


@dataclass(frozen=True)
class ViewPlan:
    table: str
    path: tuple[str, ...]
    max_rows: int
    rho: Fraction                # this view's share
    report: PlanReport | None    # its plan at that share (None: no workload query reads it)
    total_error: float           # expected total squared error at the share (planner objective)
    dropped_at_least: int | None  # rows its bound must drop, from declared public sizes
    groups: Any = None           # its GroupBound (dpsql.plan.views), or None
    rows_sq: float | None = None  # its noise's squared row factor (k² without a group bound)
    truncation_rho: Fraction = Fraction(0)   # the slice releasing the rows its bound drops
    truncation: Any = None       # that release (people_truncation.Truncation), once made

    def line(self) -> str:
        path = " -> ".join(self.path)
        head = f"  {self.table}: {path}, at most {self.max_rows} row{'' if self.max_rows == 1 else 's'} per person"
        if self.groups is not None:
            from dpsql.plan.views import grouped_l2_sq
            g = self.groups
            head += (f" in at most {g.max_groups} group{'' if g.max_groups == 1 else 's'} of "
                     f"({', '.join(g.attributes)}), {g.max_rows_per_group} per group (L2 sensitivity "
                     f"{math.sqrt(grouped_l2_sq(self.max_rows, g.max_groups, g.max_rows_per_group)):.4g} rows "
                     f"for marginals over the groups, {self.max_rows} otherwise")
            if self.rows_sq is not None:
                head += f"; this plan's noise: {math.sqrt(self.rows_sq):.4g} rows"
            head += ")"
        if self.report is None:
            return f"{head}; no workload query reads it (not measured)"
        units = "; ".join(f"{u.unit} {u.rmse:,.2f}" for u in self.report.units)
        n = self.report.queries
        return (f"{head}; {n} quer{'y' if n == 1 else 'ies'}, rho share {float(self.rho):.4g}, "
                f"expected RMSE per row: {units}")


@dataclass(frozen=True)
class PeoplePlan:
    rho: Fraction
    views: tuple[ViewPlan, ...]
    total_error: float           # Σ over views at the optimal shares
    even_error: float            # the same at an even split, for comparison

    def lines(self) -> list[str]:
        out = [f"people schema: {len(self.views)} views of the same persons share rho = {float(self.rho):.4g} "
               "(split to minimise the total expected error: rho_v proportional to the square root of each view's "
               "error at unit noise, times its noise's row factor under a group bound)"]
        for v in self.views:
            out.append(v.line())
            if v.truncation is not None:
                out.append("    " + v.truncation.line())
            elif v.truncation_rho > 0:
                out.append(f"    truncation: rho {float(v.truncation_rho):.4g} of its share releases, with noise, how "
                           "many rows the bound drops when it is measured (not released yet)")
            if v.dropped_at_least:
                out.append(f"    truncation: at least {v.dropped_at_least:,} rows of {v.table} are dropped by the "
                           "bound (from the declared public sizes)")
            elif v.dropped_at_least == 0 and v.max_rows > 1 and v.truncation_rho == 0:
                out.append("    truncation: the declared public sizes do not force the bound to drop rows; how "
                           "many it drops is not released")
        if any(v.dropped_at_least is None and v.truncation_rho == 0 for v in self.views if v.max_rows > 1):
            out.append("  truncation bias unknown: the rows a bound drops are never counted in the clear; declare "
                       "[tables.NAME] rows (public sizes) of the table and of the person table to bound it, or "
                       "[people] truncation_share to release it with noise")
        if self.even_error > 0 and math.isfinite(self.even_error):
            out.append(f"total expected squared error {self.total_error:,.4g} (planner objective); an even split "
                       f"would give {self.even_error:,.4g}")
        return out


def people_plan(engine: Engine, rho: Fraction | None = None) -> PeoplePlan:
    """The plan of every view at its share of ``rho`` (default: the workload budget)."""
    from dpsql.plan.views import even_total, expected_total

    people = engine.config.people
    if people is None:
        raise ProgrammingError("no [people] schema is configured",
                               hint='declare [people] person = "...", key = "..." (docs/config.md, "People across '
                                    'tables")')
    rho = Fraction(rho) if rho is not None else engine.workload_rho()
    # the split across views and its costs, planned once per budget (``Planner.view_costs``):
    # each view's plan at ``share`` below is the only other plan of it
    costs, shares = engine.planning.view_costs(rho), engine.view_shares(rho)
    rows = engine.config.table_rows
    persons = rows.get(people.person)
    views = []
    for table, view in people.views.items():
        share = shares.get(table, Fraction(0))
        # a bounded view's counts get its share less the truncation slice (people_truncation)
        slice_ = share * people.truncation_share if table != people.person else Fraction(0)
        report = engine.plan(table, rho=share - slice_) if table in shares else None
        dropped = None
        if persons is not None and table in rows:
            dropped = max(0, rows[table] - view.max_rows * persons)
        total = expected_total({table: costs[table].cost}, shares) if table in costs else 0.0
        released = None
        if slice_ > 0 and rho == engine.workload_rho():
            from dpsql.engine.people_truncation import released_truncation
            released = released_truncation(engine, table)
        views.append(ViewPlan(table, view.path, view.max_rows, share - slice_, report, total, dropped, view.groups,
                              costs[table].rows_sq if table in costs else None, slice_, released))
    cost_map = {v: c.cost for v, c in costs.items()}
    return PeoplePlan(rho, tuple(views), expected_total(cost_map, shares), even_total(rho, cost_map))


def increment_shares(engine: Engine, rho: Fraction) -> dict[str, Fraction]:
    """An increment's budget ``rho`` divided across the views whose workload queries no
    release supports yet (``dpsql measure --increment`` of a people schema): the workload's
    split (``Planner.view_shares``) restricted to those views and scaled to add up to exactly
    ``rho``, so a view gets the part of the budget the plan gives it beside the others that
    need one.  Empty when every query is supported.  Public: the workload, the domains and
    the released measurements' shapes; the model fitted to the releases is post-processing."""
    shares = engine.view_shares(engine.workload_rho())
    needing = {view: share for view, share in shares.items() if engine.unsupported_workload(view)}
    if not needing:
        return {}
    total = sum(needing.values(), Fraction(0))
    if total == 0:
        return {view: Fraction(rho) / len(needing) for view in needing}
    out = {view: Fraction(rho) * share / total for view, share in needing.items()}
    assert sum(out.values(), Fraction(0)) == rho
    return out
