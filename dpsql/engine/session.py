"""One user's session: execute SQL against the engine and get private answers.

``Session.execute`` compiles the statement (public metadata only; failures spend nothing),
answers each of its linear queries from the fitted graphical model, attaches standard
errors, and post-processes into rows.  Identical statements get identical answers: results
are cached per model version, and a model only changes when new noisy measurements are
released (never fresh noise for a repeat).

Queries the released measurements do not support follow the configured policy
(``docs/config.md``): ``infer`` (answer from the model, flagged ``inferred``), ``measure``
(plan a strategy for the query, charge this user's per-query budget, refit) or ``refuse``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field, replace
from typing import Any, Mapping, Sequence

import numpy as np

from dpsql.engine.engine import Engine, MeasureReport, PlanReport
from dpsql.engine.variance import Z95
from dpsql.errors import InterfaceError, OperationalError, ProgrammingError, UnsupportedQueryError
from dpsql.plan import Workload


@dataclass(frozen=True)
class Column:
    name: str
    type: str  # "text" | "integer" | "double"


@dataclass
class Result:
    """Rows of a private answer with their standard errors.

    ``stderr[i][j]`` is the standard error of ``rows[i][j]`` (None for group keys and exact
    values); ``inferred[i]`` is True when a value of row i came from model inference
    without a supporting measurement.  ``cost`` is the ρ this statement spent."""

    columns: list[Column]
    rows: list[tuple]
    stderr: list[tuple] = field(default_factory=list)
    inferred: list[bool] = field(default_factory=list)
    cost: float = 0.0
    message: str | None = None   # e.g. "SET" for session commands, EXPLAIN text
    seconds: float = 0.0
    model_version: int = 0
    model: str = ""      # which model answered: "exact junction tree" or "relaxed region graph"


def _model_kind(model) -> str:
    """Short public description of the fitted model (its structure, never its values)."""
    if model is None:
        return ""
    from dpsql.pgm import RelaxedModel
    return "relaxed region graph" if isinstance(model, RelaxedModel) else "exact junction tree"


def _type_name(pg_type: str) -> str:
    """The driver's type code for a PostgreSQL type name from the compiler."""
    t = pg_type.lower()
    if t in ("integer", "bigint", "smallint", "int", "int8", "int4"):
        return "integer"
    if t in ("double precision", "numeric", "real", "float8", "double"):
        return "double"
    return "text"


class Session:
    def __init__(self, engine: Engine, user: str | None = None) -> None:
        self.engine = engine
        self.user = user or engine.config.default_user
        self.settings: dict[str, str] = {"dpsql.error_columns": engine.config.error_columns,
                                         "dpsql.estimator": "pgm"}
        self._cache: dict[tuple, Result] = {}

    # -- public ------------------------------------------------------------------------------
    def execute(self, sql: str, params: Sequence[Any] | None = None) -> Result:
        from dpsql.sql import compile as compile_sql
        from dpsql.sql.session_commands import parse_session_command

        t0 = time.perf_counter()
        command = parse_session_command(sql)
        if command is not None:
            return self._session_command(command, t0)
        compiled = compile_sql(sql, self.engine.catalog, params=params)
        if getattr(compiled, "is_explain", False):
            return Result([Column("QUERY PLAN", "text")],
                          [(line,) for line in self.explain_compiled(compiled).splitlines()],
                          message="EXPLAIN", seconds=time.perf_counter() - t0)
        columns = [Column(c.name, _type_name(c.type)) for c in compiled.columns]
        if compiled.is_schema_probe:
            return Result(columns, [], seconds=time.perf_counter() - t0)
        # A mapping of named parameters is keyed by its items (its keys alone would make two
        # different bindings share one cached answer).
        bound = None if params is None else tuple(sorted(params.items(), key=lambda kv: str(kv[0]))) \
            if isinstance(params, Mapping) else tuple(params)
        key = (sql, bound, self.settings["dpsql.estimator"])
        model, variance, version = self.engine.model(compiled.table)
        cached = self._cache.get(key)
        if cached is not None and cached.model_version == version:
            return self._with_error_columns(replace(cached, cost=0.0))  # a repeat is free
        cost = 0.0
        if model is None:
            if self.engine.config.policy != "measure":
                raise OperationalError(
                    f"nothing has been measured on table {compiled.table!r} yet",
                    hint="the operator runs `dpsql measure` first (or set the policy to \"measure\")")
        answers, stderrs = {}, {}
        if model is not None:
            answers, stderrs, unsupported = self._answer(compiled, model, variance)
        else:
            unsupported = list(compiled.linear_queries)
        if unsupported:
            policy = self.engine.config.policy
            if policy == "refuse":
                raise UnsupportedQueryError(
                    "the released measurements do not support this query and the policy refuses "
                    "queries that would need new measurements",
                    hint="ask the operator to add it to the workload, or aggregate attributes that were measured together")
            if policy == "measure":
                cost = self._measure_for(compiled, unsupported).rho
                model, variance, version = self.engine.model(compiled.table)
                answers, stderrs, unsupported = self._answer(compiled, model, variance)
        # Unsupported rows carry an infinite variance through the post-processing (the
        # delta method keeps inf where it would turn NaN into "no stderr"); a value is
        # inferred exactly when its standard error comes out infinite, and is reported NaN.
        rows, stderr_rows = compiled.postprocess(
            answers, {k: np.where(np.isnan(v), np.inf, v) for k, v in stderrs.items()})
        quantile_inferred = any(lq.kind == "quantile" for lq in unsupported)
        inferred, cleaned = [], []
        for r in stderr_rows:
            flag = quantile_inferred
            out = []
            for v in r:
                if isinstance(v, float) and (math.isinf(v) or math.isnan(v)):
                    out.append(math.nan)
                    flag = True
                else:
                    out.append(v)
            cleaned.append(tuple(out))
            inferred.append(flag)
        stderr_rows = cleaned
        result = Result(columns, list(rows), stderr_rows, inferred,
                        cost=cost, seconds=time.perf_counter() - t0, model_version=version,
                        model=_model_kind(model))
        self._cache[key] = result
        return self._with_error_columns(result)

    def plan(self, table: str | None = None, queries: Sequence[str] | None = None) -> PlanReport:
        return self.engine.plan(self._table(table), queries)

    def measure(self, table: str | None = None, mode: str | None = None, progress=None):
        """Measure the workload: HDMM's one-shot plan, or AIM's adaptive rounds with
        ``mode="aim"`` (default: the config's ``[planner] mode``)."""
        if self._mode(mode) == "aim":
            from dpsql.engine.aim import measure_aim
            return measure_aim(self.engine, self._table(table), self.user, progress=progress)
        return self.engine.measure(self._table(table), self.user)

    def measure_cost(self, table: str | None = None, mode: str | None = None) -> float:
        """ρ that ``measure`` would spend (0 if that release already exists); plans the
        workload if needed (public, free)."""
        if self._mode(mode) == "aim":
            from dpsql.engine.aim import aim_cost
            return aim_cost(self.engine, self._table(table))
        return self.engine.measure_cost(self._table(table))

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
        led = self.engine.ledger
        cfg = self.engine.config
        return {"user": self.user, "spent_rho": float(led.spent(self.user)),
                "remaining_rho": float(led.remaining(self.user)),
                "total_spent_rho": float(led.spent(None)),
                "total_remaining_rho": float(led.remaining(None)),
                "total_rho": cfg.budget.rho, "delta": cfg.budget.delta,
                "entries": len(led.entries())}

    def explain(self, sql: str, params=None) -> str:
        from dpsql.sql import compile as compile_sql
        return self.explain_compiled(compile_sql(sql, self.engine.catalog, params=params))

    def explain_compiled(self, compiled) -> str:
        lines = [compiled.explain()]
        if getattr(compiled, "is_explain", False):
            compiled = compiled.inner
        model, variance, _ = self.engine.model(compiled.table)
        for lq in compiled.linear_queries:
            if variance is None:
                lines.append(f"{lq.name}: no measurements yet")
                continue
            err, sup = variance.analyse(lq.matrix)
            if sup.all():
                lines.append(f"{lq.name}: supported by released measurements; "
                             f"expected stderr ≈ {float(np.sqrt(np.mean(err ** 2))):.4g} per row")
            else:
                extra = ""
                if self.engine.config.policy == "measure" and self.engine.config.query_budget:
                    extra = f"; answering would measure it at rho = {self.engine.config.query_budget.rho:.4g}"
                lines.append(f"{lq.name}: not supported by a measurement (inferred from the model){extra}")
        return "\n".join(lines)

    def close(self) -> None:
        self._cache.clear()

    # -- internals ---------------------------------------------------------------------------
    def _table(self, table: str | None) -> str:
        if table is not None:
            return table
        if len(self.engine.tables) == 1:
            return next(iter(self.engine.tables))
        raise InterfaceError("several tables are configured; name one",
                             hint=f"tables: {', '.join(sorted(self.engine.tables))}")

    def _answer(self, compiled, model, variance):
        """Answers from the graphical model (default) or, with ``SET dpsql.estimator =
        'least_squares'``, HDMM's local least squares (thesis §3.9: unbiased, possibly
        negative and mutually inconsistent; unsupported values are NULL)."""
        answers, stderrs, unsupported = {}, {}, []
        least_squares = self.settings.get("dpsql.estimator") == "least_squares"
        for lq in compiled.linear_queries:
            if least_squares:
                answers[lq.name], _ = variance.least_squares(lq.matrix)
            else:
                answers[lq.name] = np.asarray(model.answer(lq.matrix), dtype=np.float64)
            err, sup = variance.analyse(lq.matrix)
            stderrs[lq.name] = err
            if not sup.all():
                unsupported.append(lq)
        return answers, stderrs, unsupported

    def _measure_for(self, compiled, unsupported) -> MeasureReport:
        """Policy "measure": plan a strategy for the unsupported linear queries and measure it
        with this user's per-query budget (charged before any data is read)."""
        from dpsql import linalg
        table = compiled.table
        state = self.engine._state(table)
        workload = Workload(state.schema.domain, linalg.Union([lq.matrix for lq in unsupported]))
        rho = self.engine.config.query_budget.rho
        # optimize_counted adds the total count when nothing released determines it: the
        # first on-demand measurement was charged and then failed to fit (issue 21).
        strategy = self.engine.optimize_counted(workload, rho, self.engine.config.sources[table].max_rows_per_id,
                                                self.engine.released_measurements(table))
        return self.engine.measure_strategy(table, strategy, rho, self.user,
                                            "query:" + ";".join(lq.name for lq in unsupported))

    def _session_command(self, command, t0) -> Result:
        kind, name, value = command
        if kind == "set":
            allowed = {"dpsql.error_columns": ("off", "stderr", "ci95"),
                       "dpsql.estimator": ("pgm", "least_squares")}.get(name)
            if allowed is not None and value not in allowed:
                raise ProgrammingError(f"invalid value for {name}: {value!r}",
                                       hint="use " + " or ".join(repr(a) for a in allowed))
            self.settings[name] = value
            return Result([], [], message="SET", seconds=time.perf_counter() - t0)
        if kind == "show":
            if name == "all":
                rows = sorted(self.settings.items())
                return Result([Column("name", "text"), Column("setting", "text")], rows,
                              seconds=time.perf_counter() - t0)
            return Result([Column(name, "text")], [(self.settings.get(name, ""),)],
                          seconds=time.perf_counter() - t0)
        if kind == "reset":
            defaults = {"dpsql.error_columns": self.engine.config.error_columns, "dpsql.estimator": "pgm"}
            self.settings[name] = defaults.get(name, "")
            return Result([], [], message="RESET", seconds=time.perf_counter() - t0)
        if kind in ("begin", "commit", "rollback"):
            return Result([], [], message=kind.upper(), seconds=time.perf_counter() - t0)
        raise ProgrammingError(f"unsupported session command {kind}")

    def _with_error_columns(self, result: Result) -> Result:
        mode = self.settings.get("dpsql.error_columns", "off")
        if mode == "off":
            return result
        cols = list(result.columns)
        value_idx = [j for j, c in enumerate(result.columns)
                     if any(r[j] is not None for r in result.stderr)] if result.stderr else []
        for j in value_idx:
            cols.append(Column(f"{result.columns[j].name}_{mode}", "double"))
        rows = []
        for i, row in enumerate(result.rows):
            extra = []
            for j in value_idx:
                se = result.stderr[i][j] if i < len(result.stderr) else None
                if se is None or (isinstance(se, float) and math.isnan(se)):
                    extra.append(None)
                else:
                    extra.append(float(se) * (Z95 if mode == "ci95" else 1.0))
            rows.append(tuple(row) + tuple(extra))
        return replace(result, columns=cols, rows=rows)
