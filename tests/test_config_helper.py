"""dpsql.testing.write_config: the one writer of test and benchmark configurations."""

from __future__ import annotations

import tomllib

from dpsql.engine.config import load_config
from dpsql.testing import ADULT, write_config


def test_write_config_round_trips_through_toml(tmp_path):
    odd = 'it\'s "quoted" \\ and ünïcode'
    path = write_config(tmp_path, queries=["SELECT sex, COUNT(*) FROM adult GROUP BY sex", odd], rho=0.25,
                        dpsql={"fit_iters": 7}, planner={"mode": "aim", "restarts": 2},
                        sections={"budget.per_user": {"epsilon": 0.5}, "policy": {"allow_spend": True}})
    doc = tomllib.loads(path.read_text())
    assert doc["workload"]["queries"][1] == odd
    assert doc["budget"] == {"rho": 0.25, "delta": 1e-6, "per_user": {"epsilon": 0.5}}
    assert doc["tables"]["adult"] == {"domain": str(ADULT / "adult.toml"), "source": {"csv": str(ADULT / "adult.csv")}}
    assert doc["dpsql"] == {"ledger": str(tmp_path / "dpsql.ledger"), "cache_dir": str(tmp_path / "cache"),
                            "fit_iters": 7}
    assert doc["planner"] == {"mode": "aim", "restarts": 2} and doc["policy"] == {"allow_spend": True}


def test_the_default_config_loads(tmp_path):
    cfg = load_config(write_config(tmp_path, queries=["SELECT sex, COUNT(*) FROM adult GROUP BY sex"]))
    assert "adult" in cfg.tables
