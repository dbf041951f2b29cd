"""Write rows to CSV or Parquet files (used by ``dpsql synth``).

Only already-private rows pass through here (synthetic records drawn from the fitted
model); Parquet is written by DuckDB through ``backend.csv_to_parquet`` (duckdb is imported
only in ``dpsql/measure/backend.py``, docs/architecture.md).
"""

from __future__ import annotations

import csv
import tempfile
from pathlib import Path
from collections.abc import Sequence

from dpsql.errors import ProgrammingError

__all__ = ["write_rows", "FORMATS"]

FORMATS = ("csv", "parquet")
_SQL_TYPES = {"text": "VARCHAR", "integer": "BIGINT", "double": "DOUBLE"}


def _format(path: Path, fmt: str | None) -> str:
    fmt = (fmt or path.suffix.lstrip(".")).lower()
    if fmt not in FORMATS:
        raise ProgrammingError(f"cannot tell the output format of {str(path)!r}",
                               hint="name the file .csv or .parquet, or pass --format csv|parquet")
    return fmt


def _write_csv(path: Path, columns: Sequence[tuple[str, str]], rows) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        out = csv.writer(fh)
        out.writerow([name for name, _ in columns])
        # NULL is an empty field (declared labels are never empty strings).
        for row in rows:
            out.writerow(["" if v is None else v for v in row])


def write_rows(path, columns: Sequence[tuple[str, str]], rows, *, fmt: str | None = None) -> Path:
    """Write ``rows`` (tuples aligned with ``columns`` = [(name, "text"|"integer"|"double")])."""
    path = Path(path)
    kind = _format(path, fmt)
    if kind == "csv":
        _write_csv(path, columns, rows)
        return path
    from dpsql.measure.backend import csv_to_parquet

    with tempfile.TemporaryDirectory() as tmp:
        staging = Path(tmp) / "rows.csv"
        _write_csv(staging, columns, rows)
        csv_to_parquet(staging, [(name, _SQL_TYPES[t]) for name, t in columns], path)
    return path
