"""The small ``t`` table (age in 10-year bins, sex) that the crash-recovery and record-lines
tests measure: its domain file and a deterministic CSV of ``n`` rows."""

from __future__ import annotations

from pathlib import Path

DOMAIN = """
[tables.t]
source = { csv = "t.csv" }

[tables.t.columns.age]
type = "integer"
lo = 17
hi = 90
bin_width = 10

[tables.t.columns.sex]
type = "categorical"
labels = ["Female", "Male"]
"""


def write_table(tmp: Path, n: int) -> None:
    """``tmp/t.csv`` (n rows, ages spread over the range, sexes alternating) and ``tmp/d.toml``."""
    tmp.mkdir(parents=True, exist_ok=True)
    rows = [f"{17 + (i * 7) % 70},{['Female', 'Male'][i % 2]}" for i in range(n)]
    (tmp / "t.csv").write_text("\n".join(["age,sex"] + rows) + "\n")
    (tmp / "d.toml").write_text(DOMAIN)
