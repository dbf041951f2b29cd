"""Run every benchmark in bench/ (``make bench``), one process each, and summarize.

Each script prints its figures next to their references (paper value, bound or peer);
this runner only sequences them, enforces a per-script time limit and reports failures.
Results worth keeping are recorded by hand in bench/RESULTS.md with date, machine and load.
Pass script names to run a subset: ``python bench/run_all.py noise pgm_scale``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
LIMIT = int(os.environ.get("DPSQL_BENCH_TIMEOUT", "1800"))


def main(argv: list[str]) -> int:
    scripts = sorted(p for p in HERE.glob("*.py") if p.name not in ("run_all.py", "__init__.py")
                     and not p.name.startswith("_"))
    if argv:
        wanted = {a.removesuffix(".py") for a in argv}
        scripts = [p for p in scripts if p.stem in wanted]
    failed = []
    for script in scripts:
        print(f"\n### {script.name}  (load {os.getloadavg()[0]:.2f})", flush=True)
        t0 = time.perf_counter()
        try:
            rc = subprocess.run([sys.executable, str(script)], cwd=HERE.parent, timeout=LIMIT).returncode
        except subprocess.TimeoutExpired:
            rc = "timeout"
        print(f"### {script.name}: exit {rc} in {time.perf_counter() - t0:.1f} s", flush=True)
        if rc != 0:
            failed.append(script.name)
    print(f"\n{len(scripts) - len(failed)} benchmarks ran, {len(failed)} failed: {', '.join(failed) or '-'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
