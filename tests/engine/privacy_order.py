"""The steps of a measurement as they happen, for tests of the engine's privacy order.

``spied(con, events, monkeypatch)`` records each step of a measurement made through ``con``
into ``events``: the ledger's ``preview`` (public), the backend's ``count`` of the rows, the
ledger's durable ``charge``, the ``noise`` drawn and the ledger's ``record_release``, so a test
asserts their order (docs/engine.md: preview → count → charge → noise → release; a split's
charges all before any noise).  With ``fail_on = k`` the k-th count fails as an engine that
went away does.  Used by tests/engine/test_ordered_sql.py and test_mixed_ordered.py.
"""

from __future__ import annotations

import dpsql.privacy.noise as noise
from dpsql.errors import OperationalError


def spied(con, events: list[str], monkeypatch, fail_on: int | None = None) -> None:
    engine = con.session.engine
    ledger, backend = engine.ledger, engine.backend
    for name in ("preview", "charge", "record_release"):
        real = getattr(ledger, name)
        monkeypatch.setattr(ledger, name, lambda *a, _real=real, _name=name, **kw:
                            (events.append(_name), _real(*a, **kw))[1])
    real_count = backend.count_marginals

    def count(*a, **kw):
        events.append("count")
        if fail_on is not None and events.count("count") == fail_on:
            raise OperationalError("the engine went away")
        return real_count(*a, **kw)
    monkeypatch.setattr(backend, "count_marginals", count)
    real_noise = noise.discrete_gaussian
    monkeypatch.setattr(noise, "discrete_gaussian",
                        lambda *a, **kw: (events.append("noise"), real_noise(*a, **kw))[1])
