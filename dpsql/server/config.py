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

Unknown keys and bad values are refused, naming the key.  Command-line options of
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

from dpsql.errors import ConfigError

DEFAULT_MAX_STATEMENT = 256 * 1024
USER_SETTINGS = {"error_columns": ("dpsql.error_columns", ("off", "stderr", "ci95", "bounds")),
                 "estimator": ("dpsql.estimator", ("pgm", "least_squares"))}
SERVER_DEFAULTS = {"dpsql.error_columns": "ci95"}   # every analyst's session, unless [server] says otherwise
USER_LIMITS = ("connection_limit",)     # per-user keys that are server limits, not session settings
_NUMBERS = {"max_statement_bytes": int, "max_user_statements": int, "max_connections": int,
            "max_user_connections": int, "query_log_max_bytes": int, "query_log_files": int,
            "max_session_memory": int,
            "max_unauthenticated": int, "auth_timeout": float, "catalog_timeout": float}


@dataclass
class ServerConfig:
    max_statement_bytes: int = DEFAULT_MAX_STATEMENT
    max_user_statements: int = 2
    max_connections: int = 100
    max_user_connections: int | None = None   # None: half of max_connections
    max_unauthenticated: int = 256
    auth_timeout: float = 5.0
    catalog_timeout: float = 10.0
    query_log: str | None = None          # a path, or "-" for stderr
    query_log_max_bytes: int = 64 * 1024 * 1024
    max_session_memory: int = 64 * 1024 * 1024
    query_log_files: int = 4
    settings: dict[str, str] = field(default_factory=lambda: dict(SERVER_DEFAULTS))  # {dpsql.x: value}
    user_settings: dict[str, dict[str, str]] = field(default_factory=dict)   # user -> {dpsql.x: value}
    user_connection_limits: dict[str, int] = field(default_factory=dict)     # user -> connection_limit


def parse_server_section(section, where: str = "[server]", base: Path | None = None) -> ServerConfig:
    if not isinstance(section, dict):
        raise ConfigError(f"{where} must be a table")
    cfg = ServerConfig()
    allowed = set(_NUMBERS) | set(USER_SETTINGS) | {"query_log", "users"}
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {unknown}", hint=f"allowed keys: {', '.join(sorted(allowed))}")
    for key, kind in _NUMBERS.items():
        if key in section:
            value = section[key]
            if (isinstance(value, bool) or not isinstance(value, (int, float))
                    or (kind is int and not isinstance(value, int))):
                raise ConfigError(f"{where}: {key} must be a{'n integer' if kind is int else ' number'}")
            if value <= 0:
                raise ConfigError(f"{where}: {key} must be positive")
            setattr(cfg, key, kind(value))
    if "query_log" in section:
        log = section["query_log"]
        if not isinstance(log, str) or not log:
            raise ConfigError(f"{where}: query_log must be a path or \"-\" (stderr)")
        cfg.query_log = log if log == "-" or os.path.isabs(log) or base is None else str(base / log)
    for key, (name, values) in USER_SETTINGS.items():
        if key in section:
            if section[key] not in values:
                raise ConfigError(f"{where}: {key} must be one of {', '.join(values)}")
            cfg.settings[name] = section[key]
    users = section.get("users", {})
    if not isinstance(users, dict):
        raise ConfigError(f"{where}.users must be a table of tables")
    for user, settings in users.items():
        here = f"{where}.users.{user}"
        if not isinstance(settings, dict):
            raise ConfigError(f"{here} must be a table")
        bad = sorted(set(settings) - set(USER_SETTINGS) - set(USER_LIMITS))
        if bad:
            raise ConfigError(f"{here}: unknown key(s) {bad}",
                              hint=f"allowed keys: {', '.join([*USER_SETTINGS, *USER_LIMITS])}")
        out = {}
        for key, value in settings.items():
            if key == "connection_limit":
                if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                    raise ConfigError(f"{here}: connection_limit must be a positive integer")
                cfg.user_connection_limits[user] = value
                continue
            name, values = USER_SETTINGS[key]
            if value not in values:
                raise ConfigError(f"{here}: {key} must be one of {', '.join(values)}")
            out[name] = value
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
    return parse_server_section(raw.get("server", {}), f"{path}: [server]", path.resolve().parent)
