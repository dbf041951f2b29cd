"""Driving a real ``Shell`` through prompt-toolkit's pipe input, as a terminal would.

The shell runs in a thread so the test can type, wait for the shell to react, and type
again (type-ahead makes most tests a single ``send``).  Every wait has a generous limit
so that a shell stuck at a prompt fails the test instead of hanging the suite.
"""

from __future__ import annotations

import io
import threading
import time
from contextlib import contextmanager

from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput

from repl.app import Shell

LIMIT = 30.0
UP = "\x1b[A"
DOWN = "\x1b[B"
TAB = "\t"
CTRL_C = "\x03"
ENTER = "\r"


class Driven:
    def __init__(self, shell: Shell, pipe, out: io.StringIO, limit: float = LIMIT) -> None:
        self.limit = limit
        self.shell = shell
        self.pipe = pipe
        self.out = out
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.code = None
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            self.code = self.shell.run()
        except BaseException as exc:  # noqa: BLE001 - reported by finish()
            self.error = exc

    def send(self, text: str) -> None:
        self.pipe.send_text(text)

    def text(self) -> str:
        return self.out.getvalue()

    def wait_for(self, predicate, what: str) -> None:
        deadline = time.monotonic() + self.limit
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; output so far:\n{self.text()}")
            if not self.thread.is_alive():
                raise AssertionError(f"shell exited while waiting for {what}: {self.error!r}\n{self.text()}")
            time.sleep(0.02)

    def wait_output(self, needle: str) -> None:
        self.wait_for(lambda: needle in self.text(), repr(needle))

    def finish(self) -> str:
        self.send("\\q" + ENTER)
        self.thread.join(self.limit)
        if self.thread.is_alive():
            raise AssertionError(f"shell did not quit; output so far:\n{self.text()}")
        if self.error is not None:
            raise self.error
        return self.text()


@contextmanager
def driven(connection, *, history=None, limit: float = LIMIT, **options):
    """A running shell over ``connection``; yields a ``Driven`` to type into.  ``limit``
    bounds every wait (the real engine may plan and fit for a while)."""
    out = io.StringIO()
    options.setdefault("pager", False)
    with create_pipe_input() as pipe:
        shell = Shell(connection, out=out, input=pipe, output=DummyOutput(), history=history, **options)
        d = Driven(shell, pipe, out, limit)
        d.thread.start()
        try:
            yield d
        finally:
            if d.thread.is_alive():
                d.shell.done = True
                pipe.send_text("\x04")
                d.thread.join(5)


def run_keys(connection, keys: str, **options) -> str:
    """Type ``keys`` then ``\\q`` and return everything the shell printed."""
    with driven(connection, **options) as d:
        d.send(keys)
        return d.finish()
