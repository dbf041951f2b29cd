"""Saved models (issue 17): an exact model's file holds its junction tree, so loading it
neither triangulates nor imports networkx; a file whose tree is not a junction tree of the
model's cliques is refused (the caller refits)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpsql.domain import Domain
from dpsql.linalg import Identity, Kron, Total
from dpsql.pgm import JunctionTree, Measurement, fit
from dpsql.pgm.store import load_model, save_model

ROOT = Path(__file__).resolve().parents[2]
DOM = Domain(["a", "b", "c", "d", "e"], [2, 3, 4, 3, 2])
CLIQUES = [("a", "b"), ("b", "c"), ("c", "d"), ("b", "d"), ("d", "e")]


def _model():
    rng = np.random.default_rng(7)
    data = rng.integers(0, 4, size=(500, 5)) % np.array(DOM.shape)
    out = []
    for c in CLIQUES:
        axes = [DOM.attributes.index(a) for a in c]
        counts = np.zeros([DOM[a] for a in c])
        np.add.at(counts, tuple(data[:, i] for i in axes), 1)
        noisy = counts.ravel() + rng.normal(0, 2.0, counts.size)
        out.append(Measurement(c, Kron([Identity(DOM[a]) for a in c]), noisy, 2.0))
    out.append(Measurement(("a",), Total(2), np.array([500.0]), 2.0))
    return fit(DOM, out, iters=300)


def _tree_parts(tree: JunctionTree):
    return (tree.cliques, tree.parent, tree.preorder, tree.edges, tree.separators, tree.children,
            tree.root, tree.order, tree.size, tree.by_attribute)


def test_the_loaded_tree_is_the_fitted_one_and_answers_match(tmp_path):
    model = _model()
    path = tmp_path / "m.npz"
    save_model(model, path)
    loaded = load_model(path, DOM)
    assert loaded is not None
    assert _tree_parts(loaded.tree) == _tree_parts(model.tree)
    q = Kron([Identity(2), Total(3), Identity(4), Total(3), Identity(2)])
    np.testing.assert_array_equal(loaded.answer(q), model.answer(q))
    # a fresh process loads it without networkx (nor the fit's scipy.sparse)
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
            "from dpsql.domain import Domain\nfrom dpsql.pgm.store import load_model\n"
            f"m = load_model({str(path)!r}, Domain({list(DOM.attributes)!r}, {list(DOM.shape)!r}))\n"
            "assert m is not None\n"
            "print(sorted(k for k in sys.modules if k.split('.')[0] in ('networkx', 'scipy')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"


def _rewrite_header(path: Path, change) -> None:
    with np.load(path, allow_pickle=False) as npz:
        header = json.loads(bytes(npz["header"]).decode())
        arrays = {k: npz[k] for k in npz.files if k != "header"}
    change(header)
    buf = io.BytesIO()
    np.savez(buf, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **arrays)
    path.write_bytes(buf.getvalue())


@pytest.mark.parametrize("change", [
    lambda h: h.update(parent=[-1] * len(h["parent"])),                 # several roots
    lambda h: h.update(preorder=list(reversed(h["preorder"]))),         # a child before its parent
    lambda h: h.update(cliques=[c[:1] for c in h["cliques"]]),           # measured cliques not held
    lambda h: h.update(parent=h["parent"][:-1]),                        # wrong length
])
def test_a_stored_tree_that_is_not_a_junction_tree_is_refused(tmp_path, change):
    model = _model()
    path = tmp_path / "m.npz"
    save_model(model, path)
    _rewrite_header(path, change)
    assert load_model(path, DOM) is None


def test_a_file_from_before_the_tree_was_stored_still_loads(tmp_path):
    model = _model()
    path = tmp_path / "m.npz"
    save_model(model, path)
    _rewrite_header(path, lambda h: [h.pop(k) for k in ("parent", "preorder", "order")])
    loaded = load_model(path, DOM)
    assert loaded is not None and loaded.tree.cliques == model.tree.cliques


def test_running_intersection_is_checked():
    # a and c both in two cliques joined only through ("b",)-free links: not a junction tree
    with pytest.raises(ValueError):
        JunctionTree.from_structure(["a", "b", "c"], [2, 2, 2], [("a", "b"), ("c",), ("a", "c")],
                                    [-1, 0, 1], [0, 1, 2], ["a", "b", "c"])
    tree = JunctionTree.from_structure(["a", "b", "c"], [2, 2, 2], [("a", "b"), ("a", "c")],
                                       [-1, 0], [0, 1], ["b", "a", "c"])
    assert tree.separators == {(0, 1): ("a",)} and tree.size == 8
