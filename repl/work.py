"""Running a plan, measurement or query so that Ctrl-C gets the analyst back to the prompt.

The work runs in a daemon thread while the shell waits.  If it takes longer than a
moment, a one-line prompt-toolkit application shows a spinner with the elapsed time; it
owns the terminal in raw mode, so Ctrl-C arrives as a key press and cancels the wait.
Before the spinner appears (and in scripts) Ctrl-C arrives as SIGINT, i.e. as
``KeyboardInterrupt`` in the waiting thread, and cancels the same way.

Cancelling abandons the wait, not the thread: Python cannot stop a thread safely, so the
work may finish in the background and its result is discarded.  That is safe because the
engine makes every privacy charge atomic (charged and released together, or not at all)
and a re-run re-uses what was already paid for.  Keys typed while the spinner runs are
handed on to the next prompt (type-ahead), not lost.
"""

from __future__ import annotations

import asyncio
import threading
import time
from concurrent.futures import Future
from collections.abc import Callable
from typing import TypeVar

from prompt_toolkit.application import Application
from prompt_toolkit.input.typeahead import get_typeahead, store_typeahead
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.keys import Keys
from prompt_toolkit.layout import Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl

T = TypeVar("T")

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class Cancelled(Exception):
    """The analyst pressed Ctrl-C; the work's result (if any comes) is discarded."""


def start(work: Callable[[], T]) -> Future:
    """Run ``work`` in a daemon thread (so an abandoned run never blocks exit)."""
    fut: Future = Future()

    def run() -> None:
        if not fut.set_running_or_notify_cancel():
            return
        try:
            result = work()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            fut.set_exception(exc)
        else:
            fut.set_result(result)

    threading.Thread(target=run, name="dpsql-shell-work", daemon=True).start()
    return fut


def wait_blocking(fut: Future[T]) -> T:
    """Wait without a terminal UI; SIGINT (Ctrl-C) cancels the wait."""
    try:
        return fut.result()
    except KeyboardInterrupt:
        raise Cancelled() from None


def run(work: Callable[[], T], label: str, *, input=None, output=None, interactive: bool = True,
        delay: float = 0.25, status: Callable[[], str | None] | None = None) -> T:
    """The result of ``work()``; raises ``Cancelled`` on Ctrl-C, or what ``work`` raised.
    ``status()``, when given, names the current step (e.g. the fit's iteration) beside the
    spinner instead of ``label``."""
    fut = start(work)
    if not interactive:
        return wait_blocking(fut)
    try:
        return fut.result(timeout=delay)
    except TimeoutError:
        pass
    except KeyboardInterrupt:
        raise Cancelled() from None
    if not _spin(fut, label, input, output, status):
        raise Cancelled()
    return fut.result()


def _spin(fut: Future, label: str, input, output, status=None) -> bool:
    """Show a spinner until ``fut`` is done (True) or Ctrl-C is pressed (False)."""
    t0 = time.monotonic()
    typed: list = []
    kb = KeyBindings()

    @kb.add("c-c")
    @kb.add("c-d")
    def _cancel(event) -> None:
        event.app.exit(result=False)

    @kb.add(Keys.Any)
    def _keep(event) -> None:
        typed.extend(event.key_sequence)

    def text():
        elapsed = time.monotonic() - t0
        frame = SPINNER[int(elapsed * 10) % len(SPINNER)]
        now = status() if status is not None else None
        return [("bold", f"{frame} "), ("", f"{now or label + '…'} {elapsed:.1f} s"),
                ("class:bottom-toolbar.key", "   Ctrl-C"), ("", " to cancel")]

    app: Application = Application(
        layout=Layout(Window(FormattedTextControl(text), height=1)),
        key_bindings=kb, input=input, output=output, erase_when_done=True,
        refresh_interval=0.1)

    async def watch() -> None:
        try:
            await asyncio.wrap_future(fut)
        except BaseException:  # noqa: BLE001 - the caller reads the outcome from fut
            pass
        if app.is_running and app.future is not None and not app.future.done():
            app.exit(result=True)

    def pre_run() -> None:
        app.create_background_task(watch())

    done = bool(app.run(pre_run=pre_run, handle_sigint=False))
    # keys typed during the wait go before anything the application left unread
    leftover = get_typeahead(app.input)
    store_typeahead(app.input, typed + leftover)
    return done


__all__ = ["run", "start", "wait_blocking", "Cancelled"]
