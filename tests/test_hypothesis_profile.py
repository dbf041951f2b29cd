"""Hypothesis tests draw the same examples on every run (tests/conftest.py's profile): before,
each run drew new ones from an unseeded generator, so a rare failing example could fail one
CI run in many and pass the next."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
_seen: list[int] = []


@settings(max_examples=20, database=None)
@given(st.integers(0, 2 ** 62))
def test_collects_its_examples(x):
    _seen.append(x)


def _examples(profile: str | None) -> str:
    env = {k: v for k, v in os.environ.items() if k != "HYPOTHESIS_PROFILE"}
    if profile is not None:
        env["HYPOTHESIS_PROFILE"] = profile
    code = ("import sys; sys.path.insert(0, 'tests'); import conftest, test_hypothesis_profile as t; "
            "t.test_collects_its_examples(); print(t._seen)")
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.slow      # four interpreters
def test_every_run_draws_the_same_examples_unless_asked_to_explore():
    assert settings.default.derandomize or os.environ.get("HYPOTHESIS_PROFILE") == "explore"
    assert _examples(None) == _examples(None)
    assert _examples("explore") != _examples("explore")     # 20 draws alike twice: never seen
