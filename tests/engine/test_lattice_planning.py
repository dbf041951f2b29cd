"""Strategies must stay measurable: a Kron of 16 real factors cannot be put on the integer
lattice finely enough at small budgets (its 2×2 factors would collapse to rank 1), so the
engine re-plans such workloads with integer-block operators."""

import itertools

import numpy as np
import pytest

import dpsql
from dpsql.linalg import Explicit, Identity, Kron
from dpsql.measure import release as rel

ATTRS = [f"b{i}" for i in range(16)]


def test_rank_check_flags_collapsing_factors():
    factor = Explicit(np.array([[1.0, 0.8], [0.75, 1.0]]))  # like OPT_⊗'s factors on nltcs
    many = [(tuple(ATTRS), Kron([factor] * 16), 1.0)]
    assert not rel.lattice_keeps_rank(many, 0.0024)
    assert rel.lattice_keeps_rank([(("b0", "b1"), Kron([factor] * 2), 1.0)], 0.0024)
    assert rel.lattice_keeps_rank([(("b0",), Identity(2), 1.0)], 1e-6)  # integer blocks always


@pytest.fixture()
def binary_config(tmp_path):
    rng = np.random.default_rng(1)
    rows = rng.integers(0, 2, size=(500, 16))
    (tmp_path / "t.csv").write_text(",".join(ATTRS) + "\n" + "\n".join(",".join(map(str, r)) for r in rows))
    cols = "\n".join(f"[tables.t.columns.{a}]\ntype = \"integer\"\nlo = 0\nhi = 1\n" for a in ATTRS)
    (tmp_path / "t.toml").write_text(f"[tables.t]\nsource = {{ csv = \"t.csv\" }}\n\n{cols}")
    queries = [f"SELECT {a}, {b}, COUNT(*) FROM t GROUP BY {a}, {b}" for a, b in itertools.combinations(ATTRS, 2)]
    # the check is about support, not accuracy: a short fit of the 2^16-cell model is enough
    return {"dpsql": {"ledger": str(tmp_path / "t.ledger"), "cache_dir": str(tmp_path / "cache"),
                      "fit_iters": 20},
            "tables": {"t": {"domain": str(tmp_path / "t.toml")}},
            "workload": queries}


@pytest.mark.parametrize("epsilon", [0.1, 10.0])
def test_all_pairs_of_sixteen_binary_attributes_are_measurable(binary_config, epsilon):
    con = dpsql.connect(binary_config, budget={"epsilon": epsilon, "delta": 1e-6})
    report = con.session.plan()
    blocks = [(b.clique, b.query, b.weight) for b in report.strategy.blocks]
    assert rel.lattice_keeps_rank(blocks, report.rho)
    con.session.measure()
    cur = con.cursor().execute("SELECT b3, b7, COUNT(*) FROM t GROUP BY b3, b7")
    assert len(cur.fetchall()) == 4 and not any(cur.inferred)
