"""Issue 17: a new `dpsql query` process answers at once.

* `dpsql measure` fits and saves the model right after measuring (the first query of the
  next process took 27.9 s on a 55-marginal workload: it fitted).
* A process answering from the saved model reads no source file (its hash is kept beside the
  ledger) and imports only what answering needs: the planner
  with scipy.optimize/linalg, networkx, DuckDB and the server cost 1.7-3.0 s of a 1.76-2.06 s
  answer on a loaded machine.  Checked in a fresh interpreter from sys.modules (no timing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
WORKLOAD = ["SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race",
            "SELECT age, income, COUNT(*) FROM adult GROUP BY age, income",
            "SELECT education, sex, COUNT(*) FROM adult GROUP BY education, sex",
            "SELECT COUNT(*) FROM adult WHERE age BETWEEN 25 AND 54"]
QUERIES = ["SELECT sex, COUNT(*) FROM adult GROUP BY sex",
           "SELECT race, COUNT(*) FROM adult WHERE sex = 'Female' GROUP BY race",
           "SELECT COUNT(*) FROM adult WHERE age BETWEEN 25 AND 54 AND income = '>50K'",
           "SELECT income, AVG(age) FROM adult GROUP BY income"]

pytestmark = pytest.mark.slow   # each test measures, then answers in new CLI processes

# Modules a process answering from a saved model must not import: the planner and its
# numerics, the fit's sparse loss, the junction-tree builder, the source engine, the front
# ends it does not use, and optional extras.
HEAVY = ("scipy", "networkx", "duckdb", "dpsql.plan.planner", "dpsql.plan.operators", "dpsql.plan.marginals",
         "dpsql.measure.backend", "dpsql.server.server", "prompt_toolkit", "pyarrow", "pandas",
         "psycopg", "ssl")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "dpsql.cli", *args], env=_env(),
                          capture_output=True, text=True, timeout=600)


ANSWER = """
import json, sys
read = set()
sys.addaudithook(lambda event, args: read.add(str(args[0]))
                 if event == "open" and str(args[0]).endswith(".csv") else None)
from dpsql.cli import main
for sql in json.loads(sys.argv[2]):
    assert main(["query", "--config", sys.argv[1], sql]) == 0
print("READ " + json.dumps(sorted(read)))
print("MODULES " + json.dumps(sorted(sys.modules)))
"""


def _answer_in_new_process(cfg: Path) -> tuple[str, list[str]]:
    r = subprocess.run([sys.executable, "-c", ANSWER, str(cfg), json.dumps(QUERIES)], env=_env(),
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    out, _, mods = r.stdout.rpartition("MODULES ")
    out, _, read = out.rpartition("READ ")
    assert json.loads(read) == [], "a new process read the source file to answer from a saved model"
    return out, json.loads(mods)


@pytest.mark.parametrize("planner", [{}, {"max_model_cells": 200}], ids=["exact", "relaxed"])
def test_measure_saves_the_model_and_a_new_process_imports_only_what_answering_needs(adult_config, tmp_path, planner):
    cfg = adult_config(queries=WORKLOAD, ledger=tmp_path / "q.ledger", planner=planner)
    r = _cli("measure", "--config", str(cfg), "--yes")
    assert r.returncode == 0, r.stderr
    assert "fitting the model" in r.stdout and "model ready" in r.stdout
    saved = list((tmp_path / "q.ledger.models").glob("adult-*.npz"))
    assert len(saved) == 1

    out, modules = _answer_in_new_process(cfg)
    heavy = sorted(m for m in modules if m.split(".")[0] in HEAVY or m.startswith(HEAVY))
    assert not heavy, f"answering from a saved model imported {heavy}"
    assert out.count(" row") == len(QUERIES) and "Female" in out

    # the same answers, printed the same way, as this process gets from the same saved model
    import io

    from dpsql.cli import print_result
    from dpsql.dbapi import connect
    con = connect(cfg)
    events = []
    con.session.engine.add_listener(lambda stage, info: events.append((stage, dict(info))))
    cur = con.cursor()
    expected = io.StringIO()
    for sql in QUERIES:
        cur.execute(sql)
        print_result(cur.result, out=expected)
    assert out == expected.getvalue()
    assert any(info.get("loaded") for stage, info in events if stage == "fit")
    assert not any("iteration" in info for _, info in events)


def test_measure_no_fit_leaves_the_fit_to_the_first_query(adult_config, tmp_path):
    cfg = adult_config(queries=WORKLOAD, ledger=tmp_path / "q.ledger")
    r = _cli("measure", "--config", str(cfg), "--yes", "--no-fit")
    assert r.returncode == 0, r.stderr
    assert "fitting" not in r.stdout
    assert not list((tmp_path / "q.ledger.models").glob("*.npz"))
    r = _cli("query", "--config", str(cfg), QUERIES[0])
    assert r.returncode == 0, r.stderr
    assert len(list((tmp_path / "q.ledger.models").glob("*.npz"))) == 1
