"""``make bi-check``: Apache Superset against ``dpsql serve``, end to end, driven by its REST API.

    .venv/bin/python bicheck/drive.py [--superset-venv bicheck/.venv-superset] [--out bicheck/out]

1. measures the adult example's workload on a fresh ledger (the operator's step);
2. starts ``dpsql serve`` with a query log and adds the analyst ``superset``;
3. starts Superset (its own venv; ``bicheck/run.sh`` creates it), creates an admin;
4. through Superset's REST API: a database connection ``postgresql://superset:…@127.0.0.1:PORT/dpsql``
   (psycopg2, Superset's default driver), a dataset on ``public.adult`` (Superset reflects its
   columns through dpsql's catalog), a bar chart and a table chart, and fetches both charts'
   data, so that Superset generates its own SQL and dpsql answers it;
5. takes a screenshot of each chart in headless Chromium (``bicheck/screenshot.py``);
6. reports every statement Superset sent, from dpsql's query log, with its outcome, and exits
   non-zero unless both charts got rows from the DP engine.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "adult"
PASSWORD = "bi-check-pw"


def log(msg: str) -> None:
    print(f"[bi-check {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# -- dpsql --------------------------------------------------------------------------------------

def prepare_dpsql(out: Path) -> Path:
    work = out / "dpsql"
    work.mkdir(parents=True)
    for name in ("dpsql.toml", "adult.toml", "dashboard.sql"):
        shutil.copy(EXAMPLE / name, work / name)
    (work / "adult.csv").symlink_to(EXAMPLE / "adult.csv")
    # The charts below break races down by sex, which the example dashboard never measures
    # together; under the default policy ("informed") dpsql refuses such an answer rather than
    # return the model's prior, and its hint says to add the marginal to the workload, which is
    # what an operator preparing a BI dashboard does.
    with open(work / "dashboard.sql", "a") as fh:
        fh.write("\n-- the Superset charts' race-by-sex breakdown\n"
                 "SELECT race, sex, COUNT(*) FROM adult GROUP BY race, sex;\n"
                 "-- the average survey weight (fnlwgt, in bins of 50,000) by income\n"
                 "SELECT income, fnlwgt, COUNT(*) FROM adult GROUP BY income, fnlwgt;\n")
    config = work / "dpsql.toml"
    subprocess.run([sys.executable, "-m", "dpsql.cli", "user", "add", "superset", "--password", PASSWORD,
                    "--config", str(config)], check=True, capture_output=True)
    log("measuring the adult workload (the operator's step; spends the example's budget on a fresh ledger)")
    subprocess.run([sys.executable, "-m", "dpsql.cli", "measure", "--yes", "--config", str(config)], check=True,
                   timeout=1800)
    return config


def start_dpsql(config: Path, out: Path):
    proc = subprocess.Popen([sys.executable, "-m", "dpsql.cli", "serve", "--config", str(config), "--port", "0",
                             "--query-log", str(out / "queries.jsonl")],
                            stdout=subprocess.PIPE, stderr=open(out / "dpsql-serve.log", "w"), text=True)
    ready, _, _ = select.select([proc.stdout], [], [], 300)
    line = proc.stdout.readline() if ready else ""
    match = re.match(r"dpsql: ready on 127\.0\.0\.1:(\d+) ", line)
    if match is None:
        proc.kill()
        raise SystemExit(f"dpsql serve did not start: {line!r}; see {out / 'dpsql-serve.log'}")
    log(line.strip())
    return proc, int(match.group(1))


# -- Superset -----------------------------------------------------------------------------------

class Superset:
    def __init__(self, venv: Path, out: Path) -> None:
        self.bin = venv / "bin"
        self.out = out / "superset"
        self.out.mkdir(parents=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = dict(os.environ, SUPERSET_CONFIG_PATH=str(ROOT / "bicheck" / "superset_config.py"),
                        SUPERSET_HOME=str(self.out), BICHECK_OUT=str(self.out), FLASK_APP="superset",
                        PYTHONWARNINGS="ignore")
        self.proc = None
        self.token = ""

    def cli(self, *args: str, timeout: float = 900) -> None:
        with open(self.out / "cli.log", "a") as fh:
            subprocess.run([str(self.bin / "superset"), *args], env=self.env, check=True, stdout=fh,
                           stderr=subprocess.STDOUT, timeout=timeout)

    def start(self) -> None:
        log("superset db upgrade / create-admin / init")
        self.cli("db", "upgrade")
        self.cli("fab", "create-admin", "--username", "admin", "--firstname", "bi", "--lastname", "check",
                 "--email", "admin@localhost", "--password", "admin")
        self.cli("init")
        log(f"starting Superset on {self.url}")
        self.proc = subprocess.Popen([str(self.bin / "superset"), "run", "-h", "127.0.0.1", "-p", str(self.port),
                                      "--with-threads"], env=self.env, stdout=open(self.out / "web.log", "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                if self.proc.poll() is not None:
                    raise SystemExit(f"Superset exited; see {self.out / 'web.log'}") from None
                time.sleep(1)
        else:
            raise SystemExit("Superset did not answer /health within 300 s")
        self.token = self.api("POST", "/api/v1/security/login",
                              {"username": "admin", "password": "admin", "provider": "db", "refresh": True})[
            "access_token"]

    def api(self, method: str, path: str, body=None, expect=(200, 201)):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              **({"Authorization": f"Bearer {self.token}"} if self.token else {})})
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                status, text = r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            status, text = exc.code, exc.read().decode()
        try:
            payload = json.loads(text) if text else {}
        except ValueError:
            payload = {"raw": text[:2000]}
        if status not in expect:
            raise ApiError(method, path, status, payload)
        return payload

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)


class ApiError(Exception):
    def __init__(self, method, path, status, payload) -> None:
        super().__init__(f"{method} {path} -> {status}: {json.dumps(payload)[:1500]}")
        self.status = status
        self.payload = payload


#: AVG over a numeric column in wide bins, picked from the dataset's columns (no custom SQL):
#: Superset offers it because the catalog types fnlwgt as BIGINT (issue 33)
AVG_FNLWGT = {"expressionType": "SIMPLE", "column": {"column_name": "fnlwgt"}, "aggregate": "AVG",
              "label": "AVG(fnlwgt)"}


def chart_specs(dataset_id: int) -> list[dict]:
    """A bar chart (education by count, descending), a table chart (sex x income counts, with
    the error columns dpsql sends by default) and a bar chart of AVG(fnlwgt) by income."""
    datasource = f"{dataset_id}__table"
    bar = {"datasource": datasource, "viz_type": "echarts_timeseries_bar", "x_axis": "education",
           "metrics": ["count"], "groupby": [], "adhoc_filters": [], "row_limit": 1000,
           "x_axis_sort": "count", "x_axis_sort_asc": False, "orientation": "vertical",
           "show_legend": False, "y_axis_title": "people (DP count)", "x_axis_title": "education"}
    table = {"datasource": datasource, "viz_type": "table", "query_mode": "aggregate",
             "groupby": ["sex", "income"], "metrics": ["count"], "adhoc_filters": [], "row_limit": 1000,
             "order_desc": True, "timeseries_limit_metric": "count", "server_pagination": False}
    avg = {"datasource": datasource, "viz_type": "echarts_timeseries_bar", "x_axis": "income",
           "metrics": [AVG_FNLWGT], "groupby": [], "adhoc_filters": [], "row_limit": 1000,
           "orientation": "vertical", "show_legend": False, "y_axis_title": "average fnlwgt (DP)",
           "x_axis_title": "income"}
    out = []
    for name, params, query in (
            ("Education (bar, dpsql)", bar,
             {"columns": [{"columnType": "BASE_AXIS", "sqlExpression": "education", "label": "education",
                           "expressionType": "SQL"}],
              "metrics": ["count"], "orderby": [["count", False]], "row_limit": 1000, "filters": [],
              "extras": {"having": "", "where": ""}, "series_columns": [], "is_timeseries": False}),
            ("Sex by income (table, dpsql)", table,
             {"columns": ["sex", "income"], "metrics": ["count"], "orderby": [["count", False]],
              "row_limit": 1000, "filters": [], "extras": {"having": "", "where": ""}}),
            ("Average fnlwgt by income (bar, dpsql)", avg,
             {"columns": [{"columnType": "BASE_AXIS", "sqlExpression": "income", "label": "income",
                           "expressionType": "SQL"}],
              "metrics": [AVG_FNLWGT], "orderby": [[AVG_FNLWGT, False]], "row_limit": 1000, "filters": [],
              "extras": {"having": "", "where": ""}, "series_columns": [], "is_timeseries": False})):
        query_context = {"datasource": {"id": dataset_id, "type": "table"}, "force": True,
                         "queries": [query], "form_data": params, "result_format": "json", "result_type": "full"}
        out.append({"slice_name": name, "viz_type": params["viz_type"], "datasource_id": dataset_id,
                    "datasource_type": "table", "params": json.dumps(params),
                    "query_context": json.dumps(query_context), "_query_context": query_context})
    return out


def _q(columns, metrics, **extra) -> dict:
    return {"columns": columns, "metrics": metrics, "orderby": [[metrics[0], False]] if metrics else [],
            "row_limit": 1000, "filters": [], "extras": {"having": "", "where": ""}, **extra}


AVG_AGE = {"expressionType": "SIMPLE", "column": {"column_name": "age"}, "aggregate": "AVG", "label": "AVG(age)"}
SUM_HOURS = {"expressionType": "SIMPLE", "column": {"column_name": "hours_per_week"}, "aggregate": "SUM",
             "label": "SUM(hours_per_week)"}
DISTINCT = {"expressionType": "SIMPLE", "column": {"column_name": "race"}, "aggregate": "COUNT_DISTINCT",
            "label": "COUNT_DISTINCT(race)"}
# More of what Superset generates from its chart controls, each sent through /api/v1/chart/data;
# (name, query, result_type, whether dpsql is expected to answer it).
PROBES = [
    ("big number: COUNT(*) without GROUP BY", _q([], ["count"], orderby=[]), "full", True),
    ("filter: income = '>50K'", _q(["sex"], ["count"], filters=[{"col": "income", "op": "==", "val": ">50K"}]),
     "full", True),
    ("filter: age >= 30 (numeric)", _q(["income"], ["count"], filters=[{"col": "age", "op": ">=", "val": 30}]),
     "full", True),
    ("filter: race IN (…)", _q(["sex"], ["count"], filters=[{"col": "race", "op": "IN",
                                                           "val": ["White", "Black"]}]), "full", True),
    ("metric: AVG(age)", _q(["income"], [AVG_AGE]), "full", True),
    ("metric: SUM(hours_per_week)", _q(["sex"], [SUM_HOURS]), "full", True),
    ("two metrics", _q(["income"], ["count", AVG_AGE]), "full", True),
    ("series limit (top 3 races by count, bar per sex)",
     _q(["sex", "race"], ["count"], series_columns=["race"], series_limit=3, series_limit_metric="count",
        order_desc=True), "full", True),
    ("metric: COUNT(DISTINCT race)", _q(["sex"], [DISTINCT]), "full", False),
    ("samples pane (row-level SELECT … LIMIT)", _q([], [], orderby=[]), "samples", False),
]


def run_probes(superset: Superset, dataset_id: int, log_path: Path) -> list[dict]:
    out = []
    for name, query, result_type, expected in PROBES:
        ctx = {"datasource": {"id": dataset_id, "type": "table"}, "force": True, "queries": [query],
               "result_format": "json", "result_type": result_type}
        entry = {"name": name, "expected_answer": expected}
        try:
            sql = superset.api("POST", "/api/v1/chart/data", dict(ctx, result_type="query"))
            entry["generated_sql"] = [q.get("query") for q in sql.get("result", [])]
        except ApiError as exc:
            entry["generated_sql"] = [f"(not shown: {exc.status})"]
        before = len(read_log(log_path))
        try:
            data = superset.api("POST", "/api/v1/chart/data", ctx)
            result = data["result"][0]
            entry["rows"] = len(result.get("data") or [])
            if result.get("error"):
                entry["error"] = result["error"]
        except ApiError as exc:
            entry["error"] = "; ".join(e.get("message", "") for e in exc.payload.get("errors", [])) \
                or json.dumps(exc.payload)[:500]
        statements = [e for e in read_log(log_path, before) if e["route"] in ("engine", "error")]
        entry["dpsql"] = [{k: e[k] for k in ("statement", "outcome", "sqlstate", "message") if k in e}
                          for e in statements]
        entry["answered"] = "error" not in entry and entry.get("rows", 0) > 0
        outcome = (f"answered, {entry['rows']} rows" if entry["answered"]
                   else "refused: " + entry.get("error", "")[:200])
        log(f"probe {name}: {outcome}")
        out.append(entry)
    return out


SQLLAB = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"


def sqllab_error_columns(superset: Superset, database_id: int) -> dict:
    """SQL Lab shows every column dpsql sends: with no SET, each count's 95% half-width and the
    ``inferred`` flag (the server's default error columns, issue 33), the count at its error's
    precision.  Chart queries keep only their own columns and metrics, so charts do not."""
    reply = superset.api("POST", "/api/v1/sqllab/execute/", {"database_id": database_id, "sql": SQLLAB,
                                                            "schema": "public", "runAsync": False})
    columns = [c.get("column_name") or c.get("name") for c in reply.get("columns", [])]
    data = reply.get("data") or []
    ok = columns == ["sex", "count", "count_ci95", "inferred"] and len(data) == 2 \
        and all(row["count_ci95"] > 0 for row in data)
    log(f"SQL Lab {SQLLAB!r}: columns {columns}, rows {data}")
    return {"sql": SQLLAB, "columns": columns, "rows": data, "ok": ok}


def read_log(path: Path, since: int = 0) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines()[since:] if line.strip()]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--superset-venv", default=str(ROOT / "bicheck" / ".venv-superset"))
    ap.add_argument("--out", default=str(ROOT / "bicheck" / "out"))
    ap.add_argument("--screenshots", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    out = Path(args.out).resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    venv = Path(args.superset_venv)
    config = prepare_dpsql(out)
    dpsql_proc, port = start_dpsql(config, out)
    superset = Superset(venv, out)
    results: dict = {"charts": []}
    ok = False
    try:
        superset.start()
        uri = f"postgresql://superset:{PASSWORD}@127.0.0.1:{port}/dpsql"
        log(f"creating the database connection {uri.replace(PASSWORD, '***')}")
        superset.api("POST", "/api/v1/database/test_connection/", {"database_name": "dpsql", "sqlalchemy_uri": uri})
        db = superset.api("POST", "/api/v1/database/", {"database_name": "dpsql", "sqlalchemy_uri": uri,
                                                         "expose_in_sqllab": True, "allow_run_async": False})
        log("creating the dataset public.adult (Superset reflects the columns through dpsql's catalog)")
        ds = superset.api("POST", "/api/v1/dataset/", {"database": db["id"], "schema": "public",
                                                        "table_name": "adult"})
        columns = superset.api("GET", f"/api/v1/dataset/{ds['id']}")["result"]["columns"]
        results["dataset_columns"] = {c["column_name"]: c.get("type") for c in columns}
        log(f"dataset {ds['id']}: {len(columns)} columns: {results['dataset_columns']}")
        # Superset offers AVG/SUM on the columns it takes for numbers (GenericDataType.NUMERIC = 0)
        numeric = sorted(c["column_name"] for c in columns if c.get("type_generic") == 0)
        results["numeric_columns"] = numeric
        log(f"numeric in Superset (AVG/SUM offered): {numeric}")
        all_ok = "fnlwgt" in numeric
        for spec in chart_specs(ds["id"]):
            query_context = spec.pop("_query_context")
            chart = superset.api("POST", "/api/v1/chart/", spec)
            before = len(read_log(out / "queries.jsonl"))
            entry = {"id": chart["id"], "name": spec["slice_name"], "viz_type": spec["viz_type"]}
            try:
                sql = superset.api("POST", "/api/v1/chart/data", dict(query_context, result_type="query"))
                entry["generated_sql"] = [q.get("query") for q in sql.get("result", [])]
                data = superset.api("POST", "/api/v1/chart/data", query_context)
                rows = data["result"][0]["data"]
                entry["rows"] = len(rows)
                entry["sample"] = rows[:3]
                entry["columns"] = data["result"][0].get("colnames")
                log(f"chart {chart['id']} ({spec['viz_type']}): {len(rows)} rows from dpsql, "
                    f"columns {entry['columns']}")
                all_ok = all_ok and len(rows) > 0
            except ApiError as exc:
                entry["error"] = str(exc)
                log(f"chart {chart['id']} ({spec['viz_type']}) FAILED: {exc}")
                all_ok = False
            entry["dpsql_statements"] = [{k: e[k] for k in ("route", "statement", "outcome", "sqlstate", "message")
                                          if k in e} for e in read_log(out / "queries.jsonl", before)]
            results["charts"].append(entry)
        results["sqllab"] = sqllab_error_columns(superset, db["id"])
        all_ok = all_ok and results["sqllab"]["ok"]
        results["probes"] = run_probes(superset, ds["id"], out / "queries.jsonl")
        unexpected = [p["name"] for p in results["probes"] if p["answered"] != p["expected_answer"]]
        if unexpected:
            log(f"probes with an unexpected outcome: {unexpected}")
            all_ok = False
        log("screenshots in headless Chromium")
        shots = Path(args.screenshots)
        shots.mkdir(parents=True, exist_ok=True)
        shot = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "bicheck" / "screenshot.py"), superset.url,
                               str(shots), "--sqllab", str(db["id"]), SQLLAB,
                               *[str(c["id"]) for c in results["charts"]]],
                              capture_output=True, text=True, timeout=600)
        results["screenshots"] = shot.stdout.strip().splitlines()
        if shot.returncode != 0:
            log(f"screenshot failed: {shot.stderr[-2000:]}")
            all_ok = False
        ok = all_ok
    except ApiError as exc:
        log(f"FAILED: {exc}")
        results["error"] = str(exc)
    finally:
        superset.stop()
        dpsql_proc.send_signal(signal.SIGTERM)
        dpsql_proc.wait(60)
    statements = read_log(out / "queries.jsonl")
    results["seconds"] = round(time.monotonic() - t0)
    results["statements"] = {"total": len(statements),
                             "refused": [{k: e[k] for k in ("statement", "sqlstate", "message") if k in e}
                                         for e in statements if e["outcome"] != "ok"],
                             "engine_ok": sum(e["route"] == "engine" and e["outcome"] == "ok" for e in statements)}
    (out / "report.json").write_text(json.dumps(results, indent=2))
    log(f"{len(statements)} statements from Superset reached dpsql; "
        f"{results['statements']['engine_ok']} answered by the DP engine; "
        f"{len(results['statements']['refused'])} refused:")
    for e in results["statements"]["refused"]:
        log(f"  {e.get('sqlstate')} {e.get('message')}: {e['statement'][:300]}")
    log(f"report: {out / 'report.json'}; {results['seconds']} s in all; {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
