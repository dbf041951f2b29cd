"""The engine's fit on a few adult releases, with the code of two checkouts side by side.

    python bench/fit_paths.py --old CHECKOUT [--repeat 3] [--cases dashboard,ranges,dashboard40,marginals55]

For a refactor of the fit (issue 36 item 1: the finishers of ``dpsql.pgm.finishers``) that
must change no number.  Each case's release is measured once by this checkout (ε = 1) and
read back from its ledger by both; each checkout then fits it in fresh processes
(``ModelStore._fit``, the engine's own call, alternated ``--repeat`` times) and the table gives,
per case and checkout: the median wall and CPU time of the fit, the model kind, the path
(``model.report``, where the code has one), the final loss (in units of the noise) and the
largest difference of any fitted marginal on the measured cliques from the other checkout's.

The saved-model round trip: per checkout, one process answers ``Engine.model`` (fits and
saves), a second one loads the file (its "fit" progress event says ``loaded``) and its
marginals are compared with the first's.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from trust import ROOT, _env, _measured_config, dashboard40, marginals55  # noqa: E402

FIT = """
import json, sys, time
import numpy as np
from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
cfg = load_config(sys.argv[1], **({"fit_iters": int(sys.argv[3])} if sys.argv[3] != "-" else {}))
engine = Engine(cfg)
state = engine._sync("adult")
measurements = engine.fit_measurements(state.released)
domain = state.schema.domain
t0, c0 = time.perf_counter(), time.process_time()
model = engine.models._fit(domain, measurements, None, "adult")
seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
cliques = sorted(set(tuple(c) for c in model.measured))
np.savez(sys.argv[2], **{"|".join(c): np.asarray(model.marginal(c).values) for c in cliques})
report = getattr(model, "report", None)
print(json.dumps({"seconds": seconds, "cpu": cpu, "kind": type(model).__name__,
                  "path": report.path if report is not None else None,
                  "loss": float(model.loss[-1]), "stopped": model.stopped}))
"""

ROUND_TRIP = """
import json, sys
import numpy as np
from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
cfg = load_config(sys.argv[1], **({"fit_iters": int(sys.argv[3])} if sys.argv[3] != "-" else {}))
engine = Engine(cfg)
events = []
engine.add_listener(lambda stage, info: events.append(info) if stage == "fit" and info.get("done") else None)
model, _, _ = engine.model("adult")
cliques = sorted(set(tuple(c) for c in model.measured))
np.savez(sys.argv[2], **{"|".join(c): np.asarray(model.marginal(c).values) for c in cliques})
print(json.dumps({"loaded": bool(events and events[-1].get("loaded")), "kind": type(model).__name__,
                  "path": events[-1].get("path") if events else None}))
"""

def _ranges() -> list[str]:
    from dpsql.sql.split import split_statements
    return split_statements((ROOT / "bench" / "workloads" / "adult" / "ranges.sql").read_text())


CASES = {"dashboard": ("adult dashboard (examples/adult/dashboard.sql)", None, "-"),
         "ranges": ("adult ranges (bench/workloads/adult/ranges.sql)", _ranges, "-"),
         "dashboard40": ("40-query adult dashboard", dashboard40, "-"),
         "marginals55": ("55 one- and two-way marginals, 300 iterations", marginals55, "300")}


def _dashboard() -> list[str]:
    from dpsql.sql.split import split_statements
    return split_statements((ROOT / "examples" / "adult" / "dashboard.sql").read_text())


def _run(snippet: str, checkout: Path, cfg: Path, out: Path, iters: str) -> dict:
    r = subprocess.run([sys.executable, "-c", snippet, str(cfg), str(out), iters], env=_env(checkout),
                       capture_output=True, text=True, timeout=3600, cwd=checkout)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def _max_diff(a: Path, b: Path) -> float:
    with np.load(a) as x, np.load(b) as y:
        assert sorted(x.files) == sorted(y.files)
        return max(float(np.abs(x[k] - y[k]).max()) for k in x.files)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--old", required=True, type=Path, help="the checkout to compare with")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--cases", default="dashboard,ranges,dashboard40,marginals55")
    args = parser.parse_args(argv)
    checkouts = {"old": args.old.resolve(), "new": ROOT}
    tmp = Path(tempfile.mkdtemp(prefix="fit-paths-"))
    print("| case | code | fit (s), median | CPU (s), median | model | path | final loss | "
          "max |Δ marginal| vs other |")
    print("|---|---|---:|---:|---|---|---:|---:|")
    trips = []
    for case in args.cases.split(","):
        label, queries, iters = CASES[case]
        cfg = _measured_config(queries() if queries else _dashboard(), f"fit-{case}-")
        runs: dict[str, list[dict]] = {name: [] for name in checkouts}
        for _ in range(args.repeat):
            for name, checkout in checkouts.items():
                runs[name].append(_run(FIT, checkout, cfg, tmp / f"{case}-{name}.npz", iters))
        diff = _max_diff(tmp / f"{case}-old.npz", tmp / f"{case}-new.npz")
        for name, out in runs.items():
            print(f"| {label} | {name} | {statistics.median(o['seconds'] for o in out):.2f} | "
                  f"{statistics.median(o['cpu'] for o in out):.2f} | {out[0]['kind']} | "
                  f"{out[0]['path'] or '–'} | {out[0]['loss']:.6g} | {diff:.3g} |", flush=True)
        for name, checkout in checkouts.items():
            first = _run(ROUND_TRIP, checkout, cfg, tmp / f"{case}-{name}-rt1.npz", iters)
            second = _run(ROUND_TRIP, checkout, cfg, tmp / f"{case}-{name}-rt2.npz", iters)
            trips.append((label, name, first, second,
                          _max_diff(tmp / f"{case}-{name}-rt1.npz", tmp / f"{case}-{name}-rt2.npz"),
                          _max_diff(tmp / f"{case}-{name}-rt1.npz", tmp / f"{case}-{name}.npz")))
    print("\nsaved-model round trip (a second process loads what the first fitted and saved)")
    print("| case | code | first: loaded | second: loaded | path | max |Δ| loaded vs fitted | "
          "max |Δ| vs the timed fit |")
    print("|---|---|---|---|---|---:|---:|")
    for label, name, first, second, d, d_fit in trips:
        print(f"| {label} | {name} | {first['loaded']} | {second['loaded']} | {second['path'] or '–'} | "
              f"{d:.3g} | {d_fit:.3g} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
