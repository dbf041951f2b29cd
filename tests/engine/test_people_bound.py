"""The private choice of a view's bound (dpsql bound, dpsql/engine/people_bound.py)."""

from __future__ import annotations

import random
import sys
from collections import Counter
from fractions import Fraction
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "measure"))
import shop  # noqa: E402

import dpsql  # noqa: E402
from dpsql.engine.people_bound import bound_scores, candidates, choose_bound  # noqa: E402
from dpsql.errors import BudgetExhaustedError, ProgrammingError  # noqa: E402
from dpsql.privacy.noise import SeededBitSource  # noqa: E402


def _hist(counts, cap):
    h = [0] * (cap + 1)
    for n in counts:
        h[min(n, cap)] += 1
    return h


@pytest.mark.parametrize("seed", range(30))
def test_one_person_moves_every_score_by_at_most_one(seed):
    """The exponential mechanism is calibrated for sensitivity 1: brute force over random
    persons' row counts, adding each possible person and removing each present one."""
    rng = random.Random(seed)
    cap = rng.choice([1, 5, 16, 64])
    cands = candidates(cap)
    q = Fraction(rng.randint(1, 100), 100)
    counts = [rng.randint(1, 3 * cap) for _ in range(rng.randint(0, 40))]
    base = bound_scores(_hist(counts, cap), cands, q)
    neighbours = [counts + [n] for n in range(1, 3 * cap + 2)]
    neighbours += [counts[:i] + counts[i + 1:] for i in range(len(counts))]
    for other in neighbours:
        for a, b in zip(base, bound_scores(_hist(other, cap), cands, q)):
            assert abs(a - b) <= 1


def test_candidates_are_powers_of_two_up_to_the_cap():
    assert candidates(1) == (1,)
    assert candidates(20) == (1, 2, 4, 8, 16, 20)
    with pytest.raises(ProgrammingError):
        candidates(0)


@pytest.fixture
def con(tmp_path):
    files = shop.write_parquet(shop.shop_rows(customers=200), tmp_path)
    spec = shop.config(tmp_path, {t: {"parquet": str(p)} for t, p in files.items()})
    c = dpsql.connect(spec, budget={"rho": 2000})
    yield c, shop.shop_rows(customers=200)
    c.close()


def test_the_bound_is_the_quantile_at_a_huge_epsilon_and_costs_epsilon_squared_over_8(con):
    c, rows = con
    engine = c.session.engine
    per_person = Counter(o[1] for o in rows["orders"] if o[1] is not None and o[1] <= 200)
    cands = candidates(64)
    hist = _hist(list(per_person.values()), 64)
    scores = bound_scores(hist, cands, Fraction(9, 10))
    best = cands[scores.index(max(scores))]
    choice = choose_bound(engine, "orders", Fraction(100), cap=64, rng=SeededBitSource(32))
    assert choice.max_rows == best and not choice.reused
    assert choice.rho == Fraction(100) ** 2 / 8 == engine.ledger.spent()
    again = choose_bound(engine, "orders", Fraction(100), cap=64)
    assert again.reused and again.rho == 0 and again.max_rows == best
    assert engine.ledger.spent() == choice.rho
    assert [(r.table, r.purpose, r.current) for r in engine.releases()] == [("orders", "bound", True)]


def test_a_bound_over_the_budget_is_refused_before_any_row_is_read(con, monkeypatch):
    """Review finding: the contributions were counted before the ledger refused the charge."""
    c, _ = con
    engine = c.session.engine
    read = []
    monkeypatch.setattr(engine.backend, "contributions", lambda *a, **k: read.append(a) or [0] * 65)
    with pytest.raises(BudgetExhaustedError):
        choose_bound(engine, "orders", Fraction(1000), cap=64)   # rho = 125,000 > 2,000
    assert read == [] and engine.ledger.spent() == 0


def test_an_interrupted_bound_is_completed_under_its_charge_not_paid_twice(con, monkeypatch):
    """Review finding: a process dying between the charge and the release left the charge
    without a release, and the next run charged again."""
    c, _ = con
    engine = c.session.engine
    calls = []

    def die(*a, **k):
        calls.append(1)
        raise KeyboardInterrupt   # the process dies after the charge, before the release

    import dpsql.engine.people_bound as pb
    monkeypatch.setattr(pb, "exponential_mechanism", die)
    with pytest.raises(KeyboardInterrupt):
        choose_bound(engine, "orders", Fraction(1), cap=64)
    assert calls and engine.ledger.spent() == Fraction(1, 8)
    monkeypatch.undo()
    choice = choose_bound(engine, "orders", Fraction(1), cap=64, rng=SeededBitSource(3))
    assert engine.ledger.spent() == Fraction(1, 8)          # not charged a second time
    charges = [e for e in engine.ledger.entries() if e.kind == "charge"]
    releases = [e for e in engine.ledger.entries() if e.kind == "release"]
    assert len(charges) == 1 and [r.charge_id for r in releases] == [charges[0].seq]
    assert choice.max_rows in candidates(64)


def test_no_bound_for_the_person_table_or_an_ordinary_table(con, adult_config):
    c, _ = con
    with pytest.raises(ProgrammingError, match="person table") as info:
        choose_bound(c.session.engine, "customers", Fraction(1))
    assert "--table orders" in info.value.hint       # what to change
    for bad in ({"epsilon": Fraction(0)}, {"epsilon": Fraction(1), "quantile": Fraction(0)}):
        with pytest.raises(ProgrammingError) as info:
            choose_bound(c.session.engine, "orders", **bad)
        assert info.value.hint and "--epsilon" in info.value.hint
    other = dpsql.connect(adult_config())
    with pytest.raises(ProgrammingError, match="people schema"):
        choose_bound(other.session.engine, "adult", Fraction(1))
    other.close()


def test_dpsql_bound_on_the_shop_example(tmp_path, capfd):
    import shutil

    from dpsql.cli import main
    shop_dir = Path(__file__).resolve().parents[2] / "examples" / "shop"
    for f in shop_dir.iterdir():
        if f.suffix in (".toml", ".sql", ".parquet"):
            shutil.copy(f, tmp_path / f.name)
    config = str(tmp_path / "dpsql.toml")
    assert main(["bound", "-C", config, "--table", "orders", "--epsilon", "0.1", "--yes"]) == 0
    out = capfd.readouterr().out
    assert "orders: max_rows = " in out and "spent rho = 0.00125" in out
    assert main(["bound", "-C", config, "--table", "orders", "--epsilon", "0.1", "--yes"]) == 0
    assert "re-used, nothing spent" in capfd.readouterr().out
