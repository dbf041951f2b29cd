"""Whole-file replacement: a reader sees the old file or the new one, never a half-written one
(write under a temporary name in the same directory, then ``os.replace``, which is atomic on
POSIX within one file system)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path

__all__ = ["atomic_write"]


def atomic_write(path: str | os.PathLike, write: Callable, *, text: bool = False,
                 prefix: str = ".tmp-", mode: int | None = None) -> None:
    """Call ``write(fh)`` on a temporary file beside ``path`` and rename it over ``path``;
    on any failure the temporary file is removed and ``path`` is untouched.  ``mode`` sets
    the permission bits before anything is written (e.g. 0o600 for secrets)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".tmp", dir=path.parent)
    try:
        if mode is not None:
            os.fchmod(fd, mode)
        with (os.fdopen(fd, "w", encoding="utf-8") if text else os.fdopen(fd, "wb")) as fh:
            write(fh)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
