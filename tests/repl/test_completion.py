"""Completion from public metadata: keywords, tables, columns, declared labels, commands."""

from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document

from fakes import adult_catalog
from repl.commands import completion_table
from repl.completion import SqlCompleter
from repl.lexer import SqlLexer, tokens

CATALOG = adult_catalog()


def complete(text, after=""):
    completer = SqlCompleter(lambda: CATALOG, completion_table())
    doc = Document(text + after, len(text))
    return list(completer.get_completions(doc, CompleteEvent(completion_requested=True)))


def texts(text, after=""):
    return [c.text for c in complete(text, after)]


def test_labels_inside_a_string_literal():
    got = complete("SELECT COUNT(*) FROM adult WHERE sex = '")
    assert [c.display_text for c in got] == ["Female", "Male"]
    assert [c.text for c in got] == ["Female'", "Male'"]
    assert all(c.start_position == 0 for c in got)


def test_labels_filter_by_the_typed_prefix_case_insensitively():
    got = complete("SELECT COUNT(*) FROM adult WHERE race = 'bl")
    assert [c.text for c in got] == ["Black'"]
    assert got[0].start_position == -2


def test_labels_in_in_lists_and_for_qualified_columns():
    assert texts("SELECT COUNT(*) FROM adult WHERE income IN ('<=50K', '") == ["<=50K'", ">50K'"]
    assert texts("SELECT COUNT(*) FROM adult WHERE adult.sex <> 'M") == ["Male'"]
    assert texts("SELECT COUNT(*) FROM adult WHERE income NOT IN (") == ["'<=50K'", "'>50K'"]


def test_a_value_position_without_a_quote_offers_quoted_labels():
    assert texts("SELECT COUNT(*) FROM adult WHERE sex = ") == ["'Female'", "'Male'"]


def test_no_labels_for_numeric_columns_or_unknown_context():
    assert texts("SELECT COUNT(*) FROM adult WHERE age = '") == []
    assert texts("SELECT 'x") == []


def test_nullable_and_closed_columns_offer_only_declared_labels():
    got = texts("SELECT COUNT(*) FROM adult WHERE workclass = '")
    assert "Private'" in got and len(got) == 8  # the declared list, not the NULL cell


def test_tables_after_from():
    assert texts("SELECT COUNT(*) FROM ") == ["adult"]
    assert texts("SELECT COUNT(*) FROM ad") == ["adult"]


def test_columns_keywords_and_functions():
    got = texts("SELECT se")
    assert got[0] == "sex"
    assert texts("SELECT sex FROM adult WHERE ed") == ["education", "education_num"]
    assert "GROUP" in texts("SELECT sex FROM adult GR")
    assert "group" in texts("select sex from adult gr")
    assert "COUNT(" in texts("SELECT COU")


def test_columns_come_from_the_table_named_later_in_the_statement():
    assert texts("SELECT ag", after=" FROM adult") == ["age"]


def test_qualified_column_names():
    assert texts("SELECT adult.hou") == ["hours_per_week"]


def test_meta_commands_and_their_arguments():
    assert texts("\\me") == ["\\measure"]
    assert texts("\\d ") == ["adult"]
    assert texts("\\errors s") == ["stderr"]
    assert texts("\\set v") == ["vi"]
    assert texts("\\set vi o") == ["on", "off"]
    assert texts("\\explain SELECT COUNT(*) FROM adult WHERE sex = '") == ["Female'", "Male'"]


def test_file_arguments_complete_paths(tmp_path, monkeypatch):
    (tmp_path / "dash.sql").write_text("SELECT 1;")
    monkeypatch.chdir(tmp_path)
    assert texts("\\workload da") == ["sh.sql"]


def test_completion_in_the_second_statement_of_a_buffer():
    assert texts("SELECT 1; SELECT COUNT(*) FROM adult WHERE sex = 'F") == ["Female'"]


def test_lexer_styles():
    toks = tokens("SELECT sex, COUNT(*) FROM adult WHERE sex = 'Male'; -- c\n\\d adult")
    styles = {text: style for style, text in toks}
    assert styles["SELECT"] == "class:sql.keyword"
    assert styles["COUNT"] == "class:sql.function"
    assert styles["'Male'"] == "class:sql.string"
    assert styles["-- c"] == "class:sql.comment"
    assert styles["\\d adult"] == "class:sql.meta"
    assert styles["sex"] == "class:sql.identifier"


def test_lexer_splits_multi_line_tokens_by_line():
    doc = Document("SELECT 'a\nb' FROM t")
    get_line = SqlLexer().lex_document(doc)
    assert get_line(0)[-1] == ("class:sql.string", "'a")
    assert get_line(1)[0] == ("class:sql.string", "b'")
    assert "".join(t for _, t in get_line(1)) == "b' FROM t"
    assert get_line(5) == []


def test_public_tables_and_their_columns_are_completed():
    """Issue 31: a public dimension's name and columns are public metadata, offered like a private table's."""
    from dpsql.public import PublicColumn, PublicTable, StarCatalog
    star = StarCatalog(adult_catalog(), public={"countries": PublicTable(
        "countries", (PublicColumn("code", "text"), PublicColumn("population", "bigint")), ())})

    def names(text):
        completer = SqlCompleter(lambda: star, completion_table())
        doc = Document(text, len(text))
        return [c.text for c in completer.get_completions(doc, CompleteEvent(completion_requested=True))]

    assert "countries" in names("SELECT COUNT(*) FROM adult JOIN coun")
    assert names("SELECT countries.po") == ["population"]
    assert "population" in names("SELECT COUNT(*) FROM adult a JOIN countries c ON a.native_country = c.code "
                                 "GROUP BY popu")
    assert "population" not in names("SELECT COUNT(*) FROM adult GROUP BY popu")
