"""The shop example (examples/shop: three private tables, one person) runs end to end from the
command line as its demo script says (issue 32): each ``dpsql`` command of ``demo.sh`` is run
here, in order, on a copy of the example, and what it prints is checked — the plan's views with
their bounds, group bounds and shares, a private choice of a bound, the measurement with the
released truncation, the plan again with it, answers over joins with the truncation beside the
noise, customers with a child-table condition counted on demand (near DuckDB's exact count), and
the budget with every release in use."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import duckdb

from dpsql.cli import main

SHOP = Path(__file__).resolve().parents[2] / "examples" / "shop"


def demo_commands() -> list[list[str]]:
    """The ``dpsql`` commands of demo.sh, each as its argv (a quoted statement may span lines)."""
    out, pending = [], ""
    for line in (SHOP / "demo.sh").read_text().splitlines():
        if not pending and not line.startswith("dpsql "):
            continue
        pending += line + "\n"
        try:
            argv = shlex.split(pending)
        except ValueError:      # the quoted SQL goes on
            continue
        out.append(argv)
        pending = ""
    return out


def test_the_shop_demo_plans_chooses_a_bound_measures_and_answers(tmp_path, capfd, monkeypatch):
    for f in SHOP.iterdir():
        if f.suffix in (".toml", ".sql", ".parquet"):
            shutil.copy(f, tmp_path / f.name)
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("DPSQL_CONFIG", raising=False)
    commands = demo_commands()
    assert [c[1] for c in commands] == ["plan", "bound", "measure", "plan", "query", "query", "query", "budget"]
    outs = []
    for argv in commands:
        assert argv[0] == "dpsql"
        assert main(argv[1:]) == 0, argv
        outs.append(capfd.readouterr().out)
    plan, bound, measure, plan_after, flags, segments, returners, budget = outs
    assert "customers -> orders -> lineitem, at most 32 rows per person in at most 3 groups of (returnflag)" in plan
    assert "customers -> orders, at most 8 rows per person in at most 7 groups of (year), 3 per group" in plan
    assert plan.count("rho share") == 3 and "an even split would give" in plan
    assert "(not released yet)" in plan
    assert "orders: max_rows = " in bound and "spent rho = 0.00125" in bound
    assert measure.count("truncation (released with noise") == 2
    assert plan_after.count("truncation (released with noise") == 2 and "not released yet" not in plan_after
    for word in ("A ", "N ", "R ", "lineitem: truncation (released with noise"):
        assert word in flags
    for segment in ("AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"):
        assert segment in segments
    # customers with a recent returned line item, measured on demand: near the exact count
    got = {m[1].strip(): (float(m[2].replace(",", "")), float(m[3].replace(",", "")))
           for m in re.finditer(r"^ (\w[\w ]*?) *\| *([\d,]+) ± ([\d,]+)", returners, re.M)}
    con = duckdb.connect()
    for t in ("customers", "orders", "lineitem"):
        con.execute(f"CREATE VIEW {t} AS SELECT * FROM read_parquet('{tmp_path / t}.parquet')")
    exact = con.execute(commands[6][-1]).fetchall()
    assert len(exact) == len(got) == 5
    for region, count in exact:
        value, ci95 = got[region]
        assert abs(value - count) <= 4 * ci95, (region, value, count, ci95)   # ~8 standard errors
    assert "7 in use, 0 stale" in budget and "__has_" in budget
