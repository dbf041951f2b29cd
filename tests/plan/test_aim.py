"""AIM selection logic (dpsql/plan/aim.py) against brute-force references on small domains.

The private steps are played by a brute-force oracle that holds the whole data set as an
array of rows, computes marginals by counting, and uses dpsql's exact samplers with a
seeded bit source; reconstruction is dpsql's Private-PGM.
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.linalg import Identity, Marginals, Prefix, Kron, Total, Union, Weighted
from dpsql.pgm import Measurement, estimate
from dpsql.pgm.junction_tree import model_size as jt_size_reference
from dpsql.plan import Workload
from dpsql.plan.planner import junction_tree_size
from dpsql.plan.aim import (AIMOptions, RoundResult, candidate_weights, downward_closure,
                            epsilon_for, exact_scores, jt_size, plan_summary, run_aim, scaled_l1,
                            workload_marginals)
from dpsql.privacy.noise import SeededBitSource, discrete_gaussian, exponential_mechanism

DOM = Domain(["a", "b", "c", "d", "e"], [3, 4, 2, 5, 3])


def _data(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    z = rng.integers(0, 2, n)
    return np.stack([(z * 2 + rng.integers(0, 2, n)) % s for s in DOM.shape], axis=1)


class Oracle:
    """Brute-force private steps: counts from the rows, exact samplers, seeded bits."""

    def __init__(self, data, seed=1):
        self.data = data
        self.bits = SeededBitSource(seed)
        self.rounds = []
        self.scores = []

    def marginal(self, clique):
        idx = [DOM.attributes.index(a) for a in clique]
        shape = [DOM.shape[i] for i in idx]
        flat = np.ravel_multi_index(tuple(self.data[:, i] for i in idx), shape)
        return np.bincount(flat, minlength=math.prod(shape))

    def __call__(self, rnd, model):
        self.rounds.append(rnd)
        if rnd.kind == "init":
            measured = tuple((c, self.marginal(c) + discrete_gaussian(rnd.sigma2, DOM.size(c), rng=self.bits),
                              rnd.sigma2) for c in rnd.cliques)
            return RoundResult(rnd.index, "init", None, measured, rnd.rho, rnd.sigma2)
        counts = [self.marginal(c) for c in rnd.cliques]
        scores = exact_scores(rnd, counts, [model.marginal(c).values for c in rnd.cliques])
        self.scores.append((rnd, counts, scores, model))
        i = exponential_mechanism(scores, rnd.epsilon, rnd.sensitivity, rng=self.bits)
        c = rnd.cliques[i]
        y = counts[i] + discrete_gaussian(rnd.sigma2, counts[i].size, rng=self.bits)
        return RoundResult(rnd.index, "select", c, ((c, y, rnd.sigma2),), rnd.rho, rnd.sigma2,
                           rnd.epsilon, rnd.final)


def _fit(measured, previous):
    ms = [Measurement(c, Identity(int(np.size(y))), np.asarray(y, float), math.sqrt(float(s2)))
          for c, y, s2 in measured]
    return estimate(DOM, ms, iters=150, method="adaptive", warm_start=previous)


WORKLOAD = [(c, 1) for c in itertools.combinations(DOM.attributes, 3)]


@pytest.fixture(scope="module")
def run():
    oracle = Oracle(_data())
    res = run_aim(DOM, WORKLOAD, Fraction(1, 10), step=oracle, fit=_fit)
    return oracle, res


# --- candidates and weights ----------------------------------------------------------------

def test_workload_marginals_from_a_compiled_workload():
    w = Workload(DOM, Union([Weighted(2.0, Kron([Identity(3), Total(4), Identity(2), Total(5), Total(3)])),
                             Weighted(1.0, Kron([Prefix(3), Total(4), Total(2), Identity(5), Total(3)])),
                             *Marginals(DOM, [("c", "a"), ("e",)]).blocks]))
    assert workload_marginals(w) == {("a", "c"): 3, ("a", "d"): 1, ("e",): 1}


def test_downward_closure_and_weights_match_their_definitions():
    wl = {("a", "b", "c"): Fraction(2), ("c", "d"): Fraction(1), ("b", "e", "a"): Fraction(1, 2)}
    closure = downward_closure(wl, DOM.attributes)
    # brute force: every non-empty subset of the attributes that lies inside a workload clique
    brute = {s for k in range(1, 6) for s in itertools.combinations(DOM.attributes, k)
             if any(set(s) <= set(c) for c in wl)}
    assert set(closure) == brute and len(closure) == len(brute)
    assert [len(c) for c in closure] == sorted(len(c) for c in closure)
    weights = candidate_weights(closure, wl)
    for r in closure:
        assert weights[r] == sum(c * len(set(r) & set(s)) for s, c in wl.items())
    assert weights[("a", "b")] == 2 * 2 + 0 + Fraction(1, 2) * 2


def test_scaled_l1_is_exact_and_has_sensitivity_one_per_row():
    rng = np.random.default_rng(3)
    x = rng.integers(0, 50, 60)
    m = rng.random(60) * 50
    grid = np.rint(m * 2**20) / 2**20
    exact = sum(abs(Fraction(int(a)) - Fraction(float(b))) for a, b in zip(x, grid))
    assert Fraction(scaled_l1(x, m), 2**20) == exact
    for cell in range(60):  # add or remove one row anywhere
        for d in (1, -1):
            y = x.copy()
            y[cell] += d
            assert abs(scaled_l1(y, m) - scaled_l1(x, m)) <= 2**20


def test_jt_size_equals_the_junction_tree_the_estimator_builds():
    rng = np.random.default_rng(4)
    attrs = [f"x{i}" for i in range(9)]
    sizes = dict(zip(attrs, rng.integers(2, 30, 9).tolist()))
    dom = Domain(attrs, [sizes[a] for a in attrs])
    for _ in range(40):
        k = int(rng.integers(1, 9))
        cliques = [tuple(rng.choice(attrs, int(rng.integers(1, 4)), replace=False)) for _ in range(k)]
        assert jt_size(sizes, cliques) == jt_size_reference(dom, cliques)
        # the planner's cap (dpsql.triangulation, no pgm import) is the same JT-SIZE
        assert junction_tree_size(dom.attributes, dom.shape, cliques) == jt_size_reference(dom, cliques)


def test_epsilon_is_the_largest_grid_value_within_the_selection_share():
    for rho in (Fraction(1, 3), Fraction(7, 10**6), Fraction(2)):
        eps = epsilon_for(rho)
        assert eps * eps / 8 <= rho < (eps + Fraction(1, 2**40)) ** 2 / 8


# --- the loop ---------------------------------------------------------------------------------

def test_budget_is_spent_exactly_and_never_exceeded(run):
    oracle, res = run
    assert sum(r.rho for r in res.rounds) == res.rho_used
    assert res.rho_used == res.rho    # the last round takes exactly what is left (issue 28)
    assert res.rounds[-1].final and not any(r.final for r in res.rounds[:-1])
    for r in oracle.rounds:
        k = len(r.cliques) if r.kind == "init" else 1
        sel = r.epsilon ** 2 / 8 if r.kind == "select" else 0
        assert r.rho == sel + k / (2 * r.sigma2)


def test_initialisation_measures_every_oneway_marginal_at_sigma0(run):
    oracle, res = run
    init = oracle.rounds[0]
    T = 16 * len(DOM)
    assert init.kind == "init" and init.cliques == tuple((a,) for a in DOM.attributes)
    assert init.sigma2 == T / (2 * Fraction(9, 10) * Fraction(1, 10))
    first = oracle.rounds[1]
    assert first.epsilon == epsilon_for(Fraction(1, 10) * Fraction(1, 10) / T)


def test_annealing_and_termination_follow_algorithm_8(run):
    oracle, res = run
    selects = [r for r in oracle.rounds if r.kind == "select"]
    logs = [e for e in res.log if e["kind"] == "select"]
    assert len(selects) == len(logs) >= 3
    used = res.rounds[0].rho
    for r, nxt, log in zip(selects, selects[1:], logs):
        used += r.rho
        if nxt.final:
            rem = res.rho - used
            # ε rounded down to its grid; the measurement takes all the rest (issue 28)
            assert nxt.epsilon == epsilon_for(Fraction(1, 10) * rem)
            assert nxt.sigma2 == 1 / (2 * (rem - nxt.epsilon ** 2 / 8))
            assert abs(nxt.sigma2 - 1 / (2 * Fraction(9, 10) * rem)) < nxt.sigma2 * Fraction(1, 10**6)
        elif log["annealed"]:
            assert nxt.sigma2 == r.sigma2 / 4
            assert abs(nxt.epsilon - 2 * r.epsilon) <= Fraction(2, 2**40)
        else:
            assert nxt.sigma2 == r.sigma2 and nxt.epsilon == r.epsilon
    for r, log in zip(selects, logs):  # Algorithm 8, line 1
        n_r = DOM.size(log["selected"])
        assert math.isclose(log["threshold"], math.sqrt(2 / math.pi) * math.sqrt(float(r.sigma2)) * n_r)
        assert log["annealed"] == (log["change"] <= log["threshold"])
    assert any(e["annealed"] for e in logs) and not all(e["annealed"] for e in logs)


def test_scores_match_the_definition_on_the_full_data_vector(run):
    oracle, res = run
    rnd, counts, scores, model = oracle.scores[0]
    # brute force: the data vector over the whole domain, marginalised by summing
    vec = np.zeros(DOM.shape)
    np.add.at(vec, tuple(oracle.data.T), 1)
    sigma = math.sqrt(float(rnd.sigma2))
    for r, w, q in zip(rnd.cliques, rnd.weights, scores):
        axes = tuple(i for i, a in enumerate(DOM.attributes) if a not in r)
        true = vec.sum(axis=axes).reshape(-1)
        est = model.marginal(r).values.reshape(-1)
        want = float(w) * (np.abs(true - est).sum() - math.sqrt(2 / math.pi) * sigma * true.size)
        assert abs(float(q) - want) <= float(w) * true.size * 2.0**-20 + 1e-9 * abs(want)
    assert rnd.sensitivity == max(rnd.weights)


def test_candidates_respect_the_model_size_limit():
    # A small capacity makes the JT-SIZE filter bite; recompute every round's candidate set.
    oracle = Oracle(_data(seed=2), seed=5)
    cap = 120
    res = run_aim(DOM, WORKLOAD, Fraction(1, 2), step=oracle, fit=_fit,
                  options=AIMOptions(max_model_cells=cap))
    used = Fraction(0)
    chosen = []
    for rnd, rr in zip(oracle.rounds, res.rounds):
        used += rnd.rho
        if rnd.kind == "init":
            chosen.extend(rnd.cliques)
            continue
        limit = used / res.rho * cap
        closure = downward_closure(dict(WORKLOAD), DOM.attributes)
        brute = [r for r in closure
                 if any(set(r) <= set(m) for m in chosen) or jt_size_reference(DOM, chosen + [r]) <= limit]
        assert list(rnd.cliques) == brute
        if rr.selected not in chosen:
            chosen.append(rr.selected)
    assert any(len(r.cliques) < len(downward_closure(dict(WORKLOAD), DOM.attributes))
               for r in oracle.rounds[1:])
    assert jt_size_reference(DOM, chosen) <= cap


def test_lost_budget_and_replayed_rounds():
    # A run that replays its first rounds from a record and counts an orphaned charge.
    first = Oracle(_data(), seed=7)
    full = run_aim(DOM, WORKLOAD, Fraction(1, 10), step=first, fit=_fit)
    stored = full.rounds[:4]

    calls = []

    def replay(rnd, model):
        calls.append(rnd)
        if rnd.index < len(stored):
            r = stored[rnd.index]
            return RoundResult(r.index, r.kind, r.selected, r.measured, r.rho, r.sigma2, r.epsilon,
                               r.final, replayed=True)
        return second(rnd, model)

    second = Oracle(_data(), seed=8)
    lost = Fraction(1, 1000)
    res = run_aim(DOM, WORKLOAD, Fraction(1, 10), step=replay, fit=_fit, lost_rho=lost)
    assert [r.selected for r in res.rounds[:4]] == [r.selected for r in stored]
    assert res.rho_used <= res.rho and res.rho - res.rho_used < Fraction(1, 10**9)
    assert sum(r.rho for r in res.rounds) + lost == res.rho_used


def test_unit_rows_scale_noise_and_sensitivity():
    oracle = Oracle(_data(), seed=9)
    res = run_aim(DOM, WORKLOAD, Fraction(1, 10), step=oracle, fit=_fit, options=AIMOptions(unit_rows=3))
    sel = oracle.rounds[1]
    assert sel.sensitivity == 3 * max(sel.weights)
    assert oracle.rounds[0].rho == 5 * 9 / (2 * oracle.rounds[0].sigma2)
    assert res.rho_used <= res.rho


def test_plan_summary_is_public_and_consistent():
    s = plan_summary(DOM, WORKLOAD, 0.1)
    assert s["candidates"] == len(downward_closure(dict(WORKLOAD), DOM.attributes))
    assert s["rounds_bound"] == 80 and s["oneway"] == 5
    assert math.isclose(s["rho_select"] + s["rho_measure"], 0.1)
    assert math.isclose(s["sigma0"], math.sqrt(80 / (2 * 0.9 * 0.1)))


def test_advice_follows_hdmm_noise_relative_to_the_table():
    from dpsql.plan.aim import AIM_NOISE_SHARE, advise
    wl = [(("a", "b"), 1), (("c", "d", "e"), 1)]  # 12 and 30 cells
    rmse = 10.0
    noise = math.sqrt(2 / math.pi) * rmse * 21
    a = advise(wl, DOM, rmse)
    assert a.choice is None and math.isclose(a.noise_per_marginal, noise)
    assert math.isclose(a.rows_threshold, noise / AIM_NOISE_SHARE) and "unless the table has more" in a.text
    assert advise(wl, DOM, rmse, total=a.rows_threshold * 0.5).choice == "aim"
    assert advise(wl, DOM, rmse, total=a.rows_threshold * 2).choice == "hdmm"
    # more budget (smaller RMSE) lowers the threshold: HDMM for smaller tables
    assert advise(wl, DOM, rmse / 10).rows_threshold < a.rows_threshold
