"""What each ``make bi-check`` chart script does around its own chart: the command line, a
fresh output directory, ``dpsql serve`` over the prepared configuration, a Superset instance
with a database connection to it, the screenshot of the saved chart, the report and the exit
status.  A script gives its ``prepare`` (write and measure the configuration) and its ``check``
(build the dataset and chart through ``Check``, return whether it passed)."""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from drive import PASSWORD, ROOT, ApiError, Superset, log, read_log, start_dpsql


@dataclass
class Check:
    superset: Superset
    venv: Path
    out: Path
    port: int
    screenshots: Path
    results: dict = field(default_factory=dict)

    def database(self, name: str) -> dict:
        """A Superset database connection to ``dpsql serve`` as the analyst ``superset``."""
        uri = f"postgresql://superset:{PASSWORD}@127.0.0.1:{self.port}/dpsql"
        return self.superset.api("POST", "/api/v1/database/", {
            "database_name": name, "sqlalchemy_uri": uri, "expose_in_sqllab": True, "allow_run_async": False})

    def log_since(self, before: int) -> list[dict]:
        """dpsql's query-log entries after the first ``before``: route, statement, outcome."""
        return [{k: e[k] for k in ("route", "statement", "outcome", "sqlstate", "message") if k in e}
                for e in read_log(self.out / "queries.jsonl", before)]

    def logged(self) -> int:
        return len(read_log(self.out / "queries.jsonl"))

    def screenshot(self, chart_id: int, name: str) -> bool:
        """Save the chart's screenshot as ``<screenshots>/<name>``; whether it worked."""
        with tempfile.TemporaryDirectory() as shots:
            shot = subprocess.run([str(self.venv / "bin" / "python"), str(ROOT / "bicheck" / "screenshot.py"),
                                   self.superset.url, shots, str(chart_id)], capture_output=True, text=True,
                                  timeout=600)
            if shot.returncode != 0:
                log(f"screenshot failed: {shot.stderr[-2000:]}")
                return False
            dest = self.screenshots / name
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(Path(shots) / "superset_chart_1.png", dest)
            self.results["screenshot"] = str(dest)
            log(f"screenshot: {dest}")
            return True


def run(name: str, description: str, prepare: Callable[[Path], Path], check: Callable[[Check], bool],
        argv=None) -> int:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--superset-venv", default=str(ROOT / "bicheck" / ".venv-superset"))
    ap.add_argument("--out", default=str(ROOT / "bicheck" / "out"))
    ap.add_argument("--screenshots", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    out = Path(args.out).resolve() / name
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    venv = Path(args.superset_venv)
    config = prepare(out / "dpsql")
    dpsql_proc, port = start_dpsql(config, out)
    superset = Superset(venv, out)
    state = Check(superset, venv, out, port, Path(args.screenshots))
    ok = False
    try:
        superset.start()
        ok = check(state)
    except ApiError as exc:
        log(f"FAILED: {exc}")
        state.results["error"] = str(exc)
    finally:
        superset.stop()
        dpsql_proc.send_signal(signal.SIGTERM)
        dpsql_proc.wait(60)
    state.results["seconds"] = round(time.monotonic() - t0)
    (out / "report.json").write_text(json.dumps(state.results, indent=2, default=str))
    log(f"report: {out / 'report.json'}; {state.results['seconds']} s; {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1
