"""``make bi-check``, part 3: a Superset chart over a join of the private table with a public one (issue 31).

    .venv/bin/python bicheck/star_chart.py [--superset-venv bicheck/.venv-superset] [--out bicheck/out]

1. copies the star-schema example (examples/flights: the private ``flights`` and the public
   ``airports`` …) with a one-query workload, flights per origin airport by name, and measures
   it (the operator's step, ε = 1, a fresh ledger);
2. serves it with ``dpsql serve`` and starts a Superset instance, through its REST API: a
   database connection, a *virtual dataset* (created as the physical ``flights`` and edited to
   the join, as Superset's "Edit dataset" dialog does: its creation would sample the SQL with a
   row-level ``LIMIT 1`` that dpsql refuses) whose SQL joins the private table with the public
   dimension (``SELECT f.origin, a.name AS airport, a.tzone FROM flights f JOIN airports a ON
   f.origin = a.faa``), and a bar chart of the count per ``airport``: the only SQL is the
   dataset's and what Superset generates around it (the dataset as a subquery, GROUP BY, LIMIT);
3. fetches the chart's data and the dpsql query log, saves ``docs/img/superset_star_join.png``;
   exits non-zero unless the chart has one row per New York airport, named by the public table,
   answered by the DP engine (the log's route) and not refused.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from drive import PASSWORD, ROOT, log  # noqa: E402
from harness import Check, run  # noqa: E402

WORKLOAD = "SELECT a.name, COUNT(*) FROM flights f JOIN airports a ON f.origin = a.faa GROUP BY a.name"
DATASET_SQL = "SELECT f.origin, a.name AS airport, a.tzone FROM flights f JOIN airports a ON f.origin = a.faa"
# the names of EWR, JFK and LGA in airports.csv (public)
AIRPORTS = {"Newark Liberty Intl", "John F Kennedy Intl", "La Guardia"}


def prepare(work: Path) -> Path:
    shutil.copytree(ROOT / "examples" / "flights", work)
    config = work / "dpsql.toml"
    text = config.read_text()
    head, sep, _ = text.partition("[workload]")
    assert sep, "examples/flights/dpsql.toml has no [workload] table"
    config.write_text(head + "[workload]\nqueries = [" + json.dumps(WORKLOAD) + "]\n")
    for stale in (work / "flights.ledger", work / ".dpsql-cache"):
        if stale.is_dir():
            shutil.rmtree(stale)
        elif stale.exists():
            stale.unlink()
    subprocess.run([sys.executable, "-m", "dpsql.cli", "user", "add", "superset", "--password", PASSWORD,
                    "--config", str(config)], check=True, capture_output=True)
    log("measuring flights per origin airport (ε = 1, a fresh ledger)")
    subprocess.run([sys.executable, "-m", "dpsql.cli", "measure", "--yes", "--config", str(config)], check=True,
                   timeout=1800, cwd=work)
    return config


def chart(dataset_id: int) -> tuple[dict, dict]:
    """A bar chart of the DP count per airport name (a column of the public table)."""
    params = {"datasource": f"{dataset_id}__table", "viz_type": "echarts_timeseries_bar", "x_axis": "airport",
              "metrics": ["count"], "groupby": [], "adhoc_filters": [], "row_limit": 10000,
              "x_axis_title": "origin airport (public airports table)", "y_axis_title": "flights (DP count)",
              "x_axis_title_margin": 30, "y_axis_title_margin": 50, "show_legend": False}
    query = {"columns": [{"columnType": "BASE_AXIS", "sqlExpression": "airport", "label": "airport",
                          "expressionType": "SQL"}],
             "metrics": ["count"], "orderby": [["count", False]], "row_limit": 10000, "filters": [],
             "extras": {"having": "", "where": ""}, "series_columns": []}
    context = {"datasource": {"id": dataset_id, "type": "table"}, "force": True, "queries": [query],
               "form_data": params, "result_format": "json", "result_type": "full"}
    spec = {"slice_name": "Flights per origin airport, joined with airports (dpsql)", "viz_type": params["viz_type"],
            "datasource_id": dataset_id, "datasource_type": "table", "params": json.dumps(params),
            "query_context": json.dumps(context)}
    return spec, context


def check(c: Check) -> bool:
    superset, results = c.superset, c.results
    results["dataset_sql"] = DATASET_SQL
    db = c.database("dpsql star")
    # Superset samples a new virtual dataset's SQL with LIMIT 1 to learn its columns: a
    # row-level read that dpsql refuses by design (42501).  So, as an analyst does in
    # Superset's "Edit dataset" dialog, the physical dataset `flights` is turned into a
    # virtual one (the join) with its columns declared; Superset then only ever sends the
    # aggregates its charts generate around that SQL.
    ds = superset.api("POST", "/api/v1/dataset/", {"database": db["id"], "schema": "public",
                                                    "table_name": "flights"})
    # origin kept (by id), the public columns added; without override_columns, which would
    # re-sample the SQL
    reflected = {col["column_name"]: col["id"] for col in
                 superset.api("GET", f"/api/v1/dataset/{ds['id']}")["result"]["columns"]}
    declared = [{"id": reflected["origin"], "column_name": "origin"}]
    declared += [{"column_name": name, "type": "TEXT", "groupby": True, "filterable": True}
                 for name in ("airport", "tzone")]
    superset.api("PUT", f"/api/v1/dataset/{ds['id']}",
                 {"table_name": "flights_by_airport", "sql": DATASET_SQL, "columns": declared})
    columns = superset.api("GET", f"/api/v1/dataset/{ds['id']}")["result"]["columns"]
    results["dataset_columns"] = {col["column_name"]: col.get("type") for col in columns}
    log(f"virtual dataset {ds['id']}: {results['dataset_columns']}")
    spec, context = chart(ds["id"])
    saved = superset.api("POST", "/api/v1/chart/", spec)
    sql = superset.api("POST", "/api/v1/chart/data", dict(context, result_type="query"))
    results["generated_sql"] = [q.get("query") for q in sql.get("result", [])]
    before = c.logged()
    data = superset.api("POST", "/api/v1/chart/data", context)
    rows = data["result"][0]["data"]
    results["rows"] = rows
    statements = [e for e in c.log_since(before) if e["route"] in ("engine", "error")]
    results["dpsql_statements"] = statements
    log(f"chart {saved['id']}: {rows}; Superset sent {results['generated_sql']}")
    log(f"dpsql log: {statements}")
    shot = c.screenshot(saved["id"], "superset_star_join.png")
    names = {r.get("airport") for r in rows}
    dp = [s for s in statements if "JOIN" in s.get("statement", "").upper()
          and s.get("outcome") == "ok" and s.get("route") == "engine"]
    return names == AIRPORTS and bool(dp) and shot


if __name__ == "__main__":
    sys.exit(run("star", __doc__.splitlines()[0], prepare, check))
