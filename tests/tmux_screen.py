"""Driving a real terminal in tmux for the shells' screen tests (tests/repl/test_engine_shell.py,
tests/server/test_remote_shell.py): one tmux server per test (``-L socket``), one window named
``shell``."""

from __future__ import annotations

import subprocess
import time


def tmux(socket: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", "-L", socket, *args], capture_output=True, text=True, timeout=30,
                          check=check)


def type_text(socket: str, text: str, enter: bool = True) -> None:
    """Type ``text`` literally, then Enter.  tmux reads an argument ending in ``;`` as a
    command separator, so that ``;`` is escaped."""
    if text.endswith(";"):
        text = text[:-1] + "\\;"
    tmux(socket, "send-keys", "-t", "shell", "-l", text)
    if enter:
        tmux(socket, "send-keys", "-t", "shell", "Enter")


def wait_screen(socket: str, needle: str, limit: float = 240.0) -> str:
    """The screen once ``needle`` is on it (polled every 0.2 s), or an AssertionError
    showing the screen after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while True:
        screen = tmux(socket, "capture-pane", "-p", "-t", "shell").stdout
        if needle in screen:
            return screen
        if time.monotonic() > deadline:
            raise AssertionError(f"{needle!r} never appeared; screen:\n{screen}")
        time.sleep(0.2)
