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
from fractions import Fraction
from typing import TYPE_CHECKING

import numpy as np

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
        if is_ordered_strategy(strategy):
            # a tree's levels or the Toeplitz root's integer coefficients, over one column:
            # their own blocks (no n×n lattice factor), the int64 bound from the declared rows
            from dpsql.measure.ordered import counts_bound, ordered_blocks
            oblocks = ordered_blocks(strategy, counts_bound(strategy, self.config.table_rows.get(table),
                                                            source.unit_rows))
            oplan = rel.calibrate(oblocks, rho, family=self.config.noise,  # type: ignore[arg-type]
                                  unit_rows=source.unit_rows)        # a LatticeBlock's view
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
        with self._lock:
            state = self._sync(table)
            blocks, plan, key = self.release_plan(table, strategy, rho, purpose)
            cost = Fraction(0) if key in state.release_keys or self._unreleased_charge(key) else Fraction(rho)
            if cost:
                self.check_useful(table, blocks, plan, cost)
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
        t0 = time.perf_counter()
        state = self._state(table)
        # the ledger's lock first: waiting for another process must not block this
        # engine's queries (they take only self._lock)
        with self._ledger().measurement_lock(), self._lock:
            self._sync(table)  # re-read the ledger under the lock: another process may have measured
            blocks, plan, key = self.release_plan(table, strategy, rho, purpose, offsets)
            cells = sum(int(np.prod([state.schema.domain[a] for a in b.clique])) for b in blocks)
            if key in state.release_keys:
                return MeasureReport(table, Fraction(0), True, len(blocks), cells, time.perf_counter() - t0)
            # the share, not the calibrated cost plan.rho (≤ the share by ~1e-9 of it, the
            # float margin of calibrate): a measurement given the whole remaining budget
            # leaves exactly 0, never a residue that a later measurement would spend on noise
            cost = Fraction(rho)
            # A charge for this very release whose process died before recording it: the
            # release is completed under that charge, never paid again (docs/privacy.md §6,
            # "Every charge has exactly one release").
            unreleased = self._unreleased_charge(key)
            if unreleased is not None and unreleased.rho != cost:
                raise OperationalError(
                    f"the ledger holds an unreleased charge for this measurement of rho = {unreleased.rho}, "
                    f"but it now costs {cost}", hint="the ledger was edited; start a new ledger")
            view = self._ledger().preview(principal, cost)
            if unreleased is None and not view.fits:
                raise BudgetExhaustedError(
                    f"measuring this needs rho = {format_rho(cost, 'up')} but only rho = "
                    f"{format_rho(view.remaining, 'down')} remains"
                    + (f" for {principal!r}" if view.remaining_user is not None
                       and view.remaining_user <= view.remaining_global else ""),
                    hint="ask the operator for more budget, or answer from existing measurements",
                    requested_rho=Fraction(cost), remaining_rho=Fraction(view.remaining))
            if unreleased is None:
                self.check_useful(table, blocks, plan, cost)   # before any data is read
            cliques = list(dict.fromkeys(b.clique for b in blocks if b.offsets is None))
            requests = [(b.clique, b.offsets) for b in blocks if b.offsets is not None]
            self._progress("measure", {"table": table, "blocks": len(blocks), "cells": cells})
            if hasattr(self.backend, "fingerprint"):
                # counted only from the content the identity names (else nothing is charged)
                counts = self.backend.count_marginals(state.schema, cliques, expect=state.content)
                sums = self.backend.sum_offsets(state.schema, requests, expect=state.content) if requests else {}
            else:
                counts = self.backend.count_marginals(state.schema, cliques)
                sums = self.backend.sum_offsets(state.schema, requests) if requests else {}
            exact = [b.apply(counts[b.clique] if b.offsets is None else sums[(b.clique, b.offsets)])
                     for b in blocks]
            kill_point("counted")
            if unreleased is None:
                charge_id = self._ledger().charge(principal, cost, key, {
                    "purpose": purpose, "table": table, "family": plan.family,
                    **({"requested_by": requested_by} if requested_by else {}),
                    **({"flag": flag} if flag else {}),
                    "identity": _identity(state).as_dict(), "identity_key": _identity(state).key(),
                    "blocks": [{"clique": list(b.clique), "rows": b.rows(), "param": str(p),
                                **({"offsets": b.offsets, "bound": b.bound} if b.offsets else {})}
                               for b, p in zip(blocks, plan.params)]}).id
            else:
                charge_id, cost = unreleased.seq, Fraction(0)   # this call spends nothing
            kill_point("charged")
            released = [(b, rel.noisy_values(b, x, p, plan.family), rel.stddev(b, p, plan.family))
                        for b, x, p in zip(blocks, exact, plan.params)]
            del exact, counts, sums
            kill_point("drawn")
            if is_ordered_strategy(strategy):
                from dpsql.measure import ordered
                done = ordered.release_of(strategy, released, plan.rho)
                self._ledger().record_release(charge_id, key, ordered.pack(done))
                kill_point("released")
                state.ordered.append(done)
                state.ordered_estimate = None
                state.release_keys.add(key)
                released = []
            else:
                self._ledger().record_release(charge_id, key, rel.pack(released))
                kill_point("released")
            if any(b.offsets for b, _, _ in released):
                state.offsets.extend(r for r in released if r[0].offsets)
                state.offset_models = None
                released = [r for r in released if not r[0].offsets]
            if released:
                state.released.extend(released)
                state.release_keys.add(key)
                _retire_model(state)  # refit lazily with a warm start
        self._progress("measure", {"table": table, "blocks": len(blocks), "cells": cells, "done": True})
        return MeasureReport(table, cost, False, len(blocks), cells, time.perf_counter() - t0,
                             completed=unreleased is not None)


__all__ = ["Measurer", "USELESS_SHARE", "KILL_AT_ENV", "kill_point"]
