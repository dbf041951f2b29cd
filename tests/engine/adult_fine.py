"""The adult example's two fine columns, for the tests of workloads over both (issue 35
item 4): capital gains to the dollar (100,000 cells) and capital losses to the dollar (5,000
cells) beside sex and race, copied from ``examples/adult/adult.csv`` into a table ``a``, and
a connection with its own ledger at a given budget.  Used by tests/engine/test_mixed_columns.py
(a part per column) and test_two_fine.py (thin statements over both, measured directly)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import duckdb

import dpsql
from dpsql.testing import ADULT, write_domain

COLUMNS = {"capital_gain": {"type": "integer", "lo": 0, "hi": 99999},
           "capital_loss": {"type": "integer", "lo": 0, "hi": 4999},
           "sex": {"type": "categorical", "labels": ["Female", "Male"], "closed": True},
           "race": {"type": "categorical", "labels": ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other",
                                                      "Black"], "closed": True}}


def write_table(tmp: Path, columns: Sequence[str] = tuple(COLUMNS)) -> Path:
    """``columns`` of adult's rows as ``tmp/a.csv`` and their domain as ``tmp/d.toml``."""
    duckdb.sql(f"COPY (SELECT {', '.join(columns)} FROM read_csv('{ADULT / 'adult.csv'}')) "
               f"TO '{tmp / 'a.csv'}' (HEADER)")
    write_domain(tmp / "d.toml", "a", {c: COLUMNS[c] for c in columns}, source={"csv": "a.csv"})
    return tmp


def connect(data: Path, ledger: Path, epsilon: float, queries: Sequence[str]):
    """A connection to table ``a`` of ``data`` (``write_table``), its plan cache shared there."""
    return dpsql.connect({"dpsql": {"ledger": str(ledger), "cache_dir": str(data / "cache")},
                          "budget": {"epsilon": epsilon, "delta": 1e-6},
                          "tables": {"a": {"domain": str(data / "d.toml"), "source": {"csv": str(data / "a.csv")},
                                           "rows": 48842}},
                          "workload": {"queries": list(queries)}}, user="tester")
