"""A small built-in pager for results taller than the terminal.

External pagers (``less``) would need the output piped through a subprocess and would not
see prompt-toolkit's pipe input in tests; a full-screen prompt-toolkit application keeps
paging testable and behaves the same on every platform.  Keys follow ``less``: Space /
PageDown / f forward a page, b / PageUp back, j / Down / Enter a line, k / Up back a line,
g / Home top, G / End bottom, Left / Right scroll sideways, q / Escape / Ctrl-C quit.
"""

from __future__ import annotations

from prompt_toolkit.application import Application
from prompt_toolkit.key_binding import KeyBindings
from prompt_toolkit.layout import HSplit, Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl


class Pager:
    """State of one paging session over ``lines`` (kept separate from the UI for tests)."""

    def __init__(self, lines: list[str], height: int, width: int) -> None:
        self.lines = lines
        self.height = max(1, height - 1)  # the last row is the status line
        self.width = max(10, width)
        self.top = 0
        self.left = 0

    @property
    def last_top(self) -> int:
        return max(0, len(self.lines) - self.height)

    def scroll(self, rows: int) -> None:
        self.top = min(self.last_top, max(0, self.top + rows))

    def shift(self, cols: int) -> None:
        longest = max((len(x) for x in self.lines), default=0)
        self.left = min(max(0, longest - self.width // 2), max(0, self.left + cols))

    def visible(self) -> list[str]:
        return [x[self.left:self.left + self.width] for x in self.lines[self.top:self.top + self.height]]

    def status(self) -> str:
        last = min(len(self.lines), self.top + self.height)
        where = "(END)" if last >= len(self.lines) else f"{100 * last // len(self.lines)}%"
        return f" lines {self.top + 1}-{last} of {len(self.lines)} {where}  q quit, space/b page, j/k line"


def page(lines: list[str], *, input=None, output=None) -> None:
    """Show ``lines`` until the analyst quits."""
    kb = KeyBindings()
    state: list[Pager] = []

    def pager() -> Pager:
        size = app.output.get_size()
        if not state:
            state.append(Pager(lines, size.rows, size.columns))
        p = state[0]
        p.height, p.width = max(1, size.rows - 1), max(10, size.columns)
        p.scroll(0)
        return p

    def bind(keys, action):
        for key in keys:
            kb.add(*key.split())(lambda event: action(pager()))

    bind(["space", "pagedown", "f", "c-f"], lambda p: p.scroll(p.height))
    bind(["b", "pageup", "c-b"], lambda p: p.scroll(-p.height))
    bind(["j", "down", "enter", "c-n", "e"], lambda p: p.scroll(1))
    bind(["k", "up", "c-p", "y"], lambda p: p.scroll(-1))
    bind(["g", "home", "<"], lambda p: p.scroll(-len(p.lines)))
    bind(["G", "end", ">"], lambda p: p.scroll(len(p.lines)))
    bind(["right"], lambda p: p.shift(p.width // 2))
    bind(["left"], lambda p: p.shift(-(p.width // 2)))

    @kb.add("q")
    @kb.add("Q")
    @kb.add("escape", eager=True)
    @kb.add("c-c")
    def _quit(event) -> None:
        event.app.exit()

    body = Window(FormattedTextControl(lambda: "\n".join(pager().visible())), wrap_lines=False)
    status = Window(FormattedTextControl(lambda: [("reverse", pager().status())]), height=1)
    app: Application = Application(layout=Layout(HSplit([body, status])), key_bindings=kb,
                                   full_screen=True, input=input, output=output)
    app.run(handle_sigint=False)


__all__ = ["Pager", "page"]
