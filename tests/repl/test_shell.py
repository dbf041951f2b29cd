"""The shell application driven through prompt-toolkit's pipe input, over a fake session.

These check the interactive behaviour itself (Enter, multi-line statements, meta-commands,
confirmation, history, Ctrl-C) independently of the engine; ``test_engine_shell.py`` runs
the same application over the real engine.
"""

import csv

from driver import CTRL_C, DOWN, ENTER, TAB, UP, driven, run_keys
from fakes import SEX_COUNTS, Column, FakeConnection, FakeSession, Result
from dpsql import errors

SEX_SQL = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"


def _session(**kw):
    return FakeSession({SEX_SQL: SEX_COUNTS}, **kw)


def test_a_query_and_enter_prints_the_table():
    s = _session()
    out = run_keys(FakeConnection(s), SEX_SQL + ";" + ENTER)
    assert s.executed == [SEX_SQL]
    assert " Female | 16,192 ± 24 " in out
    assert " Male   | 32,650 ± 30 " in out
    assert "(2 rows, 12.3 ms)" in out


def test_enter_inside_a_statement_continues_it_on_a_new_line():
    s = _session()
    s.results["SELECT sex, COUNT(*)\nFROM adult GROUP BY sex"] = SEX_COUNTS
    out = run_keys(FakeConnection(s), "SELECT sex, COUNT(*)" + ENTER + "FROM adult GROUP BY sex;" + ENTER)
    assert s.executed == ["SELECT sex, COUNT(*)\nFROM adult GROUP BY sex"]
    assert "(2 rows" in out


def test_several_statements_on_one_line_run_in_order():
    s = _session()
    run_keys(FakeConnection(s), f"{SEX_SQL}; {SEX_SQL};" + ENTER)
    assert s.executed == [SEX_SQL, SEX_SQL]


def test_errors_show_sqlstate_caret_and_hint_and_the_shell_carries_on():
    s = _session()
    out = run_keys(FakeConnection(s), "SELECT COUNT(*) FROM nope;" + ENTER + SEX_SQL + ";" + ENTER)
    lines = out.splitlines()
    i = lines.index("ERROR [42P01]: table 'nope' is not a private table of this configuration")
    assert lines[i + 1] == "LINE 1: SELECT COUNT(*) FROM nope"
    assert lines[i + 2].index("^") == lines[i + 1].index("nope")
    assert lines[i + 3] == "HINT: tables: adult"
    assert "(2 rows" in out


def test_describe_lists_tables_and_the_declared_domain():
    out = run_keys(FakeConnection(_session()), "\\d" + ENTER + "\\d adult" + ENTER)
    assert "Private tables" in out and " adult " in out
    lines = out.splitlines()
    rows, domains, col = {}, {}, None
    for line in lines[lines.index(next(x for x in lines if x.startswith("Table 'adult'"))) + 3:]:
        if "|" not in line:
            break
        cells = [c.strip() for c in line.split("|")]
        if cells[0]:
            col = cells[0]
            rows[col] = cells
            domains[col] = cells[-1]
        else:  # a long domain continues on the next lines
            domains[col] += " " + cells[-1]
    # the wire catalog's types (dpsql.labels.catalog_type): what a column can be aggregated as
    assert rows["sex"][1:] == ["text", "categorical", "no", "2", "'Female', 'Male'"]
    assert rows["age"][1:] == ["bigint", "integer", "no", "74", "17..90"]
    assert rows["fnlwgt"][1] == "bigint"   # in bins of 50,000, still averaged as a number
    assert domains["fnlwgt"] == "1..1500000 in bins of 50000"
    assert domains["capital_loss"] == "0..5000 in bins starting at 0, 1, 500, 1000, 1500, 2000, 2500, 3000"
    assert rows["workclass"][3] == "yes" and domains["workclass"].endswith("'Never-worked', NULL")
    assert domains["native_country"].count("'") == 2 * 41
    # wrapped to the (dummy) 80-column screen; only a single label longer than the room may stick out
    table = [line for line in lines if "|" in line and line.split("|")[0].strip() in ("",) + tuple(rows)]
    assert all(len(line.rstrip()) <= 80 or " " not in line.split("|")[-1].strip() for line in table)


def _flights():
    """A table with a 1,459-label open categorical (the FAA airport list's size) and a closed one."""
    import itertools
    import string
    from dpsql.domain import Categorical, TableSchema
    codes = ["".join(t) for t in itertools.product(string.ascii_uppercase, repeat=3)][:1459]
    return TableSchema("flights", (Categorical("carrier", ["AA", "DL"], closed=True),
                                   Categorical("dest", codes)))


def test_describe_summarises_a_long_domain_and_explains_the_other_cell():
    """Issue 33 item 7: ``\\d flights`` printed all 1,459 labels (a 194-line pager)."""
    s = _session()
    s.engine.catalog = {"flights": _flights()}
    out = run_keys(FakeConnection(s), "\\d flights" + ENTER)
    grid = [line for line in out.splitlines() if "|" in line]
    dest = " ".join(line.split("|")[-1].strip() for line in grid[grid.index(next(
        line for line in grid if line.startswith(" dest "))):])
    assert dest.startswith("'AAA', 'AAB'") and "'CDC'" not in dest
    assert dest.endswith("… and 1,451 more (1,459 labels; \\d flights dest lists all), (any other value)")
    assert len(grid) < 10
    note = " ".join(out.split("(any other value): ", 1)[1].split())
    assert note.startswith("in 'dest', every value that is not a declared label is counted in one (other) cell")
    out = run_keys(FakeConnection(s), "\\d flights dest" + ENTER)
    assert "Column 'dest' of 'flights': text, categorical, 1,460 cells, 1,459 declared labels" in out
    assert "'CDC'" in out and "more" not in out and "(other) cell" in out
    out = run_keys(FakeConnection(s), "\\d flights nosuch" + ENTER)
    assert "ERROR [42703]" in out and "columns: carrier, dest" in out


def _star_catalog():
    """adult beside a public dimension table (issue 31: public tables are public metadata)."""
    from dpsql.public import PublicColumn, PublicTable, StarCatalog
    from fakes import adult_catalog
    return StarCatalog(adult_catalog(), public={"countries": PublicTable(
        "countries", (PublicColumn("native_country", "text"), PublicColumn("population", "bigint")),
        (("Germany", 83_000_000), ("Peru", None)))})


def test_describe_lists_public_tables_with_their_real_types():
    s = _session()
    s.engine.catalog = _star_catalog()
    out = run_keys(FakeConnection(s), "\\d" + ENTER + "\\d countries" + ENTER + "\\d countries population" + ENTER)
    assert "Public tables (read exactly, at no privacy cost)" in out
    assert any(line.split("|")[0].strip() == "countries" and line.split("|")[1].strip() == "2"
               for line in out.splitlines() if "|" in line)
    assert "Public table 'countries': read exactly, at no privacy cost" in out
    grid = [[c.strip() for c in line.split("|")] for line in out.splitlines() if "|" in line]
    assert ["native_country", "text"] in grid and grid.count(["population", "bigint"]) == 2
    out = run_keys(FakeConnection(s), "\\d countries nosuch" + ENTER)
    assert "ERROR [42703]" in out and "columns: native_country, population" in out


def test_describe_an_unknown_table_is_an_error():
    out = run_keys(FakeConnection(_session()), "\\d nosuch" + ENTER)
    assert "ERROR [42P01]: table 'nosuch' is not a private table" in out


def test_measure_asks_first_and_no_spends_nothing():
    s = _session()
    out = run_keys(FakeConnection(s), "\\measure" + ENTER + "no" + ENTER + "\\budget" + ENTER)
    assert s.measured == 0 and s.spent == 0
    assert "Measuring the workload spends ρ = 0.5 (ε = 5.222 at δ = 1e-06) of the ρ = 2 left in total" in out
    assert "Nothing measured; nothing spent." in out
    assert "The ledger has no charges yet." in out


def test_measure_states_the_cost_and_yes_measures():
    s = _session()
    with driven(FakeConnection(s)) as d:
        d.send("\\measure" + ENTER)
        d.wait_for(lambda: d.shell.prompt_session is not None and s.measured == 0, "the question")
        d.send("y" + ENTER + "\\budget" + ENTER)
        out = d.finish()
    assert s.measured == 1
    assert "spent ρ = 0.5" in out
    lines = out.splitlines()
    you = next(line for line in lines if line.lstrip().startswith("you (alice)"))
    assert [c.strip() for c in you.split("|")][1:3] == ["0.5", "1.5"]
    assert any("workload" in line and "alice" in line for line in lines)


def test_measure_in_a_script_needs_an_explicit_yes():
    from repl.app import Shell
    import io
    s = _session()
    out = io.StringIO()
    shell = Shell(FakeConnection(s), out=out, interactive=False)
    assert not shell.run_text("\\measure", stop_on_error=True)
    assert s.measured == 0 and "\\measure -y" in out.getvalue()
    assert shell.run_text("\\measure -y", stop_on_error=True) and s.measured == 1
    assert s.prepared == 1        # the model is fitted and saved right after measuring (issue 17)


def test_workload_plan_and_explain(tmp_path):
    wl = tmp_path / "dash.sql"
    wl.write_text("-- two queries\nSELECT sex, COUNT(*) FROM adult GROUP BY sex;\nSELECT COUNT(*) FROM adult;\n")
    s = _session()
    out = run_keys(FakeConnection(s), f"\\workload {wl}" + ENTER + "\\plan" + ENTER
                   + "\\explain SELECT sex FROM adult;" + ENTER + "\\explain SELECT nope FROM adult" + ENTER)
    assert s.plans == [["SELECT sex, COUNT(*) FROM adult GROUP BY sex", "SELECT COUNT(*) FROM adult"]]
    assert "Loaded 2 statements" in out
    assert "Strategy for table adult: OPT_⊗, 3 measurement blocks" in out
    assert "expected RMSE  12.50 per query row" in out
    assert "plan for SELECT sex FROM adult" in out
    assert "ERROR [42703]: unknown column 'nope'" in out
    assert "LINE 1: SELECT nope FROM adult" in out


def test_display_settings(tmp_path):
    s = _session()
    target = tmp_path / "out.csv"
    out = run_keys(FakeConnection(s), "\\x" + ENTER + SEX_SQL + ";" + ENTER + "\\x off" + ENTER
                   + "\\errors stderr" + ENTER + "\\timing" + ENTER + SEX_SQL + ";" + ENTER
                   + f"\\o {target}" + ENTER + SEX_SQL + ";" + ENTER + "\\o" + ENTER + "\\errors bogus" + ENTER)
    assert "-[ RECORD 1 ]" in out and "count | 16,192 ± 24" in out
    assert " Female | 16,192 ± 12 " in out and "(2 rows)" in out  # stderr, no timing
    assert "(2 rows written to" in out
    rows = list(csv.reader(target.open()))
    assert rows == [["sex", "count", "count_stderr"], ["Female", "16192", "12"], ["Male", "32650", "15"]]
    assert "ERROR [42000]: \\errors takes ci95, stderr or off" in out


def test_help_set_and_unknown_commands():
    out = run_keys(FakeConnection(_session()), "\\help" + ENTER + "\\set vi on" + ENTER + "\\set" + ENTER
                   + "\\frobnicate" + ENTER)
    assert "\\measure [-y] [TABLE]" in out
    assert "Vi mode is on." in out and "vi        on" in out
    assert "unknown command \\frobnicate" in out


def test_vi_mode_switches_the_editing_mode():
    from prompt_toolkit.enums import EditingMode
    with driven(FakeConnection(_session())) as d:
        d.send("\\set vi on" + ENTER)
        d.wait_output("Vi mode is on.")
        assert d.shell.prompt_session.editing_mode == EditingMode.VI
        d.send("\\set vi off" + ENTER)
        d.wait_output("Vi mode is off.")
        assert d.shell.prompt_session.editing_mode == EditingMode.EMACS
        d.finish()


def test_tab_after_an_open_quote_offers_the_labels():
    with driven(FakeConnection(_session())) as d:
        d.send("SELECT COUNT(*) FROM adult WHERE sex = '" + TAB)
        buffer = d.shell.prompt_session.default_buffer
        d.wait_for(lambda: buffer.complete_state is not None and buffer.complete_state.completions,
                   "the completion menu")
        assert [c.display_text for c in buffer.complete_state.completions] == ["Female", "Male"]
        d.send(CTRL_C)
        d.finish()


def test_tab_completes_a_unique_label_into_the_statement():
    s = _session()
    sql = "SELECT COUNT(*) FROM adult WHERE sex = 'Female'"
    s.results[sql] = Result([Column("count", "double")], [(16192.4,)], [(12.1,)], [False])
    with driven(FakeConnection(s)) as d:
        d.send("SELECT COUNT(*) FROM adult WHERE sex = 'Fe" + TAB)
        buffer = d.shell.prompt_session.default_buffer
        d.wait_for(lambda: buffer.text.endswith("'Female'"), "the completed label")
        d.send(";" + ENTER)
        d.wait_output("(1 row")
        d.finish()
    assert s.executed == [sql]


def test_enter_on_a_highlighted_completion_keeps_it_and_does_not_run():
    s = _session()
    sql = "SELECT COUNT(*) FROM adult WHERE sex = 'Male'"
    s.results[sql] = Result([Column("count", "double")], [(32649.7,)], [(15.3,)], [False])
    with driven(FakeConnection(s)) as d:
        buffer = d.shell.prompt_session.default_buffer
        d.send("SELECT COUNT(*) FROM adult WHERE sex = '" + TAB)
        d.wait_for(lambda: buffer.complete_state is not None and buffer.complete_state.completions, "menu")
        d.send(DOWN + DOWN)
        d.wait_for(lambda: buffer.text.endswith("'Male'"), "the second label")
        d.send(ENTER)
        d.wait_for(lambda: buffer.complete_state is None, "the menu to close")
        assert buffer.text == sql and s.executed == []
        d.send(";" + ENTER)
        d.wait_output("(1 row")
        d.finish()
    assert s.executed == [sql]


def test_history_survives_a_restart(tmp_path):
    history = tmp_path / "hist"
    s = _session()
    run_keys(FakeConnection(s), SEX_SQL + ";" + ENTER, history=history)
    assert SEX_SQL in history.read_text()
    s2 = _session()
    # the previous session's last entry is "\q"; the query is the one before it
    run_keys(FakeConnection(s2), UP + UP + ENTER, history=history)
    assert s2.executed == [SEX_SQL]


def test_default_history_location(monkeypatch, tmp_path):
    from repl.app import history_path
    monkeypatch.delenv("DPSQL_HISTORY")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path))
    assert history_path() == tmp_path / "dpsql" / "history"
    monkeypatch.delenv("XDG_DATA_HOME")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert history_path() == tmp_path / ".local" / "share" / "dpsql" / "history"


def test_ctrl_c_during_a_long_plan_returns_to_the_prompt():
    s = _session(block_plan=True)
    try:
        with driven(FakeConnection(s)) as d:
            d.send("\\plan" + ENTER)
            assert s.plan_started.wait(30)
            d.send(CTRL_C)
            d.wait_output("Cancelled")
            d.send(SEX_SQL + ";" + ENTER)
            d.wait_output("(2 rows")
            out = d.finish()
    finally:
        s.release.set()
    assert "Strategy for table" not in out  # the abandoned plan's result is discarded
    assert s.executed == [SEX_SQL]


def test_keys_typed_while_work_runs_reach_the_next_prompt():
    s = _session(block_plan=True)
    with driven(FakeConnection(s)) as d:
        d.send("\\plan" + ENTER)
        assert s.plan_started.wait(30)
        d.send(SEX_SQL + ";" + ENTER)
        s.release.set()
        d.wait_output("(2 rows")
        out = d.finish()
    assert "Strategy for table adult" in out and s.executed == [SEX_SQL]


def test_toolbar_shows_user_budget_and_model():
    from prompt_toolkit.formatted_text import fragment_list_to_text
    s = _session()
    with driven(FakeConnection(s)) as d:
        before = fragment_list_to_text(d.shell.toolbar())
        d.send(SEX_SQL + ";" + ENTER)
        d.wait_output("(2 rows")
        after = fragment_list_to_text(d.shell.toolbar())
        d.finish()
    assert "user alice" in before and "model none yet" in before
    assert "ρ=2" in before and "δ=1e-06" in before and "ε=" in before
    assert "model v1" in after


def test_long_results_go_through_the_pager():
    s = _session()
    sql = "SELECT age, COUNT(*) FROM adult GROUP BY age"
    s.results[sql] = Result([Column("age", "integer"), Column("count", "double")],
                            [(a, 100.0 + a) for a in range(17, 91)], [(None, 3.0)] * 74, [False] * 74)
    with driven(FakeConnection(s), pager=True) as d:
        d.send(sql + ";" + ENTER)
        d.wait_for(lambda: s.executed, "the query")
        d.send("q")
        out = d.finish()
    assert "(74 rows" not in out  # shown in the pager, not printed under the prompt
    out = run_keys(FakeConnection(s), sql + ";" + ENTER, pager=False)
    assert "(74 rows" in out


def test_scripts_stop_at_the_first_error():
    from repl.app import Shell
    import io
    s = _session()
    out, err = io.StringIO(), io.StringIO()
    shell = Shell(FakeConnection(s), out=out, err=err, interactive=False)
    ok = shell.run_text(f"{SEX_SQL};\nSELECT COUNT(*) FROM nope;\n{SEX_SQL};", source="r.sql", stop_on_error=True)
    assert not ok and s.executed == [SEX_SQL, "SELECT COUNT(*) FROM nope"]
    assert "(r.sql, line 2)" in err.getvalue() and "(2 rows" in out.getvalue()


def test_engine_errors_inside_meta_commands_are_reported():
    s = _session()
    s.budget = lambda: (_ for _ in ()).throw(errors.LedgerCorruptError("ledger hash chain broken"))
    out = run_keys(FakeConnection(s), "\\budget" + ENTER)
    assert "ERROR [XX001]: ledger hash chain broken" in out


def test_an_unexpected_engine_failure_is_reported_and_the_shell_carries_on():
    s = _session()
    s.results["SELECT 1"] = ZeroDivisionError("division by zero")
    out = run_keys(FakeConnection(s), "SELECT 1;" + ENTER + SEX_SQL + ";" + ENTER)
    assert "INTERNAL ERROR: ZeroDivisionError: division by zero" in out
    assert "(2 rows" in out
