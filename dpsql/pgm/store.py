"""Saving and loading fitted models: a later process answers without refitting.

A model is a function of released (noisy) measurements only, so its file is as public as
the releases themselves.  One ``.npz`` file holds a JSON header (kind, structure, total,
fit summary, a checksum of the arrays) and the arrays: the junction tree's potentials and
calibrated probabilities and the tree itself (cliques, parent links, visiting and
elimination orders) for the exact model, or the region graph's θ̂, τ̂ and messages for
the relaxed model.  Loading checks that the stored tree is a junction tree holding every
measured clique (no triangulation, no networkx) and skips belief propagation (the
probabilities are stored), so it costs about as much as reading the arrays.

Files are written to a temporary name and renamed, so a reader never sees half a model;
any problem on loading (missing, truncated, other version, other structure) returns
None and the caller refits.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from dpsql.domain import Domain
from dpsql.files import atomic_write
from dpsql.pgm.exact_model import ExactModel
from dpsql.pgm.junction_tree import JunctionTree
from dpsql.pgm.model import GraphicalModel
from dpsql.pgm.region_graph import RegionGraph
from dpsql.pgm.relaxed import RelaxedFit
from dpsql.pgm.relaxed_model import RelaxedModel
from dpsql.pgm.report import FitReport

__all__ = ["FORMAT", "save_model", "load_model"]

FORMAT = "dpsql-model-1"


def _digest(arrays: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def _header_common(model, kind: str, domain: Domain) -> dict:
    return {"format": FORMAT, "kind": kind, "attributes": list(domain.attributes),
            "shape": [int(s) for s in domain.shape], "total": float(model.total),
            "measured": [list(c) for c in model.measured], "loss": [float(x) for x in model.loss[-200:]],
            # a bare GraphicalModel has no fit report: only ExactModel and RelaxedModel do
            "reason": getattr(model, "reason", ""), "seconds": getattr(model, "seconds", None),
            "stopped": getattr(model, "stopped", None),
            "report": report.to_json() if (report := getattr(model, "report", None)) is not None else None}


def save_model(model, path: str | os.PathLike) -> None:
    """Write ``model`` (an ExactModel, GraphicalModel or RelaxedModel) to ``path``."""
    path = Path(path)
    arrays: dict[str, Any] = {}     # ndarrays; Any: numpy's type annotation of savez would read a key as allow_pickle
    if isinstance(model, RelaxedModel):
        fit = model.fit
        header = _header_common(model, "relaxed", model.domain)
        header.update({"regions": [list(r) for r in fit.graph.regions],
                       "edges": [[list(fit.graph.regions[p]), list(fit.graph.regions[c])]
                                 for p, c in fit.graph.edges],
                       "graph_kind": fit.graph.kind, "stepsize": float(fit.stepsize),
                       "violation": float(fit.violation), "iterations": int(fit.iterations),
                       "damping": float(fit.damping), "n_messages": len(fit.messages),
                       "method": fit.method})
        arrays["kappa"] = np.asarray(fit.kappa, dtype=float)
        for i, (t, p) in enumerate(zip(fit.theta, fit.probs)):
            arrays[f"theta_{i}"], arrays[f"probs_{i}"] = np.asarray(t), np.asarray(p)
        for i, m in enumerate(fit.messages):
            arrays[f"msg_{i}"] = np.asarray(m)
    else:
        exact = model if isinstance(model, ExactModel) else None
        gm: GraphicalModel = exact.model if exact is not None else model
        header = _header_common(exact or gm, "exact", gm.domain)
        header.update({"cliques": [list(c) for c in gm.tree.cliques],
                       "parent": [int(p) for p in gm.tree.parent],
                       "preorder": [int(i) for i in gm.tree.preorder],
                       "order": list(gm.tree.order),
                       "log_partition": float(gm.log_partition)})
        for i, (t, p) in enumerate(zip(gm.theta, gm._probs)):
            arrays[f"theta_{i}"], arrays[f"probs_{i}"] = np.asarray(t), np.asarray(p)
    header["digest"] = _digest(arrays)
    atomic_write(path, lambda fh: np.savez(
        fh, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **arrays), prefix=".model-")


def _report(header: dict) -> FitReport | None:
    """The saved fit report (None for files written before reports existed)."""
    data = header.get("report")
    return FitReport.from_json(data) if data is not None else None


def load_model(path: str | os.PathLike, domain: Domain):
    """The model saved at ``path`` for ``domain``, or None when it cannot be used."""
    try:
        data = Path(path).read_bytes()
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            header = json.loads(bytes(npz["header"]).decode())
            arrays = {k: npz[k] for k in npz.files if k != "header"}
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):
        return None
    if (header.get("format") != FORMAT or header.get("attributes") != list(domain.attributes)
            or header.get("shape") != [int(s) for s in domain.shape]
            or header.get("digest") != _digest(arrays)):
        return None
    measured = [tuple(c) for c in header["measured"]]
    sizes = dict(zip(domain.attributes, domain.shape))
    try:
        if header["kind"] == "exact":
            if "parent" in header:
                tree = JunctionTree.from_structure(domain.attributes, sizes, header["cliques"],
                                                   header["parent"], header["preorder"], header["order"])
                hosts = tree.clique_sets
                if not all(any(set(c) <= h for h in hosts) for c in measured):
                    return None
            else:   # saved before the tree was stored: build it again
                tree = JunctionTree(domain.attributes, sizes, measured)
                if [list(c) for c in tree.cliques] != header["cliques"]:
                    return None
            n = len(tree.cliques)
            theta = [arrays[f"theta_{i}"] for i in range(n)]
            probs = [arrays[f"probs_{i}"] for i in range(n)]
            gm = GraphicalModel.from_parts(domain, tree, theta, header["total"], probs,
                                           header["log_partition"], measured=measured, loss=header["loss"])
            return ExactModel(gm, header["reason"], header["seconds"], header["stopped"], _report(header))
        if header["kind"] == "relaxed":
            graph = RegionGraph(domain.attributes, sizes, [tuple(r) for r in header["regions"]],
                                [(tuple(p), tuple(c)) for p, c in header["edges"]], kind=header["graph_kind"])
            n = len(graph.regions)
            fit = RelaxedFit(graph, [arrays[f"theta_{i}"] for i in range(n)],
                             [arrays[f"probs_{i}"] for i in range(n)], header["total"],
                             [arrays[f"msg_{i}"] for i in range(header["n_messages"])], header["loss"],
                             header["stepsize"], header["violation"], header["iterations"],
                             arrays["kappa"], header["damping"],
                             method=header.get("method", "prox-pgm"))
            return RelaxedModel(domain, fit, measured=measured, reason=header["reason"],
                                seconds=header["seconds"], stopped=header["stopped"],
                                report=_report(header))
    except (KeyError, ValueError, TypeError):
        return None
    return None
