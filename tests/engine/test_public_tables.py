"""Public tables and declared keys (issue 31): the configuration, and joins answered end to
end — measured in DuckDB, fitted, answered — equal to DuckDB's exact join at a
near-infinite budget, at the cost of the private table's own measurements."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import dpsql
from dpsql.engine.config import load_config
from dpsql.errors import ConfigError
from dpsql.measure.exact import ExactOracle

STAR = Path(__file__).resolve().parents[1] / "fixtures" / "star"
HUGE = {"epsilon": 1e7, "delta": 1e-6}
WORKLOAD = [
    "SELECT c.name, COUNT(*) FROM flights f JOIN carriers c ON f.carrier = c.carrier GROUP BY c.name",
    "SELECT s.region, COUNT(*) FROM flights f JOIN airports a ON f.dest = a.faa "
    "LEFT JOIN states s ON a.state = s.code GROUP BY s.region",
    "SELECT al.alliance, COUNT(*) FROM flights f JOIN alliances al ON f.carrier = al.carrier GROUP BY 1",
    "SELECT month, COUNT(*) FROM flights GROUP BY month",
    # composite keys, and a LEFT join whose ON filters the public table (the NULL group keeps
    # the rows it rejects)
    "SELECT h.role, s.season, COUNT(*) FROM flights f JOIN hubs h ON f.carrier = h.carrier AND f.origin = h.origin "
    "LEFT JOIN seasons s ON f.origin = s.origin AND f.month = s.month AND s.season <> 'festival' GROUP BY 1, 2",
]


def test_public_tables_and_keys_load():
    cfg = load_config(STAR / "dpsql.toml")
    assert set(cfg.tables) == {"flights"}
    assert set(cfg.public_tables) == {"carriers", "alliances", "airports", "states", "holidays", "hubs", "seasons"}
    airports = cfg.public_tables["airports"]
    assert [(c.name, c.type) for c in airports.columns] == [("faa", "text"), ("name", "text"), ("state", "text"),
                                                           ("alt", "bigint")]
    # labels_from: the dest domain is the airports' codes, declared once in the public table
    dest = cfg.tables["flights"].attribute("dest")
    assert dest.labels_ == tuple(airports.values("faa"))
    assert {str(r) for r in cfg.references} >= {"flights.dest → airports.faa", "airports.state → states.code"}
    assert {str(r) for r in cfg.references} >= {"flights.(carrier, origin) → hubs.(carrier, origin)",
                                                 "flights.(origin, month) → seasons.(origin, month)"}
    # dates and timestamps of a dimension keep their types (docs/config.md, "Public tables")
    assert [(c.name, c.type) for c in cfg.public_tables["holidays"].columns] == [
        ("month", "bigint"), ("day", "date"), ("name", "text"), ("announced", "timestamp")]


def _star_copy(tmp_path: Path, replace: dict[str, str]) -> Path:
    for f in STAR.iterdir():
        if f.suffix in (".csv", ".toml"):
            shutil.copy(f, tmp_path / f.name)
    for name, (old, new) in replace.items():
        path = tmp_path / name
        text = path.read_text()
        assert old in text
        path.write_text(text.replace(old, new))
    return tmp_path / "dpsql.toml"


@pytest.mark.parametrize("name, edit, says", [
    ("dpsql.toml", ('[tables.carriers]\npublic = true', '[tables.carriers]\npublic = true\nrows = 4'), "no rows"),
    ("dpsql.toml", ('origin = "airports.faa"', 'origin = "airports.iata"'), "no column 'iata'"),
    ("dpsql.toml", ('origin = "airports.faa"', 'origin = "planes.faa"'), "not a public table"),
    ("dpsql.toml", ('month = "holidays.month"', 'month = "airports.faa"'), "holds values that are not integers"),
    ("dpsql.toml", ('origin = "airports.faa"', 'distance = "airports.alt"'), "cannot be a join key"),
    ("dpsql.toml", ('public = true\nsource = { csv = "states.csv" }',
                    'public = "yes"\nsource = { csv = "states.csv" }'), "public must be true or false"),
    # an open categorical must declare every public key: others would share its (other) cell
    ("flights.toml", ('labels = ["AA", "B6", "DL", "UA", "ZZ"]', 'labels = ["AA", "B6", "ZZ"]'),
     "not labels of the open column"),
    ("flights.toml", ('labels_from = "airports.faa"', 'labels_from = "airports"'), "table.column"),
    # composite keys: one target column per key column, of one table, each checked as a key
    ("dpsql.toml", ('"carrier, origin" = "hubs.carrier, hubs.origin"', '"carrier, origin" = "hubs.carrier"'),
     "2 key column(s) but 1 target column(s)"),
    ("dpsql.toml", ('"carrier, origin" = "hubs.carrier, hubs.origin"',
                    '"carrier, origin" = "hubs.carrier, airports.faa"'), "names columns of several tables"),
    ("dpsql.toml", ('"carrier, origin" = "hubs.carrier, hubs.origin"',
                    '"carrier, carrier" = "hubs.carrier, hubs.origin"'), "does not name distinct columns"),
    ("dpsql.toml", ('"origin, month" = "seasons.origin, seasons.month"',
                    '"origin, month" = "seasons.origin, seasons.season"'), "holds values that are not integers"),
    ("hubs.csv", ("AA,BOS,hub,80", "WN,LGA,hub,80"), "not labels of the open column"),
])
def test_configuration_errors_name_the_problem(tmp_path, name, edit, says):
    config = _star_copy(tmp_path, {name: edit})
    with pytest.raises(ConfigError) as info:
        load_config(config)
    assert says in info.value.message and info.value.hint, info.value.message


def test_labels_from_needs_a_configuration():
    from dpsql.domain_file import load_domain
    with pytest.raises(ConfigError) as info:
        load_domain(STAR / "flights.toml")
    assert "labels_from" in info.value.message


def test_a_closed_key_may_leave_public_keys_undeclared():
    """origin is closed (EWR, JFK, LGA) and nullable, and airports lists more codes: no
    private row can hold them (one that does lands in the NULL cell), so the reference is
    accepted."""
    cfg = load_config(STAR / "dpsql.toml")
    assert "flights.origin → airports.faa" in {str(r) for r in cfg.references}


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("star")
    con = dpsql.connect(STAR / "dpsql.toml", user="t", ledger=str(tmp / "l"), cache_dir=str(tmp / "c"),
                        budget=HUGE, workload=WORKLOAD)
    report = con.session.measure()
    cfg = load_config(STAR / "dpsql.toml")
    oracle = ExactOracle(cfg.tables, cfg.sources, cfg.public_tables)
    yield con, oracle, report
    oracle.close()
    con.close()


@pytest.mark.parametrize("sql", WORKLOAD + [
    "SELECT c.name, COUNT(*) FROM flights f LEFT JOIN carriers c ON f.carrier = c.carrier GROUP BY 1",
    "SELECT COUNT(*) FROM flights f JOIN alliances al ON f.carrier = al.carrier WHERE al.alliance <> 'Partner'",
])
def test_joins_equal_exact_at_huge_budget(measured, sql):
    con, oracle, _ = measured
    cur = con.cursor()
    cur.execute(sql)
    ours = {tuple(r[:-1]): r[-1] for r in cur.fetchall()}
    exact = {tuple(r[:-1]): r[-1] for r in oracle.query(sql)}
    assert set(exact) <= set(ours)
    for key, value in ours.items():
        assert abs(value - float(exact.get(key, 0))) <= 0.5 + 1e-6 * abs(value), (key, value, exact.get(key))


def test_joins_spend_nothing_beyond_the_measurement(measured):
    con, _, report = measured
    before = con.session.engine.ledger.spent()
    cur = con.cursor()
    for sql in WORKLOAD:
        cur.execute(sql)
        cur.fetchall()
    assert con.session.engine.ledger.spent() == before == report.rho


def test_join_workloads_plan_like_any_other(tmp_path):
    """A dimension attribute is a public function of the key (or a multiplicity matrix),
    so join queries are planned by HDMM with the others: each has its row in the plan,
    within its per-query baseline, and the strategy measures the private table's cells."""
    con = dpsql.connect(STAR / "dpsql.toml", user="t", ledger=str(tmp_path / "l"), cache_dir=str(tmp_path / "c"),
                        workload=WORKLOAD)
    report = con.session.plan()
    assert [q.sql for q in report.per_query] == WORKLOAD
    for q in report.per_query:
        assert 0 < q.stderr <= q.baseline * (1 + 1e-9), q
    names = set(con.session.engine.catalog["flights"].column_names)
    assert all(set(b.clique) <= names for b in report.strategy.blocks)
    con.close()


def test_labels_from_is_part_of_the_domain_and_a_dimension_edit_is_not(tmp_path):
    """docs/privacy.md §7.4: editing the public column a domain reads its labels from changes
    the domain's fingerprint (earlier releases become stale); editing a dimension that only
    joins changes answers, not what was measured (the fingerprint stays)."""
    from dpsql.domain import domain_fingerprint
    before = domain_fingerprint(load_config(STAR / "dpsql.toml").tables["flights"])
    config = _star_copy(tmp_path, {"airports.csv": ("DEN,Denver Intl,CO,5431", "DEN,Denver Intl,CO,5431\n"
                                                                               "SEA,Seattle Tacoma Intl,WA,433")})
    assert domain_fingerprint(load_config(config).tables["flights"]) != before
    config = _star_copy(tmp_path, {"carriers.csv": ("B6,JetBlue Airways", "B6,JetBlue")})
    assert domain_fingerprint(load_config(config).tables["flights"]) == before


def test_a_duckdb_public_table_leaves_nothing_else_of_its_file_reachable(tmp_path):
    """Review finding: a public table read from a DuckDB file kept the whole file attached
    (as public_0), so a statement naming public_0.main.secret reached the private rows if the
    syntax check let it through; the file is now detached once the table is copied."""
    import duckdb

    from dpsql.measure.backend import PublicDatabase
    from dpsql.measure.source import Source

    path = tmp_path / "warehouse.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE carriers AS SELECT * FROM (VALUES ('AA', 'American')) t(carrier, name)")
    con.execute("CREATE TABLE secret AS SELECT 42 AS salary")
    con.close()
    db = PublicDatabase({"carriers": Source.from_config({"duckdb": str(path), "table": "carriers"}, tmp_path)})
    assert db.query("SELECT * FROM carriers")[1] == [("AA", "American")]
    for sql in ("SELECT * FROM public_0.main.secret", "SELECT * FROM public_0.secret"):
        with pytest.raises(Exception) as info:
            db.query(sql)
        assert "42" not in str(info.value)


def test_sums_over_a_join_use_the_measured_offsets(tmp_path):
    """Review finding: a SUM of a binned column over a join raised ValueError (operands could
    not be broadcast) once the column's binning offsets were measured: the SUM's offset query
    stayed over the join's cells instead of the key's, so it did not fit the offset sums.
    Now it is expanded like the counts, and the answer is the raw data's SUM (not the bins')."""
    import duckdb
    workload = ["SELECT carrier, origin, dest, month, COUNT(*) FROM flights GROUP BY 1, 2, 3, 4",
                "SELECT dest, month, SUM(distance) FROM flights GROUP BY 1, 2"]
    con = dpsql.connect(STAR / "dpsql.toml", user="t", ledger=str(tmp_path / "l"), cache_dir=str(tmp_path / "c"),
                        budget=HUGE, workload=workload)
    raw = duckdb.connect()
    try:
        con.session.measure()
        for name in ("flights", "airports", "holidays"):
            raw.execute(f"CREATE TABLE {name} AS SELECT * FROM read_csv('{STAR / (name + '.csv')}', header = true, "
                        "nullstr = '')")
        for sql in ["SELECT a.state, SUM(f.distance) FROM flights f JOIN airports a ON f.dest = a.faa GROUP BY 1",
                    "SELECT h.name, SUM(f.distance), AVG(f.distance) FROM flights f JOIN holidays h "
                    "ON f.month = h.month GROUP BY 1"]:
            cur = con.cursor()
            cur.execute(sql)
            rows = cur.fetchall()
            ours = {r[0]: r[1:] for r in rows}
            errs = {r[0]: se[1:] for r, se in zip(rows, cur.stderr)}
            exact = {r[0]: r[1:] for r in raw.execute(sql).fetchall()}
            assert set(exact) <= set(ours), sql
            for key, values in ours.items():
                # a key without flights gets the fit's few hundredths of a row times its bin's
                # midpoint (~2,000 miles): within its reported error, not within a flat 20
                for v, e, se in zip(values, exact.get(key, (0, 0)), errs[key]):
                    assert abs(v - float(e)) <= 20 + 4 * se + 1e-4 * abs(float(e)), (sql, key, v, e, se)
    finally:
        raw.close()
        con.close()


def test_a_dimension_time_column_stays_a_time(tmp_path):
    """A TIME column of a public table (DuckDB reads ``09:30:00`` in a CSV as TIME) is a time
    of day: answered exactly as ``datetime.time`` of type ``time`` (it was ISO text typed
    ``time``, which the wire sent as OID 1083 with text bytes in binary form), compared with
    text read as a time, and grouped in a join, equal to DuckDB's exact join."""
    import datetime as dt
    config = _star_copy(tmp_path, {})
    rows = (tmp_path / "holidays.csv").read_text().splitlines()
    opens = ["09:30:00", "12:00:00", "07:15:00"]
    (tmp_path / "holidays.csv").write_text("\n".join([rows[0] + ",opens"] + [
        r + "," + opens[i % 3] for i, r in enumerate(rows[1:])]) + "\n")
    con = dpsql.connect(config, user="t", ledger=str(tmp_path / "l"), cache_dir=str(tmp_path / "c"), budget=HUGE,
                        workload=["SELECT month, COUNT(*) FROM flights GROUP BY month"])
    cfg = load_config(config)
    oracle = ExactOracle(cfg.tables, cfg.sources, cfg.public_tables)
    try:
        assert ("opens", "time") in [(c.name, c.type) for c in cfg.public_tables["holidays"].columns]
        cur = con.cursor()
        cur.execute("SELECT name, opens FROM holidays WHERE opens >= '09:00' ORDER BY name")
        got = cur.fetchall()
        assert cur.description[1][1] == "time" and got and all(isinstance(t, dt.time) for _, t in got)
        assert got == [(n, t) for n, t in oracle.query("SELECT name, opens FROM holidays WHERE opens >= "
                                                       "TIME '09:00' ORDER BY name")]
        con.session.measure()
        sql = ("SELECT h.opens, COUNT(*) FROM flights f JOIN holidays h ON f.month = h.month "
               "WHERE h.opens < '{}' GROUP BY 1")
        cur.execute(sql.format("12:00"))
        ours = {r[0]: r[1] for r in cur.fetchall()}
        assert cur.description[0][1] == "time"
        exact = {r[0]: r[1] for r in oracle.query(sql.format("12:00:00"))}
        assert set(ours) == set(exact) == {dt.time(9, 30), dt.time(7, 15)}
        assert all(abs(ours[k] - exact[k]) <= 0.5 for k in exact), (ours, exact)
    finally:
        oracle.close()
        con.close()
