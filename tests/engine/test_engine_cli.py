"""The `dpsql` command line, run as a user would (a subprocess per command)."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "adult" / "dpsql.toml"


def run(*args, cwd=None, input=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "dpsql.cli", *args], cwd=cwd, env=env, input=input,
                          capture_output=True, text=True, timeout=600)


def test_init_drafts_schema_only_config(tmp_path):
    csv = tmp_path / "people.csv"
    csv.write_text("age,name,score\n31,Ann,2.5\n45,Bob,3.0\n")
    r = run("init", str(csv), "-o", str(tmp_path / "dpsql.toml"))
    assert r.returncode == 0, r.stderr
    domain = (tmp_path / "people.domain.toml").read_text()
    assert 'type = "integer"' in domain and 'type = "categorical"' in domain and 'type = "numeric"' in domain
    # nothing read off the rows: no value of the data appears in the draft
    for value in ("31", "45", "Ann", "Bob", "2.5"):
        assert value not in domain
    assert "PUBLIC" in domain
    again = run("init", str(csv), "-o", str(tmp_path / "dpsql.toml"))
    assert again.returncode == 2 and "--force" in again.stderr


@pytest.fixture()
def config(adult_config):
    """The adult example's settings (docs/config.md) with a temp ledger and a two-query workload."""
    return adult_config(queries=["SELECT sex, COUNT(*) FROM adult GROUP BY sex",
                                 "SELECT race, COUNT(*) FROM adult GROUP BY race"],
                        dpsql={"noise": "gaussian", "policy": "informed"},
                        table_options={"privacy_unit": "row"}, planner={"restarts": 3, "seed": 0},
                        sections={"budget.per_user": {"epsilon": 1.0}})


@pytest.mark.slow
def test_plan_measure_query_budget(config):
    r = run("plan", "--config", str(config))
    assert r.returncode == 0, r.stderr
    assert "expected RMSE" in r.stdout and "baseline" in r.stdout
    # the per-query table (issue 16): std err, baseline, ratio, floor, weight per query
    assert "std err" in r.stdout and "ratio" in r.stdout and "floor" in r.stdout
    assert "SELECT race, COUNT(*) FROM adult GROUP BY race" in r.stdout
    r = run("measure", "--config", str(config), input="no\n")
    assert r.returncode == 1 and "nothing spent" in r.stdout
    r = run("budget", "--config", str(config))
    assert "spent rho = 0" in r.stdout
    r = run("measure", "--config", str(config), "--yes")
    assert r.returncode == 0, r.stderr
    assert "spent rho" in r.stdout
    r = run("query", "--config", str(config), "SELECT sex, COUNT(*) FROM adult GROUP BY sex")
    assert r.returncode == 0, r.stderr
    assert "Female" in r.stdout and "±" in r.stdout and "(2 rows)" in r.stdout
    r = run("query", "--config", str(config), "SELECT * FROM adult")
    assert r.returncode == 2 and "42501" in r.stderr and "HINT" in r.stderr


# -- issue 17, item 5: the operator's CLI explains itself (no tracebacks) ---------------------

def _no_traceback(r):
    assert "Traceback" not in r.stderr and "Traceback" not in r.stdout, r.stderr


@pytest.mark.slow
def test_measure_without_a_terminal_asks_nothing_twice_and_never_crashes(config):
    r = run("measure", "--config", str(config), input="")          # stdin at EOF
    _no_traceback(r)
    assert r.returncode == 1 and "nothing spent" in r.stdout
    assert run("measure", "--config", str(config), "--yes").returncode == 0
    r = run("measure", "--config", str(config), input="")          # nothing left to spend
    _no_traceback(r)
    assert r.returncode == 0 and "already measured" in r.stdout and "Continue?" not in r.stdout


@pytest.mark.slow
def test_query_into_a_closed_pipe_stops_quietly(config):
    assert run("measure", "--config", str(config), "--yes").returncode == 0
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(f"{sys.executable} -m dpsql.cli query --config {config} "
                       "'SELECT race, COUNT(*) FROM adult GROUP BY race' | head -c 1",
                       shell=True, env=env, capture_output=True, text=True, timeout=600)
    _no_traceback(r)
    assert "BrokenPipe" not in r.stderr


def test_user_add_without_a_terminal_is_a_message(config):
    r = run("user", "add", "carol", "--config", str(config), input="")
    _no_traceback(r)
    assert r.returncode == 2 and "standard input ended" in r.stderr


def test_serve_on_a_busy_port_is_a_message(config):
    import socket
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        r = run("serve", "--config", str(config), "--port", str(port), "--no-catalog")
    _no_traceback(r)
    assert r.returncode == 2 and "already in use" in r.stderr and "--port" in r.stderr


def test_a_renamed_header_is_explained_to_the_operator(tmp_path, config):
    csv = tmp_path / "renamed.csv"
    lines = (CONFIG.parent / "adult.csv").read_text().splitlines()
    csv.write_text("\n".join([lines[0].replace("capital_gain", "capital gain")] + lines[1:50]) + "\n")
    text = config.read_text().replace(str(CONFIG.parent / "adult.csv"), str(csv))
    config.write_text(text)
    r = run("measure", "--config", str(config), "--yes")
    _no_traceback(r)
    assert r.returncode == 2 and "capital_gain" in r.stderr, r.stderr
    assert run("budget", "--config", str(config)).stdout.count("spent rho = 0") >= 2


# -- issue 17, item 6: `dpsql init` ------------------------------------------------------------

def _toml(path):
    import tomllib
    return tomllib.loads(path.read_text())


def test_init_quotes_any_column_name_and_lists_every_missing_item(tmp_path):
    csv = tmp_path / "people.csv"
    csv.write_text("age,capital gain,native-country,income>50K\n31,0,US,1\n")
    r = run("init", str(csv), "-o", str(tmp_path / "dpsql.toml"))
    assert r.returncode == 0, r.stderr
    columns = _toml(tmp_path / "people.domain.toml")["tables"]["people"]["columns"]
    assert list(columns) == ["age", "capital gain", "native-country", "income>50K"]
    # every blank is listed at once, by the draft and by the loader
    assert r.stdout.count("  - column ") == 7          # lo and hi of three integers, labels
    r = run("plan", "--config", str(tmp_path / "dpsql.toml"))
    _no_traceback(r)
    assert r.returncode == 2 and "4 columns need attention" in r.stderr
    for name in ("age", "capital gain", "native-country", "income>50K"):
        assert f"column '{name}'" in r.stderr


def test_init_reads_parquet_as_parquet(tmp_path):
    import duckdb
    pq = tmp_path / "t.parquet"
    duckdb.sql(f"COPY (SELECT 1 AS a, 'x' AS b) TO '{pq}' (FORMAT parquet)")
    assert run("init", str(pq), "-o", str(tmp_path / "dpsql.toml")).returncode == 0
    assert "parquet" in _toml(tmp_path / "t.domain.toml")["tables"]["t"]["source"]


def test_init_reads_a_duckdb_table(tmp_path):
    import duckdb
    db = tmp_path / "w.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE people (age INTEGER, city VARCHAR)")
    con.close()
    r = run("init", str(db), "--table", "people", "-o", str(tmp_path / "dpsql.toml"))
    assert r.returncode == 0, r.stderr
    table = _toml(tmp_path / "people.domain.toml")["tables"]["people"]
    assert table["source"]["table"] == "people" and list(table["columns"]) == ["age", "city"]


def test_init_reads_a_domain_json_into_a_complete_config(tmp_path):
    data = Path("/work/shared/data/titanic")
    if not data.exists():
        pytest.skip("benchmark data not available")
    r = run("init", str(data / "titanic-domain.json"), "-o", str(tmp_path / "dpsql.toml"))
    assert r.returncode == 0, r.stderr
    assert "the domain is complete" in r.stdout
    from dpsql.engine.config import load_config
    cfg = load_config(tmp_path / "dpsql.toml")
    assert cfg.tables["titanic"].domain.shape[:3] == (3, 3, 2)


def test_init_reads_smartnoise_metadata(tmp_path):
    meta = tmp_path / "pums.yaml"
    meta.write_text("""Database:
    PUMS:
        PUMS:
            rows: 1000
            row_privacy: True
            age:
                type: int
                lower: 0
                upper: 100
            sex:
                type: string
            married:
                type: boolean
            income:
                type: float
                lower: 0
                upper: 500000
""")
    r = run("init", str(meta), "-o", str(tmp_path / "dpsql.toml"))
    assert r.returncode == 0, r.stderr
    cols = _toml(tmp_path / "pums.domain.toml")["tables"]["pums"]["columns"]
    assert cols["age"] == {"type": "integer", "lo": 0, "hi": 100}
    assert cols["married"]["labels"] == ["false", "true"] and cols["sex"]["type"] == "categorical"
    assert "source" in r.stdout and "'sex' (categorical): labels" in r.stdout


def test_serve_warns_about_analysts_without_a_cap_under_the_measure_policy(adult_config, tmp_path):
    """Issue 34 item 3: an unlisted analyst's cap is 0, not the global budget; `serve` names
    the analysts who therefore cannot spend under the `measure` policy."""
    config = adult_config(queries=["SELECT sex, COUNT(*) FROM adult GROUP BY sex"],
                          sections={"policy": {"unsupported": "measure", "epsilon": 0.1},
                                    "budget.users.alice": {"epsilon": 0.5}})
    for name in ("alice", "carol"):
        r = run("user", "add", name, "--config", str(config), "--password-stdin", input="pw-123456\n")
        assert r.returncode == 0, r.stderr
    import socket
    with socket.socket() as busy:    # the warning comes before the port is bound
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        r = run("serve", "--config", str(config), "--port", str(busy.getsockname()[1]), "--no-catalog")
    warning = [line for line in r.stderr.splitlines() if "no budget cap" in line]
    assert len(warning) == 1 and "carol" in warning[0] and "alice" not in warning[0], r.stderr


@pytest.mark.parametrize("users", [{}, {"budget.users.alice": {"epsilon": 0.5}}])
def test_an_unlisted_analyst_may_spend_nothing(adult_config, users):
    """Issue 34 item 3: without [budget.per_user] an analyst not listed in [budget.users] had
    the whole global budget under the `measure` policy; now their cap is 0 and nothing is spent."""
    import dpsql
    config = adult_config(queries=["SELECT sex, COUNT(*) FROM adult GROUP BY sex"],
                          sections={"policy": {"unsupported": "measure", "epsilon": 0.1,
                                               "allow_spend": True}, **users})
    con = dpsql.connect(str(config), user="mallory")
    assert con.session.engine.ledger.remaining("mallory") == 0
    if users:
        assert con.session.engine.ledger.remaining("alice") > 0
    with pytest.raises(dpsql.Error, match="mallory"):
        con.cursor().execute("SET dpsql.policy = 'measure'")
    assert con.session.engine.ledger.spent() == 0


# -- issue 35, item 5: planning is free in every sense ----------------------------------------

def test_plan_creates_no_ledger_and_compares_budgets(adult_config, tmp_path):
    config = adult_config(queries=["SELECT sex, COUNT(*) FROM adult GROUP BY sex"],
                          planner={"restarts": 1, "seed": 0})
    ledger = tmp_path / "dpsql.ledger"
    r = run("plan", "--config", str(config))
    assert r.returncode == 0, r.stderr
    assert not ledger.exists()                  # planning neither creates nor binds the ledger
    assert "budget: epsilon = 1 at delta = 1e-06" in r.stdout
    text = config.read_text()
    r2 = run("plan", "--config", str(config), "--epsilon", "2")
    assert r2.returncode == 0, r2.stderr
    assert "budget: epsilon = 2 at delta = 1e-06" in r2.stdout and "configuration says epsilon = 1" in r2.stdout
    r3 = run("plan", "--config", str(config), "--epsilon", "1", "--delta", "1e-9")
    assert r3.returncode == 0 and "epsilon = 1 at delta = 1e-09" in r3.stdout, r3.stderr
    r4 = run("plan", "--config", str(config), "--rho", "0.5")
    assert r4.returncode == 0 and "rho = 0.5)" in r4.stdout, r4.stderr
    # more budget, less noise: the what-if plans really are at the budget asked for
    assert "at rho = 0.5," in r4.stdout and "at rho = 0.5," not in r.stdout
    assert r2.stdout != r.stdout and r3.stdout != r.stdout
    assert config.read_text() == text and not ledger.exists()
    bad = run("plan", "--config", str(config), "--delta", "1e-9")
    assert bad.returncode == 2 and "--delta is the δ of --epsilon" in bad.stderr
    # a ledger bound to another budget does not stop planning at a new one
    import dpsql
    dpsql.connect(str(config)).close()
    assert ledger.exists()
    config.write_text(text.replace("epsilon = 1.0", "epsilon = 2.0"))
    r = run("plan", "--config", str(config))
    assert r.returncode == 0 and "budget: epsilon = 2 at delta" in r.stdout, r.stderr
    # ...and measuring then says, in epsilon words, what differs and what to change
    r = run("measure", "--config", str(config), "--yes")
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert "ε = 1 at δ = 1e-06" in r.stderr and "ε = 2 at δ = 1e-06" in r.stderr
    assert "total_rho" not in r.stderr and "HINT" in r.stderr and "[budget]" in r.stderr


def test_init_drafts_date_and_timestamp_columns(tmp_path):
    """Issue 30: DATE and TIMESTAMP columns were drafted as categoricals with labels to fill
    (and then refused by `dpsql check`); a CSV's date-like text likewise, now to confirm."""
    import duckdb
    pq = tmp_path / "flights.parquet"
    duckdb.sql(f"COPY (SELECT DATE '2013-01-05' AS flight_date, TIMESTAMP '2013-01-05 10:00:00' AS time_hour, "
               f"TIMESTAMPTZ '2013-01-05 10:00:00+00' AS departed, 'AA' AS carrier) TO '{pq}' (FORMAT parquet)")
    r = run("init", str(pq), "-o", str(tmp_path / "dpsql.toml"))
    assert r.returncode == 0, r.stderr
    domain = (tmp_path / "flights.domain.toml").read_text()
    columns = _toml(tmp_path / "flights.domain.toml")["tables"]["flights"]["columns"]
    assert [c["type"] for c in columns.values()] == ["date", "timestamp", "timestamp", "categorical"]
    assert columns["time_hour"]["timezone"] == "UTC"
    assert "# bin = ?" in domain and "2013-01-05" not in domain and "TO CONFIRM" not in domain
    assert r.stdout.count("  - column ") == 3 * 3 + 1          # lo, hi, bin of three; labels
    csv = tmp_path / "trips.csv"
    csv.write_text("day,n\n2013-01-05,3\n2013-01-06,4\n")
    r = run("init", str(csv), "-o", str(tmp_path / "t.toml"))
    assert r.returncode == 0, r.stderr
    domain = (tmp_path / "trips.domain.toml").read_text()
    assert 'type = "date"' in domain and "# TO CONFIRM: the CSV text looked like dates" in domain
    assert "confirm it is ISO 8601" in r.stdout


def test_a_one_shot_command_puts_its_imports_out_of_the_collectors_sight(adult_config):
    # issue 35: a new process's full collections rescanned every imported object (0.1 of
    # 0.73 CPU-s of `dpsql query`); _connect freezes them once the command is connected
    import argparse
    import gc

    from dpsql import cli
    gc.unfreeze()
    try:
        con, _ = cli._connect(argparse.Namespace(config=str(adult_config()), user=None))
        assert gc.get_freeze_count() > 0
        con.close()
    finally:
        gc.unfreeze()
