"""``max_record_lines``: the noise of every measurement path is calibrated for records that
span several physical lines (issue 34 item 1; the reader's side is
tests/measure/test_neighbours.py::test_records_spanning_lines_move_counts_by_at_most_max_record_lines).

The workload measurement (``Session.measure()``, ``dpsql measure``), the ``measure`` policy and
AIM all take the factor from ``Source.unit_rows``: at the same ρ, a table declaring
``max_record_lines = 3`` gets three times the noise of one declaring 1, and the release
identity changes with it."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import dpsql
from age_sex import write_table
from dpsql.engine.aim import aim_options
from dpsql.errors import ConfigError

CONFIG = """
[dpsql]
ledger = "t.ledger"
cache_dir = "cache"

[budget]
epsilon = 10.0
delta = 1e-6

[budget.per_user]
epsilon = 10.0

[tables.t]
domain = "d.toml"
source = {{ csv = "t.csv"{extra} }}
{unit}

[workload]
queries = ["SELECT age, COUNT(*) FROM t GROUP BY age"]
epsilon = 1.0

[policy]
unsupported = "measure"
epsilon = 1.0
allow_spend = true
"""


def _connect(tmp: Path, lines: int | None, extra: str = "", unit: str = ""):
    write_table(tmp, 40)
    if lines is not None:
        extra += f", max_record_lines = {lines}"
    (tmp / "dpsql.toml").write_text(CONFIG.format(extra=extra, unit=unit))
    return dpsql.connect(str(tmp / "dpsql.toml"))


def _sigmas(con) -> list[float]:
    return sorted(sd for _, _, sd in con.session.engine._state("t").released)


def test_every_measurement_path_calibrates_for_max_record_lines(tmp_path):
    one, three = _connect(tmp_path / "one", None), _connect(tmp_path / "three", 3)
    assert one.session.engine.identity("t") != three.session.engine.identity("t")
    for con in (one, three):
        con.session.measure()                                              # the workload
        con.cursor().execute("SELECT sex, COUNT(*) FROM t GROUP BY sex")   # the measure policy
    spent = [con.session.engine.ledger.spent(None) for con in (one, three)]
    assert float(spent[1]) == pytest.approx(float(spent[0]), rel=1e-6) and spent[0] > 0   # the same ρ ...
    s1, s3 = _sigmas(one), _sigmas(three)
    assert len(s1) == len(s3) >= 2
    for a, b in zip(s1, s3):                                               # ... three times the noise
        assert b == pytest.approx(3 * a, rel=1e-6)
    assert aim_options(one.session.engine, "t").unit_rows == 1            # AIM's rounds
    assert aim_options(three.session.engine, "t").unit_rows == 3


def test_max_record_lines_is_checked(tmp_path):
    for bad in (0, 10_001, "2", True):
        with pytest.raises(ConfigError, match="max_record_lines"):
            _connect(tmp_path / f"bad{bad}", None, extra=f", max_record_lines = {bad!r}".replace("'", '"')
                     .replace("True", "true"))
    with pytest.raises(ConfigError, match='privacy_unit = "row"'):
        _connect(tmp_path / "id", 2, unit='privacy_unit = { id = "sex", max_rows = 2 }')
    assert math.isfinite(_connect(tmp_path / "ok", 2).session.measure_cost())


def test_check_points_at_quoted_line_breaks(tmp_path, capsys):
    """The operator's data check says when quoted fields seem to hold line breaks (lines that
    leave a quote open) and what to declare; a clean file gets no such line."""
    from dpsql import cli
    con = _connect(tmp_path, None)
    path = tmp_path / "dpsql.toml"
    con.close()
    assert cli.main(["check", "-C", str(path)]) == 0
    assert "quote open" not in capsys.readouterr().out
    with open(tmp_path / "t.csv", "a") as fh:
        fh.write('40,"Fe\nmale"\n33,"Ma\r\nle"\n')
    assert cli.main(["check", "-C", str(path)]) == 1         # the fragments are malformed records
    out = capsys.readouterr().out
    assert "4 lines leave a quote open" in out and "max_record_lines" in out
