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
from hypothesis import settings  # noqa: E402

# Hypothesis draws its examples from an unseeded generator: each run would test other examples
# than the last, so a failure would come and go (one CI run in many).  Derandomized, every run
# tests the same examples (chosen from a hash of the test); HYPOTHESIS_PROFILE=explore searches
# afresh.  A test's own @settings keep what they set and take the rest from this profile.
settings.register_profile("derandomized", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "derandomized"))

from dpsql.testing import write_config  # noqa: E402


@pytest.fixture
def adult_config(tmp_path):
    """``adult_config(**options)`` writes a ``dpsql.toml`` over the adult example in
    ``tmp_path`` (ledger and plan cache there, ε = 1, δ = 1e-6) and returns its path; the
    options are those of :func:`dpsql.testing.write_config` (``queries``, ``planner``, …)."""
    return lambda **options: write_config(tmp_path, **options)


# The files whose tests use the Spark session (tests/measure/conftest.py): one worker runs them
# all, so that one JVM starts (20-50 s and 1 GB each on the 2-core machine).  Another file that
# takes the `spark` fixture belongs here too (or it starts a second JVM on the other worker).
SPARK_FILES = frozenset({"tests/measure/test_engines.py", "tests/measure/test_sources.py",
                         "tests/measure/test_people_engines.py", "tests/measure/test_people_group_engines.py",
                         "tests/measure/test_people_flag_engines.py",
                         "tests/measure/test_init_sources.py", "tests/measure/test_public_engines.py",
                         "tests/measure/test_time_arithmetic.py", "tests/measure/test_time_of_day_reader.py"})


@pytest.hookimpl(optionalhook=True)   # a pytest-xdist hook: without xdist nothing calls it
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (as ``make test`` runs): each file's tests run on one worker, so
    that a module fixture (a measured model, seeded releases, a loaded lake) is built once,
    and the Spark files run on one worker together.

    Split by test, two workers built the same module fixture each: tests/engine/test_issue29.py's
    three seeded releases (150 s at load 10) twice.  ``--dist loadgroup`` with xdist_group marks
    would say this per test, but with pytest 9.2 it silently groups nothing: xdist 3.8 tags the
    group onto ``item._nodeid``, which pytest no longer reads (pytest-xdist issue 1386)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class FileScheduling(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "spark" if path in SPARK_FILES else path

    return FileScheduling(config, log)
