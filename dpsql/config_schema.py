"""The declared schema of ``dpsql.toml``: every section and key, with its type, default,
allowed values and meaning (``docs/config.md`` documents the same keys; a test holds the two
together).

One table, one checker.  The engine (``dpsql.engine.config``), the sources
(``dpsql.measure.source``), the people schema and the wire server (``dpsql.server.config``)
each used to check their keys by hand, the ``[server]`` keys twice (their names in the
engine, their values in the server): a wrong type passed one and crashed or was silently
coerced in the other (``fit_iters = "many"`` raised a ValueError, ``seed = 1.5`` became 1,
``[server] max_connections = "lots"`` loaded in ``dpsql.connect``).  Now :func:`check` refuses
an unknown key (naming the closest valid one: a typo such as ``privacy_unt`` must never
silently weaken a table's privacy), a value of the wrong type or outside its allowed values,
with a :class:`~dpsql.errors.ConfigError` (SQLSTATE F0000) naming the file, the section and
the key; the readers keep only the checks that relate several keys.

Why not pydantic or msgspec: the file is a few dozen keys read once at startup; what we
need beyond a type (the closest-key hint, errors naming the file and the TOML path, unions
such as ``policy = "refuse"`` or a ``[policy]`` table, per-kind source keys) would be
written around either library anyway, and the schema here is plain data that the docs test
can walk.  It imports nothing but :mod:`dpsql.domain`'s key check and the errors, so every
layer that reads configuration can use it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dpsql.domain import check_keys
from dpsql.errors import ConfigError
from dpsql.triangulation import AIM_MODEL_CELLS, MAX_MODEL_CELLS

__all__ = ["Key", "Section", "SCHEMA", "check", "default", "source_keys",
           "ERROR_COLUMNS", "ESTIMATORS", "POLICIES", "NOISES", "PLANNER_MODES", "OBJECTIVES",
           "BINNING_MODES", "SOURCE_KINDS"]

ERROR_COLUMNS = ("off", "stderr", "ci95", "bounds")
ESTIMATORS = ("pgm", "least_squares")
POLICIES = ("informed", "infer", "measure", "refuse")
NOISES = ("gaussian", "laplace")
PLANNER_MODES = ("hdmm", "aim")
OBJECTIVES = ("relative", "absolute")
BINNING_MODES = ("offsets", "bound")
SOURCE_KINDS = ("csv", "parquet", "duckdb", "postgres", "spark")

#: How each type reads in an error message.
_TYPE_NAMES = {"str": "a string", "int": "an integer", "number": "a number", "bool": "true or false",
               "strings": "a list of strings", "list": "a list", "table": "a table"}


@dataclass(frozen=True)
class Key:
    """One key: the types its value may have (``str``, ``int``, ``number``, ``bool``,
    ``strings``, ``list``, ``table``), its default (None: absent means unset), the values a
    string may take, the smallest number, the section a table value (or a list's tables)
    follows, and, for a source key, the source kinds that read it (empty: every kind)."""

    types: tuple[str, ...]
    doc: str
    default: Any = None
    choices: tuple = ()
    minimum: float | None = None
    section: str | None = None
    items: str | None = None
    kinds: tuple[str, ...] = ()


@dataclass(frozen=True)
class Section:
    """A TOML table: its keys, or (``each``) named entries that each follow one section
    (``[tables.NAME]``, ``[budget.users.NAME]``), or free-form (``open``: Spark's ``conf``,
    a table's ``keys``, read and checked by their reader)."""

    doc: str
    keys: Mapping[str, Key] = field(default_factory=dict)
    each: str | None = None
    open: bool = False


def _k(types: str, doc: str, **kw: Any) -> Key:
    return Key(tuple(types.split("|")), doc, **kw)


_BUDGET_KEYS = {
    "epsilon": _k("number", "ε of an (ε, δ) budget, converted to the largest ρ within it", minimum=0),
    "delta": _k("number", "δ of an (ε, δ) budget", default=1e-6),
    "rho": _k("number", "a zCDP budget ρ (read as at most the decimal written)"),
}

# the [dpsql] keys, also accepted at the top level of the file
_DPSQL_KEYS = {
    "ledger": _k("str", "durable record of charges and releases (default: the config file's name .ledger)"),
    "noise": _k("str", "discrete Gaussian (zCDP) or discrete Laplace (pure DP)", default="gaussian",
                choices=NOISES),
    "policy": _k("str", "values the measurements do not support", default="informed", choices=POLICIES),
    "cache_dir": _k("str", "planned strategies, keyed by a fingerprint", default=".dpsql-cache"),
    "fit_iters": _k("int", "limit on fit iterations (fits end at convergence)", default=20000, minimum=1),
    "default_user": _k("str", "budget principal when a connection names no user", default="analyst"),
    "error_columns": _k("str", "in-process default of SET dpsql.error_columns", default="off",
                        choices=ERROR_COLUMNS),
}

_SOURCE_KEYS = {
    **{kind: _k("str", f"the {kind} source: a path, or the engine's URL", kinds=(kind,))
       for kind in ("csv", "duckdb", "postgres")},
    "parquet": _k("str", "a Parquet file, glob or directory (spark: a path, glob or URI)",
                  kinds=("parquet", "spark")),
    "spark": _k("str", "the Spark master URL", kinds=("spark",)),
    "table": _k("str", "the table inside a duckdb database, PostgreSQL or the Spark catalog",
                kinds=("duckdb", "postgres", "spark")),
    "data_version": _k("str|int", "names the content instead of its SHA-256"),
    "delimiter": _k("str", "one ASCII character", default=",", kinds=("csv",)),
    "quote": _k("str", 'one ASCII character, or "" for no quoting', default='"', kinds=("csv",)),
    "escape": _k("str", "inside quoted fields (default: the quote)", default='"', kinds=("csv",)),
    "header": _k("bool", "the first record names the fields", default=True, kinds=("csv",)),
    "encoding": _k("str", "utf-8, latin-1 or cp1252", default="utf-8", kinds=("csv",)),
    "null": _k("str|strings", "unquoted field texts that mean NULL", default=("",), kinds=("csv",)),
    "columns": _k("strings", "the field names in file order (header = false)", kinds=("csv",)),
    "max_record_bytes": _k("int", "longer records are read as malformed", default=4 << 20, kinds=("csv",)),
    "max_record_lines": _k("int", "the most physical lines one person's record spans", default=1,
                           kinds=("csv",)),
    "hive_partitioning": _k("bool", "key=value directories are text columns", default=False,
                            kinds=("parquet", "spark")),
    "statement_timeout": _k("number", "seconds before PostgreSQL cancels a count", default=600.0,
                            kinds=("postgres",)),
    "passfile": _k("str", "a libpq password file", kinds=("postgres",)),
    "version_query": _k("str", "a SELECT whose result names the table's content", kinds=("postgres",)),
    "conf": _k("table", "Spark session settings", section="spark_conf", kinds=("spark",)),
}

_SERVER_USER_KEYS = {
    "error_columns": _k("str", "this user's sessions' dpsql.error_columns", choices=ERROR_COLUMNS),
    "estimator": _k("str", "this user's sessions' dpsql.estimator", choices=ESTIMATORS),
    "connection_limit": _k("int", "this user's own connection limit", minimum=1),
}

SCHEMA: dict[str, Section] = {
    "": Section("the file", {
        **_DPSQL_KEYS,      # the [dpsql] keys may be written at the top level (policy: also a table)
        "dpsql": _k("table", "engine options", section="dpsql"),
        "budget": _k("table|number", "the total budget over all users", section="budget"),
        "tables": _k("table", "the private and public tables", section="tables"),
        "workload": _k("table|list|str", "what dashboards will ask", section="workload", items="query"),
        "policy": _k("str|table", "values the measurements do not support", choices=POLICIES, section="policy"),
        "planner": _k("table", "planner options", section="planner"),
        "model": _k("table", "model options", section="model"),
        "server": _k("table", "the wire server (dpsql serve)", section="server"),
        "people": _k("table", "one person across several tables", section="people"),
    }),
    "dpsql": Section("engine options", _DPSQL_KEYS),
    "budget": Section("the total budget", {
        **_BUDGET_KEYS,
        "per_user": _k("table|number", "the default cap of each user", section="user_budget"),
        "users": _k("table", "explicit caps of named users", section="users"),
    }),
    "user_budget": Section("a user's cap", _BUDGET_KEYS),
    "users": Section("users' caps", each="user_budget"),
    "tables": Section("tables", each="table"),
    "table": Section("a table", {
        "domain": _k("str", "the public domain declaration (docs/domains.md)"),
        "domain_table": _k("str", "the table's name in the domain file (default: this name)"),
        "source": _k("table", "where the rows live", section="source"),
        "privacy_unit": _k("str|table", '"row", or { id, max_rows, hash_key_file }', choices=("row",),
                           section="privacy_unit"),
        "rows": _k("int", "the table's publicly known size", minimum=1),
        "public": _k("bool", "a public table: content published, read whole, never charged", default=False),
        "keys": _k("table", "columns joinable with public tables", section="keys"),
    }),
    "keys": Section("join keys: column = \"table.column\" or a list of them", open=True),
    "privacy_unit": Section("the privacy unit", {
        "id": _k("str", "the column naming the person"),
        "max_rows": _k("int", "the most rows one person keeps", minimum=1),
        "hash_key_file": _k("str", "a secret key choosing the rows kept (optional)"),
    }),
    "source": Section("a source", _SOURCE_KEYS),
    "spark_conf": Section("Spark session settings", open=True),
    "workload": Section("the workload", {
        "files": _k("strings", "SQL files, one query per statement"),
        "queries": _k("list", "inline statements, or { sql, weight } tables", items="query"),
        **_BUDGET_KEYS,
    }),
    "query": Section("a workload query", {
        "sql": _k("str", "the statement(s)"),
        "weight": _k("number", "the planner weight", default=1.0),
    }),
    "policy": Section("the unsupported-value policy", {
        "unsupported": _k("str", "values the measurements do not support", default="informed",
                          choices=POLICIES),
        "allow_spend": _k("bool", "non-interactive callers may spend without asking", default=False),
        **_BUDGET_KEYS,
    }),
    "planner": Section("planner options", {
        "restarts": _k("int", "HDMM random restarts per operator", default=3, minimum=1),
        "seed": _k("int", "planning is deterministic for a seed", default=0),
        "max_clique_cells": _k("int", "largest marginal a strategy may count", default=2_000_000, minimum=1),
        "max_model_cells": _k("int", "largest junction tree the exact model may build", default=MAX_MODEL_CELLS,
                              minimum=1),
        "objective": _k("str", "what the planner minimises", default="relative", choices=OBJECTIVES),
        "mode": _k("str", "hdmm, or aim (adaptive rounds)", default="hdmm", choices=PLANNER_MODES),
        "binning": _k("str", "SUM/AVG over wide bins: measured offsets or the bound", default="offsets",
                      choices=BINNING_MODES),
        "aim_max_model_cells": _k("int", "AIM's JT-SIZE cap (thesis default 80 MB of float64)",
                                  default=AIM_MODEL_CELLS, minimum=1),
    }),
    "model": Section("model options", {
        "iters": _k("int", "the same as fit_iters", minimum=1),
    }),
    "people": Section("one person across several tables", {
        "person": _k("str", "the person table: one row per person"),
        "key": _k("str", "its primary key"),
        "hash_key_file": _k("str", "a secret key choosing the rows kept (optional)"),
        "tables": _k("table", "the other private tables", section="people_tables"),
        "truncation_share": _k("number", "the share of each view's budget that releases the rows its bound "
                                         "drops, in [0, 1) (0: not released)", default=0),
        "max_ad_hoc_flags": _k("int", "on-demand flag tables that nothing has measured yet, kept at once "
                                      "(53000 beyond)", default=64, minimum=1),
    }),
    "people_tables": Section("the other private tables", each="people_table"),
    "people_table": Section("a table's link towards the person", {
        "parent": _k("str", "the table this one references"),
        "foreign_key": _k("str", "this table's column equal to the parent's primary key"),
        "primary_key": _k("str", "needed when another table references this one"),
        "max_rows": _k("int", "the most rows of this table one person contributes", minimum=1),
        "group_by": _k("strings", "view columns whose values are a person's groups (with max_groups)"),
        "max_groups": _k("int", "the most groups of group_by one person's rows fall in", minimum=1),
        "max_rows_per_group": _k("int", "the most rows one person keeps in each group", minimum=1),
    }),
    "server": Section("the wire server", {
        "max_statement_bytes": _k("int", "larger frontend messages are refused (54000)", default=256 * 1024,
                                  minimum=1),
        "max_user_statements": _k("int", "statements one user may run at once", default=2, minimum=1),
        "max_connections": _k("int", "authenticated connections (53300 beyond)", default=100, minimum=1),
        "max_user_connections": _k("int", "one user's share (default: half of max_connections)", minimum=1),
        "max_session_memory": _k("int", "bytes one connection holds (53200)", default=64 * 1024 * 1024,
                                 minimum=1),
        "max_unauthenticated": _k("int", "connections still authenticating", default=256, minimum=1),
        "auth_timeout": _k("number", "seconds to finish authenticating", default=5.0, minimum=0),
        "catalog_timeout": _k("number", "statement timeout of catalog queries", default=10.0, minimum=0),
        "query_log": _k("str", 'JSON lines, one per statement; "-" for stderr'),
        "query_log_max_bytes": _k("int", "the query log is rotated beyond this size", default=64 * 1024 * 1024,
                                  minimum=1),
        "query_log_files": _k("int", "rotated query log files kept", default=4, minimum=1),
        "error_columns": _k("str", "every analyst's default of dpsql.error_columns", default="ci95",
                            choices=ERROR_COLUMNS),
        "estimator": _k("str", "every analyst's default of dpsql.estimator", choices=ESTIMATORS),
        "users": _k("table", "one user's session defaults", section="server_users"),
    }),
    "server_users": Section("users' session defaults", each="server_user"),
    "server_user": Section("one user's session defaults", _SERVER_USER_KEYS),
}


def default(section: str, key: str) -> Any:
    """The declared default of ``key`` in ``section`` (the one place it is written)."""
    return SCHEMA[section].keys[key].default


def source_keys(kind: str) -> tuple[str, ...]:
    """The keys a source of ``kind`` may hold."""
    return tuple(k for k, spec in _SOURCE_KEYS.items() if not spec.kinds or kind in spec.kinds)


def _has_type(value: Any, kind: str) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False
    if kind == "str":
        return isinstance(value, str)
    if kind == "int":
        return isinstance(value, int)
    if kind == "number":
        return isinstance(value, (int, float))
    if kind == "strings":
        return isinstance(value, list) and all(isinstance(v, str) for v in value)
    if kind == "list":
        return isinstance(value, list)
    return isinstance(value, Mapping)   # "table"


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def check(raw: Any, section: str, where: str, path: str = "", kind: str | None = None,
          label: str | None = None) -> None:
    """Check ``raw`` (a parsed TOML table) against ``SCHEMA[section]``, recursively.

    ``where`` names the file, ``path`` the TOML path of ``raw`` (``tables.adult``).  A
    ``source`` is checked with its ``kind``'s keys (``Source.from_config`` knows the kind;
    without it the source's keys wait for it).  ``label`` replaces ``[path]`` in messages."""
    spec = SCHEMA[section]
    here = label or (f"{where}: [{path}]" if path else where)
    if not isinstance(raw, Mapping):
        raise ConfigError(f"{here} must be a table", hint=f"{section or 'the file'}: {spec.doc}")
    if spec.open:
        return
    if spec.each is not None:
        for name, value in raw.items():
            sub = f"{path}.{name}" if path else str(name)
            check(value, spec.each, where, sub)
        return
    if section == "source":
        if kind is None:
            return
        allowed: Any = source_keys(kind)
    else:
        allowed = spec.keys
    check_keys(raw, allowed, here)
    for key, value in raw.items():
        _check_value(spec.keys[key], key, value, where, f"{path}.{key}" if path else key, here)


def _check_value(key: Key, name: str, value: Any, where: str, path: str, here: str) -> None:
    if not any(_has_type(value, t) for t in key.types):
        want = " or ".join(_TYPE_NAMES[t] for t in key.types)
        raise ConfigError(f"{here}: {name} must be {want}, got {_shown(value)}", hint=f"{name}: {key.doc}")
    if key.choices and isinstance(value, str) and value not in key.choices:
        raise ConfigError(f"{here}: {name} must be one of {', '.join(key.choices)}, got {_shown(value)}",
                          hint=f"{name}: {key.doc}")
    if key.minimum is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        if not (value > key.minimum if key.minimum == 0 else value >= key.minimum):
            bound = "positive" if key.minimum in (0, 1) else f"at least {key.minimum}"
            raise ConfigError(f"{here}: {name} must be {bound}, got {_shown(value)}", hint=f"{name}: {key.doc}")
    if isinstance(value, Mapping) and key.section is not None:
        check(value, key.section, where, path)
    elif isinstance(value, list) and key.items is not None:
        for i, item in enumerate(value):
            if isinstance(item, Mapping):
                check(item, key.items, where, f"{path}[{i}]")
            elif not isinstance(item, str):
                raise ConfigError(f"{here}: {name}[{i}] must be a string or a table, got {_shown(item)}",
                                  hint=f"{name}: {key.doc}")
