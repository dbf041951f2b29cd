"""One private release outside the workload measurement (a bound's choice, a view's dropped
rows), in the engine's order (docs/privacy.md §6): a payload released before is returned
free; a charge whose process died before its release is completed under that charge; else
the spend is previewed from the ledger alone (a refusal reads no row and spends nothing),
the exact values are computed (a failure spends nothing), the charge is made durable, and
only then are the noisy values drawn and recorded."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any, TypeVar

from dpsql.errors import BudgetExhaustedError, OperationalError
from dpsql.privacy.accountant import format_rho

T = TypeVar("T")


def release_once(ledger: Any, principal: str, key: str, rho: Fraction, mechanism: dict[str, Any], *,
                 what: str, hint: str, count: Callable[[], T],
                 noisy: Callable[[T], bytes]) -> tuple[bytes, bool]:
    """(payload, reused) of the release ``key`` costing ``rho``; ``what`` names it in
    messages ("choosing this bound"), ``hint`` says how to afford it, ``count()`` computes the
    exact values (they stay in this process) and ``noisy(exact)`` returns the payload of
    their noisy version."""
    with ledger.measurement_lock():
        found = ledger.release(key)
        if found is not None:
            return found, True
        unreleased = ledger.unreleased_charge(key)
        if unreleased is not None and unreleased.rho != rho:
            raise OperationalError(f"the ledger holds an unreleased charge for {what} (rho = "
                                   f"{unreleased.rho}), but it costs {rho}",
                                   hint="the ledger was edited; start a new ledger")
        if unreleased is None:
            view = ledger.preview(principal, rho)
            if not view.fits:
                raise BudgetExhaustedError(
                    f"{what} needs rho = {format_rho(rho, 'up')} but only rho = "
                    f"{format_rho(view.remaining, 'down')} remains",
                    hint=hint, requested_rho=rho, remaining_rho=view.remaining)
        exact = count()
        charge_id = unreleased.seq if unreleased is not None else ledger.charge(principal, rho, key, mechanism).id
        payload = noisy(exact)
        del exact
        ledger.record_release(charge_id, key, payload)
        return payload, False
