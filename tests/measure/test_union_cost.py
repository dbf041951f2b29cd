"""One σ for a union of lattice blocks (docs/privacy.md §7.1, "One σ for a union of blocks").

``release.calibrate`` charged Σ_b k²·Δ_b²/(2σ_b²), each block at its own worst column.  One
record sits in one cell, so the round costs max_c Σ_b k²·‖M_b e_c‖²/(2σ_b²): the planner's
errors assume that union sensitivity, and every release had 3–7% more variance than its plan
(adult's mixed corpus: 1.032; issue 35 item 6).
"""

from __future__ import annotations

import itertools
from fractions import Fraction

import numpy as np
import pytest

from dpsql.measure import release as rel
from dpsql.measure.release import LatticeBlock
from dpsql.measure.union_cost import union_max

SIZES = {"a": 3, "b": 4, "c": 2}


def _block(rng, clique, joint=False, bound=1, lo=-3, hi=4):
    if joint:
        n = int(np.prod([SIZES[a] for a in clique]))
        factors = (rng.integers(lo, hi, size=(int(rng.integers(1, 5)), n)),)
    else:
        factors = tuple(rng.integers(lo, hi, size=(int(rng.integers(1, 4)), SIZES[a])) for a in clique)
    return LatticeBlock(tuple(clique), factors, 1.0, 1.0, None, bound)


def _brute(blocks, coefs):
    """max over every cell of the full domain, in Fractions."""
    best = Fraction(0)
    for cell in itertools.product(*(range(SIZES[a]) for a in SIZES)):
        at = dict(zip(SIZES, cell))
        total = Fraction(0)
        for b, coef in zip(blocks, coefs):
            n = b.bound ** 2
            if b.joint:
                i = 0
                for a in b.clique:
                    i = i * SIZES[a] + at[a]
                n *= int((b.factors[0][:, i].astype(object) ** 2).sum())
            else:
                for a, f in zip(b.clique, b.factors):
                    n *= int((f[:, at[a]].astype(object) ** 2).sum())
            total += coef * n
        best = max(best, total)
    return best


@pytest.mark.parametrize("seed", range(40))
def test_union_max_is_the_largest_column_over_every_cell(seed):
    rng = np.random.default_rng(seed)
    blocks = [_block(rng, ("a",)), _block(rng, ("b", "c")), _block(rng, ("a", "c"), joint=True),
              _block(rng, ("c",), bound=3), _block(rng, ("b",), lo=0, hi=2),
              LatticeBlock((), (np.ones((1, 1), dtype=np.int64),), 1.0, 1.0)]
    coefs = [Fraction(int(rng.integers(1, 9)), int(rng.integers(1, 9))) for _ in blocks]
    exact = union_max(blocks, coefs)
    assert isinstance(exact, Fraction) and exact == _brute(blocks, coefs)
    assert union_max(blocks, [float(c) for c in coefs]) == pytest.approx(float(exact), rel=1e-12)
    # never above the sum of each block's own maximum
    assert exact <= sum(c * b.l2_sensitivity_sq() for b, c in zip(blocks, coefs))


def test_blocks_whose_column_norms_are_constant_factor_out():
    # marginals (identity factors) and a total: every cell alike, the union is the sum
    blocks = [LatticeBlock(("a",), (np.eye(3, dtype=np.int64),), 1.0, 1.0),
              LatticeBlock(("b", "c"), (2 * np.eye(4, dtype=np.int64), np.eye(2, dtype=np.int64)), 1.0, 1.0),
              LatticeBlock((), (np.ones((1, 1), dtype=np.int64),), 1.0, 1.0, None, 5)]
    coefs = [Fraction(1, 3), Fraction(2), Fraction(1, 7)]
    assert union_max(blocks, coefs) == _brute(blocks, coefs) == Fraction(1, 3) + 8 + Fraction(25, 7)


def test_entries_past_int64_are_exact():
    big = np.array([[3 ** 38, 1], [3 ** 38, 0]], dtype=object)     # column sums of squares ≫ 2⁶³
    blocks = [LatticeBlock(("a",), (big[:, :2].astype(object),), 1.0, 1.0),
              LatticeBlock(("a",), (np.array([[0, 5]], dtype=np.int64),), 1.0, 1.0)]
    got = union_max(blocks, [Fraction(1), Fraction(1)])
    assert got == max(2 * 3 ** 76, 1 + 25)


def test_calibrate_charges_the_union_of_disjoint_filtered_counts():
    # three filtered counts over disjoint ranges of a and a marginal over b: a record is in at
    # most one of the filters, so the union's Δ² is 1 + 1, not 1 + 3
    ind = [np.array([[1, 1, 0, 0, 0, 0]]), np.array([[0, 0, 1, 1, 0, 0]]), np.array([[0, 0, 0, 0, 1, 1]])]
    blocks = [LatticeBlock(("a",), (f.astype(np.int64),), 1.0, 1.0) for f in ind] + \
             [LatticeBlock(("b",), (np.eye(4, dtype=np.int64),), 1.0, 1.0)]
    rho = Fraction(1, 2)
    plan = rel.calibrate(blocks, rho)
    assert plan.rho <= rho and plan.rho == pytest.approx(float(rho), rel=1e-8)
    # σ² = Δ²/(2ρ) with Δ² = 2 (the union), not 4 (the sum of maxima)
    assert float(plan.params[0]) == pytest.approx(2.0, rel=1e-8)
    cost = max(sum(Fraction(int((f[:, c] ** 2).sum())) / (2 * p) for f, p in zip(ind, plan.params[:3]))
               for c in range(6)) + Fraction(1) / (2 * plan.params[3])
    assert plan.rho == cost
    # a unit of k rows: k² times it, exactly
    plan3 = rel.calibrate(blocks, rho, unit_rows=3)
    assert float(plan3.params[0]) == pytest.approx(9 * 2.0, rel=1e-8) and plan3.rho <= rho
    # Laplace keeps the sum (ε = Σ_b kΔ₁/b_b)
    lap = rel.calibrate(blocks, rho, family="laplace")
    assert lap.rho <= rho and float(lap.params[0]) == pytest.approx(4.0 / float((2 * rho) ** 0.5) * 1, rel=1e-6)


def test_beyond_the_limits_the_caller_keeps_the_sum_of_maxima(monkeypatch):
    from dpsql.measure import union_cost
    ind = [LatticeBlock(("a",), (np.array([[1, 0, 0]], dtype=np.int64),), 1.0, 1.0),
           LatticeBlock(("a",), (np.array([[0, 0, 1]], dtype=np.int64),), 1.0, 1.0)]
    assert union_max(ind, [Fraction(1), Fraction(1)]) == 1
    monkeypatch.setattr(union_cost, "LIMIT", 2)         # a varies over 3 cells
    assert union_max(ind, [Fraction(1), Fraction(1)]) is None
    plan = rel.calibrate(ind, Fraction(1, 2))
    assert float(plan.params[0]) == pytest.approx(2.0, rel=1e-8)      # Δ² = 1 + 1, the sum
    monkeypatch.setattr(union_cost, "LIMIT", 1 << 22)
    monkeypatch.setattr(union_cost, "MAX_BLOCKS", 1)
    assert union_max(ind, [Fraction(1), Fraction(1)]) is None


def test_cells_whose_norms_differ_past_a_doubles_precision_are_told_apart():
    # column norms 2⁵⁴ and 2⁵⁴ + 1 are one double: cells were grouped by their norms' float
    # values, only the first of the class was evaluated exactly, and the union came out 2⁵⁴,
    # one below the true maximum (a charge below the cost; review of 28ca264)
    f = np.array([[2 ** 27, 2 ** 27], [0, 1]], dtype=np.int64)
    blocks = [LatticeBlock(("a",), (f,), 1.0, 1.0)]
    assert union_max(blocks, [Fraction(1)]) == 2 ** 54 + 1 == blocks[0].l2_sensitivity_sq()
    joint = [LatticeBlock(("a", "b"), (np.array([[2 ** 27, 2 ** 27, 2 ** 27, 2 ** 27], [0, 0, 0, 1]]),), 1.0, 1.0),
             LatticeBlock(("a",), (np.array([[1, 1]]),), 1.0, 1.0), LatticeBlock(("b",), (np.eye(2, dtype=np.int64),),
                                                                                1.0, 1.0)]
    assert union_max(joint, [Fraction(1)] * 3) == 2 ** 54 + 1 + 1 + 1


@pytest.mark.parametrize("seed", range(60))
def test_union_max_over_permuted_joint_cliques_and_bounds(seed, monkeypatch):
    # cliques in any order (a joint factor flattened in its clique's order, not the
    # domain's), one-cell attributes, totals, offset bounds and 0/1 factors, against brute force
    sizes = {"a": 3, "b": 4, "c": 2, "d": 1}
    monkeypatch.setitem(globals(), "SIZES", sizes)
    rng = np.random.default_rng(1000 + seed)
    blocks = []
    for _ in range(int(rng.integers(1, 6))):
        k = int(rng.integers(0, 4))
        clique = tuple(str(a) for a in rng.permutation(list(sizes))[:k])
        lo, hi = (-3, 4) if rng.integers(0, 2) else (0, 2)
        if k > 1 and rng.integers(0, 2):
            n = int(np.prod([sizes[a] for a in clique]))
            factors = (rng.integers(lo, hi, size=(int(rng.integers(1, 5)), n)),)
        elif k == 0:
            factors = (np.ones((1, 1), dtype=np.int64),)
        else:
            factors = tuple(rng.integers(lo, hi, size=(int(rng.integers(1, 4)), sizes[a])) for a in clique)
        blocks.append(LatticeBlock(clique, factors, 1.0, 1.0, None, int(rng.integers(1, 4))))
    coefs = [Fraction(int(rng.integers(1, 9)), int(rng.integers(1, 9))) for _ in blocks]
    got = union_max(blocks, coefs)
    assert got is None or got == _brute(blocks, coefs)


def test_under_a_group_bound_blocks_that_all_separate_the_groups_share_the_union():
    # every block reads one group per row (I_g ⊗ a filter on a), so all carry S² and
    # calibrate charges S²·U; brute force over every person a view with k = 3, g = 2, r = 2
    # may hold: removing them costs at most the charge (docs/privacy.md §7.1 and §2a)
    from dpsql.plan.views import GroupBound

    groups, k = GroupBound(("g",), 2, 2), 3
    eye = np.eye(3, dtype=np.int64)
    blocks = [LatticeBlock(("g", "a"), (eye, np.array([[1, 1, 0]])), 1.0, 1.0),
              LatticeBlock(("g", "a"), (eye, np.array([[0, 0, 1]])), 1.0, 2.0),
              LatticeBlock(("g",), (eye,), 1.0, 1.0)]
    plan = rel.calibrate(blocks, Fraction(1, 2), unit_rows=k, groups=groups)
    s2 = groups.l2_sq(k)
    assert s2 == 5 and plan.rho <= Fraction(1, 2)
    # σ_b² = S²·U/(2ρ·w_b²) with U = max_c Σ_b w_b²‖M_b e_c‖² = 4 + 1 (a = 2), not 1 + 4 + 1
    assert float(plan.params[0]) == pytest.approx(s2 * (4 + 1) / 1.0, rel=1e-8)
    worst = Fraction(0)
    cells = list(itertools.product(range(3), range(3)))
    for n in range(1, k + 1):
        for rows in itertools.combinations_with_replacement(cells, n):
            per = [sum(1 for g, _ in rows if g == gg) for gg in range(3)]
            if sum(1 for p in per if p) > groups.max_groups or max(per) > groups.max_rows_per_group:
                continue
            delta = np.zeros((3, 3), dtype=np.int64)
            for g, a in rows:
                delta[g, a] += 1
            marg = [delta if len(b.clique) == 2 else delta.sum(axis=1) for b in blocks]
            cost = sum(Fraction(int((b.apply(m) ** 2).sum())) / (2 * p) for b, m, p in zip(blocks, marg, plan.params))
            worst = max(worst, cost)
    assert worst <= plan.rho


@pytest.mark.parametrize("seed", range(20))
def test_calibrate_charges_exactly_the_worst_record_never_above_its_share(seed):
    # random weights, scales, offset bounds and k: the charged ρ is the brute-force maximum
    # over every cell of Σ_b k²·S_b²‖M_b e_c‖²/(2σ_b²) with the σ_b² handed to the sampler,
    # and never above the share the ledger records
    rng = np.random.default_rng(500 + seed)
    blocks = [LatticeBlock(b.clique, b.factors, float(rng.uniform(0.1, 3)), float(rng.uniform(0.1, 3)), None,
                           b.bound)
              for b in (_block(rng, ("a",)), _block(rng, ("b", "c")), _block(rng, ("a", "c"), joint=True),
                        _block(rng, ("c",), bound=int(rng.integers(1, 5))), _block(rng, ("b",), lo=0, hi=2))
              if b.l2_sensitivity_sq() > 0]
    k = int(rng.integers(1, 4))
    rho = Fraction(int(rng.integers(1, 100)), int(rng.integers(1, 100)))
    plan = rel.calibrate(blocks, rho, unit_rows=k)
    assert plan.rho <= rho
    assert plan.rho == _brute(blocks, [Fraction(k * k) / (2 * p) for p in plan.params])
    assert float(plan.rho) == pytest.approx(float(rho), rel=1e-8)
