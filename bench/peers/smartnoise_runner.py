"""Answer a list of SQL counting queries with SmartNoise SQL (runs inside its own venv).

This script is executed by ``bench/peers/.venv-smartnoise/bin/python`` only; dpsql never
imports SmartNoise.  It reads one JSON job on stdin and writes one JSON report on stdout:

job = {
  "csv": path of the table (the binned copy both systems count over),
  "table": "adult", "schema": "bench",
  "columns": {name: {"type": "int"|"float"|"string"|"datetime", "lower": .., "upper": ..}},
  "queries": [sql, ...]            (FROM <table>; rewritten here to FROM <schema>.<table>),
  "runs": [{"epsilon": per-query ε, "delta": per-query δ,
            "mechanism": "laplace"|"gaussian"|"best", "trials": n}, ...]
}

report = {"versions": {...}, "load_seconds": .., "runs": [{"trials": [[{"rows", "seconds",
"error"}, ...per query], ...per trial], "mechanism": used, "scale": noise scale of a count,
"count_variance": its variance}], "peak_rss_kb": ..}

``"best"`` picks, before any data is read, whichever of SmartNoise's count mechanisms
(its default discrete Laplace, or its Gaussian) has the smaller noise variance at the given
per-query (ε, δ).

The metadata gives SmartNoise what dpsql is given: row-level privacy, clamping bounds equal
to dpsql's declared domains, and ``censor_dims = false`` so that every group present in the
data is returned (SmartNoise cannot know groups absent from the data).  Its other options
keep their defaults (``clamp_counts = false``).
"""

from __future__ import annotations

import json
import math
import re
import resource
import sys
import time
from importlib.metadata import version


def metadata(job: dict) -> dict:
    table = {"row_privacy": True, "censor_dims": False, "rows": job.get("rows", 0)}
    for name, spec in job["columns"].items():
        col = {"type": spec["type"], "nullable": True}
        if spec["type"] in ("int", "float"):
            col["lower"] = spec["lower"]
            col["upper"] = spec["upper"]
        table[name] = col
    return {"bench": {job["schema"]: {job["table"]: table}}}


def privacy_for(run: dict):
    from snsql import Privacy
    from snsql.sql._mechanisms.base import Mechanism
    from snsql.sql.privacy import Stat

    privacy = Privacy(epsilon=run["epsilon"], delta=run["delta"])
    if run["mechanism"] == "gaussian":
        privacy.mechanisms.map[Stat.count] = Mechanism.gaussian
    elif run["mechanism"] != "laplace":
        raise ValueError(f"unknown mechanism {run['mechanism']!r}")
    return privacy


def count_scale(run: dict) -> float:
    """The noise scale SmartNoise uses for a COUNT (sensitivity 1) at these parameters."""
    from snsql.sql._mechanisms import Gaussian, Laplace

    cls = Gaussian if run["mechanism"] == "gaussian" else Laplace
    mech = cls(run["epsilon"], delta=run["delta"], sensitivity=1, max_contrib=1)
    return float(mech.scale)


def count_variance(mechanism: str, scale: float) -> float:
    """Noise variance of a count: discrete Laplace (SmartNoise's default) or Gaussian."""
    if mechanism == "gaussian":
        return scale * scale
    q = math.exp(-1.0 / scale)
    return 2.0 * q / (1.0 - q) ** 2


def choose(run: dict) -> dict:
    """Resolve ``"best"`` into the mechanism with the smaller count variance (public choice)."""
    if run["mechanism"] != "best":
        return dict(run)
    options = []
    for mech in ("laplace", "gaussian"):
        try:
            scale = count_scale({**run, "mechanism": mech})
        except ValueError:  # e.g. the Gaussian scale search fails at tiny epsilon
            continue
        options.append((count_variance(mech, scale), mech))
    return {**run, "mechanism": min(options)[1]}


def to_json_value(v):
    if v is None:
        return None
    if isinstance(v, float) and math.isnan(v):
        return None
    if hasattr(v, "isoformat"):           # a datetime group key: ISO text (the suite reads it back)
        return v.isoformat(sep=" ")
    if hasattr(v, "item"):
        v = v.item()
    return v


def main() -> int:
    job = json.load(sys.stdin)
    import pandas as pd
    import snsql

    t0 = time.perf_counter()
    dtypes = {n: ("string" if s["type"] in ("string", "datetime") else "float64") for n, s in job["columns"].items()}
    df = pd.read_csv(job["csv"], dtype=dtypes, keep_default_na=True)
    for n, s in job["columns"].items():
        if s["type"] == "int" and not df[n].isna().any():
            df[n] = df[n].astype("int64")
        if s["type"] == "datetime":
            df[n] = pd.to_datetime(df[n])
    meta = metadata(job)
    load_seconds = time.perf_counter() - t0
    pattern = re.compile(r"\bFROM\s+" + re.escape(job["table"]) + r"\b", re.IGNORECASE)
    queries = [pattern.sub(f"FROM {job['schema']}.{job['table']}", q) for q in job["queries"]]

    out_runs = []
    for run in job["runs"]:
        run = choose(run)
        reader = snsql.from_df(df, privacy=privacy_for(run), metadata=meta)
        trials = []
        for _ in range(run["trials"]):
            answers = []
            for sql in queries:
                q0 = time.perf_counter()
                try:
                    res = reader.execute(sql)
                    rows = [[to_json_value(v) for v in r] for r in res[1:]]
                    answers.append({"rows": rows, "seconds": time.perf_counter() - q0, "error": None})
                except Exception as e:  # a refusal: recorded, the run goes on
                    answers.append({"rows": None, "seconds": time.perf_counter() - q0,
                                    "error": f"{type(e).__name__}: {e}"[:300]})
            trials.append(answers)
        scale = count_scale(run)
        out_runs.append({"trials": trials, "mechanism": run["mechanism"], "scale": scale,
                         "count_variance": count_variance(run["mechanism"], scale)})
    report = {
        "versions": {p: version(p) for p in ("smartnoise-sql", "opendp", "pandas")},
        "load_seconds": load_seconds,
        "runs": out_runs,
        "peak_rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
    }
    json.dump(report, sys.stdout)
    return 0


if __name__ == "__main__":
    sys.exit(main())
