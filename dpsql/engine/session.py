"""One user's session: execute SQL against the engine and get private answers.

``Session.execute`` compiles the statement (public metadata only; failures spend nothing),
answers each of its linear queries from the fitted graphical model, attaches standard
errors, and post-processes into rows (``dpsql.engine.results``).  Identical statements get
identical answers: results are cached per model version, and a model only changes when new
noisy measurements are released (never fresh noise for a repeat).

Values the released measurements do not support follow the session's policy
(``SET dpsql.policy``, default from ``docs/config.md``):

* ``informed`` (the default): answer from the model when the query's attributes were
  measured together (the value is flagged *inferred* and carries its range, see
  ``dpsql.engine.bounds``), and refuse with a hint when the answer would only be the
  model's prior (attributes never measured together);
* ``infer``: answer everything from the model, flagged and with its range;
* ``measure``: plan a strategy for the query and measure it on demand (charged to this
  user's cap; interactive front ends ask first, others opt in with ``SET
  dpsql.allow_spend = on``);
* ``refuse``: refuse anything not supported.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, replace
from collections.abc import Callable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from dpsql.engine.engine import Engine, MeasureReport, PlanReport, SpendPreview
from dpsql.engine.results import (Column, Result, answer_linear, model_kind, result_rows, type_name,
                                  with_error_columns)
from dpsql.privacy.accountant import format_rho
from dpsql.errors import (BudgetExhaustedError, InterfaceError, OperationalError,
                          PrivacyViolationError, ProgrammingError, UnsupportedQueryError,
                          UselessMeasurementError)

from dpsql.config_schema import ERROR_COLUMNS, ESTIMATORS, POLICIES
#: Who a session serves.  In-process front ends (CLI, DB-API, shell) are the operator's, who runs
#: dpsql's commands; behind ``dpsql serve`` an analyst cannot, so hints name what to ask the
#: operator for instead of a command (issue 33 item 5).
ROLES = ("operator", "analyst")
#: The read-only ``SHOW`` of the budget left (issue 33 item 4; ``Session.budget_rows``).
BUDGET_SETTING = "dpsql.budget_remaining"


@dataclass(frozen=True)
class SpendRequest:
    """What a statement would spend, shown to the user before anything is charged."""

    rho: Fraction      # exact
    epsilon: float
    delta: float
    table: str
    what: str          # the queries to be measured
    remaining_rho: Fraction


#: Values (rows x columns) one session keeps in its answer cache, oldest answers dropped first
#: (issue 34 item 11: each cached large answer held ~200 MB, without bound).  Dropping one is
#: safe for privacy and budget: asked again, it is recomputed from the same release (the cache
#: is keyed by model version), identically and at no cost.
CACHE_CELLS = 200_000


def _cells(result) -> int:
    return len(result.rows) * max(1, len(result.columns))


class Session:
    """``approve`` is called with a :class:`SpendRequest` before an on-demand measurement
    (policy "measure"): interactive front ends ask the user; without it (and without ``SET
    dpsql.allow_spend = on``) a statement that would spend is refused and spends nothing."""

    def __init__(self, engine: Engine, user: str | None = None,
                 approve: Callable[[SpendRequest], bool] | None = None, role: str = "operator") -> None:
        if role not in ROLES:
            raise InterfaceError(f"unknown session role {role!r}", hint="roles: " + ", ".join(ROLES))
        self.engine = engine
        self.role = role
        self.user = user or engine.config.default_user
        if self.user.startswith("@"):
            raise InterfaceError(f"user names may not start with '@' ({self.user!r})",
                                 hint="names starting with '@' are reserved for the engine's own "
                                      "budget principals (e.g. @workload)")
        self.approve = approve
        # the hint of a spend refused because nobody could be asked: how such a caller opts in;
        # a front end with its own switch names it instead (``dpsql query --allow-spend``)
        self.spend_hint = ("non-interactive callers opt in with SET dpsql.allow_spend = 'on' (the shell asks "
                           "instead); or answer from existing measurements with SET dpsql.policy = 'informed'")
        self.settings: dict[str, str] = self._defaults()
        self._cache: dict[tuple, Result] = {}

    # -- settings ------------------------------------------------------------------------
    def _defaults(self) -> dict[str, str]:
        cfg = self.engine.config
        return {"dpsql.error_columns": cfg.error_columns, "dpsql.estimator": ESTIMATORS[0],
                "dpsql.policy": cfg.policy,
                "dpsql.allow_spend": "on" if cfg.allow_spend else "off"}

    #: Every setting a session understands and its allowed values.
    ALLOWED = {"dpsql.error_columns": ERROR_COLUMNS,
               "dpsql.estimator": ESTIMATORS,
               "dpsql.policy": POLICIES,
               "dpsql.allow_spend": ("off", "on")}

    @property
    def policy(self) -> str:
        return self.settings["dpsql.policy"]

    # -- public ------------------------------------------------------------------------------
    def compile(self, sql: str, params: Sequence[Any] | None = None):
        """``sql`` compiled over the engine's catalog, after the engine has added the table of
        any per-person flag it needs that no workload statement declared (a people schema's
        ad hoc COUNT(DISTINCT person) with a condition on a child's rows: measured on demand)."""
        self.engine.add_person_flags(sql)
        return self._compile(sql, params)

    def _compile(self, sql: str, params: Sequence[Any] | None = None):
        """``sql`` compiled over the catalog as it stands (its flag tables already added)."""
        from dpsql.sql import compile as compile_sql
        return compile_sql(sql, self.engine.catalog, params=params)

    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Result:
        from dpsql.sql.session_commands import parse_session_command

        t0 = time.perf_counter()
        command = parse_session_command(sql)
        if command is not None:
            return self._session_command(command, t0)
        # the statement's on-demand flag tables are held until it ends: the engine drops
        # unmeasured ones beyond its cap, never one a running statement measures
        held = self.engine.add_person_flags(sql, hold=True)
        try:
            return self._execute(sql, params, t0)
        finally:
            self.engine.release_person_flags(held)

    def _execute(self, sql: str, params: Sequence[Any] | None, t0: float) -> Result:
        compiled = self._compile(sql, params)     # execute added and holds its flag tables
        if compiled.is_explain:
            return Result([Column("QUERY PLAN", "text")],
                          [(line,) for line in self.explain_compiled(compiled).splitlines()],
                          message="EXPLAIN", seconds=time.perf_counter() - t0)
        columns = [Column(c.name, type_name(c.type)) for c in compiled.columns]
        # the value columns, which get error columns, are the compiled noisy ones (ir.noisy):
        # what the wire's Describe announces before any row exists, a probe's columns included
        values = [j for j, c in enumerate(compiled.columns) if c.is_aggregate]
        if compiled.is_schema_probe:
            return self._with_error_columns(Result(columns, [], seconds=time.perf_counter() - t0), values)
        if compiled.exact_rows is not None:
            # public tables alone: their content is public metadata, shown exactly and free
            rows = list(compiled.exact_rows)
            return self._with_error_columns(Result(columns, rows, [(None,) * len(columns)] * len(rows),
                                                   [False] * len(rows), seconds=time.perf_counter() - t0), [])
        # A mapping of named parameters is keyed by its items (its keys alone would make two
        # different bindings share one cached answer).
        bound = None if params is None else tuple(sorted(params.items(), key=lambda kv: str(kv[0]))) \
            if isinstance(params, Mapping) else tuple(params)
        key = (sql, bound, self.settings["dpsql.estimator"], self.policy)
        self.engine.refresh()  # releases made by other processes since the last statement
        # a fine ordered column's release answers what it can, in closed form (issue 35);
        # a thin statement over two fine columns comes from its direct release
        ordered = self._answer_direct(compiled) or self._answer_ordered(compiled)
        if ordered is not None:
            return self._with_error_columns(self._result(compiled, columns, ordered[:2], [], t0, None, 0,
                                                         ordered[2]), values)
        # during a refit the previous model answers what it supports (issue 34 item 8)
        model, variance, version = self.engine.model(compiled.table, stale_ok=True)
        cached = self._cache.get(key)
        if cached is not None and cached.model_version == version:
            return self._with_error_columns(replace(cached, cost=Fraction(0)), values)  # a repeat is free
        cost = Fraction(0)
        policy = self.policy
        if model is None and policy != "measure":
            self._refuse_unmeasured_flag(compiled.table)
            if self.engine.direct_releases(compiled.table):
                # statements over two fine columns were measured (engine/direct.py), each
                # answering itself only: this one is not among them
                raise UnsupportedQueryError(
                    f"the releases of table {compiled.table!r} measured other statements over its fine columns "
                    "directly, and no model of the table was released to answer this one",
                    hint=self.operator_step("add it to the workload and measure it", "dpsql measure --increment"))
            raise OperationalError(
                f"nothing has been measured on table {compiled.table!r} yet",
                hint=self.operator_step("measure the workload first", "dpsql measure")
                + " (or SET dpsql.policy = 'measure' to measure queries on demand)")
        answers, stderrs = {}, {}
        if model is not None:
            answers, stderrs, unsupported = self._answer(compiled, model, variance)
            if unsupported and not self.engine.model_is_current(compiled.table, version):
                # the releases being fitted may support it: wait for their model
                model, variance, version = self.engine.model(compiled.table)
                answers, stderrs, unsupported = self._answer(compiled, model, variance)
        else:
            unsupported = list(compiled.linear_queries)
        if unsupported:
            if policy == "refuse":
                raise UnsupportedQueryError(
                    "the released measurements do not support this query and the policy refuses "
                    "queries that would need new measurements",
                    hint=self.operator_step("add it to the workload and measure it",
                                            "dpsql measure --increment")
                    + ", or aggregate attributes that were measured together")
            if policy == "measure":
                cost = self._measure_for(compiled, unsupported).rho
                ordered = self._answer_ordered(compiled)    # what was measured: a fine column's
                if ordered is not None:
                    result = self._result(compiled, columns, ordered[:2], [], t0, cost, 0, ordered[2])
                    return self._with_error_columns(result)
                model, variance, version = self.engine.model(compiled.table)
                answers, stderrs, unsupported = self._answer(compiled, model, variance)
            elif policy == "informed":
                self._refuse_prior(compiled, unsupported)
        result = self._result(compiled, columns, (answers, stderrs), unsupported, t0, cost, version,
                              model_kind(model))
        self._remember(key, result)
        return self._with_error_columns(result, values)

    def _notes(self, table: str) -> tuple[str, ...]:
        """The truncation figure of the view ``table`` as released with noise, if any (public)."""
        if self.engine.truncation_rho(table) <= 0:
            return ()
        from dpsql.engine.people_truncation import released_truncation
        released = released_truncation(self.engine, table)
        return () if released is None else (f"{table}: {released.line()}",)

    def _answer_direct(self, compiled):
        """(answers, stderrs, "direct") from the direct release that measured every linear
        query of the statement (``engine.direct.answer_direct``), or None."""
        from dpsql.engine.direct import answer_direct
        schema = self.engine.catalog[compiled.table]
        for release in self.engine.direct_releases(compiled.table):
            got = answer_direct(schema, release, compiled)
            if got is not None:
                # a CDF/quantile under a predicate on another fine column: its ordered release
                kind = "direct" if release.ordered is None else f"ordered {release.ordered.strategy.operator} (merged)"
                return got[0], got[1], kind
        return None

    def _answer_ordered(self, compiled):
        """(answers, stderrs, model description) from the table's ordered release of the
        statement's column (``engine.ordered.answer_ordered``; the latest that answers it,
        ``Engine.ordered_estimates``), or None when none can answer the statement."""
        from dpsql.engine.ordered import answer_ordered
        got = estimate = None
        for estimate in self.engine.ordered_estimates(compiled.table):
            got = answer_ordered(self.engine.catalog[compiled.table], estimate, compiled)
            if got is not None:
                break
        if got is None or estimate is None:
            return None
        if all(lq.kind != "quantile" for lq in compiled.linear_queries):
            # A thin count the plan moved to the rest (engine.mixed.thin_above_baseline) is
            # also supported by the model, within its baseline: the lower standard errors
            # answer it.  Both are public (the releases' variances), so is the choice.
            model, variance, _ = self.engine.model(compiled.table, stale_ok=True)
            if model is not None and self.settings.get("dpsql.estimator") != "least_squares":
                _, errs, unsupported = self._answer(compiled, model, variance)
                if not unsupported and all(
                        lq.name in errs and np.all(np.asarray(errs[lq.name]) <= np.asarray(got[1][lq.name]))
                        for lq in compiled.linear_queries):
                    return None
        return got[0], got[1], f"ordered {estimate.strategy.operator}"

    def _result(self, compiled, columns, answered, unsupported, t0, cost, version, model_kind) -> Result:
        """The rows of a statement from its linear queries' answers (``results.result_rows``)."""
        return result_rows(self.engine, compiled, columns, answered, unsupported, t0, cost, version,
                           model_kind, self._notes(compiled.table))

    def plan(self, table: str | None = None, queries: Sequence[str] | None = None,
             rho: Fraction | None = None) -> PlanReport:
        """The workload's plan at the workload budget, or at ``rho`` to compare budgets
        (public and free: planning reads no data and never opens the ledger)."""
        return self.engine.plan(self._table(table), queries, rho)

    def measure(self, table: str | None = None, mode: str | None = None, progress=None):
        """The operator's workload measurement: HDMM's one-shot plan, or AIM's adaptive rounds
        with ``mode="aim"`` (default: the config's ``[planner] mode``).  Charged to the
        workload budget (principal ``@workload``), not to this user's cap; the ledger records
        who asked."""
        if self._mode(mode) == "aim":
            from dpsql.engine.aim import measure_aim
            return measure_aim(self.engine, self._table(table), self.engine.WORKLOAD_PRINCIPAL,
                               progress=progress)
        return self.engine.measure(self._table(table), requested_by=self.user)

    def measure_cost(self, table: str | None = None, mode: str | None = None) -> Fraction:
        """ρ that ``measure`` would spend (0 if that release already exists); plans the
        workload if needed (public, free)."""
        if self._mode(mode) == "aim":
            from dpsql.engine.aim import aim_cost
            return aim_cost(self.engine, self._table(table))
        return self.engine.measure_cost(self._table(table))

    def prepare_model(self, table: str | None = None) -> int:
        """Load or fit the model of the table's current releases now, and save it (front ends
        call it right after measuring, so that later queries and new processes load it
        instead of fitting; issue 17).  Returns the model version."""
        return self.engine.model(self._table(table))[2]

    def synthetic(self, table: str | None = None, rows: int | None = None, *,
                  numbers: str = "label", method: str = "rounding", seed: int | None = None):
        """Synthetic records from the current model (post-processing: spends nothing).
        Returns a ``SyntheticTable`` with ``.columns`` and ``.rows`` (a list of tuples)."""
        from dpsql.engine.synthetic import synthesize
        name = self._table(table)
        model, _, version = self.engine.model(name)
        return synthesize(self.engine.catalog[name], model, rows, numbers=numbers, method=method,
                          seed=seed, model_version=version)

    def _mode(self, mode: str | None) -> str:
        mode = mode or self.engine.config.planner.mode
        if mode not in ("hdmm", "aim"):
            raise ProgrammingError(f"unknown measurement mode {mode!r}", hint="use 'hdmm' or 'aim'")
        return mode

    def budget(self) -> dict:
        """Spent and remaining ρ, exact (Fractions from the ledger): front ends display
        them with ``format_rho``, remaining rounded down and spent rounded up."""
        led = self.engine.ledger
        cfg = self.engine.config
        return {"user": self.user, "spent_rho": led.spent(self.user),
                "remaining_rho": led.remaining(self.user),
                "total_spent_rho": led.spent(None),
                "total_remaining_rho": led.remaining(None),
                "workload_spent_rho": led.spent(self.engine.WORKLOAD_PRINCIPAL),
                "total_rho": cfg.budget.rho, "delta": cfg.budget.delta,
                "entries": len(led.entries())}

    def budget_rows(self) -> Result:
        """``SHOW dpsql.budget_remaining``: this user's remaining budget (their own cap, bounded
        by the total), the total remainder, and what the next on-demand measurement would
        cost when the configuration fixes it (``[policy] epsilon``), each in ρ and in ε at the
        configured δ, rounded as ``dpsql budget`` prints them (remaining down, costs up).
        Ledger amounts are public metadata; other users' caps and spending are not shown."""
        from dpsql.privacy.accountant import rho_to_epsilon
        b = self.budget()
        delta = b["delta"]

        def row(name, rho, direction):
            eps = rho_to_epsilon(rho, delta) if rho > 0 else 0.0
            return (name, format_rho(rho, direction), f"{eps:.4g}", f"{delta:g}")
        rows = [row("user_remaining", b["remaining_rho"], "down"),
                row("total_remaining", b["total_remaining_rho"], "down")]
        qb = self.engine.config.query_budget
        # unknown (NULL) without a per-query budget: no on-demand measurement is possible then
        rows.append(row("next_measurement", qb.rho, "up") if qb is not None
                    else ("next_measurement", None, None, f"{delta:g}"))
        return Result([Column("budget", "text"), Column("rho", "text"), Column("epsilon", "text"),
                       Column("delta", "text")], rows)

    def operator_step(self, request: str, command: str) -> str:
        """A hint's step that only the operator can take: for the operator the request with
        its command, for an analyst what to ask the operator for (they cannot run it)."""
        if self.role == "analyst":
            return f"ask your operator to {request}"
        return f"{request} (`{command}`)"

    def explain(self, sql: str, params=None) -> str:
        held = self.engine.add_person_flags(sql, hold=True)
        try:
            return self.explain_compiled(self._compile(sql, params))
        finally:
            self.engine.release_person_flags(held)

    def explain_compiled(self, compiled) -> str:
        lines = [compiled.explain()]
        if compiled.is_explain:
            compiled = compiled.inner
        self.engine.refresh()
        model, variance, _ = self.engine.model(compiled.table)
        ranges = self.engine.bounds(compiled.table)
        for lq in compiled.linear_queries:
            if variance is None:
                lines.append(f"{lq.name}: no measurements yet")
                continue
            err, sup = variance.analyse(lq.matrix)
            if sup.all():
                lines.append(f"{lq.name}: supported by released measurements; "
                             f"expected stderr ≈ {float(np.sqrt(np.mean(err ** 2))):.4g} per row")
                continue
            what = "not supported by a measurement"
            if ranges is not None and not ranges.informed(lq.attributes):
                what += " and " + _never_text(ranges.never_together(lq.attributes),
                                              ranges.measured_coarsely(lq.attributes))
            lines.append(f"{lq.name}: {what}; policy {self.policy!r}: {self._policy_effect(lq, ranges)}")
        return "\n".join(lines)

    def close(self) -> None:
        self._cache.clear()

    def _remember(self, key, result) -> None:
        """Cache an answer within ``CACHE_CELLS``, dropping the oldest (one larger than the
        whole cache is not kept)."""
        self._cache.pop(key, None)
        if _cells(result) > CACHE_CELLS:
            return
        self._cache[key] = result
        total = sum(map(_cells, self._cache.values()))
        while total > CACHE_CELLS:
            total -= _cells(self._cache.pop(next(iter(self._cache))))

    # -- internals ---------------------------------------------------------------------------
    def _policy_effect(self, lq, ranges) -> str:
        policy = self.policy
        if policy == "measure":
            qb = self.engine.config.query_budget
            return f"answering would measure it at rho = {format_rho(qb.rho, 'down', 4)}" if qb \
                else "measured on demand"
        if policy == "refuse" or (policy == "informed" and ranges is not None
                                  and not ranges.informed(lq.attributes)):
            return "refused"
        return "inferred from the model, with its range"

    def _table(self, table: str | None) -> str:
        if table is not None:
            return table
        if len(self.engine.catalog) == 1:     # the listed tables: not on-demand flags
            return next(iter(self.engine.catalog))
        raise InterfaceError("several tables are configured; name one",
                             hint=f"tables: {', '.join(sorted(self.engine.catalog))}")

    def _answer(self, compiled, model, variance):
        """The linear queries' answers, standard errors and unsupported ones from the model, or
        by least squares under ``SET dpsql.estimator = 'least_squares'`` (``results.answer_linear``)."""
        least_squares = self.settings.get("dpsql.estimator") == "least_squares"
        return answer_linear(self.engine, compiled, model, variance, least_squares)

    def _refuse_prior(self, compiled, unsupported) -> None:
        """Policy "informed": refuse when a value would be the model's prior, i.e. its
        attributes were never measured together (the model can only assume independence)."""
        ranges = self.engine.bounds(compiled.table)
        if ranges is None:
            return
        bad = [lq for lq in unsupported if not ranges.informed(lq.attributes)]
        if not bad:
            return
        never, coarse = [], []
        for lq in bad:
            for item in ranges.never_together(lq.attributes):
                if item not in never:
                    never.append(item)
            coarse += [a for a in ranges.measured_coarsely(lq.attributes) if a not in coarse]
        example = _example_query(compiled.table, never + [(a,) for a in coarse])
        qb = self.engine.config.query_budget
        raise UnsupportedQueryError(
            f"no released measurement informs this answer: {_never_text(never, coarse)}, so the "
            "model could only return its prior (an assumption of independence or of evenly spread "
            "values, not information)",
            hint=(self.operator_step(f"add a query such as `{example}` to the workload and measure it",
                                     "dpsql measure --increment")
                  + (", or SET dpsql.policy = 'measure' to measure it now (spends budget)" if qb else "")
                  + ", or SET dpsql.policy = 'infer' to see the model's guess with its range"))

    def _measure_for(self, compiled, unsupported) -> MeasureReport:
        """Policy "measure": plan a strategy for the unsupported linear queries and measure it
        with this user's per-query budget (charged before any data is read), once approved."""
        from dpsql import linalg
        from dpsql.plan import Workload   # the planner: only when a query is measured on demand
        table = compiled.table
        state = self.engine._state(table)
        from dpsql.engine.ordered import workload_matrix
        workload = Workload(state.schema.domain,      # a fine column's quantile asks for its CDF
                            linalg.Union([workload_matrix(state.schema, lq) for lq in unsupported]))
        query_budget = self.engine.config.query_budget
        if query_budget is None:
            raise OperationalError("policy 'measure' needs a per-query budget in the configuration",
                                   hint='[policy] unsupported = "measure", epsilon = 0.05')
        rho = query_budget.rho
        # optimize_counted adds the total count when nothing released determines it: the
        # first on-demand measurement was charged and then failed to fit (issue 21).
        strategy = self.engine.optimize_counted(workload, rho, self.engine.config.sources[table].unit_rows,
                                                self.engine.released_measurements(table), table=table)
        purpose = "query:" + ";".join(lq.name for lq in unsupported)
        try:
            preview = self.engine.spend_preview(table, strategy, rho, self.user, purpose)
        except UselessMeasurementError as exc:
            if self.role == "analyst":   # the engine's hint names the operator's settings
                exc.hint = ("ask your operator for a larger per-query budget ([policy] epsilon), or "
                            "answer from existing measurements (SET dpsql.policy = 'informed')")
            raise
        if preview.rho > preview.remaining:
            raise BudgetExhaustedError(
                f"answering needs a new measurement of rho = {format_rho(preview.rho, 'up')} but only "
                f"rho = {format_rho(preview.remaining, 'down')} remains for {self.user!r}; nothing was spent",
                hint="answer from existing measurements (SET dpsql.policy = 'informed'), or ask the "
                     "operator for more budget", requested_rho=Fraction(preview.rho),
                remaining_rho=Fraction(preview.remaining))
        if preview.rho > 0:
            self._confirm_spend(preview, table, ", ".join(lq.description for lq in unsupported))
        return self.engine.measure_strategy(table, strategy, rho, self.user, purpose)

    def _refuse_unmeasured_flag(self, table: str) -> None:
        """An ad hoc per-person flag (``Engine.add_person_flags``) nothing measured yet: only
        this statement (or one with the same condition) can measure it, the workload never."""
        people = self.engine.config.people
        view = self.engine.config.sources[table].view
        if people is None or table == people.person or view is None or not view.filters:
            return
        column, child, cond = view.filters[-1]
        qb = self.engine.config.query_budget
        raise UnsupportedQueryError(
            f"no per-person flag of '{cond.sql(dialect='postgres')}' on {child.table!r} was measured: counting "
            "persons with such rows needs one",
            hint=("SET dpsql.policy = 'measure' to measure it now (spends your per-query budget, "
                  "asked first), or " if qb else "")
            + self.operator_step("add this statement to [workload] and measure it", "dpsql measure"))

    def _confirm_spend(self, preview: SpendPreview, table: str, what: str) -> None:
        from dpsql.privacy.accountant import rho_to_epsilon
        delta = self.engine.config.budget.delta
        request = SpendRequest(preview.rho, rho_to_epsilon(preview.rho, delta), delta, table, what,
                               preview.remaining)
        if self.settings["dpsql.allow_spend"] == "on":
            return
        cost = f"rho = {format_rho(request.rho, 'up')} (epsilon = {request.epsilon:.4g} at delta = {delta:g})"
        if self.approve is None:
            raise PrivacyViolationError(
                f"answering needs a new measurement that spends {cost}; nothing was spent",
                hint=self.spend_hint)
        if not self.approve(request):
            raise PrivacyViolationError(f"not measured: spending {cost} was declined; nothing was spent",
                                        hint="answer from existing measurements with SET dpsql.policy "
                                             "= 'informed'")

    def _session_command(self, command, t0) -> Result:
        kind, name, value = command.kind, command.name, command.value or ""
        if name == BUDGET_SETTING:
            if kind != "show":
                raise ProgrammingError(f"{name} is read-only", hint=f"SHOW {name}")
            return replace(self.budget_rows(), seconds=time.perf_counter() - t0)
        if kind in ("set", "show", "reset") and name.startswith("dpsql.") and name not in self.ALLOWED:
            raise ProgrammingError(f"unrecognized setting {name!r}",
                                   hint="settings: " + ", ".join(sorted(self.ALLOWED))
                                   + f"; SHOW {BUDGET_SETTING} shows the budget left")
        if kind == "set":
            allowed = self.ALLOWED.get(name)
            if allowed is not None:
                value = value.lower()
                if value not in allowed:
                    raise ProgrammingError(f"invalid value for {name}: {value!r}",
                                           hint="use " + " or ".join(repr(a) for a in allowed))
                if name == "dpsql.policy":
                    self._check_policy(value)
            self.settings[name] = value
            return Result([], [], message="SET", seconds=time.perf_counter() - t0)
        if kind == "show":
            if name == "all":
                rows = sorted(self.settings.items())
                return Result([Column("name", "text"), Column("setting", "text")], rows,
                              seconds=time.perf_counter() - t0)
            if name not in self.settings:
                raise ProgrammingError(f"unrecognized setting {name!r}",
                                       hint="settings: " + ", ".join(sorted(self.ALLOWED)))
            return Result([Column(name, "text")], [(self.settings[name],)],
                          seconds=time.perf_counter() - t0)
        if kind == "reset":
            defaults = self._defaults()
            if name == "all":
                self.settings = {**self.settings, **defaults}
            elif name in defaults:
                self.settings[name] = defaults[name]
            else:
                self.settings.pop(name, None)
            return Result([], [], message="RESET", seconds=time.perf_counter() - t0)
        if kind in ("begin", "commit", "rollback", "rollback_to", "ack"):
            return Result([], [], message=command.tag or kind.upper(), seconds=time.perf_counter() - t0)
        raise ProgrammingError(f"unsupported session command {kind}")

    def _check_policy(self, policy: str) -> None:
        """A user may not choose a policy that would let them spend beyond their cap."""
        if policy != "measure":
            return
        qb = self.engine.config.query_budget
        if qb is None:
            raise PrivacyViolationError(
                "policy 'measure' is not available: the configuration sets no per-query budget",
                hint=self.operator_step("enable on-demand measurement with a per-query budget",
                                        '[policy] unsupported = "measure", epsilon = ... in dpsql.toml'))
        remaining = self.engine.ledger.remaining(self.user)
        if qb.rho > remaining:
            raise PrivacyViolationError(
                f"policy 'measure' would spend rho = {format_rho(qb.rho, 'up')} per query, more than "
                f"the rho = {format_rho(remaining, 'down')} left to {self.user!r}",
                hint="answer from existing measurements (policy 'informed'), or ask the operator "
                     "for more budget")

    def _with_error_columns(self, result: Result, values: Sequence[int] | None = None) -> Result:
        """``result`` with the columns ``dpsql.error_columns`` asks for (``results.with_error_columns``)."""
        return with_error_columns(result, self.settings.get("dpsql.error_columns", "off"), values)


def _never_text(items: list[tuple[str, ...]], coarse: Sequence[str] = ()) -> str:
    alone = [i[0] for i in items if len(i) == 1]
    pairs = [f"{a} and {b}" for a, b in (i for i in items if len(i) == 2)]
    parts = []
    if alone:
        parts.append(", ".join(alone) + (" was" if len(alone) == 1 else " were") + " never measured")
    if pairs:
        parts.append("; ".join(pairs) + " were never measured together")
    if coarse:
        parts.append(", ".join(coarse) + (" was" if len(coarse) == 1 else " were") + " measured only "
                     "through coarser queries (a range, a threshold or a sum), never value by value")
    return "; ".join(parts) or "its attributes were never measured together"


def _example_query(table: str, never: list[tuple[str, ...]]) -> str:
    attrs: list[str] = []
    for item in never:
        for a in item:
            if a not in attrs:
                attrs.append(a)
    cols = ", ".join(map(_sql_name, attrs[:2] if len(never) == 1 or len(attrs) <= 2 else never[0]))
    return f"SELECT {cols}, COUNT(*) FROM {_sql_name(table)} GROUP BY {cols}"


def _sql_name(name: str) -> str:
    """``name`` as the hint's SQL must spell it: quoted unless a plain identifier (a CSV's
    ``pay-rate`` unquoted is ``pay - rate``: the suggested query did not run)."""
    return name if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) else '"' + name.replace('"', '""') + '"'
