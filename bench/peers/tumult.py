"""Drive Tumult Analytics from the main environment: its own venv, a subprocess, JSON in/out.

``ensure_venv()`` creates ``bench/peers/.venv-tumult`` with the exact versions of
``requirements-tumult.txt`` (Tumult runs on Spark: a JDK 17 must be installed, as for the
``spark`` extra); ``run(job)`` feeds a job to ``tumult_runner.py`` and returns its JSON report.

    python bench/peers/tumult.py      # create/refresh the venv and print the versions
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer import Peer  # noqa: E402

PEER = Peer("tumult", "Tumult", spark=True)
ensure_venv, run, python = PEER.ensure_venv, PEER.run, PEER.python

if __name__ == "__main__":
    PEER.main()
