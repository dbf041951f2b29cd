"""Shared fixtures for the shell tests: the helper modules live beside the tests."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(autouse=True)
def _private_history(tmp_path, monkeypatch):
    """Never touch the real user's history file from a test."""
    monkeypatch.setenv("DPSQL_HISTORY", str(tmp_path / "history"))
