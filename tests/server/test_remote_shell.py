"""``dpsql shell --connect``: the shell as an analyst's client of ``dpsql serve`` (issue 33).

The same rendering (each value ``± half-width``, inferred values with their range), the
declared domains from the catalog (``\\d``, label completion), the budget from
``dpsql_budget()`` (toolbar, ``\\budget``), ``\\explain`` from the server's EXPLAIN, and no
operator powers: ``\\measure`` and the ledger are refused with a message.  Script mode runs
the real command in a subprocess; the screen test drives it in tmux against the real engine."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import uuid

import pytest

from tmux_screen import tmux, type_text, wait_screen

from dpsql.display import Z95

from server_fakes import PASSWORD, ROOT

pytest.importorskip("psycopg", reason="psycopg not installed (pip install -e '.[dev]')")


def _url(port, user="alice") -> str:
    return f"postgresql://{user}@127.0.0.1:{port}/dpsql?sslmode=disable"


def _shell(port, *commands, user="alice"):
    env = dict(os.environ, PGPASSWORD=PASSWORD, PGCONNECT_TIMEOUT="10")
    env.pop("PGOPTIONS", None)
    args = [sys.executable, "-m", "dpsql.cli", "shell", "--connect", _url(port, user)]
    for c in commands:
        args += ["-c", c]
    return subprocess.run(args, capture_output=True, text=True, env=env, timeout=180, cwd=ROOT)


def test_script_mode_renders_like_the_operators_shell(engine_server):
    thread, admin = engine_server
    sql = "SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40 GROUP BY sex"
    r = _shell(thread.port, sql + ";", "\\d adult", "\\d adult native_country", "\\budget",
               "\\explain " + sql)
    assert r.returncode == 0, r.stderr
    out = r.stdout
    lines = out.splitlines()
    # the operator's in-process answer to the same query (same ledger, same model), rendered
    # by the same rule: the wire's rounded value and half-width give the same cells
    cur = admin.cursor()
    cur.execute(sql)
    for (sex, count), (_, se) in zip(cur.fetchall(), cur.stderr):
        row = next(line for line in lines if line.startswith(f" {sex}"))
        value, _, error = row.split("|")[1].partition("±")
        assert float(value.replace(",", "")) == pytest.approx(count, abs=se * Z95 / 10 + 0.5), row
        assert float(error.replace(",", "")) == pytest.approx(se * Z95, rel=0.06), row
    assert "(2 rows" in out
    # \d from the catalog: types, kinds and declared domains as in process
    assert "Table 'adult': declared (public) domain of" in out
    age = next(line for line in lines if line.startswith(" age "))
    assert "bigint" in age and "17..90" in age
    assert "Column 'native_country' of 'adult': text, categorical" in out and "'Holand-Netherlands'" in out
    # \budget from dpsql_budget(); the ledger's charges are not the analyst's to read
    assert "from the server's dpsql_budget()" in out and "you (alice)" in out
    assert "Ledger charges" not in out
    assert "supported by released measurements" in out      # \explain: the server's EXPLAIN


@pytest.mark.parametrize("command", ["\\measure -y", "\\plan", "\\workload x.sql", "\\synth out.csv"])
def test_operator_commands_are_refused(engine_server, command):
    thread, admin = engine_server
    before = admin.session.budget()["total_spent_rho"]
    r = _shell(thread.port, command)
    assert r.returncode == 1
    assert "is the operator's" in r.stderr and "connected to dpsql serve as an analyst" in r.stderr, r.stderr
    assert "ERROR [42501]" in r.stderr and "HINT: ask your operator" in r.stderr
    assert admin.session.budget()["total_spent_rho"] == before


def test_engine_errors_keep_their_sqlstate_hint_and_caret(engine_server):
    thread, _ = engine_server
    r = _shell(thread.port, "SELECT COUNT(*) FROM adult WHERE sex = 'Mal';")
    assert r.returncode == 1
    assert "ERROR [22023]: 'Mal' is not a declared value of column 'sex'" in r.stderr
    assert "LINE 1: SELECT COUNT(*) FROM adult WHERE sex = 'Mal'" in r.stderr and "^" in r.stderr
    assert "HINT: allowed values: 'Female', 'Male'" in r.stderr


def test_without_connect_the_options_conflict_is_explained(engine_server):
    thread, _ = engine_server
    env = dict(os.environ, PGPASSWORD=PASSWORD)
    r = subprocess.run([sys.executable, "-m", "dpsql.cli", "shell", "--connect", _url(thread.port), "--config",
                        "x.toml", "-c", "\\d"], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT)
    assert r.returncode != 0 and "--connect talks to dpsql serve" in r.stderr


# -- screen -----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_connected_shell_on_screen(engine_server, tmp_path):
    """The acceptance test of issue 33: completion of a declared label from the catalog, ``±``
    in the table, the budget in the toolbar, and ``\\measure`` refused, on a real terminal."""
    thread, admin = engine_server
    socket = f"dpsql-remote-{uuid.uuid4().hex[:8]}"
    env = dict(os.environ, DPSQL_HISTORY=str(tmp_path / "history"), TERM="xterm-256color", PGPASSWORD=PASSWORD)
    env.pop("PGOPTIONS", None)
    command = f"cd {ROOT} && exec {sys.executable} -m dpsql.cli shell --connect '{_url(thread.port)}'"
    subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", "shell", "-x", "120",
                    "-y", "40", command], check=True, env=env, timeout=30)
    try:
        screen = wait_screen(socket, "dpsql=>")
        toolbar = [line for line in screen.splitlines() if " user alice" in line]
        assert toolbar and " left ε=" in toolbar[-1] and f"server 127.0.0.1:{thread.port}" in toolbar[-1], screen
        # Tab offers the declared labels of sex, read from the server's catalog
        type_text(socket, "SELECT sex, COUNT(*) FROM adult WHERE age BETWEEN 30 AND 40 AND sex = 'Fe", enter=False)
        tmux(socket, "send-keys", "-t", "shell", "Tab")
        wait_screen(socket, "sex = 'Female'")
        type_text(socket, " GROUP BY sex;")
        screen = wait_screen(socket, "(1 row")
        female = next(line for line in screen.splitlines() if line.startswith(" Female |"))
        assert "±" in female
        type_text(socket, "\\measure -y")
        screen = wait_screen(socket, "is the operator's")
        assert "ERROR [42501]: \\measure is the operator's" in screen
        type_text(socket, "\\q")
    finally:
        tmux(socket, "kill-server", check=False)
    # history is kept as in the operator's shell
    assert "GROUP BY sex" in (tmp_path / "history").read_text()
