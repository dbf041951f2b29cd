"""A peer library in its own venv, driven from the main environment by JSON in and out.

dpsql never imports a peer.  ``Peer.ensure_venv()`` creates ``bench/peers/.venv-<name>``
(gitignored) with the exact versions of ``requirements-<name>.txt``, once per content of that
file; ``Peer.run(job)`` feeds a job to ``<name>_runner.py`` under that venv's python and returns
the JSON report the runner prints on its last line.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Peer:
    name: str                  # "tumult": .venv-tumult, requirements-tumult.txt, tumult_runner.py
    label: str                 # for messages: "Tumult"
    spark: bool = False        # Spark's Python workers must run the venv's interpreter too

    @property
    def venv(self) -> Path:
        return HERE / f".venv-{self.name}"

    @property
    def requirements(self) -> Path:
        return HERE / f"requirements-{self.name}.txt"

    @property
    def runner(self) -> Path:
        return HERE / f"{self.name}_runner.py"

    def python(self) -> Path:
        return self.venv / ("Scripts/python.exe" if os.name == "nt" else "bin/python")

    def ensure_venv(self, base_python: str | None = None, quiet: bool = True) -> Path:
        """Create the venv (once per requirements file content) and return its python."""
        stamp = self.venv / ".requirements.sha256"
        digest = hashlib.sha256(self.requirements.read_bytes()).hexdigest()
        if self.python().exists() and stamp.exists() and stamp.read_text() == digest:
            return self.python()
        if not self.python().exists():
            subprocess.run([base_python or sys.executable, "-m", "venv", str(self.venv)], check=True)
        cmd = [str(self.python()), "-m", "pip", "install", "--disable-pip-version-check",
               "-r", str(self.requirements)]
        subprocess.run(cmd + (["--quiet"] if quiet else []), check=True)
        stamp.write_text(digest)
        return self.python()

    def run(self, job: dict, timeout: float | None = None, runner: Path | None = None) -> dict:
        """Run one job (see the runner: ``<name>_runner.py``, or another script of the same
        venv such as ``tumult_people_runner.py``) and return its report."""
        py = str(self.ensure_venv())
        env = {**os.environ, **({"PYSPARK_PYTHON": py, "PYSPARK_DRIVER_PYTHON": py} if self.spark else {})}
        proc = subprocess.run([py, str(runner or self.runner)], input=json.dumps(job), text=True,
                              capture_output=True, timeout=timeout, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"{self.label} runner failed (exit {proc.returncode}):\n"
                               f"{proc.stderr[-4000:]}")
        return json.loads(proc.stdout.strip().splitlines()[-1])

    def main(self) -> None:
        """Create or refresh the venv and print the versions it holds."""
        py = self.ensure_venv(quiet=False)
        out = subprocess.run([str(py), "-m", "pip", "freeze"], capture_output=True, text=True, check=True)
        print(out.stdout)
