"""The ``[server]`` section of ``dpsql.toml``: wire-server limits, the query log, per-user defaults.

    [server]
    max_statement_bytes = 262144     # larger frontend messages are answered 54000 and discarded
    max_user_statements = 2          # statements one user may run at once (more wait their turn)
    max_connections = 100            # authenticated connections (53300 beyond)
    max_user_connections = 50        # of them one user's (default: half of max_connections; 53300 beyond)
    max_session_memory = 67108864    # bytes one connection holds: statements, portals, a reply (53200)
    max_unauthenticated = 256        # connections still authenticating; the most stalled gives way beyond
    auth_timeout = 5.0               # seconds to finish authenticating
    catalog_timeout = 10.0           # statement timeout of catalog queries, enforced per role
    query_log = "queries.jsonl"      # JSON lines, one per statement; "-" for stderr
    query_log_max_bytes = 67108864   # rotated beyond this size (queries.jsonl.1, .2, …)
    query_log_files = 4              # rotated files kept
    error_columns = "ci95"           # every analyst's default of dpsql.error_columns (default: ci95)
    estimator = "pgm"                # every analyst's default of dpsql.estimator
    [server.users.alice]             # defaults of one user's sessions (startup options override)
    error_columns = "ci95"           # dpsql.error_columns: off | stderr | ci95
    estimator = "pgm"                # dpsql.estimator: pgm | least_squares
    connection_limit = 80            # this user's own connection limit (PostgreSQL's CONNECTION LIMIT)

Keys, types, defaults and allowed values are declared once, in ``dpsql.config_schema`` (the engine
checks the same section when it loads the file); unknown keys and bad values are refused, naming
the file and the key.  Command-line options of
``dpsql serve`` override the file.

An analyst's session starts from the server's defaults (``error_columns`` is ``ci95`` unless the
operator says otherwise: the README promises every number its error, and a BI tool cannot be
expected to send a SET first; issue 33), then their own ``[server.users.NAME]`` defaults, then the
connection's startup options.  ``[dpsql] error_columns`` is the in-process sessions' default only.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from dpsql import config_schema
from dpsql.config_schema import ERROR_COLUMNS, ESTIMATORS
from dpsql.errors import ConfigError

# Keys, types, defaults and allowed values: config_schema.SCHEMA["server"] and ["server_user"]
# (the engine checks the same section when it loads the file).
_DEFAULTS = config_schema.SCHEMA["server"].keys
DEFAULT_MAX_STATEMENT: int = _DEFAULTS["max_statement_bytes"].default
USER_SETTINGS = {"error_columns": ("dpsql.error_columns", ERROR_COLUMNS),
                 "estimator": ("dpsql.estimator", ESTIMATORS)}
# every analyst's session, unless [server] says otherwise
SERVER_DEFAULTS = {"dpsql.error_columns": _DEFAULTS["error_columns"].default}
USER_LIMITS = ("connection_limit",)     # per-user keys that are server limits, not session settings


def _default(key: str):
    return _DEFAULTS[key].default


@dataclass
class ServerConfig:
    max_statement_bytes: int = DEFAULT_MAX_STATEMENT
    max_user_statements: int = _default("max_user_statements")
    max_connections: int = _default("max_connections")
    max_user_connections: int | None = None   # None: half of max_connections
    max_unauthenticated: int = _default("max_unauthenticated")
    auth_timeout: float = _default("auth_timeout")
    catalog_timeout: float = _default("catalog_timeout")
    query_log: str | None = None          # a path, or "-" for stderr
    query_log_max_bytes: int = _default("query_log_max_bytes")
    max_session_memory: int = _default("max_session_memory")
    query_log_files: int = _default("query_log_files")
    settings: dict[str, str] = field(default_factory=lambda: dict(SERVER_DEFAULTS))  # {dpsql.x: value}
    user_settings: dict[str, dict[str, str]] = field(default_factory=dict)   # user -> {dpsql.x: value}
    user_connection_limits: dict[str, int] = field(default_factory=dict)     # user -> connection_limit


_NUMBERS = tuple(k for k, spec in _DEFAULTS.items() if set(spec.types) <= {"int", "number"})


def parse_server_section(section, where: str = "<config>", base: Path | None = None) -> ServerConfig:
    """The server's settings from a ``[server]`` table, checked against the schema first."""
    config_schema.check(section, "server", where, "server")
    cfg = ServerConfig()
    for key in _NUMBERS:
        if key in section:
            setattr(cfg, key, float(section[key]) if "number" in _DEFAULTS[key].types else section[key])
    if "query_log" in section:
        log = section["query_log"]
        if not log:
            raise ConfigError(f"{where}: [server] query_log must be a path or \"-\" (stderr)")
        cfg.query_log = log if log == "-" or os.path.isabs(log) or base is None else str(base / log)
    for key, (name, _values) in USER_SETTINGS.items():
        if key in section:
            cfg.settings[name] = section[key]
    for user, settings in section.get("users", {}).items():
        out = {}
        for key, value in settings.items():
            if key == "connection_limit":
                cfg.user_connection_limits[user] = value
            else:
                out[USER_SETTINGS[key][0]] = value
        if out:
            cfg.user_settings[user] = out
    return cfg


def load_server_config(config) -> ServerConfig:
    """The ``[server]`` section of a config file (a path) or dict; defaults when absent."""
    if isinstance(config, dict):
        return parse_server_section(config.get("server", {}))
    path = Path(config)
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"configuration file not found: {path}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from None
    return parse_server_section(raw.get("server", {}), str(path), path.resolve().parent)
