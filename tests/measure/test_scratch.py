"""No plaintext copy of private data at rest (issue 34 item 5, ``dpsql.measure.scratch``).

Counting a CSV writes its normalised records to a temporary file.  A crash used to leave that
copy in ``<tmp>/dpsql-reader-*/records-*.txt`` for good, and every process left an empty
``dpsql-reader-*`` directory.  Now: a private per-user directory, a locked per-process
directory inside it, removed on every exit path, and swept at the next start after a crash."""

from __future__ import annotations

import os
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hostile  # noqa: E402

from dpsql import errors as dpsql_errors  # noqa: E402
from dpsql.errors import OperationalError  # noqa: E402
from dpsql.measure.backend import DuckDBBackend  # noqa: E402
from dpsql.measure.source import Source  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SECRET = b"40,F,White,1,0.5,Gen\xc3\xa8ve"   # a row of the private file


def _csv(tmp_path: Path) -> Path:
    path = tmp_path / "private.csv"
    path.write_bytes(b"\n".join([hostile.HEADER, *hostile.clean_rows(20), SECRET]) + b"\n")
    return path


def _python(code: str, tmpdir: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmpdir)}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=300)


def _leftovers(tmpdir: Path) -> list[Path]:
    """Every file or directory dpsql left in the temporary directory, but the per-user root."""
    return sorted(p for p in tmpdir.rglob("*") if p.name != f"dpsql-{os.getuid()}")


@pytest.fixture()
def tmpdir(tmp_path, monkeypatch):
    d = tmp_path / "systemtmp"
    d.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(d))
    return d


def test_a_crash_while_the_copy_exists_is_swept_at_the_next_start(tmp_path, tmpdir):
    csv = _csv(tmp_path)
    proc = _python(f"""
        import os, signal, sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import hostile
        from pathlib import Path
        from dpsql.measure.backend import DuckDBBackend
        from dpsql.measure.source import Source
        backend = DuckDBBackend({{"t": Source("csv", Path({str(csv)!r}))}}, threads=1)
        framed, _ = backend._frame(hostile.SCHEMA)     # the normalised copy, as counting makes it
        print(framed.path, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)           # the crash: no finally, no atexit
    """, tmpdir)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    copy = Path(proc.stdout.strip())
    assert SECRET in copy.read_bytes()                 # the crash did leave a copy ...
    user_root = tmpdir / f"dpsql-{os.getuid()}"
    assert copy.parent.parent == user_root             # ... in the process's directory of the user's
    for d in (copy.parent, user_root):
        assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700, d
    backend = DuckDBBackend({"t": Source("csv", csv)}, threads=1)    # the next start
    try:
        assert not copy.exists() and not copy.parent.exists()
        assert _leftovers(tmpdir) == []
    finally:
        backend.close()


def test_every_clean_exit_leaves_nothing(tmp_path, tmpdir):
    csv = _csv(tmp_path)
    # closed, after a count and a data check
    backend = DuckDBBackend({"t": Source("csv", csv)}, threads=1)
    backend.count_marginals(hostile.SCHEMA, hostile.CLIQUES)
    backend.data_check(hostile.SCHEMA)
    assert [p.name for p in _leftovers(tmpdir) if p.name.startswith("records-")] == []   # unlinked at once
    backend.close()
    assert _leftovers(tmpdir) == []
    # framing that fails half way (a header is declared, the file is empty) leaves no partial copy
    empty = tmp_path / "empty.csv"
    empty.write_bytes(b"")
    backend = DuckDBBackend({"t": Source("csv", empty)}, threads=1)
    with pytest.raises(dpsql_errors.Error):
        backend.count_marginals(hostile.SCHEMA, hostile.CLIQUES)
    assert [p for p in _leftovers(tmpdir) if p.is_file() and p.name != ".lock"] == []
    backend.close()
    # a process that counts and exits without closing its backend (the CLI's path)
    proc = _python(f"""
        import sys
        sys.path.insert(0, {str(Path(__file__).parent)!r})
        import hostile
        from pathlib import Path
        from dpsql.measure.backend import DuckDBBackend
        from dpsql.measure.source import Source
        backend = DuckDBBackend({{"t": Source("csv", Path({str(csv)!r}))}}, threads=1)
        backend.count_marginals(hostile.SCHEMA, hostile.CLIQUES)
    """, tmpdir)
    assert proc.returncode == 0, proc.stderr
    assert _leftovers(tmpdir) == []


def test_duckdb_spills_into_the_private_directory(tmp_path, tmpdir):
    backend = DuckDBBackend({"t": Source("csv", _csv(tmp_path))}, threads=1)
    try:
        backend.count_marginals(hostile.SCHEMA, hostile.CLIQUES)
        spill = Path(backend._run("SELECT current_setting('temp_directory')").fetchone()[0])
        assert spill.parent.parent == tmpdir / f"dpsql-{os.getuid()}"
    finally:
        backend.close()


@pytest.mark.parametrize("kind", ["open to others", "symlink"])
def test_a_scratch_directory_others_can_reach_is_refused(tmp_path, tmpdir, kind):
    root = tmpdir / f"dpsql-{os.getuid()}"
    if kind == "symlink":
        (tmp_path / "elsewhere").mkdir(mode=0o700)
        root.symlink_to(tmp_path / "elsewhere")
    else:
        root.mkdir()
        root.chmod(0o777)
    backend = DuckDBBackend({"t": Source("csv", _csv(tmp_path))}, threads=1)
    try:
        with pytest.raises(OperationalError, match="not a private directory"):
            backend.count_marginals(hostile.SCHEMA, hostile.CLIQUES)
    finally:
        backend.close()
    if kind == "symlink":
        assert list((tmp_path / "elsewhere").iterdir()) == []    # nothing written through it


def test_what_earlier_versions_left_is_swept(tmp_path, tmpdir):
    """Before the private root, copies lived in <tmp>/dpsql-reader-*/records-<pid>-<n>.txt and
    were never removed after a crash, and empty dpsql-reader-* directories piled up."""
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True).stdout.strip()
    crashed = tmpdir / "dpsql-reader-abc"
    crashed.mkdir(mode=0o700)
    (crashed / f"records-{dead}-1.txt").write_bytes(SECRET)
    empty = tmpdir / "dpsql-reader-def"
    empty.mkdir(mode=0o700)
    alive = tmpdir / "dpsql-reader-ghi"        # a running process of an earlier version
    alive.mkdir(mode=0o700)
    (alive / f"records-{os.getpid()}-1.txt").write_bytes(SECRET)
    DuckDBBackend({"t": Source("csv", _csv(tmp_path))}, threads=1).close()
    assert not crashed.exists() and not empty.exists()
    assert (alive / f"records-{os.getpid()}-1.txt").exists()
