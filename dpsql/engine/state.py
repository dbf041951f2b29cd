"""What the engine keeps per private table (``TableState``) and the helpers every engine
module shares: the release identity of a state and the content hash of release keys.

Below ``engine.py`` and ``fitting.py`` (both import it), so neither imports the other's
module for these (docs/architecture.md; issue 36 item 3: engine.py did ~6 jobs).
"""

from __future__ import annotations

import hashlib
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from dpsql.domain import TableSchema
from dpsql.engine.bounds import BoundsModel
from dpsql.engine.variance import VarianceModel
from dpsql.measure import release as rel
from dpsql.measure.identity import TableIdentity

if TYPE_CHECKING:
    from dpsql.pgm import GraphicalModel
    from dpsql.plan import Strategy

Released = tuple[rel.LatticeBlock, np.ndarray, float]



@dataclass
class TableState:
    """Everything the engine knows about one private table (all of it public or noisy)."""

    schema: TableSchema
    released: list[Released] = field(default_factory=list)
    release_keys: set[str] = field(default_factory=set)
    model: GraphicalModel | None = None
    model_version: int = 0
    variance: VarianceModel | None = None
    strategy: Strategy | None = None
    model_last: object = None  # the previous fit, for warm starts
    identity: TableIdentity | None = None   # of the releases in ``released``
    content: dict | None = None             # source fingerprint the identity was built from
    bounds: BoundsModel | None = None  # ranges of unsupported values, per model version
    fit_lock: threading.Lock = field(default_factory=threading.Lock)  # one fit at a time
    pending: Future | None = None      # a background fit started by Engine.prepare
    # (model, variance, version) fitted to an earlier set of this identity's releases: it answers
    # while the model of the current set is fitted (``Engine.model(stale_ok=True)``, issue 34 item 8)
    stale: tuple | None = None
    # the number of linear queries of the workload on this table (per-query baselines)
    workload_rows: int | None = None
    # released binning offsets (``dpsql.engine.offsets``; never in the model) and, per
    # column, their least-squares answers (built on first use after a release)
    offsets: list[Released] = field(default_factory=list)
    offset_models: dict | None = None
    # releases of a fine ordered column (``measure.ordered.OrderedRelease``; never in the
    # model) and the closed-form estimates of the latest per column and groups, latest
    # first, built on first use (``Engine.ordered_estimates``)
    ordered: list = field(default_factory=list)
    ordered_estimate: list | None = None
    # direct releases of thin statements over two fine columns (``engine.direct.DirectRelease``;
    # never in the model), oldest first
    direct: list = field(default_factory=list)


def _retire_model(state: TableState) -> None:
    """New releases arrived: the model is refitted, and until then the previous one (of the
    same identity, a post-processing of earlier releases) may still answer."""
    if state.model is not None:
        state.stale = (state.model, state.variance, state.model_version)
    state.model = None


def _identity(state: TableState) -> TableIdentity:
    """The identity of ``state``'s releases; set by ``Engine._sync``, which every caller runs first."""
    if state.identity is None:
        raise RuntimeError("table state read before Engine._sync set its identity")
    return state.identity


def _sha(*parts) -> str:
    h = hashlib.sha256()
    for p in parts:
        if isinstance(p, np.ndarray):
            h.update(str(p.dtype).encode() + str(p.shape).encode())
            h.update(np.ascontiguousarray(p).tobytes())
        else:
            h.update(repr(p).encode())
        h.update(b"\x00")
    return h.hexdigest()


__all__ = ["Released", "TableState"]
