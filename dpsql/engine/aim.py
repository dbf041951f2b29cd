"""AIM through the engine: every round charged, released and re-usable (thesis ch. 5).

:func:`dpsql.plan.aim.run_aim` decides the rounds from public information and earlier
releases; this module performs them against the table (``docs/engine.md``, "AIM"):

1. a round's cost ρ_t = ε_t²/8 + k²/(2σ_t²) is checked with ``Ledger.preview`` — a round
   the budget cannot cover is refused before any data is read;
2. the exact marginals it needs are counted (candidates once per run, cached in memory);
3. ``Ledger.charge`` makes ρ_t durable *before* anything derived from the counts exists;
4. the exponential mechanism (``noise.exponential_mechanism``, exact, on exact rational
   scores) picks the marginal and the discrete Gaussian measures it;
5. ``Ledger.record_release`` stores the noisy marginal under the run's key and round
   number — only then is it used (for the next fit, the next round's scores).

A run is identified by the table, its source, the workload's marginals, the budget and
AIM's options.  Running it again (after a crash, a SIGKILL, or simply twice) replays every
released round from the ledger without reading the data or paying again, completes the round
a crash interrupted between 3 and 5 under its charge (the same σ and ε, fresh draws nobody
saw; docs/privacy.md §6), counts any other charge without a release as spent, and continues
with fresh rounds only for what is left of the run's budget.
"""

from __future__ import annotations

import math
import threading
import time
import weakref
from dataclasses import dataclass, field
from fractions import Fraction
from collections.abc import Callable
from typing import Any

import numpy as np

from dpsql.engine.engine import Engine
from dpsql.engine.measuring import _groups, kill_point
from dpsql.engine.state import _identity, _sha
from dpsql.errors import BudgetExhaustedError, LedgerCorruptError, OperationalError
from dpsql.linalg import Identity
from dpsql.measure import release as rel
from dpsql.pgm import Measurement
from dpsql.pgm.auto import fit as pgm_fit
from dpsql.plan.aim import (AIMOptions, Round, RoundResult, as_charged, exact_scores, plan_summary,
                            run_aim, workload_marginals)
from dpsql.privacy import noise
from dpsql.privacy.accountant import format_rho
from dpsql.privacy.ledger import LedgerEntry

__all__ = ["AIMReport", "aim_options", "measure_aim", "aim_cost", "aim_summary"]

#: Iterations of each warm-started intermediate fit; the final model is the engine's fit.
ROUND_ITERS = 200
_ACTIVE: set[tuple[int, str]] = set()
_ACTIVE_LOCK = threading.Lock()


@dataclass(frozen=True)
class AIMReport:
    table: str
    rho: Fraction              # spent by this call, exact
    reused: bool               # every round came from the ledger
    blocks: int                # noisy marginals released by the run
    cells: int
    seconds: float
    rounds: int = 0
    replayed: int = 0
    selected: list = field(default_factory=list)
    run_rho: float = 0.0       # the run's budget
    rho_select: float = 0.0    # of it: exponential-mechanism selections
    rho_measure: float = 0.0   # of it: Gaussian measurements
    lost_rho: float = 0.0      # charged by an interrupted round that released nothing
    run: str = ""


def aim_options(engine: Engine, table: str) -> AIMOptions:
    opts = engine.config.planner
    cap = min(opts.aim_max_model_cells, opts.max_model_cells)
    source = engine.config.sources[table]
    # a view's group bound: the marginals over its groups are measured with less noise at
    # the same cost (AIMOptions.sigma2_for; docs/privacy.md §7.1a)
    groups = _groups(source, engine.config.noise)
    if groups is None:
        return AIMOptions(max_model_cells=int(cap), unit_rows=source.unit_rows)
    return AIMOptions(max_model_cells=int(cap), unit_rows=source.unit_rows, group_attributes=groups.attributes,
                      group_rows_sq=min(source.unit_rows ** 2, groups.l2_sq(source.unit_rows)))


def _run_key(engine: Engine, table: str, weights: dict, rho: Fraction, options: AIMOptions) -> str:
    # The release identity (table, domain, source content, privacy unit, noise) is part of
    # every release key; the run key adds what makes one AIM run.
    return _sha("aim-v1", engine.identity(table).key(), sorted((c, str(w)) for c, w in weights.items()),
                str(rho), str(options.alpha), options.rounds, options.max_model_cells,
                options.unit_rows, *((list(options.group_attributes), options.group_rows_sq)
                                     if options.group_rows_sq is not None else ()))[:24]


@dataclass(frozen=True)
class _Charge:
    """A ledger charge of one AIM run, with the fields a charge always has (the ledger's
    entry type allows None for a release's)."""

    seq: int
    rho: Fraction
    mechanism: dict[str, Any]

    @staticmethod
    def of(entry: LedgerEntry, run: str) -> _Charge | None:
        """``entry`` as a charge of the run ``run``, or None when it is not one."""
        m = entry.mechanism
        if entry.kind != "charge" or not isinstance(m, dict) or m.get("aim_run") != run:
            return None
        if entry.rho is None:
            raise LedgerCorruptError(f"ledger charge #{entry.seq} of an AIM run has no rho",
                                     hint="the ledger was edited; start a new ledger")
        return _Charge(entry.seq, entry.rho, m)


class _Driver:
    """The private side of one AIM run (``step``) and its reconstruction (``fit``)."""

    def __init__(self, engine: Engine, table: str, principal: str, rho: Fraction,
                 options: AIMOptions, key: str) -> None:
        self.engine, self.table, self.principal = engine, table, principal
        with engine._lock:
            self.state = engine._sync(table)  # current release identity; loads new releases
        self.schema = self.state.schema
        self.rho, self.options, self.key = rho, options, key
        self.prefix = f"{_identity(self.state).key()}:aim:{key}:"
        self.counts: dict[tuple[str, ...], np.ndarray] = {}
        self.spent = Fraction(0)
        self.stored: dict[int, tuple] = {}
        released_charges = set()
        charges: dict[int, _Charge] = {}
        for e in engine.ledger.entries():
            charge = _Charge.of(e, key)
            if charge is not None:
                charges[e.seq] = charge
            elif e.kind == "release" and e.key and e.key.startswith(self.prefix):
                released_charges.add(e.charge_id)
                self.stored[int(e.key.rsplit(":", 1)[1])] = (e.key, e.charge_id)
        self.charges = charges
        # a charge without a release at a round index no release has is the round a crash
        # interrupted: the run completes it under that charge (step); any other is lost
        self.pending: dict[int, _Charge] = {}
        for seq, c in sorted(charges.items()):
            r = c.mechanism.get("round")
            if seq not in released_charges and isinstance(r, int) and r not in self.stored \
                    and r not in self.pending:
                self.pending[r] = c
        pending = {c.seq for c in self.pending.values()}
        self.lost = sum((c.rho for s, c in charges.items() if s not in released_charges and s not in pending),
                        Fraction(0))

    # -- the private step ----------------------------------------------------------------
    def step(self, rnd: Round, model) -> RoundResult:
        if rnd.index in self.stored:
            return self._replay(rnd)
        # one round at a time across processes: count, charge and release under the
        # ledger's measurement lock (as Engine.measure_strategy does)
        with self.engine.ledger.measurement_lock():
            charged = self.pending.pop(rnd.index, None)
            if charged is not None:
                m = charged.mechanism
                paid = as_charged(rnd, Fraction(m["sigma2"]),
                                 None if m.get("epsilon") is None else Fraction(m["epsilon"]), charged.rho,
                                 bool(m.get("final")), dict(zip(self.schema.domain.attributes,
                                                                (int(n) for n in self.schema.domain.shape))),
                                 self.options.unit_rows, self.options)
                if paid is None or m.get("kind") != paid.kind:
                    raise OperationalError(
                        f"AIM round {charged.mechanism.get('round')} was charged but never released, and "
                        "its charge does not pay for the round this run plans",
                        hint="the ledger or AIM's code changed since; run AIM with another budget or a new ledger")
                rnd = paid
            return self._fresh(rnd, model, charged)

    def _fresh(self, rnd: Round, model, charged=None) -> RoundResult:
        ledger = self.engine.ledger
        view = ledger.preview(self.principal, rnd.rho)
        if charged is None and not view.fits:
            raise BudgetExhaustedError(
                f"AIM round {rnd.index} needs rho = {format_rho(rnd.rho, 'up')} but only "
                f"rho = {format_rho(view.remaining, 'down')} remains",
                hint="ask the operator for more budget; the rounds already released are kept "
                     "and re-used when the run continues",
                requested_rho=rnd.rho, remaining_rho=view.remaining)
        self._count(rnd.cliques)
        identity = _identity(self.state)
        mechanism = {"purpose": "aim", "aim_run": self.key, "table": self.table,
                     "identity": identity.as_dict(), "identity_key": identity.key(),
                     "round": rnd.index, "kind": rnd.kind, "sigma2": str(rnd.sigma2),
                     "epsilon": None if rnd.epsilon is None else str(rnd.epsilon),
                     "sensitivity": None if rnd.sensitivity is None else str(rnd.sensitivity),
                     "candidates": len(rnd.cliques), "final": rnd.final}
        key = f"{self.prefix}{rnd.index}"
        if charged is None:
            charge_id = ledger.charge(self.principal, rnd.rho, key, mechanism).id
            self.spent += rnd.rho
        else:
            charge_id = charged.seq
        kill_point("charged")
        if rnd.kind == "init":
            chosen = list(rnd.cliques)
        else:
            marg = [np.asarray(model.marginal(c).values) for c in rnd.cliques]
            scores = exact_scores(rnd, [self.counts[c] for c in rnd.cliques], marg)
            if rnd.epsilon is None or rnd.sensitivity is None:  # plan.aim gives every selection both
                raise RuntimeError(f"AIM round {rnd.index} selects without an epsilon and a sensitivity")
            chosen = [rnd.cliques[noise.exponential_mechanism(scores, rnd.epsilon, rnd.sensitivity)]]
            del scores, marg
        released, variances = [], []
        for c in chosen:
            x = self.counts[c]
            # S²/(2σ_c²) = k²/(2σ²): each clique costs the round's measurement share exactly
            s2 = self.options.sigma2_for(c, rnd.sigma2)
            y = noise.add_exact(x, noise.discrete_gaussian(s2, x.size)).astype(np.float64)
            released.append((_block(self.schema.domain, c), y, math.sqrt(float(s2))))
            variances.append(s2)
        kill_point("drawn")
        ledger.record_release(charge_id, key, rel.pack(released))
        self._adopt(key, released)
        return RoundResult(rnd.index, rnd.kind, None if rnd.kind == "init" else chosen[0],
                           tuple((b.clique, y, s2) for (b, y, _), s2 in zip(released, variances)), rnd.rho,
                           rnd.sigma2, rnd.epsilon, rnd.final, completed=charged is not None)

    def _replay(self, rnd: Round) -> RoundResult:
        key, charge_id = self.stored[rnd.index]
        charge = self.charges.get(charge_id)
        if charge is None:
            raise OperationalError(f"AIM round {rnd.index} has a release but no charge of this run",
                                   hint="the ledger was edited; start a new ledger")
        payload = self.engine.ledger.release(key)
        if payload is None:
            raise LedgerCorruptError(f"the ledger lists AIM release {key!r} but holds no payload for it",
                                     hint="the ledger was edited or truncated; start a new ledger")
        released = rel.unpack(payload)
        self._adopt(key, released)
        mech = charge.mechanism
        sigma2 = Fraction(mech["sigma2"])
        eps = None if mech.get("epsilon") is None else Fraction(mech["epsilon"])
        measured = tuple((b.clique, y, self.options.sigma2_for(b.clique, sigma2)) for b, y, _ in released)
        selected = None if mech["kind"] == "init" else measured[0][0]
        return RoundResult(rnd.index, mech["kind"], selected, measured, charge.rho, sigma2, eps,
                           bool(mech.get("final")), replayed=True)

    def _adopt(self, key: str, released) -> None:
        with self.engine._lock:
            if key not in self.state.release_keys:
                self.state.released.extend(released)
                self.state.release_keys.add(key)
                self.state.model = None

    def _count(self, cliques) -> None:
        missing = [c for c in cliques if c not in self.counts]
        if missing:
            try:  # counted only from the content the release identity names
                got = self.engine.backend.count_marginals(self.schema, missing, expect=self.state.content)
            except TypeError:  # a backend without content fingerprints
                got = self.engine.backend.count_marginals(self.schema, missing)
            for c in missing:
                self.counts[c] = np.asarray(got[c], dtype=np.int64).reshape(-1)

    # -- reconstruction (post-processing) ------------------------------------------------
    def fit(self, measured, previous):
        domain = self.schema.domain
        ms = [Measurement(c, Identity(int(np.size(y))), np.asarray(y, dtype=np.float64),
                          math.sqrt(float(s2))) for c, y, s2 in measured]
        # a fixed number of iterations per round (no gap test, no discrepancy stop)
        return pgm_fit(domain, ms, iters=min(ROUND_ITERS, self.engine.config.fit_iters),
                       warm_start=previous, limits=self.engine.config.fit_limits,
                       method="exact", exact_method="adaptive", gap=None, stop=None)


def _block(domain, clique) -> rel.LatticeBlock:
    factors = tuple(np.eye(domain[a], dtype=np.int64) for a in clique)
    return rel.LatticeBlock(tuple(clique), factors, 1.0, 1.0)


_WORKLOADS: weakref.WeakKeyDictionary[Engine, dict] = weakref.WeakKeyDictionary()


def _setup(engine: Engine, table: str, rho=None):
    # Compiling hundreds of workload statements takes seconds; cost, plan and run share it.
    cache = _WORKLOADS.setdefault(engine, {})
    key = (table, tuple(engine.config.workload))
    if key not in cache:
        cache[key] = engine.workload_for(table)[0]
    workload = cache[key]
    weights = workload_marginals(workload)
    options = aim_options(engine, table)
    rho = Fraction(rho if rho is not None else engine.workload_rho(table))
    return workload, weights, options, rho, _run_key(engine, table, weights, rho, options)


def aim_cost(engine: Engine, table: str, rho=None) -> Fraction:
    """ρ a ``measure_aim`` call would still charge, exactly: the run's budget minus what it spent."""
    _, _, options, rho, key = _setup(engine, table, rho)
    charges = [c for c in (_Charge.of(e, key) for e in engine.ledger.entries()) if c is not None]
    spent = sum((c.rho for c in charges), Fraction(0))
    final = any(c.mechanism.get("final") for c in charges)
    return Fraction(0) if final else max(rho - spent, Fraction(0))


def aim_summary(engine: Engine, table: str, rho=None) -> dict:
    """The public plan of an AIM run (what it will spend on selection and measurement)."""
    workload, _, options, rho, key = _setup(engine, table, rho)
    out = plan_summary(engine.catalog[table].domain, workload, rho, options)
    out["run"] = key
    return out


def measure_aim(engine: Engine, table: str, principal: str, rho=None,
                progress: Callable[[dict], None] | None = None) -> AIMReport:
    """Run (or resume, or replay) AIM on ``table`` with the workload budget."""
    t0 = time.perf_counter()
    workload, weights, options, rho, key = _setup(engine, table, rho)
    token = (id(engine), key)
    with _ACTIVE_LOCK:
        if token in _ACTIVE:
            raise OperationalError("this AIM run is already in progress",
                                   hint="wait for it to finish; its rounds are shared")
        _ACTIVE.add(token)
    try:
        driver = _Driver(engine, table, principal, rho, options, key)

        def report(event):
            if progress is not None:
                progress(event)
            if engine.progress is not None:
                engine.progress("aim", event)

        result = run_aim(engine.catalog[table].domain, weights, rho, step=driver.step,
                         fit=driver.fit, options=options, lost_rho=driver.lost, progress=report)
    finally:
        with _ACTIVE_LOCK:
            _ACTIVE.discard(token)
    domain = engine.catalog[table].domain
    rounds = result.rounds
    sel = sum((r.epsilon ** 2 / 8 for r in rounds if r.epsilon is not None), Fraction(0))
    replayed = sum(1 for r in rounds if r.replayed)
    measured = result.measurements
    return AIMReport(table, driver.spent, replayed == len(rounds), len(measured),
                     sum(domain.size(c) for c, _, _ in measured), time.perf_counter() - t0,
                     len(rounds), replayed, [list(c) for c in result.selected], float(rho),
                     float(sel), float(result.rho_used - sel - driver.lost), float(driver.lost), key)
