"""Issue 21: the "measure" policy and workloads of filtered counts answer, never crash.

Reproduced at 859ac49: with nothing measured, the first filtered query was charged and then
raised ``ValueError: estimate: no measurement determines the number of records``, and every
later query on the table failed the same way; a workload of filtered counts alone did the
same after ``dpsql measure``.  At a near-infinite budget the answers equal the exact ones.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import dpsql
from dpsql.engine.config import load_config
from dpsql.measure.exact import ExactOracle

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "adult" / "dpsql.toml"
HUGE = {"rho": 1e7, "per_user": {"rho": 1e7}}


@pytest.fixture(scope="module")
def exact():
    cfg = load_config(CONFIG)
    oracle = ExactOracle(cfg.tables, cfg.sources)
    yield lambda sql: oracle.query(sql)[0][0]
    oracle.close()


def connect(tmp: Path, **kw):
    return dpsql.connect(CONFIG, user="analyst", ledger=str(tmp / "t.ledger"), cache_dir=str(tmp / "cache"),
                         budget=HUGE, **kw)


def test_measure_policy_from_nothing_answers_and_keeps_answering(tmp_path, exact):
    con = connect(tmp_path, workload={"queries": ["SELECT sex, COUNT(*) FROM adult GROUP BY sex"], "rho": 1e5},
                  policy={"unsupported": "measure", "rho": 1e5, "allow_spend": True})
    cur = con.cursor()
    for sql in ["SELECT COUNT(*) FROM adult WHERE age >= 18", "SELECT COUNT(*) FROM adult",
                "SELECT COUNT(*) FROM adult WHERE age <= 89", "SELECT COUNT(*) FROM adult WHERE age >= 17.5"]:
        cur.execute(sql)
        (value,), = cur.fetchall()
        assert cur.inferred == [False], sql    # measured (or derived from a measurement)
        assert value == pytest.approx(exact(sql), abs=0.5), sql
    assert con.session.budget()["spent_rho"] > 0


@pytest.mark.slow
def test_workload_of_filtered_counts_determines_the_total(tmp_path, exact):
    sql = "SELECT COUNT(*) FROM adult WHERE age >= 30"
    con = connect(tmp_path, workload={"queries": [sql], "rho": 1e5}, policy="infer")
    con.session.measure()
    for q in (sql, "SELECT COUNT(*) FROM adult"):
        cur = con.cursor().execute(q)
        assert cur.fetchall()[0][0] == pytest.approx(exact(q), abs=0.5)
        assert cur.inferred == [False]
    # named parameters: two bindings of one statement are two queries (not one cached answer)
    named = "SELECT COUNT(*) FROM adult WHERE age >= %(lo)s"
    a = con.cursor().execute(named, {"lo": 30}).fetchall()
    b = con.cursor().execute(named, {"lo": 60}).fetchall()
    assert a[0][0] == pytest.approx(exact(sql), abs=0.5) and b[0][0] < a[0][0]
