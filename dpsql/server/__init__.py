"""PostgreSQL wire-protocol server for dpsql: psql, psycopg, SQLAlchemy, pgjdbc and BI tools.

``serve(config, overrides=...)`` starts one in a background thread (tests, notebooks);
``dpsql serve`` runs one in the foreground.  Design and privacy rules: ``docs/server.md``.
"""

from dpsql.server.server import Server, ServerOptions, ServerThread, run, serve

__all__ = ["Server", "ServerOptions", "ServerThread", "run", "serve"]
