"""The semantic oracle for joins with public tables (issue 31): compiled linear queries on
the exact histogram of the private table vs DuckDB's own answer to the same join.

The private table of ``tests/fixtures/star`` is binned as ``sql_oracle.Oracle`` bins
adult (every value replaced by its cell's representative); the public tables are loaded
into the same DuckDB database as they are, so DuckDB evaluates the joins itself, with
SQL's semantics for unmatched, NULL and repeated keys.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from dpsql.engine.config import load_config
from dpsql.public import StarCatalog
from dpsql.sql.joins import expand_linear
from dpsql.sql.lower import QuerySpec, build_linear_query
from sql_oracle import Oracle

STAR = Path(__file__).resolve().parents[1] / "fixtures" / "star"


class StarOracle(Oracle):
    def __init__(self) -> None:            # not super().__init__: that builds adult's tables
        config = load_config(STAR / "dpsql.toml")
        self.config = config
        self.catalog = StarCatalog(config.tables, config.public_tables, config.references,
                                   query=config.public_db.query)
        self._build("flights", f"SELECT * FROM read_csv('{STAR / 'flights.csv'}', header=true, nullstr='')")
        for name, table in config.public_tables.items():
            cols = ", ".join(f'"{c.name}" {c.type}' for c in table.columns)
            self.con.execute(f'CREATE TABLE "{name}" ({cols})')
            if table.rows:
                marks = ", ".join("?" for _ in table.columns)
                self.con.executemany(f'INSERT INTO "{name}" VALUES ({marks})', [list(r) for r in table.rows])

    def ours(self, sql: str, dialect: str = "postgres", params=None):
        from dpsql.sql import compile as compile_sql
        cq = compile_sql(sql, self.catalog, params=params, dialect=dialect)
        if cq.exact_rows is not None:          # public tables alone: their rows, exactly
            return cq, list(cq.exact_rows)
        return super().ours(sql, dialect, params)

    def present(self, cq):
        out = {}
        for prog in self.programs(cq):
            if not prog.keys:
                continue
            virtual = cq.schema
            if prog.joined:
                virtual = type(cq.schema)(cq.schema.name, tuple(prog.joined.get(a.name, a)
                                                                 for a in cq.schema.attributes))
            lq = build_linear_query(QuerySpec(name="present", kind="linear", terms=prog.where_terms),
                                    virtual, prog.grouping)
            if prog.joined:
                lq = expand_linear(lq, cq.schema, prog.joined)
            counts = self.answer(lq).reshape(lq.blocks, -1).sum(axis=0)
            out[id(prog)] = counts[np.asarray(prog.grouping.listed)] > 0
        return out or None
