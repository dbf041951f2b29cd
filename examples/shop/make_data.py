"""Writes the shop example's three private tables as Parquet (seeded, synthetic; TPC-H-like).

    python examples/shop/make_data.py      # rewrites customers/orders/lineitem.parquet here

20,000 customers in five market segments and regions; about two in three place orders
(up to 20 each, a few heavy buyers above the configured bound of 10); each order has 1 to 7
line items.  The rows are made up: the example shows person-level protection across tables,
not real customers.
"""

from __future__ import annotations

import random
from pathlib import Path

import duckdb

HERE = Path(__file__).resolve().parent
SEGMENTS = ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"]
REGIONS = ["AFRICA", "AMERICA", "ASIA", "EUROPE", "MIDDLE EAST"]


def rows(customers: int = 20000, seed: int = 32) -> dict[str, list[tuple]]:
    rng = random.Random(seed)
    out: dict[str, list[tuple]] = {"customers": [], "orders": [], "lineitem": []}
    orderkey = 0
    for custkey in range(1, customers + 1):
        segment = rng.choice(SEGMENTS)
        region = rng.choices(REGIONS, weights=[1, 3, 3, 2, 1])[0]
        out["customers"].append((custkey, segment, region))
        if rng.random() < 1 / 3:
            continue                      # TPC-H: a third of the customers never order
        heavy = rng.random() < 0.03
        for _ in range(rng.randint(11, 20) if heavy else rng.randint(1, 8)):
            orderkey += 1
            year = rng.randint(1992, 1998)
            status = "O" if year == 1998 else rng.choice("FFFFP")
            priority = rng.randint(1, 5)
            out["orders"].append((orderkey, custkey, status, priority, year))
            for line in range(1, rng.randint(1, 7) + 1):
                late = year < 1995 or rng.random() < 0.5
                flag = rng.choice("AR") if late and rng.random() < 0.5 else "N"
                out["lineitem"].append((orderkey, line, flag, rng.randint(1, 50), rng.randint(0, 10)))
    return out


TYPES = {"customers": "custkey BIGINT, segment VARCHAR, region VARCHAR",
         "orders": "orderkey BIGINT, custkey BIGINT, status VARCHAR, priority INTEGER, year INTEGER",
         "lineitem": "orderkey BIGINT, linenumber INTEGER, returnflag VARCHAR, quantity INTEGER, discount INTEGER"}


def write(directory: Path = HERE) -> None:
    con = duckdb.connect()
    for table, data in rows().items():
        con.execute(f"CREATE TABLE {table} ({TYPES[table]})")
        con.executemany(f"INSERT INTO {table} VALUES ({', '.join('?' * len(data[0]))})", data)
        con.execute(f"COPY (SELECT * FROM {table} ORDER BY ALL) TO '{directory / table}.parquet' (FORMAT parquet)")
    con.close()


if __name__ == "__main__":
    write()
