"""Planning what to measure on one private table (thesis ch. 3, HDMM; docs/engine.md): the
workload compiled over the table's domain (with the binning offsets of its SUMs), the HDMM
strategy at the workload's budget (kept on the lattice, with the total count determined),
its expected errors (``PlanReport``), and the workload budget's share of each view of a
people schema.  Everything here is public: configuration, workload SQL, domains and the
tables' declared sizes; the planner is given no backend and reads no data.

``Planner`` owns this for ``Engine``, which holds one as ``engine.planning`` and delegates
its planning methods to it (issue 36 item 3: one place per concept, explicit
collaborators).  It is given everything it uses when it is built: the configuration, the
catalog, the engine's lock, the table-state lookup, whether the backend can sum binning
offsets, and where progress goes; it reads nothing else of the engine.

The planner (``dpsql.plan``: scipy.optimize, scipy.linalg) is imported where a workload is
planned, not at the top: a process that answers from a saved model never plans (issue 17,
a new process answers in ≤ 1 s; tests/engine/test_query_path.py).  The strategy cache on
disk (``config.cache_dir``) is opened on the first plan for the same reason.
"""

from __future__ import annotations

import math
import threading
import time
from fractions import Fraction
from typing import TYPE_CHECKING, Any

import numpy as np

from dpsql import linalg
from dpsql.engine.measuring import _groups
from dpsql.engine.direct import is_direct_strategy
from dpsql.engine.ordered import is_ordered_strategy
from dpsql.engine.mixed import is_mixed_strategy
from dpsql.engine.reports import COUNTS, QUANTILES, PartReport, PlanReport, QueryReport, unit_of, units_of
from dpsql.errors import ProgrammingError
from dpsql.measure import release as rel
from dpsql.pgm.measurement import Measurement, estimate_total

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from dpsql.engine.config import Config
    from dpsql.engine.state import TableState
    from dpsql.plan import Strategy, StrategyCache, Workload
    from dpsql.public import StarCatalog


def gaussian_sigma2_unit(rho: float) -> float:
    """σ² of the Gaussian mechanism with unit L2 sensitivity at cost ρ (Δ²/(2σ²) = ρ)."""
    return 1.0 / (2.0 * rho)


class Planner:
    """Planning the workload measurement of each table: its workload, strategy, expected
    errors and budget share.

    ``state(table)`` returns the table's ``TableState`` (raising for an unknown table); a
    plan at the configured budget stores its strategy there, under ``lock`` (the engine's).
    ``sums_offsets`` says whether the backend can measure binning offsets
    (``Backend.sum_offsets``); ``progress(stage, info)`` reports to the listeners and
    ``listening()`` says whether there are any (HDMM passes no per-restart callback
    otherwise)."""

    def __init__(self, config: Config, catalog: StarCatalog, lock: threading.RLock, *,
                 state: Callable[[str], TableState], sums_offsets: bool,
                 progress: Callable[[str, dict], None], listening: Callable[[], bool]) -> None:
        self.config = config
        self.catalog = catalog
        self._lock = lock
        self._state = state
        self._sums_offsets = sums_offsets
        self._progress = progress
        self._listening = listening
        self._strategy_cache: StrategyCache | None = None
        self._view_shares: dict[Fraction, dict[str, Fraction]] = {}
        self._view_costs: dict[Fraction, dict] = {}

    def workload_for(self, table: str, queries: Sequence[str] | None = None):
        """Compile workload SQL (public) into an HDMM workload over the table's domain,
        one query part per linear query, scaled for the configured objective
        (``dpsql.plan.objective``; weights from ``-- weight:`` comments or the config)."""
        return self._workload(table, queries)[:4]

    def _workload(self, table: str, queries: Sequence[str] | None = None):
        """``workload_for`` plus the offset queries of its SUMs over wide bins, each with the
        index of its SUM's query part.  Under ``[planner] binning = "offsets"`` the
        offsets replace the binning-bound queries (Σ half bin widths), which are then left
        out of the workload (docs/engine.md, "Binning offsets")."""
        from dpsql.engine.ordered import workload_matrix
        from dpsql.plan import QuerySpec, Workload
        from dpsql.sql import compile as compile_sql

        if queries is None:
            queries, weights = list(self.config.workload), list(self.config.workload_weights)
        else:
            queries, weights = list(queries), []
        weights = weights + [1.0] * (len(queries) - len(weights))
        state = self._state(table)
        specs, names, labels = [], [], []
        blocks: list = []
        offsets: list[tuple[Any, int]] = []
        measured = self.config.planner.binning == "offsets"
        for sql, weight in zip(queries, weights):
            cq = compile_sql(sql, self.catalog)
            if cq.table != table:
                continue
            pairs = cq.offset_pairs() if measured else {}
            replaced = {bound for bound, _ in pairs.values()}
            part_of = {}
            for lq in cq.linear_queries:
                if lq.name in replaced:
                    continue
                part_of[lq.name] = len(blocks)
                matrix = workload_matrix(state.schema, lq)   # a fine column's quantile: its CDF
                blocks.append(matrix)
                specs.append(QuerySpec(f"{sql} [{lq.description}]", matrix, weight))
                labels.append((sql, lq.description, unit_of(lq.kind, lq.description)))
            offsets += [(lq, part_of[pairs[lq.name][1]]) for lq in cq.offset_queries
                        if lq.name in pairs and pairs[lq.name][1] in part_of]
            names.append(sql)
        if not blocks:
            raise ProgrammingError(f"the workload has no queries on table {table!r}",
                                   hint="add SQL statements over this table to [workload]")
        workload = Workload.of_queries(state.schema.domain, specs, noise=self.config.noise,
                                       objective=self.config.planner.objective)
        return workload, names, blocks, labels, offsets

    def plan(self, table: str, queries: Sequence[str] | None = None,
             rho: Fraction | float | None = None) -> PlanReport:
        from dpsql.plan import Workload, query_errors, svd_lower_bound

        t0 = time.perf_counter()
        workload, names, blocks, labels, offsets = self._workload(table, queries)
        configured = rho is None or Fraction(rho) == self.workload_rho(table)
        rho = Fraction(rho) if rho is not None else self.workload_rho(table)
        unit_rows = self.config.sources[table].unit_rows
        strategy = self.strategy_for(table, workload, labels, offsets, rho, unit_rows)
        if configured:
            # a plan at another budget (`dpsql plan --epsilon`) is a what-if: `measure` must
            # never run a strategy planned for a budget it is not given
            with self._lock:
                self._state(table).strategy = strategy
        m = sum(b.shape[0] for b in blocks)
        # = b² of Laplace at ε = √(2ρ) too (unit TSEs carry the 2); every sensitivity is
        # multiplied by the rows one privacy unit may contribute (max_rows, a view's bound),
        # as the measurement calibrates it (release.calibrate): before issue 32 the plan
        # reported the errors of one row per unit whatever max_rows was
        # The declared workload's binning offsets take their share of rho from the counts,
        # and add their noise to the SUMs they complete (docs/engine.md, "Binning offsets")
        from dpsql.engine.offsets import offset_variances
        # one group per release: the whole workload, or each part of a mixed plan at its
        # share (dpsql/engine/mixed.py); the offsets go with the part the model answers
        groups = [("", strategy, rho, list(range(len(workload.parts))), True)] if not is_mixed_strategy(strategy) \
            else [(p.name, p.strategy, p.share(rho), list(p.parts), not (p.ordered or p.direct))
                  for p in strategy.parts]
        # the per-query baselines keep the view's bound k (a query alone at k, as the split
        # across views judges them, people_plan.ViewCost); the SVD floors, lower bounds for
        # every strategy, the smallest factor any block can get (S² under a group bound)
        s2_all = gaussian_sigma2_unit(float(rho)) * unit_rows ** 2
        s2_floor = gaussian_sigma2_unit(float(rho)) * self.min_rows_sq(table)
        reports: dict[int, QueryReport] = {}
        parts, share = [], Fraction(0)
        for name, sub, sub_rho, indices, with_offsets in groups:
            planned = self._offset_blocks(table, sub, sub_rho, indices) if queries is None and with_offsets else None
            off = planned[1] if planned is not None else Fraction(0)
            share += off
            added = (offset_variances(planned[0], off, self.config.noise, unit_rows,
                                      _groups(self.config.sources[table], self.config.noise))
                     if planned is not None else {})
            rows2 = self.rows_sq(table, sub)
            s2 = gaussian_sigma2_unit(float(sub_rho - off)) * rows2
            # a direct part of sums (engine/direct_sums.py) measures an OR's boxes as one count
            # per group: its error is the sum's, per group, not per box
            summed = is_direct_strategy(sub) and not sub.starts
            for k, (j, (tse, _, floor)) in enumerate(zip(indices, query_errors(sub))):
                # the baseline of the whole workload (a part's sub-workload holds it at its share)
                part, (sql, aggregate, unit) = workload.parts[j], labels[j]
                per = sub.workload.parts[k].rows if summed else part.rows
                if part.num_terms >= 2 and type(sub).__name__ == "Strategy" and sub.workload is not None:
                    # an OR's boxes: the statement shows their sum, its error (covariance
                    # included, engine/direct_sums.py) per group is what the plan promises
                    from dpsql.engine.direct_sums import sum_tse
                    per = int(math.prod(sub.workload.terms[sub.workload.parts[k].first_term].rows))
                    tse = sum_tse(sub, k) / sub.workload.parts[k].scale
                reports[j] = QueryReport(
                    sql, aggregate, part.rows, part.weight, math.sqrt(tse * s2 / per + added.get(j, 0.0)),
                    math.sqrt(part.rows * part.baseline * s2_all / part.rows),
                    # a direct part's floor would be its merged cells', not the column's
                    None if floor is None or is_direct_strategy(sub) else math.sqrt(floor * s2_floor / part.rows),
                    unit)
            if is_mixed_strategy(strategy):
                parts.append(self._part_report(table, name, sub, sub_rho, rho, indices, blocks, reports, s2,
                                               {labels[j][0] for j in indices}, workload.domain))
        per_query = [reports[j] for j in sorted(reports)]
        units = units_of(per_query)
        if per_query:
            rmse = math.sqrt(sum(q.stderr ** 2 * q.rows for q in per_query) / m)
            baseline = math.sqrt(sum(q.baseline ** 2 * q.rows for q in per_query) / m)
        else:
            rmse = math.sqrt(strategy.expected_error * gaussian_sigma2_unit(float(rho - share))
                             * self.rows_sq(table, strategy) / m)
            baseline = math.nan
        raw = Workload(workload.domain, linalg.Union(blocks))
        bound = svd_lower_bound(raw) if self.config.noise == "gaussian" else None
        advice = None
        # AIM's advantage is judged in rows of the table: from the counts' error, never from
        # an average that mixes in a SUM's minutes (issue 29 item 6: 5,083 for 9.71)
        by_unit = {u.unit: u.rmse for u in units}
        count_rmse = by_unit.get(COUNTS, by_unit.get(QUANTILES))
        if self.config.noise == "gaussian" and (count_rmse is not None or not per_query):
            from dpsql.plan.aim import advise
            with self._lock:
                fitted = self._state(table).model
            # thin statements over two fine columns are measured directly, never by a model
            # AIM could fit (engine/direct.py): their 10⁹-cell marginals are not AIM's to weigh
            skip = {j for p in strategy.parts if p.direct for j in p.parts} if is_mixed_strategy(strategy) else set()
            if skip and len(skip) < len(blocks):
                raw = Workload(workload.domain, linalg.Union([b for j, b in enumerate(blocks) if j not in skip]))
            advice = None if len(skip) == len(blocks) else advise(
                raw, raw.domain, rmse if count_rmse is None else count_rmse,
                total=None if fitted is None else float(fitted.total)).text
        return PlanReport(table, strategy, len(names), m, float(rho), rmse, baseline, time.perf_counter() - t0,
                          None if bound is None else math.sqrt(bound[0] * s2_floor / m),
                          bool(bound and bound[1]), self.config.planner.objective,
                          tuple(per_query), advice, units, float(share), tuple(parts))

    def _part_report(self, table, name, sub, sub_rho, rho, indices, blocks, reports, s2, statements,
                     domain) -> PartReport:
        """One part of a mixed plan (``PartReport``): its share, expected RMSE per row at it,
        and the SVD bound of its queries alone at that share."""
        from dpsql.plan import Workload, svd_lower_bound

        rows = sum(blocks[j].shape[0] for j in indices)
        got = [reports[j] for j in indices if j in reports]
        rmse = math.sqrt(sum(q.stderr ** 2 * q.rows for q in got) / rows) if len(got) == len(indices) \
            else math.sqrt(sub.expected_error * s2 / rows)
        bound, exact = None, False
        if self.config.noise == "gaussian":
            raw = Workload(domain, linalg.Union([blocks[j] for j in indices]))
            if is_direct_strategy(sub):
                b = None        # its merged domain is not the table's: no floor of the table's cells
            elif is_ordered_strategy(sub) and not sub.groups:
                # on the column alone: W ⊗ 1ᵀ over n·m cells has singular values √m·σ(W), so
                # its SVD bound (Σσ)²/N is W's over n; there it is computable in closed form
                i = list(domain.attributes).index(sub.attribute)
                rows_i = [(f[i], w) for j in indices for w, f in linalg.kron_terms(blocks[j])]
                raw = Workload(domain.project([sub.attribute]), linalg.Union(
                    [f if w == 1.0 else linalg.Weighted(float(w), f) for f, w in rows_i]))
                b = svd_lower_bound(raw)
                if b is None:
                    # a CDF with thin queries beside it has no closed form: the CDF/range rows
                    # alone are a floor too (TSE_W(A) ≥ TSE of any of W's rows ≥ their bound)
                    # (the same CDF asked twice, by two quantiles, is one CDF of weight √2: equal grams)
                    same: dict[tuple, tuple[Any, float]] = {}
                    for f, w in rows_i:
                        if isinstance(f, (linalg.Prefix, linalg.Suffix, linalg.AllRange)):
                            key = (type(f).__name__, f.shape)
                            same[key] = (f, same.get(key, (f, 0.0))[1] + float(w) ** 2)
                    ranges = [linalg.Weighted(math.sqrt(w2), f) for f, w2 in same.values()]
                    b = svd_lower_bound(Workload(raw.domain, linalg.Union(ranges))) if ranges else None
                    b = None if b is None else (b[0], False)
            else:
                b = svd_lower_bound(raw)
            if b is not None:
                bound = math.sqrt(b[0] * gaussian_sigma2_unit(float(sub_rho)) * self.min_rows_sq(table) / rows)
                exact = b[1]
        return PartReport(name, sub.operator, float(sub_rho), float(Fraction(sub_rho) / Fraction(rho)),
                          len(statements), rows, rmse, bound, float(sub.expected_error), exact)

    def strategy_for(self, table: str, workload: Workload, labels, offsets, rho: Fraction, unit_rows: int = 1,
                     index: Sequence[int] | None = None):
        """The strategy of a table's workload: one HDMM or ordered strategy, or, when the
        workload mixes fine columns' CDF/range queries with others, a ``MixedStrategy`` of
        one ordered part per such column and the rest, with the budget split between them
        (``mixed.MixedPlanner``: the split is kept only when its expected error is lower).
        ``index``: for a sub-workload planned again (the rest beside a direct part), the
        whole workload's index of each of its query parts: its binning offsets' share and
        variances are the whole workload's queries' (``_offset_blocks``), and without it they
        were matched to the wrong queries (``SUM(age)`` planned at 1.134× its baseline)."""
        from dpsql.engine.direct import plan_with_direct
        from dpsql.engine.direct_sums import plan_with_sums
        from dpsql.engine.mixed import MixedPlanner, split_columns, thin_split

        workload = self._with_offsets(table, workload, offsets, rho)
        direct = plan_with_direct(self, table, workload, labels, offsets, rho, unit_rows, index)
        if direct is not None:      # thin statements over two fine columns: a part of their own
            return direct
        # measured, one strategy's blocks get rho less the binning offsets' share (``measure``)
        counts_rho = lambda s: rho - self._offsets_rho(table, s, rho, index)     # noqa: E731
        mixed = MixedPlanner(self, table, workload, labels, offsets, rho, unit_rows, counts_rho, index)
        split = split_columns(workload, labels, offsets)
        if split is not None:
            chosen = mixed.split(*split)
        else:
            alone = mixed.whole()
            # a fine column alone whose ordered strategy leaves thin counts above their baselines
            apart = thin_split(workload, labels, offsets, alone)
            chosen = alone if apart is None else mixed.split([(apart[0], apart[1])], apart[2], alone)
        # a statement of several boxes (an OR) whose sum the strategy leaves above its
        # baseline: measured as one count per group (engine/direct_sums.py)
        return plan_with_sums(self, table, workload, labels, offsets, rho, unit_rows, chosen, index)

    def _with_offsets(self, table: str, workload: Workload, offsets, rho: Fraction) -> Workload:
        """``workload`` with each SUM's binning offsets' variance in its part
        (``QueryPart.offsets``: per row, at the whole ``rho``, in the unit noise of its baseline,
        σ²(ρ)·k²), so that the planner chooses a strategy that leaves them a share of the
        budget at which every query keeps its baseline (``dpsql.plan.shares``).  The offsets'
        blocks and their calibration do not depend on the strategy (``offset_blocks``)."""
        from dataclasses import replace

        from dpsql.engine.offsets import offset_blocks, offset_variances

        if not offsets or self.config.planner.binning != "offsets" or not self._sums_offsets or not workload.parts:
            return workload
        blocks = offset_blocks(self._state(table).schema, offsets)
        if not blocks:
            return workload
        source = self.config.sources[table]
        var = offset_variances(blocks, rho, self.config.noise, source.unit_rows,
                               _groups(source, self.config.noise))
        unit = gaussian_sigma2_unit(float(rho)) * source.unit_rows ** 2
        if not var or not unit > 0:
            return workload
        return replace(workload, parts=tuple(replace(p, offsets=var[j] / unit) if var.get(j, 0.0) > 0 else p
                                             for j, p in enumerate(workload.parts)))

    def rows_sq(self, table: str, strategy: Strategy) -> float:
        """The squared rows-per-unit factor of ``strategy``'s noise on ``table``: max_rows²,
        or less where a view's group bound applies (``release.effective_rows_sq``)."""
        source = self.config.sources[table]
        groups = _groups(source, self.config.noise)
        if groups is None:
            return float(source.unit_rows ** 2)
        if is_direct_strategy(strategy):
            strategy = strategy.inner       # over the merged domain (engine/direct.py)
        if is_ordered_strategy(strategy):
            # its blocks may hold a fine column's n×n factor: never densified, decided by shape
            return float(rel.ordered_rows_sq(strategy.groups, strategy.attribute, source.unit_rows, groups))
        return rel.effective_rows_sq([(b.clique, b.query, b.weight) for b in strategy.blocks],
                                     source.unit_rows, groups)

    def row_factor(self, table: str | None):
        """The planner's ``RowFactor`` for ``table``: None unless it is a view with a group
        bound under Gaussian noise, where a candidate's noise carries ``rows_sq`` / k²."""
        if table is None:
            return None
        source = self.config.sources[table]
        groups = _groups(source, self.config.noise)
        if groups is None:
            return None
        from dpsql.plan import RowFactor
        k2 = float(source.unit_rows ** 2)
        # "w1": the planner re-weights blocks for their factors (plan.planner._reweighted)
        return RowFactor(lambda s: self.rows_sq(table, s) / k2,
                         f"w1:k={source.unit_rows}:" + repr(sorted(groups.describe().items())),
                         lambda s: [r / k2 for _, r in self.block_rows_sq(table, s)])

    def block_rows_sq(self, table: str, strategy: Strategy) -> list[tuple[tuple[str, ...], float]]:
        """Each block's clique and the squared row factor its noise is calibrated with
        (``release.rows_sq``: S² where it reads one group per value of a group-bounded view,
        k² otherwise), as ``dpsql plan --table`` shows them."""
        source = self.config.sources[table]
        groups = _groups(source, self.config.noise)
        if is_direct_strategy(strategy):
            strategy = strategy.inner       # over the merged domain (engine/direct.py)
        if is_ordered_strategy(strategy):
            return [(tuple(strategy.clique), self.rows_sq(table, strategy))]
        return [(tuple(b.clique), float(rel.rows_sq(b.clique, rel._dense_factors(b.clique, b.query),
                                                    source.unit_rows, groups)))
                for b in strategy.blocks]

    def min_rows_sq(self, table: str) -> float:
        """The smallest squared row factor any block on ``table`` can be calibrated with:
        S² of its group bound (``GroupBound.l2_sq``), else max_rows²."""
        source = self.config.sources[table]
        groups = _groups(source, self.config.noise)
        k2 = float(source.unit_rows ** 2)
        return k2 if groups is None else float(min(k2, groups.l2_sq(source.unit_rows)))

    def optimize(self, workload: Workload, rho: Fraction, unit_rows: int = 1, *, table: str | None = None,
                 counts_rho: Callable[[Strategy], Fraction] | None = None) -> Strategy:
        """HDMM with the configured options and caps; strategies cached on disk.

        With ``table`` a view under a group bound, candidates are compared by their error
        with the row factor each would be calibrated with (``row_factor``), not at k.

        A strategy whose real-valued factors cannot be put on the measurement lattice at
        this budget without losing rank (``release.lattice_keeps_rank``) is replaced by the
        best strategy of OPT_+ and OPT_M (and the per-query mechanism), and when that one
        loses rank too, of OPT_M's marginals (identity blocks: always on the lattice).  A
        collapsed factor no longer spans the queries it was planned for: the release is
        charged and its own workload is then unsupported.  ``counts_rho(strategy)`` is
        the ρ the strategy's blocks get when measured (``plan``: the workload's ρ less the
        binning offsets' share, which depends on the strategy), default ``rho``: the
        lattice is coarser at a smaller ρ, so the check must be made at that one (TPC-H's
        Q1 sums of prices kept rank at ρ and lost it at ρ less that share)."""
        from dpsql.plan import Caps, StrategyCache, optimize

        opts = self.config.planner
        if self._strategy_cache is None:
            self._strategy_cache = StrategyCache(self.config.cache_dir)
        kwargs = dict(noise=self.config.noise, restarts=opts.restarts, seed=opts.seed,
                      caps=Caps(marginal_cells=opts.max_clique_cells, model_size=opts.max_model_cells),
                      cache=self._strategy_cache,
                      progress=(lambda *a, **kw: self._progress("plan", {"args": a, **kw}))
                      if self._listening() else None, row_factor=self.row_factor(table))
        strategy = optimize(workload, **kwargs)
        if is_ordered_strategy(strategy) or len(workload.domain) <= 1:
            return strategy      # integer blocks by construction (measure/ordered.py)
        per_query = ("per-query",) if workload.parts else ()
        for operators in (("OPT_+", "OPT_M") + per_query, ("OPT_M",) + per_query):
            blocks = [(b.clique, b.query, b.weight) for b in strategy.blocks]
            at = rho if counts_rho is None else counts_rho(strategy)
            if rel.lattice_keeps_rank(blocks, at, family=self.config.noise, unit_rows=unit_rows):
                return strategy
            strategy = optimize(workload, operators=operators, **kwargs)
        return strategy

    def optimize_counted(self, workload: Workload, rho: Fraction, unit_rows: int = 1,
                         released: Sequence[Measurement] = (), *, table: str | None = None,
                         counts_rho: Callable[[Strategy], Fraction] | None = None) -> Strategy:
        """``optimize``, then make sure the number of records is determined.

        The model is fitted to a known total (pgm.estimate: 1ᵀ must lie in some
        measurement's row space).  A workload of filtered counts alone (``WHERE age >= 18``)
        does not determine it, so its release was charged and then every fit failed
        (issue 21).  When neither the strategy nor an earlier release determines the
        total, the total count joins the workload and HDMM plans again: one more row,
        paid from the same budget."""
        from dpsql.plan import Workload

        strategy = self.optimize(workload, rho, unit_rows, table=table, counts_rho=counts_rho)
        if is_ordered_strategy(strategy):
            return strategy      # a tree's leaves and the Toeplitz root are invertible: total known
        probe = [Measurement(b.clique, b.query, np.zeros(b.query.shape[0]), 1.0) for b in strategy.blocks]
        if estimate_total(list(released) + probe) is not None:
            return strategy
        total = linalg.Weighted(1.0, linalg.Kron([linalg.Total(n) for n in workload.domain.shape]))
        blocks = list(workload.matrix.blocks) if isinstance(workload.matrix, linalg.Union) else [workload.matrix]
        return self.optimize(Workload(workload.domain, linalg.Union(blocks + [total]),
                                      _with_total(workload, self.config.noise)),
                             rho, unit_rows, table=table, counts_rho=counts_rho)

    def workload_rho(self, table: str | None = None) -> Fraction:
        """The exact ρ one workload measurement is given (``[workload]`` or the total);
        for a view of a people schema its share of it (``view_shares``)."""
        total = (self.config.workload_budget or self.config.budget).rho
        people = self.config.people
        if table is None or people is None or table not in people.views:
            return total
        share = self.view_shares(total).get(table, Fraction(0))
        return share - self.truncation_rho(table)

    def truncation_rho(self, table: str) -> Fraction:
        """The slice of a bounded view's share that releases the rows its bound drops
        (``[people] truncation_share``, ``dpsql/engine/people_truncation.py``); 0 otherwise."""
        people = self.config.people
        if people is None or table not in people.views or table == people.person or not people.truncation_share:
            return Fraction(0)
        total = (self.config.workload_budget or self.config.budget).rho
        return self.view_shares(total).get(table, Fraction(0)) * people.truncation_share

    def view_shares(self, rho: Fraction) -> dict[str, Fraction]:
        """The workload budget ``rho`` divided across the views that have workload queries,
        minimising their total expected error (``dpsql/engine/people_plan.py``; public)."""
        from dpsql.plan.views import split_budget

        rho = Fraction(rho)
        with self._lock:
            cached = self._view_shares.get(rho)
        if cached is None:
            cached = split_budget(rho, {v: c.cost for v, c in self.view_costs(rho).items()})
            with self._lock:
                self._view_shares[rho] = cached
        return dict(cached)

    def view_costs(self, rho: Fraction) -> dict:
        """``people_plan.view_costs`` at ``rho``, planned once per budget: the split across
        views (``view_shares``) and ``dpsql plan``'s people plan (``people_plan``) read the
        same costs, and each view's plan for them is a whole ``strategy_for`` (a mixed fine
        workload's parts and shares included).  Public, and a function of the configuration
        and ``rho`` alone."""
        from dpsql.engine.people_plan import view_costs

        rho = Fraction(rho)
        with self._lock:
            cached = self._view_costs.get(rho)
        if cached is None:
            cached = view_costs(self, rho)
            with self._lock:
                self._view_costs[rho] = cached
        return dict(cached)


    def release_parts(self, table: str, strategy, rho: Fraction) -> list[tuple[Any, Fraction, Any]]:
        """What one workload measurement of ``strategy`` at ``rho`` releases, as
        (strategy, ρ, offsets) per release (``Measurer.measure_parts``): the strategy with
        the workload's binning offsets (``offset_plan``), or each part of a mixed strategy
        at its exact share, the offsets with the part the model answers."""
        rho = Fraction(rho)
        if not is_mixed_strategy(strategy):
            return [(strategy, rho, self.offset_plan(table, strategy, rho))]
        return [(p.strategy, p.share(rho),
                 None if p.ordered or p.direct else self.offset_plan(table, p.strategy, p.share(rho), p.parts))
                for p in strategy.parts]

    def offset_plan(self, table: str, strategy: Strategy, rho: Fraction, indices: Sequence[int] | None = None):
        """The workload's offset blocks and their share of ``rho`` (``dpsql.engine.offsets``),
        or None: binning bounds instead (``[planner] binning``), a backend that cannot sum
        offsets, or no SUM/AVG over wide bins in the workload.  ``indices``: as in
        ``_offset_blocks``."""
        planned = self._offset_blocks(table, strategy, rho, indices)
        return None if planned is None else ([b for b, _ in planned[0]], planned[1])

    def _offsets_rho(self, table: str, strategy: Strategy, rho: Fraction,
                     indices: Sequence[int] | None = None) -> Fraction:
        """The share of ``rho`` the workload's binning offsets take from ``strategy``'s blocks
        (``indices``: as in ``_offset_blocks``, for a mixed plan's model part)."""
        planned = self._offset_blocks(table, strategy, rho, indices)
        return Fraction(0) if planned is None else planned[1]

    def _offset_blocks(self, table: str, strategy: Strategy, rho: Fraction, indices: Sequence[int] | None = None):
        """``offset_plan`` with the workload queries each block serves; ``indices`` the whole
        workload's index of each of ``strategy``'s query parts (a mixed plan's part)."""
        from dpsql.engine.offsets import offset_blocks, offset_share

        if self.config.planner.binning != "offsets" or not self._sums_offsets:
            return None
        workload, *_, queries = self._workload(table)
        blocks = offset_blocks(self._state(table).schema, queries)
        if not blocks:
            return None
        source = self.config.sources[table]
        groups = _groups(source, self.config.noise)
        # the counts' objective with its row factor over k², as the offset blocks' (offset_share)
        counts = strategy.expected_error * (1.0 if groups is None
                                            else self.rows_sq(table, strategy) / source.unit_rows ** 2)
        share = offset_share(rho, counts, blocks, [p.scale for p in workload.parts], source.unit_rows, groups)
        index = list(range(len(workload.parts))) if indices is None else list(indices)
        return blocks, self._within_baselines(table, strategy, rho, share, blocks, index)

    def least_with_offsets(self, table: str, strategy: Strategy, rho: Fraction, indices: Sequence[int],
                           baselines: Sequence[float]) -> float:
        """The least fraction of the table's ρ at which ``strategy`` (a mixed plan's model
        part, planned on a ``sub_workload``; ``indices`` the whole workload's index of each of
        its query parts, ``baselines`` their per-query baselines in the planned workload's
        unit noise at ``rho``) keeps every query within its baseline with its binning offsets
        measured beside it, 0 without offsets (``shares.least_scale``).  Without it a part's
        share kept only its counts within their baselines (``mixed.least_fraction``) and the
        offsets' share then left SUM(age) at 1.134×."""
        from dpsql.plan.shares import least_scale

        planned = self._offset_blocks(table, strategy, rho, indices)
        rows = None if planned is None else self._share_rows(table, strategy, rho, planned[0], indices, baselines)
        if rows is None:
            return 0.0
        c, o, b = (np.asarray(x, dtype=float) for x in rows)
        ok = (b > 0) & np.isfinite(b) & np.isfinite(c) & np.isfinite(o)
        # within_baselines keeps a millionth below each baseline (offsets._MARGIN)
        return min(1.0, least_scale(c[ok], o[ok], b[ok]) * (1 + 2e-6))

    def _share_rows(self, table: str, strategy: Strategy, rho: Fraction, blocks, indices: Sequence[int],
                    baselines: Sequence[float] | None = None):
        """Per query part of ``strategy``'s workload, in the figures ``plan`` reports at ``rho``:
        the counts' variance tse·σ²(ρ)·rows_sq/rows, the offsets' (``offset_variances``) and the
        baseline b·σ²(ρ)·k² (``baselines``, else the parts' own).  ``indices[i]``: the whole
        workload's index of the strategy's query part i; parts past them (the total
        ``optimize_counted`` may append, ``_with_total``) are not the workload's and are left
        out, as the report leaves them.  None without per-query errors."""
        from dpsql.engine.offsets import offset_variances
        from dpsql.plan.error import query_tse

        terms, tse = strategy.workload, query_tse(strategy)
        index = list(indices)
        if terms is None or not terms.parts or tse is None or len(index) > len(terms.parts):
            return None
        source = self.config.sources[table]
        whole = offset_variances(blocks, rho, self.config.noise, source.unit_rows,
                                 _groups(source, self.config.noise))
        s2 = gaussian_sigma2_unit(float(rho))
        rows2, k2 = self.rows_sq(table, strategy), float(source.unit_rows ** 2)
        parts = terms.parts[:len(index)]
        base = [p.baseline for p in parts] if baselines is None else baselines
        return ([float(t) * s2 * rows2 / p.rows for t, p in zip(tse, parts)],
                [whole.get(j, 0.0) for j in index],
                [float(x) * s2 * k2 for x in base])

    def _within_baselines(self, table: str, strategy: Strategy, rho: Fraction, share: Fraction, blocks,
                          indices: Sequence[int]) -> Fraction:
        """``share`` moved to the nearest at which every query of ``strategy``'s workload keeps
        its per-query baseline with its offsets' noise (``offsets.within_baselines``), in the
        figures ``_share_rows`` gives (a part's sub-workload holds its baseline at its share,
        ``mixed.sub_workload``)."""
        from dpsql.engine.offsets import within_baselines

        rows = self._share_rows(table, strategy, rho, blocks, indices) if share > 0 else None
        return share if rows is None else within_baselines(share, rho, *rows)


def _with_total(workload: Workload, noise: str) -> tuple:
    """The workload's query parts with one more for the total count appended to its terms:
    without them the re-planned strategy forgot its queries, and ``plan`` reported no
    per-query errors, no baseline (NaN) and no SVD bound for a workload of filtered counts
    (TPC-H Q4: late orders per priority and quarter)."""
    from dpsql.plan import QueryPart
    from dpsql.plan.objective import baseline_variance

    if not workload.parts:
        return ()
    first = sum(p.num_terms for p in workload.parts)
    base = baseline_variance(1.0, len(workload.parts) + 1, noise)
    return tuple(workload.parts) + (QueryPart("(total)", 1, first, 1, 1.0, 1.0, 1.0, base),)


__all__ = ["Planner", "gaussian_sigma2_unit"]
