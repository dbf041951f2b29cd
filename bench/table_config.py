"""The configuration and working directory of a benchmark table written from a package's data
(bench/flights.py, bench/diamonds.py): one CSV, its domain file, and a ``dpsql.toml`` with the
table's workload, Gaussian noise, the informed policy and a one-restart seeded planner."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path


def config_toml(table: str, workload: Sequence[str], epsilon: float = 1.0, ledger: Path | None = None,
                base: Path | None = None, binning: str = "offsets") -> str:
    """The configuration; ``ledger`` elsewhere than beside it and ``base`` the directory of
    the table, domain and plan cache when the file is written somewhere else; ``binning``
    the planner's treatment of SUM/AVG over wide bins (docs/engine.md, "Binning offsets")."""
    queries = "\n".join(f"  {json.dumps(q)}," for q in workload)
    at = (lambda name: json.dumps(str(base / name))) if base is not None else json.dumps
    return f"""[dpsql]
ledger = {json.dumps(str(ledger)) if ledger is not None else json.dumps(f"{table}.ledger")}
noise = "gaussian"
cache_dir = {at(".dpsql-cache")}
policy = "informed"

[budget]
epsilon = {epsilon}
delta = 1e-6

[tables.{table}]
domain = {at(f"{table}.toml")}
source = {{ csv = {at(f"{table}.csv")} }}
privacy_unit = "row"

[workload]
queries = [
{queries}
]

[planner]
restarts = 1
seed = 0
binning = "{binning}"
"""


def prepare(workdir: Path, table: str, write_csv: Callable[[Path], int], domain_toml: str,
            config: str) -> Path:
    """Write the table (once), its domain and ``config`` into ``workdir``; the config's path."""
    workdir.mkdir(parents=True, exist_ok=True)
    if not (workdir / f"{table}.csv").exists():
        write_csv(workdir / f"{table}.csv")
    (workdir / f"{table}.toml").write_text(domain_toml)
    (workdir / "dpsql.toml").write_text(config)
    return workdir / "dpsql.toml"
