"""Fixtures shared by every test directory, and one BLAS thread per test process."""

from __future__ import annotations

import os
import sys

# One BLAS thread in every test process (and the subprocesses tests start), set before numpy
# is imported.  `make test` runs two pytest-xdist workers on a 2-core machine shared with
# other work, and OpenBLAS's spinning threads then made dense-algebra tests up to 10x slower:
# tests/pgm/test_joint_dual.py with tests/plan/test_conjunctions.py took 82 s wall (27 s CPU)
# on two threads and 10 s (2.6 s CPU) on one, at load 9.  The engine's own hot paths already
# run on one thread (dpsql/linalg/threads.py); a test that wants more sets it with threadpoolctl.
for _var in ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS"):
    os.environ.setdefault(_var, "1")
if "numpy" in sys.modules:       # a plugin imported it first: the variables came too late
    from threadpoolctl import threadpool_limits
    threadpool_limits(limits=1, user_api="blas")

import pytest  # noqa: E402

from dpsql.testing import write_config  # noqa: E402


@pytest.fixture
def adult_config(tmp_path):
    """``adult_config(**options)`` writes a ``dpsql.toml`` over the adult example in
    ``tmp_path`` (ledger and plan cache there, ε = 1, δ = 1e-6) and returns its path; the
    options are those of :func:`dpsql.testing.write_config` (``queries``, ``planner``, …)."""
    return lambda **options: write_config(tmp_path, **options)


def pytest_collection_modifyitems(items):
    """Under pytest-xdist (``--dist loadgroup``, as ``make test`` runs), every test that uses
    the Spark session runs on one worker: each worker would otherwise start its own JVM
    (tests/measure/conftest.py), 20-50 s and 1 GB each on a 2-core machine."""
    for item in items:
        if isinstance(item, pytest.Function) and "spark" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("spark"))
