"""Connection settings (GUCs), session-control statements and session functions.

Drivers set and read a handful of PostgreSQL settings on connect (pgjdbc: ``DateStyle``,
``extra_float_digits``; SQLAlchemy: ``show standard_conforming_strings``, ``show
transaction isolation level``; Metabase: ``SET SESSION CHARACTERISTICS …``).  They are
answered here, per connection, with no data involved.  Settings in the ``dpsql.``
namespace belong to the engine session and are forwarded to it by the dispatcher.

Settings PostgreSQL marks GUC_REPORT are announced with ParameterStatus at startup and
again whenever SET changes them, as a real server does.

Startup parameters and the ``options`` startup parameter (``PGOPTIONS='-c name=value'``,
parsed as PostgreSQL does: ``-c name=value``, ``-cname=value`` or ``--name=value``,
whitespace-separated, backslash escapes) set a connection's initial values; ``dpsql.*``
names among them are collected in ``engine_settings`` for the engine session.
"""

from __future__ import annotations

from collections.abc import Callable

from dpsql import errors
from dpsql.server import codec, pgtypes
from dpsql.server.results import Outcome, QueryError
from dpsql.server.startup import Fatal
from dpsql.sql.session_commands import SessionCommand, parse_tokens

REPORTED = {"application_name": "application_name", "client_encoding": "client_encoding",
            "datestyle": "DateStyle", "timezone": "TimeZone", "integer_datetimes": "integer_datetimes",
            "standard_conforming_strings": "standard_conforming_strings", "server_version": "server_version",
            "server_encoding": "server_encoding", "intervalstyle": "IntervalStyle",
            "is_superuser": "is_superuser", "session_authorization": "session_authorization",
            "default_transaction_read_only": "default_transaction_read_only",
            "in_hot_standby": "in_hot_standby"}


def defaults(server_version: str, user: str) -> dict[str, str]:
    return {
        "server_version": server_version, "server_version_num": _version_num(server_version),
        "server_encoding": "UTF8", "client_encoding": "UTF8", "datestyle": "ISO, MDY",
        "intervalstyle": "postgres", "timezone": "UTC", "integer_datetimes": "on",
        "standard_conforming_strings": "on", "is_superuser": "off", "session_authorization": user,
        "application_name": "", "default_transaction_read_only": "on", "transaction_read_only": "on",
        "in_hot_standby": "off", "transaction_isolation": "read committed",
        "default_transaction_isolation": "read committed", "extra_float_digits": "1",
        "search_path": '"$user", public', "statement_timeout": "0", "lc_messages": "C",
        "max_identifier_length": "63", "max_index_keys": "32", "bytea_output": "hex",
    }


def _version_num(version: str) -> str:
    parts = (version.split() or ["15.0"])[0].split(".")
    try:
        major = int(parts[0])
        minor = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0
    except ValueError:
        return "150000"
    return str(major * 10000 + minor)


# The one parser of SET/SHOW/RESET and transaction statements (dpsql.sql.session_commands);
# dpsql.* settings are forwarded to the engine session, which reads the statement with it too.
Command = SessionCommand


def parse_command(route) -> Command:
    """A session-control statement's meaning, from the router's tokens."""
    try:
        return parse_tokens(route.tokens)
    except errors.Error as exc:
        raise QueryError(exc.sqlstate, exc.message, hint=exc.hint) from None


def _split_options(text: str) -> list[str]:
    """Whitespace-separated words; a backslash makes the next character literal (libpq)."""
    words, word, escaped, started = [], [], False, False
    for ch in text:
        if escaped:
            word.append(ch)
            escaped = False
        elif ch == "\\":
            escaped = started = True
        elif ch.isspace():
            if started:
                words.append("".join(word))
                word, started = [], False
        else:
            word.append(ch)
            started = True
    if escaped:
        raise QueryError("22023", "invalid command-line argument: trailing backslash in options")
    if started:
        words.append("".join(word))
    return words


def parse_options(text: str) -> dict[str, str]:
    """The settings in a startup ``options`` string (``-c a=b -c c=d`` or ``--a=b``)."""
    out: dict[str, str] = {}
    words = _split_options(text)
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-c" and i + 1 < len(words):
            item, i = words[i + 1], i + 2
        elif word.startswith("-c") and len(word) > 2:
            item, i = word[2:], i + 1
        elif word.startswith("--") and len(word) > 2:
            item, i = word[2:].replace("-", "_"), i + 1
        else:
            raise QueryError("22023", f"invalid command-line argument for server process: {word}",
                             hint="options accepts -c name=value")
        name, sep, value = item.partition("=")
        if not sep or not name:
            raise QueryError("22023", f"invalid command-line argument for server process: {item}",
                             hint="options accepts -c name=value")
        out[name.strip().lower()] = value
    return out


class Settings:
    """One connection's settings."""

    def __init__(self, server_version: str, user: str, startup: dict[str, str] | None = None) -> None:
        self.user = user
        self._defaults = defaults(server_version, user)
        self.values = dict(self._defaults)
        self.engine_settings: dict[str, str] = {}     # dpsql.* from the startup packet, for the engine
        startup = dict(startup or {})
        given = {k.lower(): v for k, v in startup.items() if k.lower() != "options"}
        if startup.get("options"):
            try:
                given.update(parse_options(startup["options"]))
            except QueryError as exc:
                raise Fatal(exc.sqlstate, exc.fields["M"], hint=exc.fields.get("H")) from None
        for low, value in given.items():
            if low in ("user", "database", "replication") or low.startswith("_pq_."):
                continue
            if low.startswith("dpsql."):
                self.engine_settings[low] = value
                continue
            if low in ("session_authorization", "role"):
                raise Fatal("0A000", f"{low} cannot be set by dpsql clients",
                            hint="connect as the user whose budget the queries should use")
            self.values[low] = value

    def initial_status(self) -> list[bytes]:
        return [codec.encode_parameter_status(display, self.values.get(key, ""))
                for key, display in REPORTED.items()]

    def _report(self, name: str) -> list[bytes]:
        if name in REPORTED:
            return [codec.encode_parameter_status(REPORTED[name], self.values.get(name, ""))]
        return []

    def apply(self, cmd: Command, status: str) -> Outcome:
        """Run a session command locally (``dpsql.*`` settings never get here)."""
        if cmd.kind == "set":
            assert cmd.value is not None    # parse_command gives every "set" its value
            if cmd.name == "client_encoding" and cmd.value.replace("-", "").upper() not in ("UTF8", "UNICODE"):
                raise QueryError("22023", f"invalid value for parameter \"client_encoding\": \"{cmd.value}\"",
                                 hint="dpsql speaks UTF8 only")
            if cmd.name in ("server_version", "server_encoding", "integer_datetimes", "is_superuser"):
                raise QueryError("55P02", f'parameter "{cmd.name}" cannot be changed')
            value = "UTC" if cmd.name == "timezone" and cmd.value.upper() in ("UTC", "GMT", "Z") else cmd.value
            self.values[cmd.name] = value
            return Outcome(tag="SET", before=self._report(cmd.name))
        if cmd.kind == "reset":
            names = list(self.values) if cmd.name == "all" else [cmd.name]
            before = []
            for name in names:
                if name in self._defaults:
                    changed = self.values.get(name) != self._defaults[name]
                    self.values[name] = self._defaults[name]
                    if changed:
                        before += self._report(name)
                else:
                    self.values.pop(name, None)
            return Outcome(tag="RESET", before=before)
        if cmd.kind == "show":
            if cmd.name == "all":
                rows = [codec.encode_data_row([k.encode(), v.encode(), b""]) for k, v in sorted(self.values.items())]
                return Outcome(description=text_description(["name", "setting", "description"]), rows=rows, tag="SHOW")
            if cmd.name not in self.values:
                raise QueryError("42704", f'unrecognized configuration parameter "{cmd.name}"')
            return Outcome(description=text_description([cmd.name]),
                           rows=[codec.encode_data_row([self.values[cmd.name].encode("utf-8")])], tag="SHOW")
        if cmd.kind == "begin":
            return Outcome(tag="BEGIN", status="T" if status == "I" else status)
        if cmd.kind == "commit":
            return Outcome(tag="ROLLBACK" if status == "E" else "COMMIT", status="I")
        if cmd.kind == "rollback":
            return Outcome(tag="ROLLBACK", status="I")
        if cmd.kind == "rollback_to":
            return Outcome(tag="ROLLBACK", status="T" if status == "E" else status)
        return Outcome(tag=cmd.tag)


def text_description(names, formats=()) -> bytes:
    fields = [codec.Field(n, pgtypes.TEXT, -1, -1,
                          formats[i] if i < len(formats) else (formats[0] if len(formats) == 1 else 0))
              for i, n in enumerate(names)]
    return codec.encode_row_description(fields)


def local_values(items, *, pid: int, user: str, database: str, server_version: str, dpsql_version: str,
                 signal: Callable[[int], bool] | None = None) -> list[tuple[str, int, bool | int | str]]:
    """Values and OIDs of FROM-less session-function SELECTs answered by the connection.

    ``signal(pid)`` cancels one of this user's sessions and says whether it existed."""
    out: list[tuple[str, int, bool | int | str]] = []
    for name, func in items:
        if func.startswith(("pg_cancel_backend:", "pg_terminate_backend:")):
            out.append((name, pgtypes.BOOL, bool(signal and signal(int(func.split(":", 1)[1])))))
        elif func == "pg_backend_pid":
            out.append((name, pgtypes.INT4, pid))
        elif func == "version":
            out.append((name, pgtypes.TEXT, f"PostgreSQL {server_version} (dpsql {dpsql_version}, "
                        "differentially private answers) on x86_64-pc-linux-gnu, 64-bit"))
        elif func in ("current_database", "current_catalog"):
            out.append((name, pgtypes.NAME, database))
        elif func == "current_schema":
            out.append((name, pgtypes.NAME, "public"))
        else:  # current_user, session_user, user
            out.append((name, pgtypes.NAME, user))
    return out
