"""Cancellable work: results and errors come back; Ctrl-C abandons the wait."""

import threading

import pytest
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.input.typeahead import get_typeahead
from prompt_toolkit.output import DummyOutput

from dpsql import errors
from repl import work


def test_quick_work_returns_without_a_spinner():
    assert work.run(lambda: 42, "x", interactive=True, input=None, output=DummyOutput()) == 42
    assert work.run(lambda: 43, "x", interactive=False) == 43


def test_errors_of_the_work_reach_the_caller():
    def fail():
        raise errors.BudgetExhaustedError("no budget left")
    with pytest.raises(errors.BudgetExhaustedError):
        work.run(fail, "x", interactive=False)


def _slow(gate: threading.Event, outcome):
    def run():
        gate.wait(30)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome
    return run


def test_spinner_waits_for_slow_work_and_keeps_typed_keys():
    gate = threading.Event()
    with create_pipe_input() as pipe:
        pipe.send_text("ab")
        threading.Timer(0.6, gate.set).start()
        assert work.run(_slow(gate, "done"), "slow", input=pipe, output=DummyOutput(), delay=0.05) == "done"
        assert "".join(k.data for k in get_typeahead(pipe)) == "ab"


def test_spinner_passes_on_errors_raised_while_it_runs():
    gate = threading.Event()
    with create_pipe_input() as pipe:
        threading.Timer(0.3, gate.set).start()
        with pytest.raises(errors.ModelTooLargeError):
            work.run(_slow(gate, errors.ModelTooLargeError("too big")), "fit", input=pipe,
                     output=DummyOutput(), delay=0.05)


def test_ctrl_c_abandons_the_wait():
    gate = threading.Event()
    with create_pipe_input() as pipe:
        pipe.send_text("\x03")
        try:
            with pytest.raises(work.Cancelled):
                work.run(_slow(gate, "late"), "slow", input=pipe, output=DummyOutput(), delay=0.05)
        finally:
            gate.set()
