"""The neighbouring-datasets property test at scale (issue 15; ``make test`` runs a bounded
version): thousands of seeded single-row edits of a clean CSV table, each measured, on the
installed DuckDB and, when present, on the lowest supported one (.venv/duckdb-*).

Reference: the sensitivity.  Every edit must succeed and move every counted marginal by
L1 ≤ 1 (append, remove) or ≤ 2 (replace), ≤ max_rows for person-level edits; the test
asserts it for each edit, this script reports pass/fail per DuckDB and the slowest tests."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EDITS = os.environ.get("DPSQL_NEIGHBOUR_EDITS", "1000")


def main() -> int:
    envs = [("installed", None)] + [(Path(p).name, p) for p in sorted(glob.glob(str(ROOT / ".venv" / "duckdb-*")))]
    rc = 0
    for label, path in envs:
        env = dict(os.environ, DPSQL_NEIGHBOUR_EDITS=EDITS)
        if path:
            env["PYTHONPATH"] = path
        print(f"{label}: {EDITS} edits per file variant (LF, CRLF, no final newline) + person-level edits",
              flush=True)
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--durations=5",
                            "tests/measure/test_neighbours.py"], cwd=ROOT, env=env)
        rc |= r.returncode
        print(f"{label}: {'every edit succeeded within the sensitivity' if r.returncode == 0 else 'FAILED'}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
