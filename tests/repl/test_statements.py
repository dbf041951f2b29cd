"""Where statements end: the scanner behind Enter, scripts and workload files."""

import pytest

from repl.statements import (Meta, current_statement, in_string, is_blank, is_complete, parse_meta,
                             scan, split_script, string_start)


@pytest.mark.parametrize("text, complete", [
    ("", True),
    ("   \n", True),
    ("SELECT 1", False),
    ("SELECT 1;", True),
    ("SELECT 1;  -- trailing comment", True),
    ("SELECT 1; SELECT", False),
    ("SELECT ';'", False),
    ("SELECT ';';", True),
    ("SELECT 'it''s;'", False),
    ('SELECT "a;b"', False),
    ("SELECT 1 -- ;", False),
    ("SELECT 1 /* ; */", False),
    ("SELECT 1 /* ; */;", True),
    ("/* open comment ;", False),
    ("\\d adult", True),
    ("  \\budget", True),
    ("\\explain SELECT 1", True),
])
def test_enter_submits_only_complete_input(text, complete):
    assert is_complete(text) is complete


def test_scan_separates_statements_and_meta_commands():
    text = "SELECT 1;\nSELECT 'a;b';\n\\d adult\n-- note\nSELECT 2"
    items, rest, start = scan(text)
    assert [(i.kind, i.text) for i in items] == [("sql", "SELECT 1"), ("sql", "SELECT 'a;b'"),
                                                  ("meta", "\\d adult")]
    assert rest.strip().endswith("SELECT 2") and text[start:] == rest
    assert text[items[1].offset:].startswith("SELECT 'a;b'")


def test_backslash_inside_a_statement_is_not_a_meta_command():
    items, rest, _ = scan("SELECT 'a\\b' FROM t\n\\d\n;")
    assert [(i.kind, i.text) for i in items] == [("sql", "SELECT 'a\\b' FROM t\n\\d")]


def test_split_script_keeps_an_unterminated_last_statement_and_skips_empty_ones():
    items = split_script("-- header\n;;\nSELECT 1;\n  SELECT 2\n")
    assert [(i.kind, i.text) for i in items] == [("sql", "SELECT 1"), ("sql", "SELECT 2")]


def test_comment_only_input_is_blank():
    assert is_blank("-- a\n /* b */ \n")
    assert not is_blank("/* open")
    assert not is_blank("x")


def test_open_string_detection():
    assert string_start("WHERE sex = '") == 12
    assert in_string("WHERE sex = 'Fe")
    assert in_string("WHERE x = 'it''")  # an escaped quote keeps the literal open
    assert not in_string("WHERE sex = 'Male' ")
    assert not in_string('WHERE "odd\'name" = 1')
    assert not in_string("-- it's a comment")


def test_current_statement_is_the_text_after_the_last_complete_one():
    assert current_statement("SELECT 1; SELECT sex FROM").strip() == "SELECT sex FROM"


def test_parse_meta():
    assert parse_meta("\\d adult") == Meta("d", "adult")
    assert parse_meta("  \\x") == Meta("x", "")
    assert parse_meta("\\explain SELECT sex FROM adult;") == Meta("explain", "SELECT sex FROM adult;")
    assert parse_meta("\\?") == Meta("?", "")
    assert parse_meta("\\measure -y adult") == Meta("measure", "-y adult")


def test_leading_comments_are_not_part_of_a_statement():
    text = "-- first\n/* second */ SELECT 1;\n-- third\nSELECT 2"
    items = split_script(text)
    assert [i.text for i in items] == ["SELECT 1", "SELECT 2"]
    assert all(text[i.offset:].startswith(i.text) for i in items)
