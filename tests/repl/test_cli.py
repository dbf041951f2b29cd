"""``dpsql shell`` as registered into the ``dpsql`` command (over a fake connection)."""

import io

import pytest

import repl.cli
from dpsql.cli import build_parser, main
from fakes import SEX_COUNTS, FakeConnection, FakeSession

SEX_SQL = "SELECT sex, COUNT(*) FROM adult GROUP BY sex"


@pytest.fixture
def session(monkeypatch):
    s = FakeSession({SEX_SQL: SEX_COUNTS})
    opened = []

    def connect(args):
        opened.append(args)
        return FakeConnection(s)

    monkeypatch.setattr(repl.cli, "_connect", connect)
    s.opened = opened
    return s


def test_the_shell_subcommand_is_registered_with_its_options():
    args = build_parser().parse_args(["shell", "-C", "x.toml", "-U", "bob", "-c", "SELECT 1", "--ledger", "l",
                                      "--vi", "--errors", "stderr", "--no-pager"])
    assert (args.config, args.user, args.command, args.ledger, args.vi, args.errors, args.no_pager) == \
        ("x.toml", "bob", ["SELECT 1"], "l", True, "stderr", True)
    assert args.func is repl.cli.run


def test_commands_run_in_order_and_exit_zero(session, capsys):
    assert main(["shell", "-c", SEX_SQL, "-c", "\\errors off", "-c", SEX_SQL + ";"]) == 0
    out = capsys.readouterr().out
    assert out.count("(2 rows") == 2 and " Female | 16,192 ± 24 " in out and " Female | 16,192 " in out
    assert session.executed == [SEX_SQL, SEX_SQL]


def test_errors_option_sets_the_display(session, capsys):
    assert main(["shell", "--errors", "stderr", "-c", SEX_SQL]) == 0
    assert " Female | 16,192 ± 12 " in capsys.readouterr().out


def test_a_failing_file_exits_one_and_reports_on_stderr(session, tmp_path, capsys):
    script = tmp_path / "r.sql"
    script.write_text(f"{SEX_SQL};\n\nSELECT COUNT(*) FROM nope;\n{SEX_SQL};\n")
    assert main(["shell", "-f", str(script)]) == 1
    captured = capsys.readouterr()
    assert "ERROR [42P01]" in captured.err and f"({script}, line 3)" in captured.err
    assert captured.out.count("(2 rows") == 1


def test_a_missing_file_exits_one(session, tmp_path, capsys):
    assert main(["shell", "-f", str(tmp_path / "absent.sql")]) == 1
    assert "cannot read" in capsys.readouterr().err


def test_statements_are_read_from_stdin_when_it_is_not_a_terminal(session, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO(f"{SEX_SQL};\n\\q\n{SEX_SQL};\n"))
    assert main(["shell"]) == 0
    assert session.executed == [SEX_SQL]  # \q stopped the script
