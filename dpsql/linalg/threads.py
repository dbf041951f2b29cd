"""One BLAS thread for dpsql's dense linear algebra (the one place threadpoolctl is used).

The planner's optimisers and the answer path's standard errors make many small and
mid-sized BLAS/LAPACK calls (pseudo-inverses of factor grams, eigendecompositions of
residual factors).  OpenBLAS's thread hand-off costs more than it saves at these sizes, and
on a loaded 2-core machine its spinning threads made them 10-100x slower: a 74×74
``eigh`` took 225 ms on two threads against 1-2 ms on one (load 4, bench/RESULTS.md, issue
17).  threadpoolctl is the maintained way to set this after numpy is imported (environment
variables only work before).  Its library scan costs ~3 ms, so the controller is made once
(again when scipy's own BLAS has been loaded since); entering a limit then costs ~0.05 ms.
"""

from __future__ import annotations

import sys
import threading
from contextlib import contextmanager
from collections.abc import Iterator
from typing import Any

__all__ = ["one_blas_thread"]

_lock = threading.Lock()
_controller = None
_scipy_blas = False


def _blas_controller() -> Any:  # a threadpoolctl.ThreadpoolController (imported when first needed)
    global _controller, _scipy_blas
    loaded = "scipy.linalg" in sys.modules
    with _lock:
        if _controller is None or loaded != _scipy_blas:
            from threadpoolctl import ThreadpoolController
            _controller, _scipy_blas = ThreadpoolController(), loaded
        return _controller


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Run the block with every loaded BLAS library limited to one thread."""
    with _blas_controller().limit(limits=1, user_api="blas"):
        yield
