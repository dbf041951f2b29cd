"""Issue 17: the engine hands the fit its declared workload, and saved models are keyed by it.

The dense-block fit chooses between the measurements' and the workload's metric
(``dpsql.pgm.workload_fit``), so the same releases give a different model under another
workload: a model saved under one workload must not be loaded under another."""

from __future__ import annotations

from pathlib import Path

import pytest

from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
from dpsql.engine.fitting import ModelStore
from dpsql.engine.session import Session

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "adult" / "dpsql.toml"
PREFIX = [f"SELECT sex, COUNT(*) FROM adult WHERE age <= {k} GROUP BY sex" for k in (25, 35, 45, 55, 65)]


def _config(tmp: Path, workload):
    return load_config(CONFIG, ledger=str(tmp / "w.ledger"), cache_dir=str(tmp / "cache"),
                       budget={"epsilon": 10.0, "delta": 1e-6},
                       workload={"queries": workload, "epsilon": 5.0}, fit_iters=500)


def test_the_dense_block_fit_sees_the_workload_and_the_key_follows_it(tmp_path):
    cfg = _config(tmp_path, PREFIX)
    engine = Engine(cfg)
    Session(engine, "op").measure()
    model, _, _ = engine.model("adult")
    # one Kronecker block over (age, sex): solved on the joint table, the metric chosen
    assert model.solved is not None, model.stopped
    assert model.metric is not None and model.metric.rows == 10, model.stopped
    assert "Stein's estimate" in model.stopped
    path = engine.model_path("adult")
    assert path.exists()

    same = Engine(_config(tmp_path, PREFIX))
    assert same.model_path("adult") == path
    weighted = Engine(_config(tmp_path, ["-- weight: 3\n" + PREFIX[0]] + PREFIX[1:]))
    assert weighted.model_path("adult") != path
    other = Engine(_config(tmp_path, PREFIX[:-1]))
    other_path = other.model_path("adult")
    assert other_path != path
    # the releases are the same (measured once), the model is fitted again for this workload
    answer = Session(other, "ana").execute(PREFIX[0])
    assert len(answer.rows) == 2 and other_path.exists()


def _refit(tmp: Path, workload):
    """A fresh engine's model of releases measured (and perhaps fitted) before: the saved model
    is removed so that the fit runs."""
    Session(Engine(_config(tmp, workload)), "op").measure()
    engine = Engine(_config(tmp, workload))
    engine.model_path("adult").unlink(missing_ok=True)
    return engine.model("adult")[0]


@pytest.mark.slow
def test_the_workload_is_compiled_only_for_the_fit_that_uses_it(tmp_path, monkeypatch):
    # Two one-way marginals: no one block covers their joint table, so the fit never reaches
    # the workload's metric and must not pay for compiling the workload (the planner's
    # imports and ~0.2 s on the 40-query dashboard; bench/trust.py --parts fit).
    calls = []
    real = ModelStore.fit_workload
    monkeypatch.setattr(ModelStore, "fit_workload", lambda self, t: calls.append(t) or real(self, t))
    model = _refit(tmp_path / "m", ["SELECT sex, COUNT(*) FROM adult GROUP BY sex",
                                    "SELECT race, COUNT(*) FROM adult GROUP BY race"])
    assert model.metric is None and calls == [], (calls, model.stopped)
    calls.clear()
    model = _refit(tmp_path / "p", PREFIX)
    assert model.metric is not None and calls == ["adult"], (calls, model.stopped)
