"""Engine configuration: ``dpsql.toml`` (format documented in ``docs/config.md``).

Everything here is public metadata chosen by the operator: table sources, declared
domains, the privacy unit, budgets, planner options and workload files.  Nothing is read
from the private rows.  ``load_config`` accepts a path or a dict (for programmatic use and
tests) and keyword overrides that replace top-level entries of the same name, e.g.
``budget={"epsilon": 1.0, "delta": 1e-6}``, ``ledger=path``, ``workload=[sql, ...]``.
"""

from __future__ import annotations

import copy
import math
import os
import re
import tomllib
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from collections.abc import Mapping
from typing import Any

from dpsql import config_schema
from dpsql.domain import TableSchema
from dpsql.domain_file import load_domain
from dpsql.engine.public import (declared_references, is_public, labels_resolver, load_public, public_apart,
                                 unclamp_keys)
from dpsql.errors import ConfigError
from dpsql.engine.people import PeopleSchema, people_views, with_flags
from dpsql.measure.source import Source
from dpsql.pgm.limits import FitLimits
from dpsql.privacy.accountant import budget_rho, epsilon_delta_to_rho
from dpsql.public import StarCatalog
from dpsql.sql.people import person_flags



_default = config_schema.default


def validate_keys(raw: Mapping, where: str, section: str = "", path: str = "") -> None:
    """Check ``raw`` against the declared schema (:mod:`dpsql.config_schema`): unknown keys,
    types and allowed values, recursively."""
    config_schema.check(raw, section, where, path)


@dataclass(frozen=True)
class BudgetSpec:
    """A budget in zCDP ρ, exact; ``delta`` is kept only to display ε at the configured δ.

    ρ is a :class:`~fractions.Fraction` never above what the operator configured: an
    (ε, δ) budget is the largest ρ certified within it (``epsilon_delta_to_rho``, rounded
    down), a ρ is the smaller of the float's binary and decimal readings (``budget_rho``).
    A float rounded to nearest would exceed the exact ρ for most (ε, δ) (docs/privacy.md,
    "Accounting")."""

    rho: Fraction
    delta: float

    @staticmethod
    def parse(spec: Any, where: str, default_delta: float) -> BudgetSpec:
        if isinstance(spec, (int, float)) and not isinstance(spec, bool):
            return BudgetSpec(_rho(spec, where), default_delta)
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{where}: a budget is a table with rho, or epsilon (and delta)",
                              hint='e.g. budget = { epsilon = 1.0, delta = 1e-6 }')
        delta = float(spec.get("delta", default_delta))
        if "rho" in spec:
            rho = _rho(spec["rho"], where)
        elif "epsilon" in spec:
            eps = float(spec["epsilon"])
            if not (0 < delta < 1):
                raise ConfigError(f"{where}: delta must be in (0, 1) to convert epsilon to rho, got {delta}")
            rho = epsilon_delta_to_rho(eps, delta)
        else:
            raise ConfigError(f"{where}: give rho or epsilon", hint='e.g. { epsilon = 1.0, delta = 1e-6 }')
        return BudgetSpec(rho, delta)


def _rho(value: Any, where: str) -> Fraction:
    try:
        rho = budget_rho(value)
    except ConfigError:
        rho = Fraction(0)
    if not rho > 0:
        raise ConfigError(f"{where}: the budget must be a positive number, got {value!r}",
                          hint="e.g. rho = 0.1, or epsilon = 1.0 and delta = 1e-6")
    return rho


@dataclass(frozen=True)
class PlannerOptions:
    """``[planner]``; every default is the schema's (dpsql.config_schema)."""

    restarts: int = _default("planner", "restarts")
    seed: int = _default("planner", "seed")
    max_clique_cells: int = _default("planner", "max_clique_cells")
    max_model_cells: int = _default("planner", "max_model_cells")
    objective: str = _default("planner", "objective")      # dpsql.plan.objective
    mode: str = _default("planner", "mode")                # "aim": adaptive measurement (thesis ch. 5)
    aim_max_model_cells: int = _default("planner", "aim_max_model_cells")  # AIM's JT-SIZE cap
    # SUM/AVG over wide bins: "offsets" measures the rows' offsets from their bins' values
    # with the workload (unbiased answers); "bound" measures Σ half bin widths and widens the
    # interval by the worst-case binning error instead (docs/engine.md, "Binning offsets")
    binning: str = _default("planner", "binning")


@dataclass(frozen=True)
class Config:
    path: Path | None
    tables: dict[str, TableSchema]
    sources: dict[str, Source]
    budget: BudgetSpec                      # global total
    user_budgets: dict[str, BudgetSpec]      # explicit per-user budgets
    default_user_budget: BudgetSpec | None   # for users not listed (None: only the global cap)
    workload_budget: BudgetSpec | None       # what one workload measurement round spends
    query_budget: BudgetSpec | None          # per on-demand query (policy "measure")
    # [tables.NAME] rows: the table's size as publicly known (documentation, not the data);
    # only judges whether a measurement's noise would drown its answers (Measurer.check_useful)
    table_rows: dict[str, int]
    ledger_path: Path
    cache_dir: Path
    noise: str = _default("dpsql", "noise")
    policy: str = _default("dpsql", "policy")
    workload: tuple[str, ...] = ()
    workload_weights: tuple[float, ...] = ()   # per workload statement (default 1)
    planner: PlannerOptions = field(default_factory=PlannerOptions)
    fit_iters: int = _default("dpsql", "fit_iters")   # a limit: fits end at convergence (FitLimits.gap)
    default_user: str = _default("dpsql", "default_user")
    error_columns: str = _default("dpsql", "error_columns")
    allow_spend: bool = False     # non-interactive callers may spend without asking ([policy])
    # public dimension tables (dpsql.public, read whole: PublicDatabase) and declared keys
    public_db: Any = field(default=None, compare=False, repr=False)
    references: tuple = ()
    # [people]: private tables protected per person, each served through its view (dpsql/engine/people.py)
    people: PeopleSchema | None = None

    # the fit's thresholds (dpsql.pgm.limits) but the capacity, which is [planner] max_model_cells
    fit_base_limits: FitLimits = field(default_factory=FitLimits)

    @property
    def fit_limits(self) -> FitLimits:
        """Every threshold of the fit, passed to ``dpsql.pgm.auto.fit`` and part of each saved
        model's key (``dpsql.pgm.finishers.fit_key``)."""
        return replace(self.fit_base_limits, capacity=self.planner.max_model_cells)

    @property
    def public_tables(self) -> dict:
        return dict(self.public_db.tables) if self.public_db is not None else {}

    def user_budget(self, user: str) -> BudgetSpec | None:
        """The user's cap: their own entry, else the declared default; None means 0 (an
        unlisted user may spend nothing, docs/config.md "Budgets")."""
        return self.user_budgets.get(user, self.default_user_budget)

    def uncapped(self, users) -> list[str]:
        """Those of ``users`` with no cap declared (who can therefore spend nothing)."""
        return sorted(u for u in users if self.user_budget(u) is None)


def _read(config: str | os.PathLike | Mapping) -> tuple[dict, Path | None]:
    if isinstance(config, Mapping):
        return copy.deepcopy(dict(config)), None
    path = Path(config)
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh), path.resolve()
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {path}",
                          hint="create one with `dpsql init <csv>` or pass a dict") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None


_WEIGHT_COMMENT = re.compile(r"^\s*--\s*weight\s*:\s*(\S+)\s*$", re.IGNORECASE | re.MULTILINE)


def _leading_weight(sql: str, where: str) -> float:
    """The planner weight of a workload statement: a ``-- weight: 3`` line among the
    comments before its first token (1 when absent)."""
    head = []
    for line in sql.splitlines():
        if line.strip() and not line.strip().startswith("--"):
            break
        head.append(line)
    found = _WEIGHT_COMMENT.findall("\n".join(head))
    return _weight(found[-1], where) if found else 1.0


def _weight(value: Any, where: str) -> float:
    try:
        w = float(value)
    except (TypeError, ValueError):
        w = math.nan
    if not (math.isfinite(w) and w > 0):
        raise ConfigError(f"{where}: query weight must be a positive number, got {value!r}",
                          hint="e.g. -- weight: 3 on the line above the query")
    return w


def _workload_sql(spec: Any, base: Path, where: str) -> list[tuple[str, float]]:
    """Workload statements from inline SQL strings and/or files (one query per statement),
    each with its planner weight (``{ sql = ..., weight = 3 }`` or a ``-- weight: 3``
    comment line before the statement; default 1)."""
    from dpsql.sql.split import split_statements

    if spec is None:
        return []
    if isinstance(spec, str):
        spec = [spec]
    if isinstance(spec, Mapping):
        items = [("file", f) for f in spec.get("files", [])] + [("sql", q) for q in spec.get("queries", [])]
    else:
        items = [("sql", q) for q in spec]
    out: list[tuple[str, float]] = []
    for kind, item in items:
        if kind == "file":
            p = Path(item) if Path(item).is_absolute() else base / item
            if not p.exists():
                raise ConfigError(f"{where}: workload file not found: {p}")
            out.extend((q, _leading_weight(q, f"{where}: {p.name}"))
                       for q in split_statements(p.read_text()))
        elif isinstance(item, Mapping):     # its keys and types: config_schema "query"
            if "sql" not in item:
                raise ConfigError(f"{where}: a query entry needs sql",
                                  hint='queries = [{ sql = "SELECT ...", weight = 3 }]')
            w = _weight(item.get("weight", _default("query", "weight")), where)
            out.extend((q, w) for q in split_statements(str(item["sql"])))
        else:
            out.extend((q, _leading_weight(q, where)) for q in split_statements(item))
    return out


def load_config(config: str | os.PathLike | Mapping, **overrides: Any) -> Config:
    raw, path = _read(config)
    for key, value in overrides.items():
        if value is not None:
            raw[key] = value
    where = str(path) if path else "<config dict>"
    validate_keys(raw, where)
    base = path.parent if path else Path.cwd()
    section = raw.get("dpsql", {})
    for key in config_schema.SCHEMA["dpsql"].keys:    # accepted at the top level too
        if key in raw and key not in ("budget",):
            section = {**section, key: raw[key]}

    tables_spec = raw.get("tables")
    if not tables_spec:
        raise ConfigError(f"{where}: no [tables] declared", hint="declare [tables.NAME] with domain and source")
    tables: dict[str, TableSchema] = {}
    sources: dict[str, Source] = {}
    table_rows: dict[str, int] = {}
    if not isinstance(tables_spec, Mapping):
        raise ConfigError(f"{where}: tables must be [tables.NAME] sections")
    public_db = load_public(tables_spec, base, where)
    labels_from = labels_resolver(public_db, where)
    for name, spec in tables_spec.items():
        twhere = f"{where}: table {name!r}"
        if not isinstance(spec, Mapping):
            raise ConfigError(f"{twhere}: must be a table", hint=f"write [tables.{name}]")
        if is_public(spec, twhere):
            continue
        if "domain" not in spec:
            raise ConfigError(f"{twhere}: missing domain file", hint='domain = "adult.toml"')
        dpath = Path(spec["domain"])
        if not dpath.is_absolute():
            dpath = base / dpath
        if not dpath.exists():
            # load_domain's own hint speaks of the working directory, which a configuration's
            # relative path is not taken from
            raise ConfigError(f"{twhere}: domain file {dpath} not found",
                              hint=f"a relative domain path is taken from the configuration's directory "
                                   f"({base}): write it relative to that, or absolute")
        declared = load_domain(dpath, labels_from)
        schema_name = spec.get("domain_table", name)
        if schema_name not in declared:
            raise ConfigError(f"{twhere}: {dpath} declares no table {schema_name!r}",
                              hint=f"declared tables: {', '.join(sorted(declared))}")
        schema = declared[schema_name]
        if schema.name != name:
            schema = TableSchema(name, schema.attributes, schema.source)
        tables[name] = schema
        src_spec = spec.get("source") or (schema.source or None)
        if not src_spec:
            raise ConfigError(f"{twhere}: missing source", hint='source = { csv = "adult.csv" }')
        src_base = base if spec.get("source") else dpath.parent
        source = Source.from_config(src_spec, src_base, twhere).with_unit(spec.get("privacy_unit"), base, twhere)
        sources[name] = source
        if "rows" in spec:     # a positive integer (config_schema)
            table_rows[name] = spec["rows"]

    public_apart(tables_spec, sources, base, where)
    if not tables:
        raise ConfigError(f"{where}: every table is public", hint="declare the private table: [tables.NAME] with "
                                                                  "domain and source")
    references = declared_references(tables_spec, tables, public_db, where)
    tables = unclamp_keys(tables, references)
    people = None
    if raw.get("people") is not None:
        tables, sources, people = people_views(raw["people"], tables, sources, base, where)

    budget_spec = raw.get("budget")
    if budget_spec is None:
        raise ConfigError(f"{where}: no [budget]", hint="[budget] epsilon = 1.0, delta = 1e-6 (or rho = ...)")
    default_delta = float(budget_spec.get("delta", 1e-6)) if isinstance(budget_spec, Mapping) else 1e-6
    budget = BudgetSpec.parse(budget_spec, f"{where}: [budget]", default_delta)
    users = {}
    if isinstance(budget_spec, Mapping):
        for user, uspec in budget_spec.get("users", {}).items():
            users[user] = BudgetSpec.parse(uspec, f"{where}: [budget.users.{user}]", default_delta)
    per_user = budget_spec.get("per_user") if isinstance(budget_spec, Mapping) else None
    default_user_budget = BudgetSpec.parse(per_user, f"{where}: budget.per_user", default_delta) if per_user else None

    wl = raw.get("workload")
    workload = _workload_sql(wl, base, f"{where}: [workload]")
    if people is not None:
        # COUNT(DISTINCT person) with conditions on other tables' rows: a measured flag per
        # person and condition (dpsql/sql/people.py), a column of the person's view
        flags = person_flags([q for q, _ in workload], StarCatalog(tables, people=people))
        tables, sources, people = with_flags(people, tables, sources, flags)
    workload_budget = None
    if isinstance(wl, Mapping) and ("epsilon" in wl or "rho" in wl):
        workload_budget = BudgetSpec.parse(wl, f"{where}: [workload]", default_delta)
    policy_spec = raw.get("policy", section.get("policy", _default("dpsql", "policy")))
    query_budget = None
    allow_spend = False
    if isinstance(policy_spec, Mapping):
        policy = policy_spec.get("unsupported", _default("policy", "unsupported"))
        allow_spend = policy_spec.get("allow_spend", _default("policy", "allow_spend"))
        if "epsilon" in policy_spec or "rho" in policy_spec:
            query_budget = BudgetSpec.parse(policy_spec, f"{where}: [policy]", default_delta)
    else:
        policy = policy_spec
    if policy == "measure" and query_budget is None:
        raise ConfigError(f"{where}: policy \"measure\" needs a per-query budget",
                          hint='[policy] unsupported = "measure", epsilon = 0.05')
    # the values' types and choices were checked against the schema (validate_keys)
    noise = section.get("noise", _default("dpsql", "noise"))
    error_columns = section.get("error_columns", _default("dpsql", "error_columns"))

    ledger = section.get("ledger")
    if ledger is None:
        if path is None:
            raise ConfigError(f"{where}: no ledger path", hint='ledger = "dpsql.ledger"')
        ledger = path.with_suffix(".ledger")
    ledger_path = Path(ledger) if Path(ledger).is_absolute() else base / ledger
    cache = section.get("cache_dir", _default("dpsql", "cache_dir"))
    cache_dir = Path(cache) if Path(cache).is_absolute() else base / cache
    planner = PlannerOptions(**raw.get("planner", {}))
    return Config(path=path, tables=tables, sources=sources, budget=budget, user_budgets=users,
                  default_user_budget=default_user_budget, workload_budget=workload_budget,
                  query_budget=query_budget, table_rows=table_rows, ledger_path=ledger_path, cache_dir=cache_dir,
                  noise=noise, policy=policy, workload=tuple(q for q, _ in workload),
                  workload_weights=tuple(w for _, w in workload), planner=planner,
                  fit_iters=section.get("fit_iters", raw.get("model", {}).get("iters", _default("dpsql", "fit_iters"))),
                  default_user=section.get("default_user", _default("dpsql", "default_user")),
                  error_columns=error_columns, allow_spend=allow_spend, public_db=public_db,
                  references=references, people=people)


