"""``dpsql serve`` and ``dpsql user``: the wire server's command-line entry points.

    dpsql serve --config dpsql.toml --host 127.0.0.1 --port 5432 [--tls-cert C --tls-key K]
                [--pidfile P] [--query-log PATH|-] [--max-statement-bytes N] [--insecure]
    dpsql user add NAME --password PW --config dpsql.toml     (or --password-stdin, or a prompt)
    dpsql user remove NAME --config dpsql.toml
    dpsql user list --config dpsql.toml

Users live in ``<config stem>.users.json`` next to the config (SCRAM verifiers only, 0600).
Registered into ``dpsql.cli`` through ``register(subparsers, common)``.
"""

from __future__ import annotations

import sys

from dpsql import errors


def _config(args) -> str:
    from dpsql.cli import _config_path
    return _config_path(args)


def _users_file(args):
    from dpsql.server import scram
    return args.users or scram.users_path(_config(args))


def cmd_serve(args) -> int:
    from dpsql.server.config import load_server_config
    from dpsql.server.server import is_loopback, run
    config = _config(args)
    server_cfg = load_server_config(config)
    context = None
    if args.tls_cert:
        import ssl
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(args.tls_cert, args.tls_key)
    elif not is_loopback(args.host):
        if not args.insecure:
            raise errors.InterfaceError(
                f"serving on {args.host} (not a loopback address) needs TLS",
                hint="give --tls-cert and --tls-key, or --insecure to send query results unencrypted")
        print(f"warning: serving on {args.host} without TLS (--insecure): passwords are never sent in clear "
              "(SCRAM), but query results are", file=sys.stderr)
    for warning in _budget_warnings(config, _users_file(args)):
        print(f"warning: {warning}", file=sys.stderr)

    def pick(flag, value):
        return value if flag is None else flag
    try:
        return _run(run, config, args, context, server_cfg, pick)
    except OSError as exc:
        raise errors.OperationalError(f"cannot serve on {args.host}:{args.port}: {exc.strerror or exc}",
                                      hint="choose another --port, or stop what uses it") from None


def _run(run, config, args, context, server_cfg, pick) -> int:
    return run(config, users_file=args.users, pidfile=args.pidfile, host=args.host, port=args.port,
               database=args.database, ssl_context=context, insecure=args.insecure, auth_method=args.auth,
               shadow=not args.no_catalog, workers=args.workers,
               max_connections=pick(args.max_connections, server_cfg.max_connections),
               max_user_connections=server_cfg.max_user_connections,
               user_connection_limits=server_cfg.user_connection_limits,
               max_statement=pick(args.max_statement_bytes, server_cfg.max_statement_bytes),
               query_log=pick(args.query_log, server_cfg.query_log),
               query_log_max_bytes=server_cfg.query_log_max_bytes, query_log_files=server_cfg.query_log_files,
               max_session_memory=server_cfg.max_session_memory,
               max_user_statements=server_cfg.max_user_statements,
               max_unauthenticated=server_cfg.max_unauthenticated, auth_timeout=server_cfg.auth_timeout,
               catalog_timeout=server_cfg.catalog_timeout, settings=server_cfg.settings,
               user_settings=server_cfg.user_settings)


def _budget_warnings(config, users_file) -> list[str]:
    """What the operator should know about budgets before analysts connect: under the
    `measure` policy an analyst without a cap ([budget.users.NAME] or [budget.per_user]) can
    spend nothing, so their on-demand measurements are refused (issue 34)."""
    from dpsql.engine.config import load_config
    from dpsql.server import scram
    cfg = load_config(config)
    if cfg.query_budget is None and cfg.policy != "measure":
        return []
    uncapped = cfg.uncapped(scram.load_users(users_file))
    if not uncapped:
        return []
    return [f"{len(uncapped)} user(s) have no budget cap and can spend nothing under the 'measure' policy: "
            f"{', '.join(uncapped)}; declare [budget.per_user] or [budget.users.NAME] to let them"]


def _read_password(args) -> str:
    if args.password is not None:
        return args.password
    if args.password_stdin:
        return sys.stdin.readline().rstrip("\n")
    import getpass
    first = getpass.getpass("password: ")
    if getpass.getpass("again: ") != first:
        raise errors.InterfaceError("passwords do not match")
    return first


def cmd_user(args) -> int:
    from dpsql.server import scram
    path = _users_file(args)
    if args.action == "add":
        try:
            scram.add_user(path, args.name, _read_password(args))
        except ValueError as exc:
            raise errors.InterfaceError(str(exc)) from None
        print(f"user {args.name!r} stored in {path} (SCRAM-SHA-256 verifier; the password is not kept)")
        return 0
    if args.action == "remove":
        if not scram.remove_user(path, args.name):
            print(f"no user {args.name!r} in {path}", file=sys.stderr)
            return 1
        print(f"user {args.name!r} removed")
        return 0
    for name in sorted(scram.load_users(path)):
        print(name)
    return 0


def register(subparsers, common) -> None:
    p = common(subparsers.add_parser("serve", help="serve the PostgreSQL wire protocol (psql, BI tools)"))
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=5432)
    p.add_argument("--database", default="dpsql", help="database name clients connect to")
    p.add_argument("--users", help="users file (default: <config stem>.users.json)")
    p.add_argument("--max-connections", type=int, help="authenticated connections (default 100)")
    p.add_argument("--max-statement-bytes", type=int,
                   help="longer statements are answered 54000 (default 262144; [server] max_statement_bytes)")
    p.add_argument("--query-log", help="JSON lines, one per statement: a path, or - for stderr")
    p.add_argument("--pidfile", help="write the server's pid here while it runs")
    p.add_argument("--insecure", action="store_true",
                   help="allow a non-loopback --host without TLS (results then travel unencrypted)")
    p.add_argument("--workers", type=int, help="query threads (default: CPU count)")
    p.add_argument("--tls-cert", help="PEM certificate: enables TLS (SSLRequest)")
    p.add_argument("--tls-key", help="PEM private key for --tls-cert")
    p.add_argument("--auth", choices=["scram-sha-256", "password"], default="scram-sha-256",
                   help="'password' (cleartext) is accepted only over TLS")
    p.add_argument("--no-catalog", action="store_true",
                   help="do not start the schema-only PostgreSQL (catalog queries are then refused)")
    p.set_defaults(func=cmd_serve)

    p = subparsers.add_parser("user", help="manage wire-server users (SCRAM verifiers)")
    sub = p.add_subparsers(dest="action", required=True)
    add = common(sub.add_parser("add", help="add a user or change their password"))
    add.add_argument("name")
    add.add_argument("--password", help="the password (visible in the process list; prefer a prompt)")
    add.add_argument("--password-stdin", action="store_true", help="read the password from stdin")
    add.add_argument("--users", help="users file (default: <config stem>.users.json)")
    rm = common(sub.add_parser("remove", help="remove a user"))
    rm.add_argument("name")
    rm.add_argument("--users")
    ls = common(sub.add_parser("list", help="list users"))
    ls.add_argument("--users")
    for q in (add, rm, ls):
        q.set_defaults(func=cmd_user)
