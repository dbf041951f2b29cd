"""The shell over the real engine: answers, measurement confirmation, history, screen.

At a near-infinite budget (ε = 10⁷) the noise is far below 0.5, so the rounded answers
must equal DuckDB's exact counts over ``examples/adult/adult.csv``; that checks the whole
path from typed keys to the printed table.  The screen test runs ``dpsql shell`` in tmux
on the demo configuration with a scratch ledger and reads the terminal back.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import uuid

import duckdb
import pytest

from tmux_screen import tmux, type_text, wait_screen

from driver import ENTER, UP, driven, run_keys
from fakes import ADULT_CONFIG, ROOT

CSV = ROOT / "examples" / "adult" / "adult.csv"
HUGE = {"epsilon": 1e7, "delta": 1e-6, "per_user": {"epsilon": 1e7}}
SLOW = 600.0  # planning the dashboard and fitting the model, on a busy 2-core machine


# The workload measured for these tests: the queries they check exactly.  (Over the full
# 30-query dashboard the engine's model fit, at its default 1000 iterations, stops a few
# counts short of the measurements when the noise is this small.)
QUERIES = [
    "SELECT sex, COUNT(*) FROM adult GROUP BY sex",
    "SELECT income, COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40 GROUP BY income",
    "SELECT COUNT(*) FROM adult",
]


def _connect(ledger):
    import dpsql
    return dpsql.connect(str(ADULT_CONFIG), ledger=str(ledger), budget=HUGE, workload=QUERIES)


def _exact(sql: str) -> dict:
    return {k: v for k, v in duckdb.sql(sql.replace("FROM adult", f"FROM read_csv('{CSV}')")).fetchall()}


def _printed_counts(out: str, keys) -> dict:
    """``key -> rounded value`` read back from the rendered table."""
    found = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.split("|")]
        if len(cells) == 2 and cells[0] in keys:
            value = cells[1].split("±")[0].replace(",", "").strip()
            found[cells[0]] = round(float(value))
    return found


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    """A connection whose workload was measured through the shell's own \\measure."""
    ledger = tmp_path_factory.mktemp("ledger") / "adult.ledger"
    con = _connect(ledger)
    session = con.session
    assert float(session.budget()["total_spent_rho"]) == 0
    out = run_keys(con, "\\measure" + ENTER + "no" + ENTER)
    assert "Nothing measured; nothing spent." in out
    assert float(session.budget()["total_spent_rho"]) == 0  # "no" spent nothing, ledger included
    assert not [e for e in session.engine.ledger.entries() if e.kind == "charge"]
    out = run_keys(con, "\\measure" + ENTER + "yes" + ENTER, limit=SLOW)
    assert "Measured" in out, out
    assert float(session.budget()["total_spent_rho"]) > 0
    return con


def test_typed_total_is_exact_at_a_huge_budget(measured):
    exact = duckdb.sql(f"SELECT COUNT(*) FROM read_csv('{CSV}')").fetchall()[0][0]
    out = run_keys(measured, "SELECT COUNT(*) FROM adult;" + ENTER, limit=SLOW)
    lines = out.splitlines()
    row = lines[lines.index(next(x for x in lines if x.startswith("-"))) + 1]
    assert round(float(row.split("±")[0].replace(",", ""))) == exact
    assert "(1 row, " in out


@pytest.mark.parametrize("sql", QUERIES[:2])
def test_typed_query_shows_the_exact_table_at_a_huge_budget(measured, sql):
    exact = _exact(sql)
    out = run_keys(measured, sql + ";" + ENTER, limit=SLOW)
    assert "ERROR" not in out, out
    assert _printed_counts(out, exact) == exact
    assert re.search(r"\(2 rows, [\d.]+ (ms|s)\)", out)
    assert "±" in out


def test_values_without_a_supporting_measurement_are_marked(tmp_path):
    # only sex is measured, so a count by age is only the model's prior: refused by default
    # with what to measure; with SET dpsql.policy = 'infer' it is shown with its range.
    import dpsql
    con = dpsql.connect(str(ADULT_CONFIG), ledger=str(tmp_path / "l.ledger"), budget=HUGE,
                        workload=["SELECT sex, COUNT(*) FROM adult GROUP BY sex"])
    con.session.measure()
    out = run_keys(con, "SELECT COUNT(*) FROM adult WHERE age < 20;" + ENTER, limit=SLOW)
    assert "ERROR [0A000]: no released measurement informs this answer: age was never measured" in out
    assert "HINT: add a query such as `SELECT age, COUNT(*) FROM adult GROUP BY age`" in out
    out = run_keys(con, "SET dpsql.policy = 'infer';" + ENTER + "SELECT COUNT(*) FROM adult WHERE age < 20;"
                   + ENTER, limit=SLOW)
    assert "ERROR" not in out, out
    assert "inferred by the model without a supporting measurement" in out
    # a count with nothing measured about age: [0, N] (N exact at this budget)
    # the range's ends are rounded outward (dpsql.display): the noisy total's 48,842.x shows as 48,843
    assert re.search(r"in \[0, 48,84\d\] \*", out), out


def test_describe_shows_the_declared_domain(measured):
    out = run_keys(measured, "\\d adult" + ENTER)
    sex = next(line for line in out.splitlines() if line.startswith(" sex "))
    assert "'Female', 'Male'" in sex


def test_tab_after_an_open_quote_offers_the_declared_labels(measured):
    with driven(measured) as d:
        d.send("SELECT COUNT(*) FROM adult WHERE sex = '\t")
        buffer = d.shell.prompt_session.default_buffer
        d.wait_for(lambda: buffer.complete_state is not None and buffer.complete_state.completions,
                   "completions")
        assert [c.display_text for c in buffer.complete_state.completions] == ["Female", "Male"]
        d.send("\x03")
        d.finish()


def test_sql_errors_carry_sqlstate_hint_and_a_caret(measured):
    out = run_keys(measured, "SELECT COUNT(*) FROM adult WHERE sex = 'Mal';" + ENTER, limit=SLOW)
    lines = out.splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("ERROR ["))
    assert lines[first].startswith("ERROR [22023]: ")
    assert lines[first + 1] == "LINE 1: SELECT COUNT(*) FROM adult WHERE sex = 'Mal'"
    assert lines[first + 1][lines[first + 2].index("^"):].startswith("sex = 'Mal'")
    assert lines[first + 3].startswith("HINT: ") and "'Female', 'Male'" in lines[first + 3]


def test_history_survives_a_restart(measured, tmp_path):
    history = tmp_path / "history"
    sql = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"
    first = run_keys(measured, sql + ";" + ENTER, history=history, limit=SLOW)
    again = run_keys(measured, UP + UP + ENTER, history=history, limit=SLOW)
    # the recalled statement ran: same statement, same model, hence the same answers
    counts = _printed_counts(first, {"Female", "Male"})
    assert set(counts) == {"Female", "Male"}
    assert _printed_counts(again, {"Female", "Male"}) == counts


def test_explain_and_budget(measured):
    out = run_keys(measured, "\\explain SELECT sex, COUNT(*) FROM adult GROUP BY sex" + ENTER + "\\budget" + ENTER)
    assert "ERROR" not in out, out
    assert "you (" in out and "Ledger charges" in out


def test_script_mode_exit_codes(tmp_path, capsys):
    from dpsql.cli import main
    ledger = tmp_path / "l.ledger"
    args = ["shell", "--config", str(ADULT_CONFIG), "--ledger", str(ledger)]
    assert main(args + ["-c", "\\d adult", "-c", "\\budget"]) == 0
    out = capsys.readouterr().out
    assert "'Female', 'Male'" in out and "The ledger has no charges yet." in out
    # a real process, so the exit status is what a calling script sees
    script = tmp_path / "bad.sql"
    script.write_text("\\d adult\nSELECT nosuch FROM adult;\n\\d\n")
    bad = subprocess.run([sys.executable, "-m", "dpsql.cli"] + args + ["-f", str(script)],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert bad.returncode == 1
    assert "'Female', 'Male'" in bad.stdout  # the statements before the error ran
    assert "ERROR [" in bad.stderr and f"({script}, line 2)" in bad.stderr
    assert "Private tables" not in bad.stdout  # and nothing after it


# -- screen ---------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_screen_in_tmux(tmp_path):
    socket = f"dpsql-test-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, DPSQL_HISTORY=str(tmp_path / "history"), TERM="xterm-256color")
    command = (f"cd {ROOT} && exec {sys.executable} -m dpsql.cli shell --config {ADULT_CONFIG} "
               f"--ledger {tmp_path / 'screen.ledger'}")
    subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", "shell", "-x", "110",
                    "-y", "40", command], check=True, env=env, timeout=30)
    try:
        wait_screen(socket, "dpsql=>")
        type_text(socket, "\\measure")
        question = wait_screen(socket, "Measure now? [y/N]")
        assert "Measuring the workload spends ρ =" in question
        type_text(socket, "y")
        wait_screen(socket, "Measured")
        wait_screen(socket, " model ")  # the next prompt (and its toolbar) is up
        type_text(socket, "SELECT sex, COUNT(*) FROM adult GROUP BY sex;")
        wait_screen(socket, "(2 rows")
        screen = wait_screen(socket, "model v1")
        lines = screen.splitlines()
        female = next(line for line in lines if line.startswith(" Female |"))
        male = next(line for line in lines if line.startswith(" Male   |"))
        assert "±" in female and female.index("±") == male.index("±")
        assert lines[lines.index(female) - 1].startswith("--------+-")
        toolbar = [line for line in lines if " user " in line and " left " in line]
        assert toolbar and "ε=" in toolbar[-1] and "model v" in toolbar[-1]
        type_text(socket, "\\q")
    finally:
        tmux(socket, "kill-server", check=False)


def test_the_shell_asks_before_a_query_spends(tmp_path):
    """Issue 17 item 4: under policy "measure" the shell states the cost in ε and ρ and asks;
    "no" spends nothing, "yes" measures once."""
    import dpsql
    # the workload spends half the budget: the other half pays for on-demand measurements
    # (a workload given the whole budget leaves exactly 0; issue 28)
    con = dpsql.connect(str(ADULT_CONFIG), ledger=str(tmp_path / "l.ledger"), budget=HUGE,
                        workload={"queries": ["SELECT sex, COUNT(*) FROM adult GROUP BY sex"], "epsilon": 1e6},
                        policy={"unsupported": "measure", "epsilon": 0.5})
    session = con.session
    session.measure()
    before = float(session.budget()["total_spent_rho"])
    sql = "SELECT race, COUNT(*) FROM adult GROUP BY race;"
    out = run_keys(con, sql + ENTER + "no" + ENTER, limit=SLOW)
    assert "Answering needs a new measurement" in out and "ρ = " in out and "ε = " in out, out
    assert "Nothing measured; nothing spent." in out
    assert float(session.budget()["total_spent_rho"]) == before
    out = run_keys(con, sql + ENTER + "yes" + ENTER, limit=SLOW)
    assert "White" in out and "spent ρ" in out, out
    assert float(session.budget()["total_spent_rho"]) > before
