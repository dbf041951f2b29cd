"""On-disk strategy cache keyed by a fingerprint of (workload, domain, noise, options).

Strategy selection is data-independent and can take seconds (thesis §3.10.1: "workloads
can be optimized once and the resulting strategies reused many times"), so the planner
stores its result.  Files are plain ``.npz`` (factor arrays) plus ``.json`` (everything
else): no pickle, so a cache directory cannot execute code when read.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.files import atomic_write
from dpsql.plan.strategy import KronBlock, Strategy
from dpsql.plan.workload import WorkloadTerms

__all__ = ["StrategyCache", "strategy_key"]

#: 2: a factor's integer basis (``KronBlock.bases``, a large attribute's C·S) is stored too;
#: format 1 dropped it, so a strategy read back measured C·S as a dense factor rounded as
#: such: another release (another key) than the same plan made fresh, and a crashed mixed
#: measurement with a thin count over a fine column could not be completed under its charge.
_FORMAT = 2


def strategy_key(terms: WorkloadTerms, noise: str, options: dict[str, Any]) -> str:
    payload = json.dumps({"workload": terms.fingerprint, "noise": noise,
                          "options": options, "format": _FORMAT},
                         sort_keys=True, default=repr)
    return hashlib.sha256(payload.encode()).hexdigest()


class StrategyCache:
    """A directory of cached strategies (``<key>.json`` + ``<key>.npz``)."""

    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def _paths(self, key: str) -> tuple[Path, Path]:
        return self.directory / f"{key}.json", self.directory / f"{key}.npz"

    def get(self, terms: WorkloadTerms, noise: str, options: dict[str, Any]) -> Strategy | None:
        meta_path, arr_path = self._paths(strategy_key(terms, noise, options))
        if not (meta_path.exists() and arr_path.exists()):
            return None
        try:
            meta = json.loads(meta_path.read_text())
            with np.load(arr_path, allow_pickle=False) as arrays:
                blocks = tuple(
                    KronBlock(float(b["weight"]),
                              tuple(np.array(arrays[f"b{k}_f{i}"]) for i in range(b["nfactors"])),
                              tuple(b["grids"]),
                              tuple(np.array(arrays[f"b{k}_s{i}"]) if has else None
                                    for i, has in enumerate(b["bases"])) if b.get("bases") else ())
                    for k, b in enumerate(meta["blocks"]))
        except (OSError, ValueError, KeyError):
            return None          # a torn or foreign file is a miss, never an error
        if meta.get("format") != _FORMAT or tuple(meta["shape"]) != tuple(terms.shape):
            return None
        assignment = meta.get("assignment")
        return Strategy(tuple(meta["attributes"]), tuple(meta["shape"]), blocks,
                        meta["operator"], meta["noise"], float(meta["expected_error"]),
                        meta["explanation"], None if assignment is None else tuple(assignment),
                        terms)

    def put(self, terms: WorkloadTerms, noise: str, options: dict[str, Any],
            strategy: Strategy) -> None:
        meta_path, arr_path = self._paths(strategy_key(terms, noise, options))
        arrays: dict[str, Any] = {f"b{k}_f{i}": F for k, b in enumerate(strategy.kron_blocks)
                                  for i, F in enumerate(b.factors)}
        arrays.update({f"b{k}_s{i}": S for k, b in enumerate(strategy.kron_blocks)
                       for i, S in enumerate(b.bases) if S is not None})
        meta = {"format": _FORMAT, "attributes": list(strategy.attributes),
                "shape": list(strategy.shape), "operator": strategy.operator,
                "noise": strategy.noise, "expected_error": strategy.expected_error,
                "explanation": strategy.explanation,
                "assignment": None if strategy.assignment is None else list(strategy.assignment),
                "blocks": [{"weight": b.weight, "nfactors": len(b.factors),
                            "grids": list(b.grids or (1.0,) * len(b.factors)),
                            "bases": [S is not None for S in b.bases]}
                           for b in strategy.kron_blocks]}
        # Write both files under temporary names and rename, so readers never see a
        # half-written entry; the json goes last because get() needs both.
        for path, writer in ((arr_path, lambda f: np.savez(f, **arrays)),
                             (meta_path, lambda f: f.write(json.dumps(meta).encode()))):
            atomic_write(path, writer)
