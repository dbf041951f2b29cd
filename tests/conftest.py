"""Fixtures shared by every test directory."""

from __future__ import annotations

import pytest

from dpsql.testing import write_config


@pytest.fixture
def adult_config(tmp_path):
    """``adult_config(**options)`` writes a ``dpsql.toml`` over the adult example in
    ``tmp_path`` (ledger and plan cache there, ε = 1, δ = 1e-6) and returns its path; the
    options are those of :func:`dpsql.testing.write_config` (``queries``, ``planner``, …)."""
    return lambda **options: write_config(tmp_path, **options)
