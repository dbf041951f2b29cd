"""``python -m dpsql.server.reaper DIR``: clean up the catalog PostgreSQL if the server dies.

Started by ``catalogdb.CatalogCluster`` in its own session, with stdin the read end of a
pipe only the server holds the write end of.  The server writes the postmaster's pid once it
started it.  At EOF, which the kernel delivers however the server ended (clean exit,
exception, SIGKILL, OOM kill), the reaper stops a postmaster still serving ``DIR/data``
(checked by pid and command line, never by name) and removes ``DIR``.  After a clean stop the
directory is already gone and it simply exits.  Signals that would end a session (SIGHUP,
SIGINT) are ignored so a terminal hang-up cannot stop it before its work is done.
"""

from __future__ import annotations

import os
import shutil
import signal
import sys

from dpsql.server import catalogdb


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m dpsql.server.reaper DIR", file=sys.stderr)
        return 2
    directory = argv[0]
    for sig in (signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, signal.SIG_IGN)
    pid = None
    stdin = sys.stdin.buffer
    while True:
        line = stdin.readline()
        if not line:
            break
        try:
            pid = int(line.strip())
        except ValueError:
            pass
    if not os.path.isdir(directory):
        return 0
    verified = catalogdb.postmaster_pid(directory)
    if verified is None and pid is not None:
        args = catalogdb._cmdline(pid)
        if args and os.path.basename(args[0]).startswith("postgres") and os.path.join(directory, "data") in args:
            verified = pid
    if verified is not None:
        catalogdb.kill_postmaster(verified)
    shutil.rmtree(directory, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
