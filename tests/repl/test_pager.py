"""The built-in pager: scrolling state, and the real application driven by keys."""

import io
import threading

from prompt_toolkit.data_structures import Size
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output.vt100 import Vt100_Output

from repl.pager import Pager, page

LINES = [f"row {i:03d}" for i in range(100)]


def test_scrolling_is_clamped_to_the_text():
    p = Pager(LINES, height=11, width=40)
    assert p.visible()[0] == "row 000" and len(p.visible()) == 10
    p.scroll(10)
    assert p.visible()[0] == "row 010"
    p.scroll(-50)
    assert p.top == 0
    p.scroll(1000)
    assert p.visible()[-1] == "row 099" and p.top == 90
    assert "(END)" in p.status()


def test_sideways_scrolling():
    p = Pager(["x" * 30 + "TAIL"], height=5, width=20)
    p.shift(20)
    assert p.visible()[0].endswith("TAIL")
    p.shift(-100)
    assert p.left == 0


def _screen_after(keys: str) -> str:
    buf = io.StringIO()
    output = Vt100_Output(buf, lambda: Size(rows=12, columns=40), term="xterm")
    with create_pipe_input() as pipe:
        pipe.send_text(keys)
        t = threading.Thread(target=page, args=(LINES,), kwargs={"input": pipe, "output": output}, daemon=True)
        t.start()
        t.join(20)
        assert not t.is_alive(), "the pager did not quit on q"
    return buf.getvalue()


def test_the_application_pages_forward_and_quits_on_q():
    first = _screen_after("q")
    assert "row 000" in first and "row 011" not in first
    paged = _screen_after(" q")
    assert "row 021" in paged and "row 022" not in paged
    assert "row 099" in _screen_after("Gq")
