"""SQL front end: aggregate SQL → exact factored linear queries over the public domain.

``compile(sql, catalog, params=None, dialect="postgres")`` parses one statement with
sqlglot (PostgreSQL or DuckDB dialect), binds it to the catalog's declared schemas and
returns a :class:`CompiledQuery` (see ``docs/sql.md`` and ``docs/architecture.md``).
sqlglot is imported only inside this package; other packages use it through
:mod:`dpsql.sql.syntax`.
"""

from dpsql.sql.compiler import compile
from dpsql.sql.query import CompiledQuery, LinearQuery, OutputColumn, RowLayout

__all__ = ["compile", "CompiledQuery", "LinearQuery", "OutputColumn", "RowLayout"]
