"""Measuring a strategy on one private table: the release's blocks, noise and key, the
check that its answers would not be noise, and the measurement itself in the privacy order
(thesis ch. 3; docs/privacy.md, "Measurement"):

1. compile + plan from SQL and public metadata only (the engine's planning; errors here
   spend nothing);
2. under the ledger's measurement lock, re-read the ledger and the source's fingerprint
   (``sync``) and look for an identical earlier release under the current release identity
   (``dpsql.measure.identity``; same strategy, same budget): if found, re-use it — never
   pay twice, never release fresh noise for a repeat, also across processes;
3. ``Ledger.preview``: a request the budget cannot cover is refused before data is read;
4. count the exact marginals (one scan);
5. ``Ledger.charge``: the spend is made durable (fsync) *before* noise is drawn;
6. draw noise, ``Ledger.record_release`` the noisy values, and only then use them.

A charge whose process died before step 6 is completed by the next request for the same
release key: steps 4 and 6 under that charge, no second charge (``unreleased_charge``;
docs/privacy.md §6 argues why the lost, never-seen draw may be redrawn).

``Measurer`` owns this for ``Engine``, which holds one as ``engine.measuring`` (issue 36
item 3: one place per concept, explicit collaborators).  It is given everything it uses
when it is built and reads nothing else of the engine; what to measure (planning the
workload, the view's share, the binning offsets) stays with the engine.
"""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

from dpsql.engine.direct import is_direct_strategy
from dpsql.engine.ordered import is_ordered_strategy
from dpsql.engine.reports import MeasureReport, SpendPreview
from dpsql.engine.state import TableState, _identity, _retire_model, _sha
from dpsql.errors import BudgetExhaustedError, OperationalError, UselessMeasurementError
from dpsql.measure import release as rel
from dpsql.privacy.accountant import format_rho

if TYPE_CHECKING:
    from collections.abc import Callable

    from dpsql.engine.config import Config
    from dpsql.measure.counting import Backend
    from dpsql.plan import Strategy
    from dpsql.privacy.ledger import Ledger, LedgerEntry

#: A table that declares no ``rows``: a measurement given less than 1/USELESS_SHARE of the
#: total budget is refused (its noise is over √USELESS_SHARE = 1000 times the whole budget's).
USELESS_SHARE = 10**6

#: Test hook (tests/engine/test_crash_recovery.py): ``DPSQL_KILL_AT=<step>`` makes the process
#: SIGKILL itself at that step of a measurement ("counted", "charged", "drawn", "released"), to
#: check that every charge ends with exactly one release whatever step a crash interrupts.
KILL_AT_ENV = "DPSQL_KILL_AT"


def kill_point(step: str) -> None:
    if os.environ.get(KILL_AT_ENV) == step:
        os.kill(os.getpid(), signal.SIGKILL)


def _groups(source, noise: str):
    """A view's group bound, when it lowers the sensitivity: L2 (Gaussian) noise only (the
    L1 norm of a person's change is still max_rows)."""
    view = source.view
    return view.groups if view is not None and noise == "gaussian" else None



class Measurer:
    """Measuring strategies on the private tables, each release charged once and durably.

    ``ledger()`` is the engine's ledger (opened on first use); ``state(table)`` returns the
    table's ``TableState`` and ``sync(table)`` brings it up to date with the ledger and the
    source, both under ``lock`` (the engine's: every read or write of a state here holds
    it); ``unreleased_charge(key)`` is the ledger's charge for release ``key`` that has no
    release yet, read after ``sync``; ``progress(stage, info)`` reports to the listeners."""

    def __init__(self, config: Config, backend: Backend, lock: threading.RLock, *,
                 ledger: Callable[[], Ledger], state: Callable[[str], TableState],
                 sync: Callable[[str], TableState],
                 unreleased_charge: Callable[[str], LedgerEntry | None],
                 progress: Callable[[str, dict], None]) -> None:
        self.config = config
        self.backend = backend
        self._lock = lock
        self._ledger = ledger
        self._state = state
        self._sync = sync
        self._unreleased_charge = unreleased_charge
        self._progress = progress

    def release_plan(self, table: str, strategy: Strategy, rho: Fraction, purpose: str, offsets=None):
        """Lattice blocks, calibrated noise and the release key (all public): the table's
        release identity, then what this release measures and how (blocks, lattice, σ).
        With ``offsets`` (``Engine.offset_plan``: offset blocks and their share of ρ), the counts'
        blocks get ρ − ρ_o and the offset blocks, after them, ρ_o."""
        state = self._state(table)
        source = self.config.sources[table]
        extra, share = offsets if offsets is not None else ([], Fraction(0))
        if is_direct_strategy(strategy):
            # statements over two fine columns (engine/direct.py), counted over their merged
            # columns (``_count``): a record still lands in one cell of each, so the
            # sensitivity is that of the blocks' integer factors as for any block (an ordered
            # part's, as for any ordered release); the merge is part of what the release is
            purpose = f"{purpose}:direct:{sorted(strategy.starts.items())!r}"
            if is_ordered_strategy(strategy.inner):
                strategy = strategy.inner
        if is_ordered_strategy(strategy):
            # a tree's levels or the Toeplitz root's integer coefficients, over one column:
            # their own blocks (no n×n lattice factor), the int64 bound from the declared rows
            from dpsql.measure.ordered import counts_bound, ordered_blocks
            oblocks = ordered_blocks(strategy, counts_bound(strategy, self.config.table_rows.get(table),
                                                            source.unit_rows))
            # a view's group bound: I_G ⊗ T separates the groups when G is among the strategy's
            # group attributes (release.ordered_rows_sq, docs/privacy.md §2a)
            groups = _groups(source, self.config.noise)
            factors = None if groups is None else [rel.ordered_rows_sq(
                strategy.groups, strategy.attribute, source.unit_rows, groups)] * len(oblocks)
            oplan = rel.calibrate(oblocks, rho, family=self.config.noise,  # type: ignore[arg-type]
                                  unit_rows=source.unit_rows, row_factors=factors)  # a LatticeBlock's view
            key = _identity(state).key() + ":" + _sha(
                purpose, "ordered", float(oplan.rho), [str(p) for p in oplan.params],
                *[(b.clique, b.scale, b.weight) for b in oblocks], *[f for b in oblocks for f in b.factors])
            return oblocks, oplan, key
        # a view's group bound lowers the L2 row factor of the blocks that separate its groups
        # (release.rows_sq), counts and binning offsets alike: a person's offsets in group γ
        # sum over at most n_γ kept rows, the same rows (docs/privacy.md §2a, §7.1b)
        groups = _groups(source, self.config.noise)
        blocks, plan = rel.lattice_blocks([(b.clique, b.query, b.weight) for b in strategy.blocks], rho - share,
                                          family=self.config.noise, unit_rows=source.unit_rows, groups=groups)
        if extra:
            oplan = rel.calibrate(extra, share, family=self.config.noise, unit_rows=source.unit_rows,
                                  groups=groups)
            blocks = blocks + list(extra)
            plan = rel.NoisePlan(plan.family, plan.params + oplan.params, plan.rho + oplan.rho)
        key = _identity(state).key() + ":" + _sha(
            purpose, float(plan.rho), [str(p) for p in plan.params],
            *[(b.clique, b.scale, b.weight) + ((b.offsets, b.bound) if b.offsets else ()) for b in blocks],
            *[f for b in blocks for f in b.factors])
        return blocks, plan, key

    def spend_preview(self, table: str, strategy: Strategy, rho: Fraction, principal: str,
                      purpose: str) -> SpendPreview:
        """What ``measure_strategy`` with the same arguments would charge now (public)."""
        cost = self.parts_cost(table, [(strategy, rho, None)], principal, purpose)
        return SpendPreview(cost, self._ledger().remaining(principal))

    def check_useful(self, table: str, blocks, plan, share: Fraction) -> None:
        """Refuse a measurement whose answers would be noise, from public metadata only
        (docs/privacy.md, "Useless measurements"): its most precise released value would
        have an expected error (noise standard deviation) above the table's declared
        ``rows``, or, for a table that declares none, its share is below a millionth of the
        total budget (noise over 1000 times what the whole budget gives)."""
        # the counts' noise (offset blocks are in a column's units, not rows)
        error = min(rel.stddev(b, p, plan.family) for b, p in zip(blocks, plan.params) if b.offsets is None)
        rows = self.config.table_rows.get(table)
        total = self.config.budget.rho
        if rows is not None:
            if error <= rows:
                return
            why = f"more than the {rows:,} rows table {table!r} declares"
        else:
            if share * USELESS_SHARE >= total:
                return
            why = (f"over {math.isqrt(USELESS_SHARE):,} times the error the whole budget would give "
                   f"(declare the table's public size as [tables.{table}] rows to judge by it instead)")
        raise UselessMeasurementError(
            f"measuring this with rho = {format_rho(share, 'up')} would release values with an expected "
            f"error of ±{error:,.0f} (noise standard deviation), {why}: the answers would be noise; "
            "nothing was spent",
            hint="measure with a larger share of the budget (--epsilon, [workload] or [policy] epsilon), "
                 "or have the operator grant a new budget (a new ledger)",
            requested_rho=Fraction(share), remaining_rho=Fraction(self._ledger().remaining(None)),
            expected_error=error)

    def measure_strategy(self, table: str, strategy: Strategy, rho: Fraction, principal: str,
                         purpose: str, requested_by: str | None = None, offsets=None,
                         flag: dict | None = None) -> MeasureReport:
        """Measure every block of ``strategy`` at total cost ≤ ``rho`` (order in module doc),
        and the ``offsets`` (``Engine.offset_plan``) in the same release; ``flag`` (an ad hoc
        per-person flag's table and condition, public) is kept in the charge."""
        return self.measure_parts(table, [(strategy, rho, offsets)], principal, purpose, requested_by,
                                  flag=flag)

    def parts_cost(self, table: str, parts, principal: str | None, purpose: str) -> Fraction:
        """What ``measure_parts`` with the same arguments would charge now: the shares of the
        parts neither released nor charged yet (public).  Refuses a useless part."""
        with self._lock:
            state = self._sync(table)
            cost = Fraction(0)
            for strategy, rho, offsets in parts:
                blocks, plan, key = self.release_plan(table, strategy, rho, purpose, offsets)
                if key in state.release_keys or self._unreleased_charge(key):
                    continue
                self.check_useful(table, blocks, plan, Fraction(rho))
                cost += Fraction(rho)
        return cost

    def measure_parts(self, table: str, parts, principal: str, purpose: str,
                      requested_by: str | None = None, link: dict | None = None,
                      flag: dict | None = None) -> MeasureReport:
        """Measure each (strategy, ρ, offsets) of ``parts`` as a release of its own, in the order
        of the module doc for all of them together: the total is previewed and every part
        judged useful before any data is read, all are counted, all charged (durably, one
        ledger entry each, carrying ``link``: the mixed plan they belong to) before any noise
        is drawn, then released.  A part already released is re-used; one charged by a
        process that died before releasing it is released under that charge."""
        t0 = time.perf_counter()
        state = self._state(table)
        # the ledger's lock first: waiting for another process must not block this
        # engine's queries (they take only self._lock)
        with self._ledger().measurement_lock(), self._lock:
            self._sync(table)  # re-read the ledger under the lock: another process may have measured
            todo, blocks_n, cells = [], 0, 0
            for strategy, rho, offsets in parts:
                blocks, plan, key = self.release_plan(table, strategy, rho, purpose, offsets)
                blocks_n += len(blocks)
                domain = (strategy.schema if is_direct_strategy(strategy) else state.schema).domain
                cells += sum(int(np.prod([domain[a] for a in b.clique])) for b in blocks)
                if key not in state.release_keys:
                    todo.append(_Pending(strategy, blocks, plan, key, Fraction(rho)))
            if not todo:
                return MeasureReport(table, Fraction(0), True, blocks_n, cells, time.perf_counter() - t0)
            for p in todo:
                # A charge for this very release whose process died before recording it: the
                # release is completed under that charge, never paid again (docs/privacy.md §6,
                # "Every charge has exactly one release").
                p.unreleased = self._unreleased_charge(p.key)
                if p.unreleased is not None and p.unreleased.rho != p.cost:
                    raise OperationalError(
                        f"the ledger holds an unreleased charge for this measurement of rho = {p.unreleased.rho}, "
                        f"but it now costs {p.cost}", hint="the ledger was edited; start a new ledger")
            # the shares, not the calibrated costs plan.rho (≤ the share by ~1e-9 of it, the
            # float margin of calibrate): a measurement given the whole remaining budget
            # leaves exactly 0, never a residue that a later measurement would spend on noise
            cost = sum((p.cost for p in todo if p.unreleased is None), Fraction(0))
            view = self._ledger().preview(principal, cost)
            if cost and not view.fits:
                raise BudgetExhaustedError(
                    f"measuring this needs rho = {format_rho(cost, 'up')} but only rho = "
                    f"{format_rho(view.remaining, 'down')} remains"
                    + (f" for {principal!r}" if view.remaining_user is not None
                       and view.remaining_user <= view.remaining_global else ""),
                    hint="ask the operator for more budget, or answer from existing measurements",
                    requested_rho=Fraction(cost), remaining_rho=Fraction(view.remaining))
            for p in todo:
                if p.unreleased is None:
                    self.check_useful(table, p.blocks, p.plan, p.cost)   # before any data is read
            self._progress("measure", {"table": table, "blocks": blocks_n, "cells": cells})
            for p in todo:
                self._count(state, p)
            kill_point("counted")
            keys = [p.key for p in todo]
            for i, p in enumerate(todo):
                if p.unreleased is None:
                    note = {} if link is None else {"part_of": {**link, "part": i, "of": len(todo), "keys": keys}}
                    p.charge_id = self._ledger().charge(principal, p.cost, p.key, {
                        "purpose": purpose, "table": table, "family": p.plan.family,
                        **({"requested_by": requested_by} if requested_by else {}), **note,
                        **({"flag": flag} if flag else {}),
                        "identity": _identity(state).as_dict(), "identity_key": _identity(state).key(),
                        "blocks": [{"clique": list(b.clique), "rows": b.rows(), "param": str(q),
                                    **({"offsets": b.offsets, "bound": b.bound} if b.offsets else {})}
                                   for b, q in zip(p.blocks, p.plan.params)]}).id
                else:
                    p.charge_id = p.unreleased.seq    # completed under its charge: spends nothing
            kill_point("charged")
            for p in todo:
                p.released = [(b, rel.noisy_values(b, x, q, p.plan.family), rel.stddev(b, q, p.plan.family))
                              for b, x, q in zip(p.blocks, p.exact, p.plan.params)]
                p.exact = []
            kill_point("drawn")
            for p in todo:
                self._release(state, p)
        self._progress("measure", {"table": table, "blocks": blocks_n, "cells": cells, "done": True})
        return MeasureReport(table, cost, False, blocks_n, cells, time.perf_counter() - t0,
                             completed=any(p.unreleased is not None for p in todo))

    def _count(self, state: TableState, p: _Pending) -> None:
        """The exact values of a part's blocks (one scan of the source)."""
        cliques = list(dict.fromkeys(b.clique for b in p.blocks if b.offsets is None))
        requests = [(b.clique, b.offsets) for b in p.blocks if b.offsets is not None]
        # a direct part counts over its merged fine columns (the same rows' counts, engine/direct.py)
        schema = p.strategy.schema if is_direct_strategy(p.strategy) else state.schema
        if hasattr(self.backend, "fingerprint"):
            # counted only from the content the identity names (else nothing is charged)
            counts = self.backend.count_marginals(schema, cliques, expect=state.content)
            sums = self.backend.sum_offsets(schema, requests, expect=state.content) if requests else {}
        else:
            counts = self.backend.count_marginals(schema, cliques)
            sums = self.backend.sum_offsets(schema, requests) if requests else {}
        p.exact = [b.apply(counts[b.clique] if b.offsets is None else sums[(b.clique, b.offsets)])
                   for b in p.blocks]

    def _release(self, state: TableState, p: _Pending) -> None:
        """Record a part's noisy values in the ledger, then make them the engine's."""
        released = p.released
        assert p.charge_id is not None, "a part is released only after its charge"
        if is_ordered_strategy(p.strategy):
            from dpsql.measure import ordered
            done = ordered.release_of(p.strategy, released, p.plan.rho)
            self._ledger().record_release(p.charge_id, p.key, ordered.pack(done))
            kill_point("released")
            state.ordered.append(done)
            state.ordered_estimate = None
            state.release_keys.add(p.key)
            return
        if is_direct_strategy(p.strategy):
            from dpsql.engine import direct
            if is_ordered_strategy(p.strategy.inner):
                from dpsql.measure import ordered
                kept = direct.DirectRelease(dict(p.strategy.starts), [],
                                            ordered.release_of(p.strategy.inner, released, p.plan.rho))
            else:
                kept = direct.DirectRelease(dict(p.strategy.starts), released)
            self._ledger().record_release(p.charge_id, p.key, direct.pack(kept))
            kill_point("released")
            state.direct.append(kept)       # never in the model: answered block by block
            state.release_keys.add(p.key)
            return
        self._ledger().record_release(p.charge_id, p.key, rel.pack(released))
        kill_point("released")
        if any(b.offsets for b, _, _ in released):
            state.offsets.extend(r for r in released if r[0].offsets)
            state.offset_models = None
            released = [r for r in released if not r[0].offsets]
        if released:
            state.released.extend(released)
            state.release_keys.add(p.key)
            _retire_model(state)  # refit lazily with a warm start


@dataclass(eq=False)
class _Pending:
    """One release being made by ``Measurer.measure_parts``: what is measured (public), then
    its exact values, its charge and its noisy values as the steps reach them."""

    strategy: Strategy
    blocks: list
    plan: rel.NoisePlan
    key: str
    cost: Fraction
    unreleased: LedgerEntry | None = None
    exact: list = field(default_factory=list)
    charge_id: int | None = None
    released: list = field(default_factory=list)


__all__ = ["Measurer", "USELESS_SHARE", "KILL_AT_ENV", "kill_point"]
