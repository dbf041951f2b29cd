"""What an analyst behind ``dpsql serve`` sees of the budget and of hints (issue 33 items 4, 5).

``SHOW dpsql.budget_remaining`` gives the analyst's own remainder, the total remainder and the
next on-demand measurement's cost, as ``dpsql budget`` prints them for that user, after other
users spent; never another user's cap.  Hints that name an operator command (``dpsql measure
--increment``) are worded for the role: the operator in process gets the command, the analyst
behind the server what to ask the operator for."""

from __future__ import annotations

import re

import pytest

import dpsql
from dpsql.cli import main as cli_main
from dpsql.server.server import Server, ServerOptions, ServerThread, serve

from server_fakes import ADULT_CONFIG, PASSWORD
from test_clients import bounded

psycopg = pytest.importorskip("psycopg", reason="psycopg not installed (pip install -e '.[dev]')")

ADULT = ADULT_CONFIG.parent
#: Under "informed", sex and race were never measured together: refused with the increment hint.
NEVER_TOGETHER = "SELECT sex, race, COUNT(*) FROM adult GROUP BY sex, race"


def _config(tmp_path, policy: str, workload: str = "") -> str:
    """A config file (the CLI reads files only) with per-user caps: alice 2 ε, bob 3 ε."""
    path = tmp_path / "dpsql.toml"
    path.write_text(f'''[dpsql]
ledger = "{tmp_path / 'budget.ledger'}"
cache_dir = "{ADULT / '.dpsql-cache'}"
{policy}

[budget]
epsilon = 10.0
delta = 1e-6

[budget.per_user]
epsilon = 2.0

[budget.users.bob]
epsilon = 3.0

[tables.adult]
domain = "{ADULT / 'adult.toml'}"
source = {{ csv = "{ADULT / 'adult.csv'}" }}
privacy_unit = "row"

[workload]
files = ["{ADULT / 'dashboard.sql'}"]
{workload}

[planner]
restarts = 3
seed = 0
''')
    return str(path)


def _connect(port, user):
    return bounded(lambda: psycopg.connect(host="127.0.0.1", port=port, user=user, password=PASSWORD,
                                           dbname="dpsql", connect_timeout=10, sslmode="disable", autocommit=True))


def _cli_budget(config, user, capsys) -> dict:
    """``dpsql budget -U user`` parsed: {"user": (rho, eps, delta), "total": (…)}."""
    capsys.readouterr()
    assert cli_main(["budget", "-C", config, "-U", user]) == 0
    out = capsys.readouterr().out
    got = {}
    for line in out.splitlines():
        m = re.match(r"(user \S+|total): spent rho = \S+, remaining rho = (\S+) \(epsilon = (\S+) at delta = (\S+)\)",
                     line)
        if m:
            got["total" if m.group(1) == "total" else "user"] = m.group(2, 3, 4)
    return got


def test_analyst_budget_view_matches_dpsql_budget_after_others_spend(users_file, tmp_path, capsys):
    config = _config(tmp_path, 'policy = "measure"\n\n[policy]\nunsupported = "measure"\nepsilon = 0.5\n'
                               'allow_spend = true')
    thread = serve(config, users_file=users_file, shadow=False)
    try:
        bob = _connect(thread.port, "bob")
        try:   # bob measures on demand: charged to his cap and to the total
            assert bounded(lambda: bob.execute("SELECT race, COUNT(*) FROM adult GROUP BY race").fetchall(),
                           timeout=300)
        finally:
            bob.close()
        alice = _connect(thread.port, "alice")
        try:
            cur = alice.cursor()
            rows = bounded(lambda: cur.execute("SHOW dpsql.budget_remaining").fetchall())
            assert [d.name for d in cur.description] == ["budget", "rho", "epsilon", "delta"]
            with pytest.raises(psycopg.Error, match="read-only"):
                bounded(lambda: alice.execute("SET dpsql.budget_remaining = '1'"))
        finally:
            alice.close()
    finally:
        thread.stop()
    view = {name: (rho, eps, delta) for name, rho, eps, delta in rows}
    cli = _cli_budget(config, "alice", capsys)
    assert view["user_remaining"] == cli["user"] and view["total_remaining"] == cli["total"]
    # bob's spending shows in the total only; alice's own cap (2 ε) is untouched
    assert float(view["user_remaining"][1]) == pytest.approx(2.0, rel=1e-3)
    assert float(view["total_remaining"][1]) < 10.0
    # the next on-demand measurement costs [policy] epsilon = 0.5 (ρ rounded up, ε from it)
    assert float(view["next_measurement"][1]) == pytest.approx(0.5, rel=1e-3)
    # bob's cap (3 ε) appears nowhere in alice's view
    bob_cli = _cli_budget(config, "bob", capsys)
    assert bob_cli["user"][0] not in {v for row in rows for v in row if v}
    # in process (the operator's DB-API) the same statement gives the same rows
    con = dpsql.connect(config, user="alice")
    try:
        cur = con.cursor()
        cur.execute("SHOW dpsql.budget_remaining")
        assert [tuple(r) for r in cur.fetchall()] == [tuple(r) for r in rows]
    finally:
        con.close()


def test_dpsql_budget_matches_dpsql_budget_after_others_spend(users_file, shadow_cluster, tmp_path, capsys):
    """Issue 33: ``dpsql_budget()`` (and the view ``dpsql_budget``) is the analyst's budget as
    rows any SQL client or BI tool can query: their own remainder, the total remainder and the
    next on-demand measurement's cost, as numbers, equal to ``dpsql budget -U alice`` after bob
    spent on demand and the operator measured the workload, and read afresh by every statement."""
    config = _config(tmp_path, 'policy = "measure"\n\n[policy]\nunsupported = "measure"\nepsilon = 0.5\n'
                               'allow_spend = true', workload="epsilon = 4.0")
    operator = dpsql.connect(config, user="operator")
    thread = ServerThread(Server(config, users_file=users_file, options=ServerOptions(port=0),
                                 shadow_cluster=shadow_cluster)).start()
    try:
        operator.session.measure()     # the operator's workload measurement: the total only
        bob = _connect(thread.port, "bob")
        try:   # bob measures on demand: charged to his cap and to the total
            assert bounded(lambda: bob.execute(NEVER_TOGETHER).fetchall(), timeout=300)
        finally:
            bob.close()
        alice = _connect(thread.port, "alice")
        try:
            cur = alice.cursor()
            rows = bounded(lambda: cur.execute("SELECT * FROM dpsql_budget()").fetchall())
            assert [d.name for d in cur.description] == ["budget", "rho", "epsilon", "delta"]
            assert [d.type_code for d in cur.description] == [25, 701, 701, 701]   # text, float8 × 3
            view = {name: (rho, eps, delta) for name, rho, eps, delta in rows}
            cli = _cli_budget(config, "alice", capsys)
            for name, key in (("user_remaining", "user"), ("total_remaining", "total")):
                assert view[name] == tuple(float(x) for x in cli[key]), name
            assert view["user_remaining"][1] == pytest.approx(2.0, rel=1e-3)      # alice spent nothing
            assert view["total_remaining"][1] < 10.0                               # the others did
            assert view["next_measurement"][1] == pytest.approx(0.5, rel=1e-3)
            # the same through the view, with a filter, a parameter and the simple protocol
            (eps,), = bounded(lambda: alice.execute(
                "SELECT epsilon FROM public.dpsql_budget b WHERE b.budget = %s", ("total_remaining",)).fetchall())
            assert eps == view["total_remaining"][1]
            # alice spends on demand: the next statement reads the ledger again
            bounded(lambda: alice.execute("SELECT relationship, sex, COUNT(*) FROM adult "
                                          "GROUP BY relationship, sex").fetchall(), timeout=300)
            (left,), = bounded(lambda: alice.execute(
                "SELECT rho FROM dpsql_budget() WHERE budget = 'user_remaining'").fetchall())
            assert left == float(_cli_budget(config, "alice", capsys)["user"][0]) < view["user_remaining"][0]
            # a private table and the budget in one statement: refused, as with any catalog relation
            with pytest.raises(psycopg.errors.FeatureNotSupported):
                bounded(lambda: alice.execute("SELECT COUNT(*) FROM adult, dpsql_budget()"))
        finally:
            alice.close()
    finally:
        thread.stop()
        operator.close()


def test_hints_by_role(users_file, tmp_path):
    config = _config(tmp_path, 'policy = "informed"')
    operator = dpsql.connect(config, user="alice")
    try:
        # nothing measured yet: the operator is told the command
        with pytest.raises(dpsql.OperationalError) as exc:
            operator.cursor().execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex")
        assert "`dpsql measure`" in exc.value.hint and "ask your operator" not in exc.value.hint
        thread = serve(config, users_file=users_file, shadow=False)
        try:
            analyst = _connect(thread.port, "alice")
            try:
                with pytest.raises(psycopg.Error) as err:
                    bounded(lambda: analyst.execute("SELECT sex, COUNT(*) FROM adult GROUP BY sex"))
                hint = err.value.diag.message_hint or ""
                assert hint.startswith("ask your operator to measure the workload first") and "`dpsql" not in hint
                operator.session.measure()
                with pytest.raises(psycopg.Error) as err:
                    bounded(lambda: analyst.execute(NEVER_TOGETHER), timeout=300)
                hint = err.value.diag.message_hint or ""
                assert hint.startswith("ask your operator to add a query such as `SELECT")
                assert "dpsql measure" not in hint
                bounded(lambda: analyst.execute("SET dpsql.policy = 'refuse'"))
                with pytest.raises(psycopg.Error) as err:
                    bounded(lambda: analyst.execute(NEVER_TOGETHER), timeout=300)
                assert (err.value.diag.message_hint or "").startswith(
                    "ask your operator to add it to the workload and measure it, or aggregate")
                with pytest.raises(psycopg.Error) as err:   # no [policy] budget in this configuration
                    bounded(lambda: analyst.execute("SET dpsql.policy = 'measure'"))
                assert (err.value.diag.message_hint or "") == \
                    "ask your operator to enable on-demand measurement with a per-query budget"
            finally:
                analyst.close()
        finally:
            thread.stop()
        with pytest.raises(dpsql.errors.UnsupportedQueryError) as exc:
            operator.cursor().execute(NEVER_TOGETHER)
        assert "(`dpsql measure --increment`)" in exc.value.hint and "ask your operator" not in exc.value.hint
        cur = operator.cursor()
        cur.execute("SET dpsql.policy = 'refuse'")
        with pytest.raises(dpsql.errors.UnsupportedQueryError) as exc:
            cur.execute(NEVER_TOGETHER)
        assert exc.value.hint.startswith("add it to the workload and measure it (`dpsql measure --increment`)")
        with pytest.raises(dpsql.errors.PrivacyViolationError) as exc:
            cur.execute("SET dpsql.policy = 'measure'")
        assert exc.value.hint.endswith('(`[policy] unsupported = "measure", epsilon = ... in dpsql.toml`)')
    finally:
        operator.close()


def test_a_useless_on_demand_measurement_hint_by_role(users_file, tmp_path):
    """A per-query budget so small that its answers would be noise is refused before anything is
    read; the operator is told the settings to change, the analyst what to ask for."""
    config = _config(tmp_path, 'policy = "measure"\n\n[policy]\nunsupported = "measure"\nepsilon = 1e-7\n'
                               'allow_spend = true')
    operator = dpsql.connect(config, user="alice")
    try:
        with pytest.raises(dpsql.errors.UselessMeasurementError) as exc:
            operator.cursor().execute("SELECT race, COUNT(*) FROM adult GROUP BY race")
        assert "[policy] epsilon" in exc.value.hint and "ask your operator" not in exc.value.hint
    finally:
        operator.close()
    thread = serve(config, users_file=users_file, shadow=False)
    try:
        analyst = _connect(thread.port, "alice")
        try:
            with pytest.raises(psycopg.Error) as err:
                bounded(lambda: analyst.execute("SELECT race, COUNT(*) FROM adult GROUP BY race"), timeout=300)
            assert err.value.sqlstate == "53P01"
            assert (err.value.diag.message_hint or "").startswith("ask your operator for a larger per-query budget")
        finally:
            analyst.close()
    finally:
        thread.stop()
    check = dpsql.connect(config, user="alice")
    try:
        assert check.session.budget()["total_spent_rho"] == 0   # nothing spent
    finally:
        check.close()


def test_declared_domains_in_the_catalog(shadow_server):
    """Issue 33 item 3: ``\\d+`` had no description and labels and bin edges were found only by
    provoking errors.  Each column's comment gives its declared domain, and ``dpsql_columns``
    has the same as rows, for BI tools; both come from the public declaration."""
    conn = _connect(shadow_server.port, "alice")
    try:
        rows = bounded(lambda: conn.execute(
            "SELECT column_name, data_type, kind, is_nullable, cells, lo, hi, bin_width, edges, labels, open "
            "FROM dpsql_columns WHERE table_name = 'adult' ORDER BY ordinal_position").fetchall())
        by_name = {r[0]: r[1:] for r in rows}
        assert [r[0] for r in rows][:3] == ["age", "workclass", "fnlwgt"] and len(rows) == 15
        assert by_name["fnlwgt"][:7] == ("bigint", "integer", False, 30, 1, 1500000, 50000)
        assert by_name["capital_loss"][7] == [0, 1, 500, 1000, 1500, 2000, 2500, 3000]
        assert by_name["sex"][:4] == ("text", "categorical", False, 2) and by_name["sex"][8] == ["Female", "Male"]
        assert by_name["workclass"][2] is True and by_name["workclass"][9] is False   # nullable, closed
        # the column comments (psql's \d+ Description, col_description) say the same in words
        comments = dict(bounded(lambda: conn.execute(
            "SELECT a.attname, col_description(a.attrelid, a.attnum) FROM pg_attribute a "
            "WHERE a.attrelid = 'adult'::regclass AND a.attnum > 0").fetchall()))
        assert comments["fnlwgt"].startswith("declared domain (integer, 30 cells): 1..1500000 in bins of 50000")
        assert "GROUP BY fnlwgt returns each bin's label (e.g. '[1, 50000]')" in comments["fnlwgt"]
        assert comments["sex"] == "declared domain (categorical, 2 cells): 'Female', 'Male'"
        # a private table and the view in one statement: refused, as with any catalog relation
        with pytest.raises(psycopg.errors.FeatureNotSupported):
            bounded(lambda: conn.execute("SELECT COUNT(*) FROM adult, dpsql_columns"))
    finally:
        conn.close()
    sqlalchemy = pytest.importorskip("sqlalchemy")
    engine = sqlalchemy.create_engine(
        f"postgresql+psycopg://alice:{PASSWORD}@127.0.0.1:{shadow_server.port}/dpsql",
        connect_args={"connect_timeout": 10, "sslmode": "disable"})
    try:
        insp = bounded(lambda: sqlalchemy.inspect(engine))
        assert bounded(insp.get_table_names) == ["adult"]
        assert sorted(bounded(insp.get_view_names)) == ["dpsql_budget", "dpsql_columns"]
        columns = {c["name"]: c for c in bounded(lambda: insp.get_columns("adult"))}
        assert columns["age"]["comment"] == "declared domain (integer, 74 cells): 17..90"
    finally:
        engine.dispose()


def test_a_refusal_says_how_an_analyst_sees_every_label(engine_server):
    """A value that is not a declared label of a long column is refused with a summary; the hint
    names the catalog view that lists every label, which an analyst behind the server can read
    (the shell's \\d it also names is the operator's)."""
    thread, _ = engine_server
    conn = _connect(thread.port, "alice")
    try:
        with pytest.raises(psycopg.Error) as err:
            bounded(lambda: conn.execute("SELECT COUNT(*) FROM adult WHERE native_country = 'Germny'"))
        hint = err.value.diag.message_hint or ""
        assert "'Germany'" in hint and hint.endswith("over dpsql serve, dpsql_columns.labels")
        (labels,), = bounded(lambda: conn.execute(
            "SELECT labels FROM dpsql_columns "
            "WHERE table_name = 'adult' AND column_name = 'native_country'").fetchall())
        assert len(labels) == 41 and "Germany" in labels and "Holand-Netherlands" in labels
    finally:
        conn.close()
