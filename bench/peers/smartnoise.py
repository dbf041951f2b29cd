"""Drive SmartNoise SQL from the main environment: its own venv, a subprocess, JSON in/out.

``ensure_venv()`` creates ``bench/peers/.venv-smartnoise`` with the exact versions of
``requirements-smartnoise.txt``; ``run(job)`` feeds a job to ``smartnoise_runner.py`` and
returns its JSON report.

    python bench/peers/smartnoise.py      # create/refresh the venv and print the versions
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from peer import Peer  # noqa: E402

PEER = Peer("smartnoise", "SmartNoise")
ensure_venv, run, python = PEER.ensure_venv, PEER.run, PEER.python

if __name__ == "__main__":
    PEER.main()
