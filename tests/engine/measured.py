"""A connection measured once and shared by a module's tests, and its closing.

The end-to-end tests of fine columns (test_large_column.py, test_ordered_sql.py,
test_ordered_groups.py) each plan a workload, measure it at a near-infinite budget and check
every answer against DuckDB: one module fixture ``yield from measured(config, tmp)``.  A
closed connection's engine is also dropped from ``dpsql.dbapi``'s shared engines (``close``),
so the next test's configuration over the same files starts from its own ledger."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dpsql


def close(con) -> None:
    """Close ``con`` and forget the engines connections share (one per configuration)."""
    con.close()
    dpsql.dbapi._engines.clear()


def measured(config: dict, tmp: Path) -> Iterator[tuple[Any, Any, Path]]:
    """Connect to ``config``, plan and measure its workload, yield (connection, plan report,
    ``tmp``), then close it (``close``)."""
    con = dpsql.connect(config, user="tester")
    try:
        report = con.session.plan()
        con.session.measure()
        yield con, report, tmp
    finally:
        close(con)
