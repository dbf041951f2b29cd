"""The tables an engine adds for ad hoc per-person flags (issue 32, ``Engine._add_flag``):
how many it keeps, who sees them, and what the refusal of an unconsented spend says.

* At most ``[people] max_ad_hoc_flags`` flag tables that nothing has measured are kept: a
  client sending many distinct conditions (each compiled, none measured) grew the engine's
  catalog, sources and table states without bound.  Beyond the cap the least recently
  asked unheld one is dropped; a measured one is kept (its release stays answerable); when
  every unmeasured one is held by a running statement a new condition is refused (53000).
* A flag table is found by name but never listed: listings and "tables:" hints named every
  condition any analyst had asked.
* ``dpsql query`` without a terminal names its own opt-in, ``--allow-spend``, not a SET it
  cannot send."""

from __future__ import annotations

import io
import sys
import types
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

import dpsql  # noqa: E402

JOIN_CO = "customers c JOIN orders o ON o.custkey = c.custkey"
WORKLOAD = [f"SELECT o.status, COUNT(*) FROM {JOIN_CO} GROUP BY o.status",
            "SELECT nation, COUNT(*) FROM customers GROUP BY nation"]


def _sql(priority: int) -> str:
    return f"SELECT COUNT(DISTINCT c.custkey) AS n FROM {JOIN_CO} WHERE o.priority = {priority}"


@pytest.fixture(scope="module")
def shop_files(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shop")
    return shop.write_parquet(shop.shop_rows(customers=40), tmp)


def _connect(files, tmp_path, cap=None):
    spec = shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()},
                       bounds={"orders": 20, "lineitem": 200}, workload={"queries": WORKLOAD},
                       policy={"unsupported": "measure", "epsilon": 1.0})
    if cap is not None:
        spec["people"]["max_ad_hoc_flags"] = cap
    return dpsql.connect(spec, budget={"epsilon": 100.0, "delta": 1e-6, "per_user": {"epsilon": 100.0}})


def _flags(con) -> list[str]:
    return sorted(t for t in con.session.engine.tables if "__has_" in t)


def _flag_of(con, sql) -> str:
    before = set(_flags(con))
    con.session.compile(sql)
    added = set(_flags(con)) - before
    assert len(added) == 1
    return added.pop()


def _spent(con) -> list:
    return [(e.kind, e.rho) for e in con.session.engine.ledger.entries()]


def test_unmeasured_flag_tables_beyond_the_cap_are_dropped_least_recent_first(shop_files, tmp_path):
    """On main all five stayed: five tables, five sources, five catalog entries."""
    con = _connect(shop_files, tmp_path, cap=2)
    engine = con.session.engine
    names = [_flag_of(con, _sql(p)) for p in range(3)]
    con.session.compile(_sql(0))        # asked again: now the most recent
    for p in (3, 4):
        con.session.compile(_sql(p))
    kept = _flags(con)
    assert len(kept) == 2 and names[0] not in kept and names[1] not in kept and names[2] not in kept
    assert sorted(engine.catalog.unlisted) == kept
    assert sorted(n for n in engine.config.sources if "__has_" in n) == kept
    # a dropped condition asked again is added again, the same table
    assert _flag_of(con, _sql(1)) == names[1] and len(_flags(con)) == 2
    con.close()


def test_a_measured_flag_table_is_kept_beyond_the_cap_and_answers_free(shop_files, tmp_path):
    con = _connect(shop_files, tmp_path, cap=1)
    cur = con.cursor()
    cur.execute("SET dpsql.allow_spend = 'on'")
    cur.execute(_sql(1))
    answer = cur.fetchall()
    measured = _flags(con)
    assert len(measured) == 1
    for p in (2, 3, 4):
        con.session.compile(_sql(p))
    kept = _flags(con)
    assert measured[0] in kept and len(kept) == 2, kept      # the measured one and one unmeasured
    spent = _spent(con)
    cur.execute(_sql(1))
    assert cur.fetchall() == answer and _spent(con) == spent
    con.close()


def test_a_running_statements_flag_is_never_dropped_and_a_new_condition_is_refused(shop_files, tmp_path):
    """While statement 1 waits for consent its flag table is held: with a cap of 1 another
    condition cannot take its place, so it is refused (53000, nothing spent) and statement 1
    is measured once approved.  On main the other condition was simply added."""
    con = _connect(shop_files, tmp_path, cap=1)
    refused = []

    def approve(request) -> bool:
        spent = _spent(con)
        with pytest.raises(dpsql.InsufficientResourcesError) as info:
            con.session.compile(_sql(2))
        refused.append(info.value)
        assert _spent(con) == spent
        return True

    con.session.approve = approve
    cur = con.cursor()
    cur.execute(_sql(1))
    assert len(cur.fetchall()) == 1 and len(refused) == 1
    err = refused[0]
    assert err.sqlstate == "53000" and "max_ad_hoc_flags" in err.hint and "nothing was spent" in str(err)
    # statement 1 ended (and measured its flag): the other condition now finds room
    con.session.compile(_sql(2))
    assert len(_flags(con)) == 2
    con.close()


def test_the_cap_is_a_checked_config_key(shop_files, tmp_path):
    with pytest.raises(dpsql.Error) as info:
        _connect(shop_files, tmp_path, cap=0)
    assert info.value.sqlstate == "F0000" and "max_ad_hoc_flags" in str(info.value)


def test_flag_tables_are_found_by_name_but_never_listed(shop_files, tmp_path):
    """On main a flag table appeared in the catalog's listing (the shell's \\dt, the wire's
    private tables) and in every 'tables:' hint, naming another analyst's condition."""
    con = _connect(shop_files, tmp_path)
    engine = con.session.engine
    name = _flag_of(con, _sql(2))
    assert name in engine.catalog and engine.catalog.get(name) is engine.catalog[name]
    assert name not in list(engine.catalog) and name not in dict(engine.catalog.items())
    assert len(engine.catalog) == len(list(engine.catalog))
    cur = con.cursor()
    with pytest.raises(dpsql.Error) as info:
        cur.execute("SELECT COUNT(*) FROM nosuch")
    assert info.value.sqlstate == "42P01" and "customers" in info.value.hint and "__has_" not in info.value.hint
    with pytest.raises(dpsql.Error) as info:
        engine.identity("nosuch")
    assert "customers" in info.value.hint and "__has_" not in info.value.hint
    con.close()


def test_dpsql_query_without_a_terminal_names_its_allow_spend_option(shop_files, tmp_path, monkeypatch, capsys):
    """On main the refusal's hint said SET dpsql.allow_spend, which one `dpsql query` run
    cannot send before its statement."""
    import dpsql.cli as cli
    monkeypatch.setattr(cli, "_connect", lambda args: (_connect(shop_files, tmp_path), types.SimpleNamespace(
        clear=lambda: None)))
    monkeypatch.setattr(sys, "stdin", io.StringIO(""))
    assert cli.main(["query", _sql(2)]) == 2
    err = capsys.readouterr().err
    assert "nothing was spent" in err and "dpsql query --allow-spend" in err and "SET dpsql" not in err, err
    assert cli.main(["query", "--allow-spend", _sql(2)]) == 0
    assert "(1 row)" in capsys.readouterr().out


def test_a_flag_table_does_not_stop_later_connections_sharing_the_engine(shop_files, tmp_path):
    """Connections to one ledger share one engine (its models, fitted once).  On main adding
    a flag table wrote its source into the engine's configuration, which then differed from
    the file's: every later connection (each wire client) built an engine of its own."""
    con = _connect(shop_files, tmp_path)
    name = _flag_of(con, _sql(3))
    later = _connect(shop_files, tmp_path)
    assert later.session.engine is con.session.engine
    # shared, and still not listed to the later connection
    assert name in later.session.engine.catalog and name not in list(later.session.engine.catalog)
    later.close()
    con.close()
