"""Issue 17, item 3: every new process refitted the model (18-25 s per `dpsql query` on a
55-marginal workload).  A fitted model is saved next to the ledger, keyed by the releases
it was fitted to, and any later engine loads it instead of fitting."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from dpsql.engine.config import load_config
from dpsql.engine.engine import Engine
from dpsql.engine.session import Session

CONFIG = Path(__file__).resolve().parents[2] / "examples" / "adult" / "dpsql.toml"
WORKLOAD = ["SELECT sex, COUNT(*) FROM adult GROUP BY sex",
            "SELECT race, income, COUNT(*) FROM adult GROUP BY race, income"]
QUERY = "SELECT race, income, COUNT(*) FROM adult GROUP BY race, income"


def _config(tmp: Path):
    return load_config(CONFIG, ledger=str(tmp / "p.ledger"), cache_dir=str(tmp / "cache"),
                       budget={"epsilon": 1.0, "delta": 1e-6}, workload={"queries": WORKLOAD, "epsilon": 0.5},
                       fit_iters=200)


def _events(engine):
    seen = []
    engine.add_listener(lambda stage, info: seen.append((stage, dict(info))))
    return seen


@pytest.mark.slow
def test_a_new_engine_loads_the_saved_model_instead_of_fitting(tmp_path):
    cfg = _config(tmp_path)
    first = Engine(cfg)
    Session(first, "op").measure()
    fitted = _events(first)
    answer = Session(first, "ana").execute(QUERY)
    assert any(stage == "fit" and "iteration" in info for stage, info in fitted)
    path = first.model_path("adult")
    assert path.exists() and path.parent == Path(str(cfg.ledger_path) + ".models")

    later = Engine(cfg)                    # what a new process does
    events = _events(later)
    again = Session(later, "bob").execute(QUERY)
    assert not any("iteration" in info for _, info in events)
    assert any(info.get("loaded") for stage, info in events if stage == "fit")
    assert np.allclose([r[-1] for r in again.rows], [r[-1] for r in answer.rows])
    assert again.stderr == answer.stderr


def test_a_new_release_changes_the_key_and_a_broken_file_is_refitted(tmp_path):
    cfg = _config(tmp_path)
    engine = Engine(cfg)
    Session(engine, "op").measure()
    Session(engine, "ana").execute(QUERY)
    before = engine.model_path("adult")
    engine.measure_increment("adult", 0.001, WORKLOAD + ["SELECT age, COUNT(*) FROM adult GROUP BY age"])
    assert engine.model_path("adult") != before
    Session(engine, "ana").execute("SELECT age, COUNT(*) FROM adult GROUP BY age")
    saved = engine.model_path("adult")
    saved.write_bytes(saved.read_bytes()[:100])      # truncated by a crash or a full disk
    other = Engine(cfg)
    events = _events(other)
    result = Session(other, "bob").execute(QUERY)
    assert len(result.rows) == 10 and any("iteration" in info for _, info in events)


def test_the_key_follows_the_fit_limits_and_the_fit_event_names_the_path(tmp_path):
    """Issue 36 item 1: the saved model's key is derived from the finishers and every
    FitLimits value the engine passes (no hand-edited estimator version), and the event that
    ends a fit, fitted or loaded, names the finisher and its certificate."""
    from dataclasses import replace

    from dpsql.display import describe_progress
    from dpsql.pgm.limits import FitLimits

    cfg = _config(tmp_path)
    engine = Engine(cfg)
    Session(engine, "op").measure()
    events = _events(engine)
    engine.model("adult")
    done = [info for stage, info in events if stage == "fit" and info.get("done")]
    assert done and done[-1]["path"] == engine.model("adult")[0].report.path
    assert f"({done[-1]['path']}: " in describe_progress("fit", done[-1])
    key = engine.model_path("adult")
    for limits in (FitLimits(face_step_max_nnz=1), FitLimits(relaxed_exact_after=1)):
        assert Engine(replace(cfg, fit_base_limits=limits)).model_path("adult") != key
    assert Engine(replace(cfg, planner=replace(cfg.planner, max_model_cells=10))).model_path("adult") != key
    assert Engine(cfg).model_path("adult") == key
    later = Engine(cfg)
    events = _events(later)
    later.model("adult")
    loaded = [info for stage, info in events if stage == "fit" and info.get("loaded")]
    assert loaded and loaded[0]["path"] == done[-1]["path"]
    assert describe_progress("fit", loaded[0]).startswith("model loaded from disk (")


@pytest.mark.slow
def test_one_fit_for_all_concurrent_sessions_and_a_background_fit(tmp_path):
    cfg = _config(tmp_path)
    Session(Engine(cfg), "op").measure()
    for p in Path(str(cfg.ledger_path) + ".models").glob("*.npz"):
        p.unlink()
    server = Engine(cfg)
    server.fit_in_background = True
    events = _events(server)
    done = []
    # the user is an argument: a lambda would read the loop variable late, and all four
    # threads would be "u3"
    threads = [threading.Thread(target=lambda user: done.append(Session(server, user).execute(QUERY)),
                                args=(f"u{i}",))
               for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(done) == 4
    assert sum(1 for stage, info in events if stage == "fit" and info.get("done")) == 1
    # a release made by another process: the server notices and refits in the background
    Engine(cfg).measure_increment("adult", 0.001, WORKLOAD + ["SELECT age, COUNT(*) FROM adult GROUP BY age"])
    assert server.refresh()
    version = server.prepare("adult").result(timeout=300)
    status = server.model_status("adult")
    assert status["ready"] and status["version"] == version and status["releases"] == 2
