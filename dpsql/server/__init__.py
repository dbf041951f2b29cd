"""PostgreSQL wire-protocol server for dpsql: psql, psycopg, SQLAlchemy, pgjdbc and BI tools.

``serve(config, overrides=...)`` starts one in a background thread (tests, notebooks);
``dpsql serve`` runs one in the foreground.  Design and privacy rules: ``docs/server.md``.
"""


__all__ = ["Server", "ServerOptions", "ServerThread", "run", "serve"]


def __getattr__(name):
    # lazy: `dpsql query` registers the serve subcommand (dpsql/server/cli.py) and must not
    # pay for importing the server (asyncio, the catalog client) to answer one query
    if name in __all__:
        from dpsql.server import server
        return getattr(server, name)
    raise AttributeError(name)
