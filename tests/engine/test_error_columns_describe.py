"""The error columns a statement gets are decided once, from the compiled statement
(``ir.noisy`` → ``OutputColumn.is_aggregate``): the wire server's Describe announces them
before any row exists, and the executed answer must carry exactly those.  Before, Describe
used the compiler's walker (any aggregate, CASE conditions included), an outer stage its own
(CASE values only), and execution added an error column to every column with a standard
error in some row, so ``SELECT 1 AS one, COUNT(*)`` was described with 4 columns and
answered with 5 (a numeric constant has standard error 0.0)."""

from pathlib import Path

import pytest

import dpsql
from dpsql.server.backend import DpsqlLink

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "adult" / "dpsql.toml"

# statement → its error columns: numbers computed from aggregates (or from a subquery's
# noisy columns) have one; constants, comparisons, text and values a CASE picks by a noisy
# condition (0 or 1, no derivative) have none
STATEMENTS = {
    "SELECT 1 AS one, COUNT(*) AS n FROM adult": ["n_ci95"],
    "SELECT sex, CASE WHEN COUNT(*) > 5 THEN 1 ELSE 0 END AS big FROM adult GROUP BY sex": [],
    "SELECT sex, CASE WHEN COUNT(*) > 5 THEN 'a' ELSE 'b' END AS big FROM adult GROUP BY sex": [],
    "SELECT sex, CASE WHEN n > 5 THEN 1 ELSE 0 END AS big FROM (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex) t":
        [],
    "SELECT sex, n, n > 5 AS many, CAST(n AS INTEGER) AS k FROM (SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex) t":
        ["n_ci95", "k_ci95"],
    "SELECT sex, COUNT(*) AS n, AVG(age) AS a, ROUND(AVG(age), 1) AS r FROM adult GROUP BY sex":
        ["n_ci95", "a_ci95", "r_ci95"],
}


@pytest.fixture(scope="module")
def link(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("describe")
    con = dpsql.connect(CONFIG, user="u", ledger=str(tmp / "l"), cache_dir=str(tmp / "c"),
                        budget={"epsilon": 1.0, "delta": 1e-6})
    con.session.measure()
    con.cursor().execute("SET dpsql.error_columns = 'ci95'")
    link = DpsqlLink.__new__(DpsqlLink)     # the server's engine side, over this connection
    link.connection = con
    yield link
    con.close()


@pytest.mark.parametrize("sql", list(STATEMENTS), ids=[f"s{i}" for i in range(len(STATEMENTS))])
def test_executed_columns_are_the_described_ones(link, sql):
    described = [name for name, _ in link.compile(sql, None).columns if name not in ("inferred", "binned")]
    executed = [c.name for c in link.execute(sql, None).columns]
    assert executed == described
    assert [n for n in executed if n.endswith("_ci95")] == STATEMENTS[sql]
