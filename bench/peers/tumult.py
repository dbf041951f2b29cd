"""Drive Tumult Analytics from the main environment: its own venv, a subprocess, JSON in/out.

dpsql never imports Tumult.  ``ensure_venv()`` creates ``bench/peers/.venv-tumult``
(gitignored) with the exact versions of ``requirements-tumult.txt`` (Tumult runs on Spark: a
JDK 17 must be installed, as for the ``spark`` extra); ``run(job)`` feeds a job to
``tumult_runner.py`` under that venv's python and returns its JSON report.

    python bench/peers/tumult.py      # create/refresh the venv and print the versions
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-tumult"
REQUIREMENTS = HERE / "requirements-tumult.txt"
RUNNER = HERE / "tumult_runner.py"


def python() -> Path:
    return VENV / ("Scripts/python.exe" if os.name == "nt" else "bin/python")


def ensure_venv(base_python: str | None = None, quiet: bool = True) -> Path:
    """Create the venv (once per requirements file content) and return its python."""
    stamp = VENV / ".requirements.sha256"
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    if python().exists() and stamp.exists() and stamp.read_text() == digest:
        return python()
    if not python().exists():
        subprocess.run([base_python or sys.executable, "-m", "venv", str(VENV)], check=True)
    cmd = [str(python()), "-m", "pip", "install", "--disable-pip-version-check", "-r", str(REQUIREMENTS)]
    subprocess.run(cmd + (["--quiet"] if quiet else []), check=True)
    stamp.write_text(digest)
    return python()


def run(job: dict, timeout: float | None = None) -> dict:
    """Run one job (see tumult_runner.py) and return its report."""
    py = str(ensure_venv())
    # Spark's Python workers must run the venv's interpreter too (they unpickle Tumult's UDFs)
    env = {**os.environ, "PYSPARK_PYTHON": py, "PYSPARK_DRIVER_PYTHON": py}
    proc = subprocess.run([py, str(RUNNER)], input=json.dumps(job), text=True, capture_output=True,
                          timeout=timeout, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"Tumult runner failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


if __name__ == "__main__":
    py = ensure_venv(quiet=False)
    out = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
    print(out.stdout)
