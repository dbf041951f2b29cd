"""``dpsql shell``: the interactive SQL shell and its script mode.

    dpsql shell [--config dpsql.toml] [--user NAME]       interactive
    dpsql shell -c "SELECT sex, COUNT(*) FROM adult GROUP BY sex"
    dpsql shell -f report.sql                              scripts stop at the first error
    dpsql shell --connect postgresql://alice@host:5432/dpsql   the analyst's shell, over dpsql serve

Without ``--connect`` the shell runs the engine in this process: it is the *operator's* tool
(it can measure and read the ledger).  With ``--connect`` (or ``--host``/``--port``) it is a
client of ``dpsql serve`` with an analyst's powers only (``repl.remote``); the password comes
from libpq (``PGPASSWORD``, ``~/.pgpass``) or is asked for (``-W``).

Registered into ``dpsql.cli`` through ``register(subparsers, common)`` so the shell's
options live with the shell.  Without ``-c``/``-f`` and with stdin not a terminal, the
statements are read from stdin, so ``dpsql shell < report.sql`` works as in psql.
"""

from __future__ import annotations

import os
import sys

from dpsql import errors


def register(subparsers, common) -> None:
    p = common(subparsers.add_parser(
        "shell", help="interactive SQL shell (or run -c SQL / -f FILE)",
        description="Interactive SQL shell over the private tables; \\help inside lists the commands."))
    p.add_argument("-c", "--command", action="append", metavar="SQL",
                   help="run SQL or a meta-command and exit (repeatable)")
    p.add_argument("-f", "--file", action="append", metavar="FILE",
                   help="run the statements in FILE and exit (repeatable; - is stdin)")
    p.add_argument("--ledger", metavar="PATH", default=os.environ.get("DPSQL_LEDGER"),
                   help="use this privacy ledger instead of the config's (default: $DPSQL_LEDGER)")
    p.add_argument("--vi", action="store_true", help="vi key bindings (default: emacs; \\set vi on)")
    p.add_argument("--errors", choices=["ci95", "stderr", "off"], default="ci95",
                   help="how to show each value's error (default: ci95, the 95%% interval)")
    p.add_argument("--no-pager", action="store_true", help="never page long results")
    p.add_argument("--connect", metavar="URL",
                   help="be a client of dpsql serve (postgresql://USER@HOST:PORT/dpsql): the analyst's shell, "
                        "no operator powers")
    p.add_argument("--host", help="dpsql serve's host (implies --connect; default: libpq's, $PGHOST)")
    p.add_argument("--port", "-p", help="dpsql serve's port (implies --connect; default: libpq's, $PGPORT)")
    p.add_argument("--dbname", "-d", help="database (implies --connect; default: libpq's)")
    p.add_argument("-W", "--password", action="store_true", help="ask for the password (with --connect)")
    p.set_defaults(func=run)


def _remote(args):
    from repl.remote import connect

    options = {k: v for k, v in (("host", args.host), ("port", args.port), ("dbname", args.dbname),
                                 ("user", args.user)) if v}
    if args.password:
        import getpass
        options["password"] = getpass.getpass("Password: ")
    try:
        return connect(args.connect or "", **options)
    except errors.OperationalError as exc:
        # libpq found no password (none given, no PGPASSWORD or ~/.pgpass): ask, as psql does
        if args.password or "password" not in exc.message or not sys.stdin.isatty():
            raise
        import getpass
        options["password"] = getpass.getpass("Password: ")
        return connect(args.connect or "", **options)


def _connect(args):
    import dpsql
    from dpsql.cli import DEFAULT_CONFIG

    if args.connect or args.host or args.port or args.dbname:
        # $DPSQL_LEDGER (the option's default) is the operator's environment: not a conflict
        if args.config or (args.ledger and args.ledger != os.environ.get("DPSQL_LEDGER")):
            raise errors.InterfaceError("--connect talks to dpsql serve, which has its own configuration",
                                        hint="drop --config/--ledger, or drop --connect for the operator's shell")
        return _remote(args)

    config = args.config or os.environ.get("DPSQL_CONFIG") or DEFAULT_CONFIG
    overrides = {"ledger": args.ledger} if args.ledger else {}
    return dpsql.connect(config, user=args.user, **overrides)


def run(args) -> int:
    from repl.app import Shell

    scripted = bool(args.command or args.file) or not sys.stdin.isatty()
    connection = _connect(args)
    shell = Shell(connection, interactive=not scripted, vi=args.vi, errors_mode=args.errors,
                  pager=not args.no_pager, err=sys.stderr, table=args.table)
    try:
        if not scripted:
            return shell.run()
        return 0 if _run_scripts(shell, args) else 1
    finally:
        shell.close()


def _run_scripts(shell, args) -> bool:
    """Run the -c commands, then the -f files, in the order given; stop at the first
    failure (a script that carries on after an error may act on a wrong assumption)."""
    jobs = [("c", c) for c in args.command or []] + [("f", f) for f in args.file or []]
    if not jobs:
        jobs = [("f", "-")]
    for kind, value in jobs:
        if kind == "c":
            ok = shell.run_text(value, stop_on_error=True)
        else:
            try:
                text = sys.stdin.read() if value == "-" else open(value, encoding="utf-8").read()
            except OSError as exc:
                shell.show_error(errors.InterfaceError(f"cannot read {value}: {exc.strerror or exc}"))
                return False
            ok = shell.run_text(text, source="stdin" if value == "-" else value, stop_on_error=True)
        if not ok:
            return False
        if shell.done:
            break
    return True


__all__ = ["register", "run"]
