"""The interactive dpsql shell (``dpsql shell``), built on prompt-toolkit.

The shell is a front end like any other: it talks to dpsql only through the public
DB-API connection and its ``session`` commands (plan, measure, budget, explain), so that
nothing here can reach private rows the engine would not release anyway.

Modules: ``statements`` (splitting input into SQL statements and meta-commands),
``render`` (tables, errors with carets, CSV), ``lexer`` (highlighting), ``completion``
(keywords, tables, columns, public category labels), ``work`` (cancellable work with a
progress indicator), ``pager``, ``commands`` (the backslash commands), ``app`` (the
``Shell`` itself) and ``cli`` (the ``shell`` subcommand).
"""

__all__ = ["Shell", "history_path"]


def __getattr__(name):
    # lazy, so `dpsql --help` and the statement splitter do not build the whole UI
    if name in __all__:
        from repl import app
        return getattr(app, name)
    raise AttributeError(name)
