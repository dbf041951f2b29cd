"""The shop example (examples/shop: three private tables, one person) runs end to end from the
command line: plan shows every view's bound and share, measure spends the whole budget across
the views, and a three-table join is answered (issue 32 item 5)."""

from __future__ import annotations

import shutil
from pathlib import Path

from dpsql.cli import main

SHOP = Path(__file__).resolve().parents[2] / "examples" / "shop"
JOIN = ("SELECT c.segment, SUM(l.quantity), AVG(l.discount) FROM customers c "
        "JOIN orders o ON o.custkey = c.custkey JOIN lineitem l ON l.orderkey = o.orderkey GROUP BY c.segment")


def test_the_shop_example_plans_measures_and_answers_joins(tmp_path, capfd):
    for f in SHOP.iterdir():
        if f.suffix in (".toml", ".sql", ".parquet"):
            shutil.copy(f, tmp_path / f.name)
    config = str(tmp_path / "dpsql.toml")
    assert main(["plan", "-C", config]) == 0
    out = capfd.readouterr().out
    assert "customers -> orders -> lineitem, at most 32 rows per person" in out
    assert "customers -> orders, at most 8 rows per person" in out
    assert "an even split would give" in out
    assert main(["measure", "-C", config, "--yes", "--no-fit"]) == 0
    capfd.readouterr()
    assert main(["budget", "-C", config]) == 0
    out = capfd.readouterr().out
    assert "3 in use" in out
    assert main(["query", "-C", config, JOIN]) == 0
    out = capfd.readouterr().out
    for segment in ("AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"):
        assert segment in out
    buyers = ("SELECT c.region, COUNT(DISTINCT c.custkey) AS buyers FROM customers c "
              "JOIN orders o ON o.custkey = c.custkey GROUP BY c.region")
    assert main(["query", "-C", config, buyers]) == 0
    assert "MIDDLE EAST" in capfd.readouterr().out
