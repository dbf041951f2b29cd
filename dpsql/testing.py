"""Configurations for tests and benchmarks, written one way.

Tests (through the ``adult_config`` fixture of ``tests/conftest.py``) and the scripts in
``bench/`` need a ``dpsql.toml`` over the adult example (or another table) with their own
ledger, cache, budget, workload and planner options.  :func:`write_config` writes it from
keyword arguments, so that each caller states only what it is about; :func:`copy_adult_example`
copies the example itself for tests of the example's own configuration.  :func:`write_domain`
writes a domain file of one table from its columns' keys (the fine-column tests and
``bench/fine_mixed.py`` declare an income of n cells beside sex and age: :func:`income_columns`).  The adult example
lives in the source checkout (``examples/adult``), which tests and benchmarks run from.

Nothing in the engine imports this module.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from collections.abc import Mapping, Sequence
from typing import Any

from dpsql.draft import toml_key, toml_value

__all__ = ["ADULT", "write_config", "write_domain", "income_columns", "copy_adult_example", "toml_value"]

#: The adult example: its configuration, domain, rows and dashboard.
ADULT = Path(__file__).resolve().parents[1] / "examples" / "adult"

def _section(name: str, entries: Mapping[str, Any]) -> list[str]:
    return [f"[{name}]", *(f"{toml_key(k)} = {toml_value(v)}" for k, v in entries.items()), ""]


def write_config(directory: str | Path, *, queries: Sequence[str] | None = None,
                 epsilon: float | None = 1.0, delta: float = 1e-6, rho: float | None = None,
                 ledger: str | Path | None = None, cache_dir: str | Path | None = None,
                 table: str = "adult", domain: str | Path | None = None, source: Mapping | None = None,
                 table_options: Mapping[str, Any] | None = None, dpsql: Mapping[str, Any] | None = None,
                 budget: Mapping[str, Any] | None = None, workload: Mapping[str, Any] | None = None,
                 planner: Mapping[str, Any] | None = None, sections: Mapping[str, Mapping] | None = None,
                 name: str = "dpsql.toml") -> Path:
    """Write ``directory/name`` and return its path.

    Defaults: the adult table (``examples/adult``, CSV source), a ledger and plan cache inside
    ``directory`` (absolute paths, so the file may be read from anywhere), ε = 1 and δ = 1e-6
    (or ``rho`` instead of ε), ``queries`` as the workload.  ``dpsql``, ``budget``,
    ``workload``, ``planner`` and ``table_options`` add entries to those sections;
    ``sections`` adds whole sections (``{"policy": {...}, "budget.per_user": {...}}``)."""
    directory = Path(directory)
    head = {"ledger": str(ledger if ledger is not None else directory / "dpsql.ledger"),
            "cache_dir": str(cache_dir if cache_dir is not None else directory / "cache"), **(dpsql or {})}
    money = {"rho": rho} if rho is not None else ({"epsilon": epsilon} if epsilon is not None else {})
    money = {**money, "delta": delta, **(budget or {})}
    if domain is None and table == "adult":
        domain = ADULT / "adult.toml"
    if source is None and table == "adult":
        source = {"csv": str(ADULT / "adult.csv")}
    tab = {**({"domain": str(domain)} if domain is not None else {}),
           **({"source": {k: str(v) if isinstance(v, Path) else v for k, v in source.items()}}
              if source is not None else {}),
           **(table_options or {})}
    lines = _section("dpsql", head) + _section("budget", money) + _section(f"tables.{toml_key(table)}", tab)
    work = {**({"queries": list(queries)} if queries is not None else {}), **(workload or {})}
    if work:
        lines += _section("workload", work)
    if planner:
        lines += _section("planner", planner)
    for sec, entries in (sections or {}).items():
        lines += _section(sec, entries)
    path = directory / name
    path.write_text("\n".join(lines))
    return path


def write_domain(path: str | Path, table: str, columns: Mapping[str, Mapping[str, Any]], *,
                 source: Mapping[str, Any] | None = None) -> Path:
    """Write the domain file ``path`` of one table and return it: ``columns`` maps each
    column, in order, to its keys (docs/domains.md: ``{"type": "integer", "lo": 0, "hi": 99}``),
    ``source`` the table's source (``{"csv": "t.csv"}``, relative to the file), if declared there."""
    path = Path(path)
    key = f"tables.{toml_key(table)}"
    lines = _section(key, {"source": source}) if source is not None else []
    for name, keys in columns.items():
        lines += _section(f"{key}.columns.{toml_key(name)}", keys)
    path.write_text("\n".join(lines))
    return path


def income_columns(cells: int, age: tuple[int, int] = (0, 99)) -> dict[str, dict[str, Any]]:
    """An income of ``cells`` integer cells from 0 (a fine column, issue 35), a closed sex
    (F, M) and an integer age over ``age``: the table of the fine-column tests and benchmarks."""
    return {"income": {"type": "integer", "lo": 0, "hi": cells - 1},
            "sex": {"type": "categorical", "labels": ["F", "M"], "closed": True},
            "age": {"type": "integer", "lo": age[0], "hi": age[1]}}


def copy_adult_example(directory: str | Path) -> Path:
    """The adult example as shipped (configuration, domain, dashboard; the rows linked, not
    copied) in ``directory``; returns its ``dpsql.toml``.  Its ledger and cache are then
    relative to ``directory``, like a user's copy."""
    directory = Path(directory)
    for name in ("dpsql.toml", "adult.toml", "dashboard.sql"):
        shutil.copy(ADULT / name, directory / name)
    (directory / "adult.csv").symlink_to(ADULT / "adult.csv")
    return directory / "dpsql.toml"
