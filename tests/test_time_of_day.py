"""TIME (time-of-day) columns in the domain: declared with public bins (``type = "time"``,
``bin`` second/minute/hour, ``lo``/``hi`` defaulting to the whole day), every value in exactly
one cell, and what cannot be a time-of-day axis refused when the configuration loads."""

from __future__ import annotations

import datetime as dt

import pytest

from dpsql.domain_file import load_domain
from dpsql.errors import ConfigError
from dpsql.labels import catalog_type
from dpsql.timeofday import TimeOfDayRange


def _load(tmp_path, body: str):
    (tmp_path / "d.toml").write_text("[tables.t.columns.dep]\n" + body)
    return load_domain(tmp_path / "d.toml")["t"].attribute("dep")


def test_declared_from_toml_local_times_and_text(tmp_path):
    a = _load(tmp_path, 'type = "time"\nlo = 05:30:00\nhi = "22:59:59.999999"\nbin = "hour"\nnullable = true\n')
    assert isinstance(a, TimeOfDayRange) and a.kind == "time" and catalog_type(a) == "time without time zone"
    assert a.labels()[:3] == ["05:30", "06:00", "07:00"] and a.labels()[-2:] == ["22:00", None]
    assert a.bin_bounds()[0] == (dt.time(5, 30), dt.time(5, 59, 59, 999999))
    whole = _load(tmp_path, 'type = "time"\nbin = "minute"\n')
    assert whole.size == 1440 and whole.labels()[-1] == "23:59" and whole.index_of("23:59:59.999999") == 1439


def test_every_value_lands_in_exactly_one_cell():
    a = TimeOfDayRange("dep", "05:00", "21:59:59.999999", "minute", nullable=True)
    inv, null = a.invalid_index, a.null_index
    assert inv == null == a.size - 1
    cases = {None: null, "05:00": 0, dt.time(5, 0, 59, 999999): 0, "05:01": 1, dt.time(21, 59, 59, 999999): 1019,
             "04:59:59.999999": inv, "22:00": inv, "24:00": inv, "5:00": inv, "noon": inv, "": inv,
             dt.datetime(2013, 1, 1, 6): inv, 600: inv, dt.time(6, tzinfo=dt.UTC): inv}
    for value, cell in cases.items():
        assert a.index_of(value) == cell, value
    # second bins: a cut first bin, then whole seconds
    s = TimeOfDayRange("s", "10:00:00.5", "10:00:02", "second")
    assert [s.index_of(v) for v in ("10:00:00.5", "10:00:00.999999", "10:00:01", "10:00:02", "10:00:02.000001")] \
        == [0, 0, 1, 2, s.invalid_index]


@pytest.mark.parametrize("body, words", [
    ('type = "time"\n', "bin"),
    ('type = "time"\nbin = "day"\n', "bin must be one of second, minute, hour"),
    ('type = "time"\nbin = "hour"\nlo = 10:00:00\nhi = 09:00:00\n', "is after hi"),
    ('type = "time"\nbin = "hour"\nlo = 2013-01-01\n', "must be a time of day"),
    ('type = "time"\nbin = "hour"\nhi = "24:00"\n', "must be a time of day"),
    ('type = "time"\nbin = "hour"\ntimezone = "UTC"\n', "timezone"),
])
def test_what_is_not_a_time_axis_is_refused_at_load(tmp_path, body, words):
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, body)
    assert words in str(info.value) and info.value.hint


def test_init_drafts_a_parquet_time_column_as_a_time_axis(tmp_path):
    """``dpsql init`` on a Parquet file with a TIME column drafts ``type = "time"`` with the
    bin to fill (it drafted a categorical before); filled in, the draft loads."""
    import duckdb

    from dpsql.draft import from_file, write
    duckdb.sql(f"COPY (SELECT TIME '06:15:00' AS dep) TO '{tmp_path / 'd.parquet'}' (FORMAT parquet)")
    draft = from_file(tmp_path / "d.parquet")
    assert [(c.name, c.kind, c.missing) for c in draft.columns][0] == ("dep", "time", ["bin"])
    _, domain_file, _ = write(draft, tmp_path / "dpsql.toml")
    text = domain_file.read_text()
    assert '# bin = ?   (TO FILL: "second", "minute" or "hour")' in text
    domain_file.write_text(text.replace("# bin = ?", 'bin = "hour"\n#'))
    table = next(iter(load_domain(domain_file).values()))
    assert table.attribute("dep").kind == "time"


def test_casts_to_and_from_time_follow_postgresql():
    from sqlglot import exp

    from dpsql.sql.scalars import cast_type, cast_value
    T = exp.DataType.Type
    assert cast_value(dt.time(6, 0, 0, 500000), T.TEXT) == "06:00:00.5"        # time_out, not str()'s .500000
    assert cast_value("06:00", T.TIME) == dt.time(6) and cast_type(T.TIME) == "time"
    assert cast_value(dt.datetime(2013, 1, 1, 6, 30), T.TIME) == dt.time(6, 30)


def test_catalog_describes_a_time_column_as_time(tmp_path):
    """``dpsql init`` from a catalog (PostgreSQL, Spark, Parquet sets) types a TIME column
    ``time`` (it was left out as a type no domain column reads)."""
    import duckdb

    from dpsql.measure.catalog import describe
    from dpsql.measure.source import Source
    (tmp_path / "set").mkdir()
    duckdb.sql(f"COPY (SELECT TIME '06:15:00' AS dep, 'x' AS c) TO '{tmp_path / 'set' / 'a.parquet'}' "
               "(FORMAT parquet)")
    source = Source.from_config({"parquet": str(tmp_path / "set" / "*.parquet")}, tmp_path)
    assert [(c, k) for c, _, k in describe(source)] == [("dep", "time"), ("c", "categorical")]
