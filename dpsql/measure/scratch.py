"""Private scratch space for copies of private data (issue 34 item 5).

Counting a CSV source writes its normalised records to a file (``reader.normalise_csv``) and
DuckDB may spill the encoded cells of a large table to disk.  Both are copies of private rows.
They live only here:

* one directory per user, ``<system temp>/dpsql-<uid>``, mode 0700, which must be a real
  directory owned by this user and closed to others (a directory someone else prepared is
  refused, never used);
* inside it one directory per process (``proc-*``, mode 0700) holding an exclusive ``flock``
  on its ``.lock`` file for as long as the process uses it.  The OS drops the lock when the
  process dies, however it dies;
* every start sweeps the per-user directory: a process directory whose lock can be taken
  belongs to a process that is gone (SIGKILL, power loss) and is removed with what it holds;
  and the ``dpsql-reader-*`` directories earlier versions left in the temporary directory,
  when empty or holding only copies of processes that are gone (``sweep_legacy``).

A clean exit removes the process directory (``close``, and a finalizer at interpreter exit);
the records file itself is unlinked as soon as it has been encoded (``backend._drop_framed``),
also when encoding fails.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import tempfile
import weakref
from pathlib import Path

from dpsql.errors import OperationalError

_LOCK = ".lock"


def user_root(base: str | os.PathLike | None = None) -> Path:
    """``<base or system temp>/dpsql-<uid>``, created 0700; refused if it is not a directory
    of this user closed to everyone else (another local user could otherwise read the copies,
    or plant a symlink)."""
    root = Path(base if base is not None else tempfile.gettempdir()) / f"dpsql-{os.getuid()}"
    try:
        os.mkdir(root, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(root)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        raise OperationalError(
            f"the scratch directory {root} is not a private directory of this user (it is a "
            "symlink, another user's, or open to others), so private data will not be written there",
            hint="remove it, or point TMPDIR at a directory only this user can read")
    return root


def sweep(root: Path) -> int:
    """Remove the process directories of processes that are gone; returns how many."""
    removed = 0
    try:
        names = os.listdir(root)
    except FileNotFoundError:
        return 0
    for name in names:
        if not name.startswith("proc-"):
            continue
        path = root / name
        try:
            fd = os.open(path / _LOCK, os.O_RDWR)
        except FileNotFoundError:
            # a directory without its lock file: its creator died before taking the lock,
            # or is just creating it; only an empty one is taken (the creator retries)
            try:
                os.rmdir(path)
                removed += 1
            except OSError:
                pass
            continue
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue       # its process is alive
        try:
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed


def sweep_legacy(base: str | os.PathLike | None = None) -> int:
    """Remove what dpsql versions before the private root left in the temporary directory:
    ``dpsql-reader-*`` directories of this user, empty or holding only ``records-<pid>-*.txt``
    copies of processes that are gone (a live pid keeps its directory).  Returns how many."""
    tmp = Path(base if base is not None else tempfile.gettempdir())
    removed = 0
    try:
        names = os.listdir(tmp)
    except OSError:
        return 0
    for name in names:
        if not name.startswith("dpsql-reader-"):
            continue
        path = tmp / name
        try:
            st = os.lstat(path)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid():
                continue
            files = os.listdir(path)
        except OSError:
            continue
        if all(_legacy_copy_of_dead_process(f) for f in files):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _legacy_copy_of_dead_process(name: str) -> bool:
    parts = name.split("-")
    if len(parts) < 3 or parts[0] != "records" or not parts[1].isdigit():
        return False
    try:
        os.kill(int(parts[1]), 0)
    except ProcessLookupError:
        return True
    except OSError:
        return False     # alive (another user's pid, or no permission to ask)
    return False


class Scratch:
    """This process's private directory (module doc).  ``path`` is created on first use."""

    def __init__(self, base: str | os.PathLike | None = None) -> None:
        self._base = base
        self._path: Path | None = None
        self._fd: int | None = None
        self._finalizer: weakref.finalize | None = None

    @property
    def path(self) -> Path:
        if self._path is not None and os.path.isdir(self._path):
            return self._path
        self.close()
        root = user_root(self._base)
        sweep(root)
        for _ in range(5):
            path = Path(tempfile.mkdtemp(prefix="proc-", dir=root))   # mode 0700
            try:
                fd = os.open(path / _LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
            except FileNotFoundError:
                continue      # a concurrent sweep removed it while still empty: try again
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.fstat(fd).st_nlink == 0:
                # a sweep took the lock between our create and our flock, and removed it all
                os.close(fd)
                continue
            self._path, self._fd = path, fd
            self._finalizer = weakref.finalize(self, _remove, path, fd)
            return path
        raise OperationalError(f"could not create a scratch directory in {root}",
                               hint="check that the temporary directory is writable")

    def close(self) -> None:
        """Remove the directory and everything in it (idempotent)."""
        if self._finalizer is not None:
            self._finalizer()
        self._path, self._fd, self._finalizer = None, None, None


def _remove(path: Path, fd: int) -> None:
    shutil.rmtree(path, ignore_errors=True)
    try:
        os.close(fd)
    except OSError:
        pass


__all__ = ["Scratch", "sweep", "sweep_legacy", "user_root"]
