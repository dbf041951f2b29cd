"""Issue 15, item by item, through the DB-API (the wire server: tests/server/test_issue15_wire.py).

1-2. one malformed value / non-UTF-8 byte / extra field never fails a measurement nor moves
     other rows; 3. the privacy unit is part of a release's identity; 4. a release does not
     outlive its data; 5. no double charge across processes; 6. strict configuration and a
     working ``id_column``; 7. ``dpsql check`` reports broken closed-categorical promises and
     ``dpsql measure`` refuses to spend on them unless ``--force``.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import dpsql
from dpsql import cli
from dpsql.engine.config import load_config
from dpsql.errors import ConfigError

DOMAIN = """
[tables.t]
source = { csv = "t.csv" }

[tables.t.columns.age]
type = "integer"
lo = 17
hi = 90
bin_width = 10

[tables.t.columns.sex]
type = "categorical"
labels = ["Female", "Male"]
closed = true

[tables.t.columns.code]
type = "categorical"
labels = [1, 2, 3]

[tables.t.columns.city]
type = "categorical"
labels = ["Zürich", "Genève"]
nullable = true
"""

CONFIG = """
[dpsql]
ledger = "t.ledger"
cache_dir = "cache"

[budget]
epsilon = 1e9
delta = 1e-6

[budget.per_user]
epsilon = 1e9

[tables.t]
domain = "d.toml"
{unit}

[workload]
queries = ["SELECT age, COUNT(*) FROM t GROUP BY age", "SELECT sex, code, COUNT(*) FROM t GROUP BY sex, code"]
epsilon = 1e6

[policy]
unsupported = "measure"
epsilon = 1e6
allow_spend = true
"""

HEADER = "pid,age,sex,code,city"
ROWS = [f"p{i % 23},{17 + (i * 7) % 70},{['Female', 'Male'][i % 2]},{1 + i % 3},{['Zürich', 'Genève', ''][i % 3]}"
        for i in range(60)]


def make(tmp: Path, rows=ROWS, *, unit: str = "", extra: bytes = b"", domain: str = DOMAIN,
         config: str = CONFIG) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "t.csv").write_bytes(("\n".join([HEADER] + list(rows)) + "\n").encode() + extra)
    (tmp / "d.toml").write_text(domain)
    path = tmp / "dpsql.toml"
    path.write_text(config.format(unit=unit))
    return path


def total(con) -> float:
    cur = con.cursor()
    cur.execute("SELECT COUNT(*) FROM t")
    return cur.fetchone()[0]


# -- items 1 and 2 ---------------------------------------------------------------------------

@pytest.mark.parametrize("token", ["NA", "?", "-", " ", "abc", "1e999", '"40', "4\x000"])
def test_one_malformed_number_never_fails_the_measure_policy(tmp_path, token):
    """Was: SQLSTATE 58000 with the DuckDB exception class in the hint (clean file: fine)."""
    clean = dpsql.connect(make(tmp_path / "clean"))
    dirty = dpsql.connect(make(tmp_path / "dirty", ROWS + [f"p0,{token},Male,1,Zürich"]))
    for con in (clean, dirty):
        cur = con.cursor()
        cur.execute("SELECT age, COUNT(*) FROM t GROUP BY age")
        assert len(cur.fetchall()) == 8 and cur.cost > 0
    assert round(total(clean)) == 60 and round(total(dirty)) == 61


@pytest.mark.parametrize("record, records", [
    (b"p1,40,Male,x1,Z\xc3\xbcrich", 1),          # integer labels compared with a non-integer string
    (b"p1,40,Male,1,Z\xfcrich", 1),              # not UTF-8
    (b"p1,40,Male,1,Gen\xe8ve,extra,fields", 1),  # an extra field: no longer moves the header/skip
    (b"p1,40,Male", 1),                          # too few fields
    (b'p1,"40,Male,1,', 1),                       # a quote that never closes
    (b"\xff\xfe\x00\r\r\n", 1),                   # random bytes; \r, \r\n and \n each end a line, and
                                                 # the two empty lines are no one's record (issue 34)
])
def test_one_hostile_record_moves_only_itself(tmp_path, record, records):
    con = dpsql.connect(make(tmp_path, extra=record + b"\n"))
    cur = con.cursor()
    cur.execute("SELECT sex, code, COUNT(*) FROM t GROUP BY sex, code")
    rows = cur.fetchall()
    assert cur.cost > 0 and len(rows) == 2 * 4
    assert round(sum(r[2] for r in rows)) == 60 + records


# -- item 3: the privacy unit (and everything else) is part of the identity ----------------------

def test_switching_the_privacy_unit_makes_releases_stale(tmp_path):
    path = make(tmp_path)
    con = dpsql.connect(path)
    con.session.measure()
    assert con.session.measure_cost() == 0.0
    con.close()
    path.write_text(CONFIG.format(unit='privacy_unit = { id = "pid", max_rows = 2 }'))
    con = dpsql.connect(path)
    engine = con.session.engine
    assert engine.model("t")[0] is None            # the row-level release is not fed to the model
    assert con.session.measure_cost() > 0           # and needs new budget
    [old] = engine.releases()
    assert not old.current and "the privacy unit changed" in old.reasons
    report = con.session.measure()
    assert not report.reused and report.rho > 0
    assert round(total(con)) <= 23 * 2              # bounded: at most 2 rows for each of 23 ids


def test_release_keys_carry_the_identity(tmp_path):
    con = dpsql.connect(make(tmp_path))
    engine = con.session.engine
    con.session.measure()
    ident = engine.identity("t")
    [release] = engine.releases()
    assert release.current and release.key.startswith(ident.key() + ":")
    entry = next(e for e in engine.ledger.entries() if e.kind == "charge")
    assert entry.mechanism["identity"] == ident.as_dict()
    key = engine.model_key("t")
    assert key == engine.model_key("t")             # stable while nothing changes


# -- item 4: a release does not outlive its data ---------------------------------------------------

def test_a_changed_source_makes_releases_stale_in_a_running_engine(tmp_path):
    path = make(tmp_path)
    con = dpsql.connect(path)
    con.session.measure()
    before = total(con)
    key = con.session.engine.model_key("t")
    (tmp_path / "t.csv").write_text("\n".join([HEADER] + ROWS[:30]) + "\n")  # the operator replaces the file
    engine = con.session.engine
    assert engine.model("t")[0] is None            # the cached model and releases are dropped
    assert engine.model_key("t") != key
    [old] = engine.releases()
    assert not old.current and old.reasons == ("the source data or how it is read changed",)
    assert con.session.measure_cost() > 0
    con.session.measure()
    assert round(before) == 60 and round(total(con)) == 30  # counted from the new content


def test_a_changed_source_invalidates_cached_answers(tmp_path):
    """Issue 34 item 2: a live session answered a repeated statement from its cache, i.e. from
    the stale release, after the source changed (the cache was keyed by a model version that
    only a refit moved)."""
    path = make(tmp_path)
    con = dpsql.connect(path)
    con.session.measure()
    assert round(total(con)) == 60
    spent = con.session.engine.ledger.spent(None)
    (tmp_path / "t.csv").write_text("\n".join([HEADER] + ROWS[:30]) + "\n")
    cur = con.cursor()
    cur.execute("SELECT COUNT(*) FROM t")            # policy "measure": the new content is measured
    assert cur.cost > 0 and round(cur.fetchone()[0]) == 30
    assert con.session.engine.ledger.spent(None) > spent


# -- item 5: no process pays for what another already released --------------------------------------

def _measure_in_subprocess(path: Path) -> subprocess.Popen:
    code = textwrap.dedent(f"""
        import dpsql
        r = dpsql.connect({str(path)!r}).session.measure()
        print(r.rho, r.reused)
    """)
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_an_engine_started_earlier_reuses_another_process_release(tmp_path):
    path = make(tmp_path)
    con = dpsql.connect(path)                        # engine A starts first
    engine = con.session.engine
    proc = _measure_in_subprocess(path)             # process B measures
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    spent = engine.ledger.spent(None)
    report = con.session.measure()                  # was: counted, charged, IntegrityError
    assert report.reused and report.rho == 0
    assert engine.ledger.spent(None) == spent
    assert round(total(con)) == 60


@pytest.mark.slow
def test_two_processes_measuring_at_once_pay_once(tmp_path):
    path = make(tmp_path)
    procs = [_measure_in_subprocess(path) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    reused = sorted(o[0].split()[1] for o in outs)
    assert reused == ["False", "True"]
    con = dpsql.connect(path)
    charges = [e for e in con.session.engine.ledger.entries() if e.kind == "charge"]
    assert len(charges) == 1


# -- item 6: strict configuration ------------------------------------------------------------------

@pytest.mark.parametrize("text, key, suggestion", [
    ('[tables.t]\ndomain = "d.toml"\nprivacy_unt = "row"\n', "privacy_unt", "privacy_unit"),
    ('polcy = "refuse"\n', "polcy", "policy"),
    ('[dpsql]\nledgr = "x.ledger"\n', "ledgr", "ledger"),
    ('[planner]\nrestart = 3\n', "restart", "restarts"),
    ('[budget.users.bob]\nepsilon = 1\ndelat = 1e-6\n', "delat", "delta"),
])
def test_unknown_keys_are_errors_naming_the_closest(tmp_path, text, key, suggestion):
    base = CONFIG.format(unit="")
    # merge the bad snippet into a valid config (a repeated table header is invalid TOML)
    if text.startswith("[tables.t]"):
        cfg = base.replace('[tables.t]\ndomain = "d.toml"\n', text)
    elif text.startswith("[dpsql]"):
        cfg = base.replace("[dpsql]\n", text)
    else:
        cfg = text + base if not text.startswith("[") else base + "\n" + text
    path = make(tmp_path, config=cfg.replace("{", "{{").replace("}", "}}"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert repr(key) in info.value.message and repr(suggestion) in info.value.message


@pytest.mark.parametrize("source, key", [
    ('{ csv = "t.csv", id_colum = "pid" }', "id_colum"),
    ('{ csv = "t.csv", delimeter = ";" }', "delimeter"),
    ('{ csv = "t.csv", table = "x" }', "table"),
])
def test_unknown_source_keys_are_errors(tmp_path, source, key):
    path = make(tmp_path, domain=DOMAIN.replace('source = { csv = "t.csv" }', f"source = {source}"))
    with pytest.raises(ConfigError) as info:
        load_config(path)
    assert repr(key) in info.value.message


def test_the_privacy_unit_bounds_contributions(tmp_path):
    """An id column was once silently ignored (row-level privacy with no per-person bound)."""
    con = dpsql.connect(make(tmp_path, unit='privacy_unit = { id = "pid", max_rows = 1 }'))
    assert con.session.engine.config.sources["t"].id_column == "pid"
    assert con.session.engine.identity("t").unit == "id=pid;max_rows=1"
    con.session.measure()
    assert round(total(con)) == 23                  # one row for each of 23 people


def test_the_privacy_unit_is_declared_in_one_place(tmp_path):
    """Issue 36 item 4: ``id_column``/``max_rows`` in a source (here the domain file's) was a
    second declaration of the unit, with its own default (max_rows 1 where privacy_unit
    requires it) and no hash key; it is refused with the privacy_unit line to write."""
    domain = DOMAIN.replace('source = { csv = "t.csv" }', 'source = { csv = "t.csv", id_column = "pid" }')
    with pytest.raises(ConfigError, match="no longer declare the privacy unit") as info:
        load_config(make(tmp_path, domain=domain))
    assert 'privacy_unit = { id = "pid", max_rows = 1 }' in info.value.hint
    domain = DOMAIN.replace('source = { csv = "t.csv" }', 'source = { csv = "t.csv", max_rows = 2 }')
    with pytest.raises(ConfigError, match="no longer declare the privacy unit"):
        load_config(make(tmp_path / "x", domain=domain, unit='privacy_unit = { id = "pid", max_rows = 2 }'))


def test_dialect_options_are_declared_not_sniffed(tmp_path):
    rows = [r.replace(",", ";") for r in ROWS]
    domain = DOMAIN.replace('source = { csv = "t.csv" }', 'source = { csv = "t.csv", delimiter = ";" }')
    path = make(tmp_path, rows, domain=domain)
    (tmp_path / "t.csv").write_text("\n".join([HEADER.replace(",", ";")] + rows) + "\n")
    con = dpsql.connect(path)
    con.session.measure()
    assert round(total(con)) == 60
    # the same file read with the default delimiter has no column "age": refused before any charge
    con2 = dpsql.connect(make(tmp_path / "comma", rows))
    (tmp_path / "comma" / "t.csv").write_text("\n".join([HEADER.replace(",", ";")] + rows) + "\n")
    with pytest.raises(ConfigError, match="no column 'age'"):
        con2.session.measure()
    assert con2.session.engine.ledger.spent(None) == 0


# -- item 7: dpsql check, and measure refusing to spend on broken promises ------------------------------

def test_check_reports_broken_closed_promises_and_measure_refuses(tmp_path, capsys):
    rows = ROWS + [f"p{i},40,{'MF'[i % 2]},1,Zürich" for i in range(17)]   # M/F codes in a closed column
    path = make(tmp_path, rows)
    assert cli.main(["check", "-C", str(path)]) == 1
    out = capsys.readouterr().out
    assert "17 not a label" in out and "'M'" in out and "cell 0 ('Female')" in out
    assert cli.main(["measure", "-C", str(path), "--yes"]) == 1
    assert "nothing spent" in capsys.readouterr().err
    con = dpsql.connect(path)
    assert con.session.engine.ledger.spent(None) == 0
    assert cli.main(["measure", "-C", str(path), "--yes", "--force"]) == 0
    assert con.session.engine.ledger.spent(None) > 0
    assert cli.main(["check", "-C", str(make(tmp_path / "clean"))]) == 0


@pytest.mark.parametrize("change, reason", [
    (lambda d, c: (d.replace("bin_width = 10", "bin_width = 5"), c), "the declared domain changed"),
    (lambda d, c: (d, c.replace('cache_dir = "cache"', 'cache_dir = "cache"\nnoise = "laplace"')),
     "the noise family changed"),
    (lambda d, c: (d.replace('source = { csv = "t.csv" }', 'source = { csv = "t.csv", null = ["", "NA"] }'), c),
     "the source data or how it is read changed"),
])
def test_any_identity_change_makes_releases_stale(tmp_path, change, reason):
    path = make(tmp_path)
    con = dpsql.connect(path)
    con.session.measure()
    con.close()
    domain, config = change(DOMAIN, CONFIG)
    path = make(tmp_path, domain=domain, config=config)
    con = dpsql.connect(path)
    assert con.session.engine.model("t")[0] is None
    [old] = con.session.engine.releases()
    assert old.reasons == (reason,)
    assert con.session.measure_cost() > 0


def test_data_version_serves_releases_after_the_data_is_removed(tmp_path):
    domain = DOMAIN.replace('source = { csv = "t.csv" }', 'source = { csv = "t.csv", data_version = "2026-11" }')
    path = make(tmp_path, domain=domain)
    con = dpsql.connect(path)
    con.session.measure()
    (tmp_path / "t.csv").unlink()
    con.close()
    con = dpsql.connect(path)
    assert round(total(con)) == 60
    assert all(r.current for r in con.session.engine.releases())
