"""A small shop schema for the people tests: customers ← orders ← lineitem (Parquet files
written by DuckDB), with orphans (orders of unknown or NULL customers, line items of unknown
orders) and a few heavy customers whose rows exceed every bound."""

from __future__ import annotations

import random
from pathlib import Path

import duckdb

DOMAIN = '''
[tables.customers.columns.segment]
type = "categorical"
labels = ["AUTO", "BUILDING", "MACHINERY"]
nullable = true

[tables.customers.columns.nation]
type = "integer"
lo = 0
hi = 4

[tables.orders.columns.status]
type = "categorical"
labels = ["F", "O", "P"]

[tables.orders.columns.priority]
type = "integer"
lo = 1
hi = 5

[tables.lineitem.columns.flag]
type = "categorical"
labels = ["A", "N", "R"]

[tables.lineitem.columns.qty]
type = "integer"
lo = 1
hi = 50
'''

TYPES = {"customers": "custkey BIGINT, segment VARCHAR, nation INTEGER",
         "orders": "orderkey BIGINT, custkey BIGINT, status VARCHAR, priority INTEGER",
         "lineitem": "orderkey BIGINT, linenumber INTEGER, flag VARCHAR, qty INTEGER"}
PG_TYPES = {"customers": "custkey bigint, segment text, nation integer",
            "orders": "orderkey bigint, custkey bigint, status text, priority integer",
            "lineitem": "orderkey bigint, linenumber integer, flag text, qty integer"}


def shop_rows(customers: int = 30, seed: int = 32) -> dict[str, list[tuple]]:
    rng = random.Random(seed)
    out: dict[str, list[tuple]] = {"customers": [], "orders": [], "lineitem": []}
    orderkey = 1000
    for c in range(1, customers + 1):
        out["customers"].append((c, rng.choice(["AUTO", "BUILDING", "MACHINERY", None, "other"]),
                                 rng.randint(0, 5)))
        heavy = c % 7 == 0
        for _ in range(rng.randint(6, 12) if heavy else rng.randint(0, 4)):
            orderkey += rng.randint(1, 3)
            out["orders"].append((orderkey, c, rng.choice("FOP"), rng.randint(1, 5)))
            for line in range(rng.randint(3, 9) if heavy else rng.randint(1, 4)):
                out["lineitem"].append((orderkey, line, rng.choice("ANR"), rng.randint(1, 50)))
    # orphans: they reach no person and are never counted
    out["orders"] += [(90001, 999, "F", 1), (90002, None, "O", 2)]
    out["lineitem"] += [(90001, 0, "A", 5), (77777, 0, "N", 7), (None, 1, "R", 9)]
    return out


def without(rows: dict[str, list[tuple]], person: int) -> dict[str, list[tuple]]:
    """The neighbour: one person and all their rows removed."""
    orders = {o[0] for o in rows["orders"] if o[1] == person}
    return {"customers": [r for r in rows["customers"] if r[0] != person],
            "orders": [r for r in rows["orders"] if r[1] != person],
            "lineitem": [r for r in rows["lineitem"] if r[0] not in orders]}


def write_parquet(rows: dict[str, list[tuple]], directory: Path) -> dict[str, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    con = duckdb.connect()
    out = {}
    for table, cols in TYPES.items():
        con.execute(f"CREATE OR REPLACE TABLE {table} ({cols})")
        if rows[table]:
            con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(rows[table][0]))})", rows[table])
        out[table] = directory / f"{table}.parquet"
        con.execute(f"COPY {table} TO '{out[table]}' (FORMAT parquet)")
    con.close()
    return out

def load(engine: str, rows, where: Path, tag: str, pg=None, spark=None) -> dict[str, dict]:
    """Put ``rows`` into ``engine`` ("duckdb", "postgres" through the ``pg`` fixture, or
    "spark": its session fixture ``spark`` started by the caller, the file scheduled with the
    other Spark files, tests/conftest.py SPARK_FILES); the source spec of each table there."""
    files = write_parquet(rows, where / tag)
    if engine == "duckdb":
        return {t: {"parquet": str(p)} for t, p in files.items()}
    if engine == "spark":
        return {t: {"spark": "local[2]", "parquet": str(p)} for t, p in files.items()}
    for t in TYPES:
        pg.load(f"{t}_{tag}", PG_TYPES[t], rows[t])
    return {t: {"postgres": pg.url, "table": f"{t}_{tag}", "data_version": tag} for t in TYPES}


def people_section(bounds: dict[str, int] | None = None) -> dict:
    bounds = {"orders": 3, "lineitem": 5, **(bounds or {})}
    return {"person": "customers", "key": "custkey",
            "tables": {"orders": {"parent": "customers", "foreign_key": "custkey", "primary_key": "orderkey",
                                  "max_rows": bounds["orders"]},
                       "lineitem": {"parent": "orders", "foreign_key": "orderkey",
                                    "max_rows": bounds["lineitem"]}}}


def config(directory: Path, sources: dict[str, dict], bounds: dict[str, int] | None = None, **extra) -> dict:
    """A config dict over the shop schema, each table read from ``sources[table]``."""
    domain = directory / "shop.toml"
    domain.write_text(DOMAIN)
    return {"tables": {t: {"domain": str(domain), "source": sources[t]} for t in TYPES},
            "people": people_section(bounds), "budget": {"epsilon": 1.0, "delta": 1e-6},
            "ledger": str(directory / "shop.ledger"), "cache_dir": str(directory / "cache"), **extra}
