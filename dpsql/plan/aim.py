"""AIM: adaptive, iterative, workload-aware selection of marginals (thesis ch. 5).

AIM (thesis Algorithm 6) alternates *select* (the exponential mechanism picks the
marginal whose measurement is expected to reduce the workload error most), *measure*
(Gaussian noise on the whole marginal) and *reconstruct* (Private-PGM), with

* candidates: the downward closure W₊ of the workload's marginals (§5.4 "New
  Candidates"), filtered so the model stays tractable: JT-SIZE of the selected cliques
  plus the candidate at most (ρ_used/ρ)·``max_model_cells``, or the candidate inside an
  already measured clique (which leaves the model unchanged);
* quality q_r = w_r (‖M_r(D) − M_r(p̂)‖₁ − √(2/π)·σ_t·n_r) with w_r = Σ_{s∈W} c_s |r ∩ s|
  (Eq. 5.1: the workload weighting and the bias correction for the noise the
  measurement itself will add), selected with sensitivity Δ = max_r w_r over the round's
  candidates;
* initialisation with all one-way marginals of W₊ at σ₀ = √(T/(2αρ)) (Algorithm 7);
* budget annealing (Algorithm 8): when measuring r_t changed the model's r_t marginal
  by less than the noise it carried, ε doubles and σ halves; when the remaining budget
  would not cover two more rounds, the last round uses exactly what remains (the
  privacy filter of Theorem 13).

This module is pure logic over public quantities: the private steps (reading counts,
drawing the exponential mechanism, adding noise, charging the ledger) happen behind the
``step`` callback the caller supplies, and reconstruction behind ``fit``.  The engine's
driver is :mod:`dpsql.engine.aim`; tests drive it with a brute-force data vector.

Exactness.  Budgets are exact rationals.  Each round's selection share ρ_sel becomes
ε = ⌊√(8ρ_sel)·2⁴⁰⌋/2⁴⁰ (rounded *down*, so ε²/8 ≤ ρ_sel) and its measurement share
ρ_meas becomes the rational variance σ² = k²/(2ρ_meas) (k = rows per privacy unit), so the
cost ε²/8 + k²/(2σ²) of every round is computed exactly and the total never exceeds ρ.
Scores are exact rationals too (:func:`scaled_l1`), as the exact exponential mechanism
needs (``docs/privacy.md`` §4a).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, replace
from fractions import Fraction
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from dpsql.triangulation import AIM_MODEL_CELLS, elimination_order

__all__ = ["AIMOptions", "Round", "RoundResult", "AIMResult", "DEFAULT_MODEL_CELLS",
           "workload_marginals", "downward_closure", "candidate_weights", "scaled_l1",
           "exact_scores", "epsilon_for", "jt_size", "run_aim", "plan_summary", "advise", "Advice"]

#: Thesis default model capacity: 80 MB of float64 (§5.6.5), in cells (declared once, below
#: plan and pgm).
DEFAULT_MODEL_CELLS = AIM_MODEL_CELLS
#: Model marginals are rounded to this dyadic grid before they meet the data (exact scores).
SCORE_GRID_BITS = 20
_EPS_BITS = 40
_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)

Clique = tuple[str, ...]


@dataclass(frozen=True)
class AIMOptions:
    """AIM's hyper-parameters; the defaults are the thesis's (Algorithm 6)."""

    max_model_cells: int = DEFAULT_MODEL_CELLS  # MAX-SIZE (80 MB of float64)
    alpha: Fraction = Fraction(9, 10)           # share of each round for measuring
    rounds: int | None = None                   # T (an upper bound on rounds); 16·d
    unit_rows: int = 1                          # rows one privacy unit may contribute
    # a view's group bound (docs/privacy.md §2a): a marginal whose clique holds every one of
    # ``group_attributes`` moves by at most √``group_rows_sq`` (S ≤ k) in L2 when a person is
    # removed, so it is measured at σ² scaled by S²/k², at the same cost as any other marginal
    group_attributes: tuple[str, ...] = ()
    group_rows_sq: int | None = None

    def __post_init__(self) -> None:
        if not 0 < Fraction(self.alpha) < 1:
            raise ValueError("AIM: alpha must lie strictly between 0 and 1")
        if self.unit_rows < 1 or self.max_model_cells < 1:
            raise ValueError("AIM: unit_rows and max_model_cells must be positive")
        if (self.group_rows_sq is None) != (not self.group_attributes) or (
                self.group_rows_sq is not None and not 1 <= self.group_rows_sq <= self.unit_rows ** 2):
            raise ValueError("AIM: a group bound needs its attributes and 1 ≤ S² ≤ unit_rows²")

    def rows_sq(self, clique: Sequence[str]) -> int:
        """The squared L2 row factor of clique's marginal: S² when it holds the group
        attributes (an identity marginal reads one group per cell), else unit_rows²."""
        if self.group_rows_sq is not None and set(self.group_attributes) <= set(clique):
            return self.group_rows_sq
        return self.unit_rows * self.unit_rows

    def sigma2_for(self, clique: Sequence[str], sigma2: Fraction) -> Fraction:
        """The variance clique's marginal is measured with in a round of σ² ``sigma2`` (σ² is
        calibrated for k² at the round's measurement share ρ_m = k²/(2σ²)): σ²·S²/k², so its
        cost S²/(2σ_c²) is that same ρ_m, exactly."""
        return Fraction(sigma2) * self.rows_sq(clique) / (self.unit_rows * self.unit_rows)


# --- workload → candidates ----------------------------------------------------------------

def _canonical(order: Mapping[str, int], clique: Iterable[str]) -> Clique:
    return tuple(sorted(set(clique), key=order.__getitem__))


def workload_marginals(workload: Any) -> dict[Clique, Fraction]:
    """The workload's marginals with weights c_s (thesis Def. 26).

    ``workload`` is a :class:`~dpsql.plan.Workload` (each weighted Kronecker term counts
    as a marginal on the attributes it does not sum over, with its weight) or a mapping /
    sequence of ``(clique, weight)``.  Equal cliques add their weights."""
    out: dict[Clique, Fraction] = {}
    if hasattr(workload, "terms"):
        attrs = workload.terms.attributes
        order = {a: i for i, a in enumerate(attrs)}
        terms = workload.terms.terms
        # A workload of queries scales its terms for the planner's objective; AIM's c_s
        # is the user's weight of the query the term belongs to.
        parts = workload.parts
        weight = [abs(t.weight) for t in terms]
        for part in parts:
            for j in part.terms:
                weight[j] = abs(part.weight)
        items = [(tuple(attrs[i] for i in sorted(t.support)), w) for t, w in zip(terms, weight)]
    else:
        items = list(workload.items()) if isinstance(workload, Mapping) else list(workload)
        order = None
    for clique, weight in items:
        clique = tuple(clique)
        if order is not None:
            clique = _canonical(order, clique)
        if not clique:
            continue  # a grand total is answered by any marginal; it adds no candidate
        out[clique] = out.get(clique, Fraction(0)) + Fraction(weight)
    return out


def downward_closure(cliques: Iterable[Clique], attributes: Sequence[str]) -> list[Clique]:
    """W₊: every non-empty subset of a workload clique, smallest first (thesis §5.4)."""
    order = {a: i for i, a in enumerate(attributes)}
    seen: set[Clique] = set()
    for c in cliques:
        c = _canonical(order, c)
        for k in range(1, len(c) + 1):
            seen.update(itertools.combinations(c, k))
    return sorted(seen, key=lambda c: (len(c), [order[a] for a in c]))


def candidate_weights(closure: Iterable[Clique],
                      workload: Mapping[Clique, Fraction]) -> dict[Clique, Fraction]:
    """w_r = Σ_{s∈W} c_s |r ∩ s| (thesis §5.4 "Better Selection Criteria")."""
    sets = [(frozenset(s), Fraction(c)) for s, c in workload.items()]
    return {r: sum((c * len(frozenset(r) & s) for s, c in sets), Fraction(0)) for r in closure}


# --- exact scores ---------------------------------------------------------------------------

def scaled_l1(counts: np.ndarray, model_marginal: np.ndarray) -> int:
    """2^20·‖x − m̂‖₁ exactly, with m̂ = round(2^20·m)/2^20 the model marginal on the grid.

    The rounding touches only the model (a public function of earlier releases); the data
    enters through integer arithmetic, so under adding or removing one row the result
    changes by at most 2^20 per row — the sensitivity the exponential mechanism assumes."""
    m = np.asarray(model_marginal, dtype=np.float64).reshape(-1)
    x = np.asarray(counts).reshape(-1)
    if m.shape != x.shape:
        raise ValueError(f"scaled_l1: {x.size} counts against {m.size} model cells")
    if not np.all(np.isfinite(m)):
        raise ValueError("scaled_l1: the model marginal is not finite")
    scale = 1 << SCORE_GRID_BITS
    big = float(np.abs(m).max(initial=0.0)) * scale > 2.0**61 or int(x.max(initial=0)) > 1 << 40
    if big:  # never in practice; Python integers keep it exact anyway
        exact = [int(v) for v in np.rint(m * scale)]
        return sum(abs(int(a) * scale - b) for a, b in zip(x.tolist(), exact))
    mi = np.rint(m * scale).astype(np.int64)
    diff = np.abs(x.astype(np.int64) * scale - mi)
    total = int(diff.sum(dtype=np.int64))
    if total < 0 or diff.size and int(diff.max()) > (1 << 62) // max(diff.size, 1):
        return sum(int(v) for v in diff.tolist())
    return total


def exact_scores(round_: Round, counts: Sequence[np.ndarray],
                 model_marginals: Sequence[np.ndarray]) -> list[Fraction]:
    """q_r = w_r (‖M_r(D) − M_r(p̂)‖₁ − √(2/π)·σ_t·n_r) for the round's candidates, exactly."""
    scale = Fraction(1 << SCORE_GRID_BITS)
    return [w * (Fraction(scaled_l1(x, m)) / scale - pen)
            for w, pen, x, m in zip(round_.weights, round_.penalties, counts, model_marginals)]


def epsilon_for(rho_select: Fraction) -> Fraction:
    """The largest ε on the 2⁻⁴⁰ grid with ε²/8 ≤ ρ_select (exact; rounds toward privacy)."""
    rho_select = Fraction(rho_select)
    if rho_select <= 0:
        return Fraction(0)
    scaled = 8 * rho_select * (1 << (2 * _EPS_BITS))
    return Fraction(math.isqrt(scaled.numerator // scaled.denominator), 1 << _EPS_BITS)


# --- rounds -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class Round:
    """What one round does, decided from public information and earlier releases.

    ``kind`` is "init" (measure every clique in ``cliques`` at ``sigma2``) or "select"
    (choose one of ``cliques`` with the exponential mechanism at ``epsilon`` and
    ``sensitivity`` on :func:`exact_scores`, then measure it at ``sigma2``).  A clique is
    measured at ``AIMOptions.sigma2_for(clique, sigma2)``: ``sigma2`` itself unless a group
    bound lowers its marginal's sensitivity.  ``rho`` is the round's exact cost; it must be
    charged before the round reads anything it releases."""

    index: int
    kind: str
    cliques: tuple[Clique, ...]
    sigma2: Fraction
    rho: Fraction
    weights: tuple[Fraction, ...] = ()
    penalties: tuple[Fraction, ...] = ()
    epsilon: Fraction | None = None
    sensitivity: Fraction | None = None
    final: bool = False


@dataclass(frozen=True)
class RoundResult:
    """What a round released: the chosen clique (select rounds) and noisy marginals
    ``measured`` = [(clique, values, sigma2)], with the parameters actually used."""

    index: int
    kind: str
    selected: Clique | None
    measured: tuple[tuple[Clique, np.ndarray, Fraction], ...]
    rho: Fraction
    sigma2: Fraction
    epsilon: Fraction | None = None
    final: bool = False
    replayed: bool = False
    completed: bool = False   # released under a charge an interrupted run left without release


def as_charged(round_: Round, sigma2: Fraction, epsilon: Fraction | None, rho: Fraction, final: bool,
               sizes: Mapping[str, int], unit_rows: int, options: AIMOptions | None = None) -> Round | None:
    """``round_`` with the noise a recorded charge paid for (σ², ε, its ρ), or None when that
    charge cannot pay for this round (its cost at these parameters is not exactly ``rho``).
    The candidates, their weights and the sensitivity stay the round's own; the penalties
    follow σ.  Used to complete a round whose process died between charge and release."""
    k2 = unit_rows * unit_rows
    n = len(round_.cliques) if round_.kind == "init" else 1
    cost = n * k2 / (2 * sigma2) + (epsilon * epsilon / 8 if epsilon is not None else 0)
    if cost != rho or (round_.kind == "init") != (epsilon is None):
        return None
    options = options or AIMOptions(unit_rows=unit_rows)
    penalties = tuple(Fraction(_SQRT_2_OVER_PI * math.sqrt(float(options.sigma2_for(r, sigma2))) * _cells(sizes, r))
                      for r in round_.cliques) if round_.kind != "init" else round_.penalties
    return replace(round_, sigma2=sigma2, epsilon=epsilon, rho=rho, penalties=penalties,
                   final=final or round_.final)


@dataclass
class AIMResult:
    rounds: list[RoundResult]
    rho_used: Fraction
    rho: Fraction
    model: Any = None
    seconds: float = 0.0
    fits: int = 0
    log: list[dict] = field(default_factory=list)

    @property
    def selected(self) -> list[Clique]:
        return [r.selected for r in self.rounds if r.selected is not None]

    @property
    def measurements(self) -> list[tuple[Clique, np.ndarray, Fraction]]:
        return [m for r in self.rounds for m in r.measured]


class _Budget:
    """Selection/measurement shares of the next round (exact), Algorithm 8's state."""

    def __init__(self, rho: Fraction, rounds: int, alpha: Fraction, unit_rows: int) -> None:
        self.rho = rho
        self.alpha = alpha
        self.k2 = unit_rows * unit_rows
        self.rho_select = (1 - alpha) * rho / rounds
        self.rho_measure = alpha * rho / rounds

    def sigma2(self) -> Fraction:
        return self.k2 / (2 * self.rho_measure)

    def cost(self) -> Fraction:
        eps = epsilon_for(self.rho_select)
        return eps * eps / 8 + self.k2 / (2 * self.sigma2())

    def anneal(self) -> None:
        # ε ← 2ε, σ ← σ/2: both shares grow fourfold
        self.rho_select *= 4
        self.rho_measure *= 4

    def last(self, remaining: Fraction) -> None:
        # the final round spends exactly what is left: ε is rounded down to its grid
        # (epsilon_for) and the measurement takes the rest, so a full run leaves 0, not a
        # residue (~1e-13 of the budget) shown as "left" that no measurement can use
        self.rho_select = (1 - self.alpha) * remaining
        eps = epsilon_for(self.rho_select)
        self.rho_measure = remaining - eps * eps / 8

    def adopt(self, result: RoundResult) -> None:
        """Continue from the parameters a replayed round actually used."""
        self.rho_measure = self.k2 / (2 * result.sigma2)
        if result.epsilon is not None:
            self.rho_select = result.epsilon * result.epsilon / 8


def _cells(sizes: Mapping[str, int], clique: Clique) -> int:
    return math.prod(sizes[a] for a in clique)


def jt_size(sizes: Mapping[str, int], cliques: Sequence[Clique]) -> int:
    """JT-SIZE (thesis Remark 1) of the junction tree Private-PGM would build for
    ``cliques``: the same greedy elimination order, summed over its maximal cliques,
    without building the tree itself (half the cost; the filter calls this for every
    candidate of every round)."""
    _, elim = elimination_order(dict(sizes), cliques)
    sets = sorted({frozenset(c) for c in elim}, key=len, reverse=True)
    maximal: list[frozenset] = []
    for c in sets:
        if not any(c <= m for m in maximal):
            maximal.append(c)
    return sum(_cells(sizes, tuple(c)) for c in maximal)


def run_aim(domain, workload: Any, rho, *,
            step: Callable[[Round, Any], RoundResult],
            fit: Callable[[list[tuple[Clique, np.ndarray, Fraction]], Any], Any],
            options: AIMOptions | None = None,
            model_size: Callable[[list[Clique]], int] | None = None,
            lost_rho: Fraction = Fraction(0),
            progress: Callable[[dict], None] | None = None) -> AIMResult:
    """Run AIM (thesis Algorithms 6–8) with private steps behind ``step``.

    ``step(round, model)`` performs the round (charge, select, measure — or return the
    stored release when the round was already paid for) and returns its
    :class:`RoundResult`; ``model`` is the current fit (for the selection scores).
    ``fit(measurements, previous)`` reconstructs a model with ``.marginal(clique).values``
    from all noisy marginals so far.  ``lost_rho`` is budget of this run already charged
    without a release (a crash between charge and release): it counts as spent.
    """
    options = options or AIMOptions()
    t0 = time.perf_counter()
    rho = Fraction(rho)
    if rho <= 0:
        raise ValueError("AIM needs a positive budget")
    attributes = tuple(domain.attributes)
    sizes = dict(zip(attributes, (int(s) for s in domain.shape)))
    weights_w = workload_marginals(workload)
    if not weights_w:
        raise ValueError("AIM: the workload has no marginal queries")
    closure = downward_closure(weights_w, attributes)
    weights = candidate_weights(closure, weights_w)
    if model_size is None:
        def model_size(cliques):
            return jt_size(sizes, cliques)
    size_cache: dict[tuple, int] = {}

    alpha = Fraction(options.alpha)
    T = options.rounds or 16 * len(attributes)
    budget = _Budget(rho, T, alpha, options.unit_rows)
    k2 = budget.k2
    result = AIMResult([], Fraction(lost_rho), rho)

    def report(**event):
        event["rho_used"] = float(result.rho_used)
        event["rho"] = float(rho)
        event["seconds"] = time.perf_counter() - t0
        result.log.append(event)
        if progress is not None:
            progress(event)

    # Algorithm 7: all one-way marginals of W₊ at σ₀.
    oneway = tuple(c for c in closure if len(c) == 1)
    measurements: list[tuple[Clique, np.ndarray, Fraction]] = []
    model = None
    if oneway:
        sigma2 = budget.sigma2()
        init = Round(0, "init", oneway, sigma2, len(oneway) * k2 / (2 * sigma2))
        res = step(init, None)
        result.rounds.append(res)
        result.rho_used += res.rho
        measurements.extend(res.measured)
        report(round=0, kind="init", cliques=len(oneway), sigma=math.sqrt(float(res.sigma2)),
               replayed=res.replayed)

    def refit(previous):
        result.fits += 1
        return fit(list(measurements), previous)

    measured_sets: list[frozenset] = [frozenset(c) for c, _, _ in measurements]
    selected: list[Clique] = [c for c, _, _ in measurements]
    index = len(result.rounds)
    final = False
    if result.rho_used >= rho:
        final = True
    while not final:
        if model is None:
            model = refit(None)
        remaining = rho - result.rho_used
        if remaining < 2 * budget.cost():
            budget.last(remaining)
            final = True
        eps = epsilon_for(budget.rho_select)
        sigma2 = budget.sigma2()
        cost = eps * eps / 8 + k2 / (2 * sigma2)
        if cost <= 0 or eps <= 0:
            break
        used_after = result.rho_used + cost
        limit = used_after / rho * options.max_model_cells
        candidates = []
        base = frozenset(measured_sets)
        for r in closure:
            rs = frozenset(r)
            if any(rs <= m for m in measured_sets):
                candidates.append(r)
                continue
            key = (base, r)  # sizes depend on the measured set only, not on the round
            if key not in size_cache:
                size_cache[key] = model_size(selected + [r])
            if size_cache[key] <= limit:
                candidates.append(r)
        cand_w = tuple(weights[r] for r in candidates)
        delta = options.unit_rows * max(cand_w)
        if delta <= 0:
            break  # every candidate has weight 0: nothing the workload cares about
        # the bias correction of each candidate's score: the noise its measurement will carry
        penalties = tuple(Fraction(_SQRT_2_OVER_PI * math.sqrt(float(options.sigma2_for(r, sigma2)))
                                   * _cells(sizes, r)) for r in candidates)
        rnd = Round(index, "select", tuple(candidates), sigma2, cost, cand_w, penalties, eps,
                    Fraction(delta), final)
        res = step(rnd, model)
        index += 1
        result.rounds.append(res)
        result.rho_used += res.rho
        final = final or res.final
        if res.replayed or res.completed:
            budget.adopt(res)
        chosen = res.selected
        assert chosen is not None  # a select round always selects
        measurements.extend(res.measured)
        if chosen is not None and frozenset(chosen) not in measured_sets:
            measured_sets.append(frozenset(chosen))
            selected.append(chosen)
        before = np.asarray(model.marginal(chosen).values).reshape(-1)
        model = refit(model)
        after = np.asarray(model.marginal(chosen).values).reshape(-1)
        n_r = _cells(sizes, chosen)
        change = float(np.abs(after - before).sum())
        threshold = math.sqrt(float(options.sigma2_for(chosen, res.sigma2))) * _SQRT_2_OVER_PI * n_r
        annealed = change <= threshold
        if annealed:
            budget.anneal()
        report(round=res.index, kind="select", selected=list(chosen), candidates=len(candidates),
               epsilon=float(res.epsilon or 0), sigma=math.sqrt(float(res.sigma2)),
               change=change, threshold=threshold, annealed=annealed, final=final,
               replayed=res.replayed)
        if result.rho_used >= rho:
            break
    result.model = model
    result.seconds = time.perf_counter() - t0
    return result


def plan_summary(domain, workload: Any, rho, options: AIMOptions | None = None) -> dict:
    """What AIM will spend, from public information: the initial one-way measurement and
    the per-round selection/measurement split (the rest is decided adaptively)."""
    options = options or AIMOptions()
    rho = Fraction(rho)
    attributes = tuple(domain.attributes)
    weights_w = workload_marginals(workload)
    closure = downward_closure(weights_w, attributes)
    T = options.rounds or 16 * len(attributes)
    alpha = Fraction(options.alpha)
    oneway = [c for c in closure if len(c) == 1]
    init = len(oneway) * alpha * rho / T
    rest = rho - init
    return {"workload_marginals": len(weights_w), "candidates": len(closure),
            "oneway": len(oneway), "rounds_bound": T,
            "rho_init": float(init), "rho_select": float((1 - alpha) * rest),
            "rho_measure": float(init + alpha * rest), "alpha": float(alpha),
            "sigma0": math.sqrt(float(options.unit_rows ** 2 * T / (2 * alpha * rho))),
            "epsilon0": float(epsilon_for((1 - alpha) * rho / T)),
            "max_model_cells": options.max_model_cells}


# --- AIM or HDMM? -------------------------------------------------------------------------------

#: HDMM's expected L1 noise per workload marginal, as a share of the table's rows, above
#: which AIM is expected to give the lower workload error (evidence: docs/engine.md,
#: "AIM or HDMM?", from bench/aim.py: measured HDMM + Private-PGM wins at shares up to 0.32,
#: ties AIM at 0.91, loses at 6.8 and above).
AIM_NOISE_SHARE = 1.0


@dataclass(frozen=True)
class Advice:
    choice: str | None            # "aim" | "hdmm" | None (depends on the table's size)
    noise_per_marginal: float     # HDMM's expected L1 error per workload marginal, in rows
    rows_threshold: float         # N*: HDMM is expected to do better above this many rows
    total: float | None           # the number of rows used (a noisy estimate), if known
    text: str


def advise(workload: Any, domain, hdmm_rmse: float, total: float | None = None,
           share: float = AIM_NOISE_SHARE) -> Advice:
    """Which mode is expected to answer ``workload`` better, from public information.

    HDMM's answers are unbiased with a known per-cell RMSE, so its expected L1 error on a
    workload marginal r is √(2/π)·RMSE·n_r.  When that is a large share of the table it is
    noise-dominated, and AIM — which spends the budget only on marginals it can measure
    well and infers the rest — does better; when it is small, measuring the whole workload
    is better (thesis §5.6: AIM's advantage is largest at small ε and large workloads).
    The table's size is private, so the rule is stated as a threshold N* on it; ``total``
    (a noisy estimate from earlier releases, which is post-processing) decides it."""
    weights = workload_marginals(workload)
    sizes = dict(zip(domain.attributes, (int(s) for s in domain.shape)))
    if not weights:
        return Advice("hdmm", 0.0, 0.0, total, "the workload has no marginal structure: HDMM")
    cells = sum(float(w) * _cells(sizes, c) for c, w in weights.items()) / float(sum(weights.values()))
    noise = _SQRT_2_OVER_PI * float(hdmm_rmse) * cells
    threshold = noise / share
    if total is not None and total > 0:
        choice = "aim" if total < threshold else "hdmm"
        text = (f"{'AIM' if choice == 'aim' else 'HDMM'} is expected to do better: HDMM's expected error "
                f"per workload marginal is {noise:,.0f} rows, {noise / total:.0%} of the table's about "
                f"{total:,.0f} rows (AIM wins above {share:.0%})")
    else:
        choice = None
        text = (f"AIM is expected to do better unless the table has more than about {threshold:,.0f} "
                f"rows: HDMM's expected error per workload marginal is {noise:,.0f} rows, and AIM wins "
                f"once that exceeds {share:.0%} of the table")
    return Advice(choice, noise, threshold, total, text)
