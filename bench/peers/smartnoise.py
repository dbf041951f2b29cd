"""Drive SmartNoise SQL from the main environment: its own venv, a subprocess, JSON in/out.

dpsql never imports SmartNoise.  ``ensure_venv()`` creates ``bench/peers/.venv-smartnoise``
(gitignored) with the exact versions of ``requirements-smartnoise.txt``; ``run(job)`` feeds a
job to ``smartnoise_runner.py`` under that venv's python and returns its JSON report.

    python bench/peers/smartnoise.py      # create/refresh the venv and print the versions
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE / ".venv-smartnoise"
REQUIREMENTS = HERE / "requirements-smartnoise.txt"
RUNNER = HERE / "smartnoise_runner.py"


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
    """Run one job (see smartnoise_runner.py) and return its report."""
    proc = subprocess.run([str(ensure_venv()), str(RUNNER)], input=json.dumps(job), text=True,
                          capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"SmartNoise runner failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout)


if __name__ == "__main__":
    py = ensure_venv(quiet=False)
    out = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
    print(out.stdout)
