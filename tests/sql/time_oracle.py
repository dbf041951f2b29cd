"""The SQL oracle (``sql_oracle.Oracle``) over a flights table with date and timestamp
columns (issue 30): 20,000 deterministic rows built in DuckDB, the cell of every value
computed by ``index_sql``, and DuckDB's own answers over the binned rows (each value
replaced by its bin's first value: an accepted query is constant on every bin, so any value
of the bin gives DuckDB's answer)."""

from __future__ import annotations

from dpsql.domain_file import load_domain
from dpsql.timeaxis import iso_text
from sql_oracle import FIXTURES, Oracle

ROWS = 20_000
#: the flights rows, deterministic (also served over the wire: tests/server/test_time_wire.py)
RAW_SQL = f"""SELECT
    DATE '2013-01-01' + CAST((i * 7919) % 365 AS INTEGER) AS flight_date,
    CASE WHEN i % 97 = 0 THEN NULL ELSE DATE '2013-01-01' + CAST((i * 104729) % 365 AS INTEGER) END
        AS sched_month,
    TIMESTAMP '2013-01-01 00:00:00' + to_minutes(CAST((i * 6151) % (59 * 24 * 60) AS BIGINT)) AS time_hour,
    (['AA', 'B6', 'DL', 'UA'])[1 + CAST((i * i + i // 7) % 4 AS INTEGER)] AS carrier,
    CAST((i * 2654435761) % 3000 AS INTEGER) AS distance
    FROM range({ROWS}) r(i)"""


class TimeOracle(Oracle):
    def __init__(self) -> None:     # not super().__init__: that loads adult
        self.catalog = load_domain(FIXTURES / "flights.toml")
        self._build("flights", RAW_SQL)

    def _midpoints(self, a) -> list[tuple]:
        if a.kind not in ("date", "timestamp"):
            return super()._midpoints(a)
        # wide bins are reported by label, at their first instant
        return [(label, bounds[0]) for label, bounds in zip(a.labels(), a.bin_bounds())
                if label is not None and bounds[0] != bounds[1]]

    def _representative(self, a) -> str:
        if a.kind not in ("date", "timestamp"):
            return super()._representative(a)
        sql_type = "DATE" if a.kind == "date" else "TIMESTAMP"
        lits = ", ".join("NULL" if b is None else f"'{iso_text(b[0])}'" for b in a.bin_bounds())
        return f'CAST(([{lits}])["{a.name}" + 1] AS {sql_type})'
