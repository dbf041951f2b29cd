from dpsql.sql.split import split_statements


def test_splits_at_top_level_semicolons_only():
    text = """
    -- a comment; with a semicolon
    SELECT COUNT(*) FROM adult WHERE sex = 'a;b';
    /* block ; comment */ SELECT "we;ird" FROM t;;
    SELECT $$x;y$$ ; SELECT 'it''s; fine'
    """
    assert split_statements(text) == [
        "-- a comment; with a semicolon\n    SELECT COUNT(*) FROM adult WHERE sex = 'a;b'",
        '/* block ; comment */ SELECT "we;ird" FROM t',
        "SELECT $$x;y$$",
        "SELECT 'it''s; fine'",
    ]


def test_comment_only_text_has_no_statements():
    assert split_statements("-- nothing\n/* here */ ;\n ;") == []
