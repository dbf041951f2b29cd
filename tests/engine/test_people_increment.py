"""``dpsql measure --increment`` on a people schema (issue 32): without ``--table`` it measures
every view that has workload queries no release supports, dividing the increment's budget
across them as the workload's split does (before: "several tables are configured; name
one"); with ``--table VIEW`` its default budget is that view's share of the workload budget
(before: the whole workload budget went to one view)."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

import dpsql  # noqa: E402
from dpsql.cli import main  # noqa: E402

SEGMENT = "SELECT segment, COUNT(*) FROM customers GROUP BY segment"
FLAG = ("SELECT l.flag, COUNT(*) FROM orders o JOIN lineitem l ON l.orderkey = o.orderkey GROUP BY l.flag")
STATUS = "SELECT status, COUNT(*) FROM orders GROUP BY status"
ADDED = ["SELECT nation, COUNT(*) FROM customers GROUP BY nation",
         "SELECT o.priority, l.flag, COUNT(*) FROM orders o JOIN lineitem l ON l.orderkey = o.orderkey "
         "GROUP BY o.priority, l.flag"]


def _config(tmp_path: Path, queries: list[str]) -> Path:
    files = shop.write_parquet(shop.shop_rows(customers=80), tmp_path / "data")
    (tmp_path / "shop.toml").write_text(shop.DOMAIN)
    tables = "".join(f'[tables.{t}]\ndomain = "shop.toml"\nsource = {{ parquet = "{p}" }}\n\n'
                     for t, p in files.items())
    people = shop.people_section()
    links = "".join(f"[people.tables.{t}]\n" + "".join(
        f'{k} = {v if isinstance(v, int) else chr(34) + v + chr(34)}\n' for k, v in link.items()) + "\n"
        for t, link in people["tables"].items())
    path = tmp_path / "dpsql.toml"
    path.write_text(f'[dpsql]\nledger = "shop.ledger"\ncache_dir = "cache"\n\n[budget]\nepsilon = 4.0\n'
                    f'delta = 1e-6\n\n[workload]\nepsilon = 1.0\nqueries = {queries!r}\n\n{tables}'
                    f'[people]\nperson = "customers"\nkey = "custkey"\n\n{links}'.replace("'", '"'))
    return path


def _increments(path: Path) -> dict[str, Fraction]:
    con = dpsql.connect(path)
    out = {r.table: r.rho for r in con.session.engine.releases() if r.purpose == "workload-increment"}
    con.close()
    return out


def test_an_increment_measures_every_view_that_needs_one_at_its_part_of_the_budget(tmp_path):
    base = [SEGMENT, STATUS, FLAG]
    path = _config(tmp_path, base)
    assert main(["measure", "-C", str(path), "--yes", "--no-fit", "--force"]) == 0
    path.write_text(path.read_text().replace(repr(base).replace("'", '"'), repr(base + ADDED).replace("'", '"')))
    con = dpsql.connect(path)
    engine = con.session.engine
    workload = engine.workload_rho()
    shares = engine.view_shares(workload)
    con.close()
    assert main(["measure", "-C", str(path), "--increment", "--yes", "--no-fit", "--force"]) == 0
    spent = _increments(path)
    # the orders view's queries are all supported: only customers and lineitem are measured,
    # their parts of the whole increment (the workload budget) in the ratio of the split
    assert set(spent) == {"customers", "lineitem"}
    assert sum(spent.values(), Fraction(0)) == workload
    assert spent["customers"] / spent["lineitem"] == shares["customers"] / shares["lineitem"]
    # nothing is left to measure
    assert main(["measure", "-C", str(path), "--increment", "--yes", "--no-fit", "--force"]) == 0
    assert _increments(path) == spent


def test_an_increment_of_one_view_defaults_to_its_share_of_the_workload_budget(tmp_path):
    base = [SEGMENT, FLAG]
    path = _config(tmp_path, base)
    assert main(["measure", "-C", str(path), "--yes", "--no-fit", "--force"]) == 0
    path.write_text(path.read_text().replace(repr(base).replace("'", '"'), repr(base + ADDED).replace("'", '"')))
    con = dpsql.connect(path)
    share = con.session.engine.workload_rho("lineitem")
    assert share < con.session.engine.workload_rho()
    con.close()
    assert main(["measure", "-C", str(path), "--increment", "--table", "lineitem", "--yes", "--no-fit", "--force"]) == 0
    assert _increments(path) == {"lineitem": share}
