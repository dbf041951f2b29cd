"""Integer join keys outside their declared range (issue 31, review finding).

An integer column of the private table declared as a key to a public table is read with
``clamp = False``: a value outside ``lo..hi`` lands in the NULL cell, which joins no
dimension row, instead of the end bin, which joined the end key's row.  So an INNER join
drops such rows and a LEFT join keeps them with NULL dimension columns, as DuckDB's own
join of the raw tables does; the answers at a near-infinite budget equal it.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import pytest

import dpsql
from dpsql.domain import IntegerRange, domain_fingerprint
from dpsql.engine.config import load_config
from dpsql.errors import ConfigError

HUGE = {"epsilon": 1e7, "delta": 1e-6}
# months 1..12 are declared; 0, 13, 99, -3 and 10**12 are outside, and 2 is the key the
# calendar lists twice (a key matching several rows)
MONTHS = [1, 1, 2, 2, 2, 3, 5, 12, 12, 12, 0, 13, 13, 99, -3, 10 ** 12, None, 7, 12, 1]
CARRIERS = ["AA", "DL", "AA", "UA", "DL", "AA", "UA", "DL", "AA", "AA", "UA", "DL", "AA", "DL", "UA", "AA", "DL",
            "AA", "UA", "DL"]
# a composite key (month, carrier): (2, AA) matches two fares
FARES = [(1, "AA", 100), (1, "DL", 120), (2, "AA", 90), (2, "AA", 95), (12, "UA", 300), (12, "DL", 310)]
CALENDAR = [(1, "winter", "Q1"), (2, "winter", "Q1"), (2, "carnival", "Q1"), (3, "spring", "Q1"),
            (5, "spring", "Q2"), (7, "summer", "Q3"), (12, "winter", "Q4")]
DOMAIN = """
[tables.flights.columns.month]
type = "integer"
lo = 1
hi = 12
nullable = {nullable}

[tables.flights.columns.carrier]
type = "categorical"
labels = ["AA", "DL", "UA"]
closed = true
nullable = true
"""


def _write(tmp: Path, keyed: bool = True, nullable: bool = True) -> Path:
    rows = ["month,carrier"] + [f"{'' if m is None else m},{c}" for m, c in zip(MONTHS, CARRIERS)]
    (tmp / "flights.csv").write_text("\n".join(rows) + "\n")
    (tmp / "fares.csv").write_text("month,carrier,fare\n" + "".join(f"{m},{c},{p}\n" for m, c, p in FARES))
    (tmp / "calendar.csv").write_text("month,season,quarter\n" + "".join(f"{m},{s},{q}\n" for m, s, q in CALENDAR))
    (tmp / "flights.toml").write_text(DOMAIN.format(nullable=str(nullable).lower()))
    keys = ('\n[tables.flights.keys]\nmonth = "calendar.month"\n"month, carrier" = "fares.month, fares.carrier"\n'
            if keyed else "")
    (tmp / "dpsql.toml").write_text(f"""
[dpsql]
ledger = "{tmp / 'ledger'}"
cache_dir = "{tmp / 'cache'}"

[budget]
epsilon = 1.0
delta = 1e-6

[tables.flights]
domain = "flights.toml"
source = {{ csv = "flights.csv" }}
{keys}
[tables.calendar]
public = true
source = {{ csv = "calendar.csv" }}

[tables.fares]
public = true
source = {{ csv = "fares.csv" }}
""")
    return tmp / "dpsql.toml"


def test_a_declared_integer_key_is_not_clamped(tmp_path):
    month = load_config(_write(tmp_path)).tables["flights"].attribute("month")
    assert isinstance(month, IntegerRange) and not month.clamp
    assert [month.index_of(v) for v in (1, 12, 0, 13, 10 ** 12, -3, 12.5, 0.5, None)] == \
        [0, 11] + [month.null_index] * 7
    plain = load_config(_write(tmp_path, keyed=False)).tables["flights"].attribute("month")
    assert plain.clamp and plain.index_of(13) == 11 and plain.index_of(0) == 0


def test_the_out_of_range_rule_is_part_of_the_domain_fingerprint(tmp_path):
    """A release measured with clamped months put 13 in December's cell: a configuration
    that declares month a key reads it into the NULL cell, so it must not reuse that
    release (docs/privacy.md §7.4).  Undeclared, the fingerprint is the one it always was."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    keyed = load_config(_write(tmp_path / "a")).tables["flights"]
    plain = load_config(_write(tmp_path / "b", keyed=False)).tables["flights"]
    assert domain_fingerprint(keyed) != domain_fingerprint(plain)
    clamped = type(plain)(plain.name, tuple(IntegerRange("month", 1, 12, nullable=True) if a.name == "month" else a
                                            for a in plain.attributes))
    assert domain_fingerprint(plain) == domain_fingerprint(clamped)


def test_public_keys_outside_the_declared_range_are_refused(tmp_path):
    """A private 13 lands in the NULL cell and joins nothing, so a public row keyed 13 could
    never be joined as SQL joins it: refused, as an open categorical missing public keys is."""
    config = _write(tmp_path)
    (tmp_path / "fares.csv").write_text((tmp_path / "fares.csv").read_text() + "13,AA,999\n")
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert "outside 'month''s declared range 1..12 (13)" in info.value.message and info.value.hint


def test_an_integer_key_must_be_nullable(tmp_path):
    with pytest.raises(ConfigError) as info:
        load_config(_write(tmp_path, nullable=False))
    assert "must be nullable" in info.value.message and "nullable = true" in info.value.hint


JOINS = [
    "SELECT c.season, COUNT(*) FROM flights f JOIN calendar c ON f.month = c.month GROUP BY c.season",
    "SELECT c.season, COUNT(*) FROM flights f LEFT JOIN calendar c ON f.month = c.month GROUP BY c.season",
    "SELECT COUNT(*) FROM flights f JOIN calendar c ON f.month = c.month",
    "SELECT COUNT(*) FROM flights f LEFT JOIN calendar c ON f.month = c.month",
    "SELECT c.quarter, f.carrier, COUNT(*) FROM flights f LEFT JOIN calendar c ON f.month = c.month "
    "GROUP BY c.quarter, f.carrier",
    "SELECT f.carrier, COUNT(*) FROM flights f JOIN calendar c ON f.month = c.month WHERE c.quarter = 'Q4' "
    "GROUP BY f.carrier",
    "SELECT COUNT(*) FROM flights f LEFT JOIN calendar c ON f.month = c.month WHERE c.season IS NULL",
    # the composite key (month, carrier), and a LEFT join whose ON filters the public table
    "SELECT r.fare, COUNT(*) FROM flights f JOIN fares r ON f.month = r.month AND f.carrier = r.carrier GROUP BY 1",
    "SELECT r.fare, c.season, COUNT(*) FROM flights f LEFT JOIN fares r ON f.month = r.month "
    "AND f.carrier = r.carrier AND r.fare < 200 LEFT JOIN calendar c ON f.month = c.month GROUP BY 1, 2",
    # LEFT joins whose ON reads the private table: rows failing it keep NULL dimension columns
    "SELECT c.season, COUNT(*) FROM flights f LEFT JOIN calendar c ON f.month = c.month AND f.carrier = 'AA' "
    "GROUP BY c.season",
    "SELECT c.quarter, f.carrier, COUNT(*) FROM flights f LEFT JOIN calendar c ON f.month = c.month "
    "AND f.carrier <> 'DL' GROUP BY 1, 2",
    "SELECT r.fare, c.season, COUNT(*) FROM flights f LEFT JOIN fares r ON f.month = r.month "
    "AND f.carrier = r.carrier AND f.month <= 6 LEFT JOIN calendar c ON f.month = c.month AND f.month > 1 "
    "GROUP BY 1, 2",
]


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("keys")
    con = dpsql.connect(_write(tmp), user="t", budget=HUGE, workload=JOINS)
    con.session.measure()
    raw = duckdb.connect()
    raw.execute(f"CREATE TABLE flights AS SELECT * FROM read_csv('{tmp / 'flights.csv'}', header=true, "
                "columns={'month': 'BIGINT', 'carrier': 'VARCHAR'}, nullstr='')")
    raw.execute(f"CREATE TABLE calendar AS SELECT * FROM read_csv('{tmp / 'calendar.csv'}', header=true)")
    raw.execute(f"CREATE TABLE fares AS SELECT * FROM read_csv('{tmp / 'fares.csv'}', header=true)")
    yield con, raw
    raw.close()
    con.close()


@pytest.mark.parametrize("sql", JOINS)
def test_out_of_range_keys_join_nothing(measured, sql):
    """Equal to DuckDB's join of the raw rows (not of the binned rows: clamped, month 13
    joined December's row and 10**12 did too)."""
    con, raw = measured
    cur = con.cursor()
    cur.execute(sql)
    ours = {tuple(r[:-1]): r[-1] for r in cur.fetchall()}
    exact = {tuple(r[:-1]): r[-1] for r in raw.execute(sql).fetchall()}
    assert set(exact) <= set(ours), (ours, exact)
    for key, value in ours.items():
        assert abs(value - exact.get(key, 0)) <= 0.5, (key, value, exact.get(key))


def test_dpsql_check_says_where_out_of_range_keys_land(tmp_path):
    """The operator's data check reports 13, 99, … of the key month as landing in its NULL
    cell (it said "the last bin (clamped)")."""
    import io

    from dpsql.cli import _check_tables
    from dpsql.measure.router import open_backend
    cfg = load_config(_write(tmp_path))
    backend = open_backend(cfg.sources)
    out = io.StringIO()
    try:
        assert not _check_tables(cfg.tables, backend, None, out=out)
    finally:
        backend.close()
    text = out.getvalue()
    assert "2 below range → the NULL cell" in text and "4 above range → the NULL cell" in text, text
    assert "clamped" not in text


def test_a_public_table_read_from_a_private_tables_source_is_refused(tmp_path):
    """A public table's rows are shown exactly: declared over the private table's own file
    (here flights.csv, by another relative spelling), the configuration is refused when it
    loads, naming both tables; its own file loads as before."""
    config = _write(tmp_path, keyed=False)
    assert load_config(config).tables["flights"]
    text = config.read_text().replace('source = { csv = "calendar.csv" }', 'source = { csv = "./flights.csv" }')
    config.write_text(text)
    with pytest.raises(ConfigError, match="'calendar'.*'flights'") as err:
        load_config(config)
    assert err.value.hint
