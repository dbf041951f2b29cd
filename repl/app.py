"""The ``Shell``: a prompt-toolkit session over one dpsql connection.

The loop reads a buffer until every statement in it ends with ``;`` (a meta-command ends
at Enter), runs each item, and prints the private answers as aligned tables with their
error bounds.  The same ``Shell`` runs scripts (``-c`` / ``-f``) with ``interactive=False``:
no prompt, no pager, no spinner, and the first error stops the script.

The bottom toolbar shows who is querying, what budget they have left (ρ, and ε at the
configured δ) and which model version answered last, because in a DP engine the budget
is the one resource an analyst must watch while working.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from collections.abc import Callable
from typing import IO, Any, TypeVar

from prompt_toolkit import PromptSession
from prompt_toolkit.enums import EditingMode
from prompt_toolkit.filters import Condition, completion_is_selected
from prompt_toolkit.history import FileHistory, History, InMemoryHistory
from prompt_toolkit.key_binding import KeyBindings

from dpsql import errors
from dpsql.privacy.accountant import format_rho
from repl import render, work
from repl.commands import MetaCommands, completion_table
from repl.completion import SqlCompleter
from repl.lexer import STYLE, SqlLexer
from repl.statements import Item, is_complete, parse_meta, split_script

T = TypeVar("T")


def history_path() -> Path:
    """``$DPSQL_HISTORY``, else ``$XDG_DATA_HOME/dpsql/history`` (``~/.local/share`` by default)."""
    explicit = os.environ.get("DPSQL_HISTORY")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "dpsql" / "history"


def _open_history(path: Path | None) -> History:
    """A file history, or an in-memory one when the data directory cannot be written
    (a read-only home must not stop the analyst from working)."""
    if path is None:
        return InMemoryHistory()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch(exist_ok=True)
    except OSError:
        return InMemoryHistory()
    return FileHistory(str(path))


class Shell:
    """One analyst's shell.  ``input``/``output`` are prompt-toolkit objects (pipe input and a
    dummy output in tests); ``out`` receives results and ``err`` errors."""

    def __init__(self, connection, *, out: IO[str] | None = None, err: IO[str] | None = None,
                 input=None, output=None, interactive: bool = True, vi: bool = False,
                 errors_mode: str = "ci95", pager: bool = True, timing: bool = True,
                 history: Path | None | str = "default", table: str | None = None) -> None:
        self.connection = connection
        self.session = connection.session
        # a client of dpsql serve (repl.remote): the analyst's shell, no operator powers
        self.remote = bool(getattr(connection, "remote", False))
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else (out if out is not None else sys.stderr)
        self.input = input
        self.output = output
        self.interactive = interactive
        self.vi = vi
        self.errors = errors_mode
        self.pager = pager
        self.timing = timing
        self.expanded = False
        self.done = False
        self.table = table  # default for \plan and \measure (None: the only table)
        self.workload: list[str] | None = None
        self.workload_source = ""
        self.csv_path: str | None = None
        self.model_version: int | None = None
        self.model_kind = ""
        self.model_note = ""
        self._budget: tuple[float, float, float] | None = None
        self.commands = MetaCommands(self)
        self._progress: tuple[str, dict] | None = None
        engine = self.session.engine
        self._unlisten = engine.add_listener(self._on_progress) if hasattr(engine, "add_listener") else None
        self._plain_answers()
        self.refresh_status()
        self.prompt_session: PromptSession | None = None
        if interactive:
            hist = _open_history(history_path() if history == "default" else
                                 (Path(history) if history is not None else None))
            self.prompt_session = self._make_prompt(hist)

    # -- setup ---------------------------------------------------------------------------
    def _plain_answers(self) -> None:
        """The shell prints each value with its error itself, so the engine must not add
        separate error columns to the rows."""
        if self.session.settings.get("dpsql.error_columns", "off") != "off":
            self.connection.cursor().execute("SET dpsql.error_columns = 'off'")

    def catalog(self):
        return self.session.catalog() if self.remote else self.session.engine.catalog

    def ledger_entries(self) -> list:
        if self.remote:
            from repl.remote import operator_only
            raise operator_only("reading the ledger", "the ledger's charges are the operator's record")
        return list(self.session.engine.ledger.entries())

    def _make_prompt(self, history: History) -> PromptSession:
        kb = KeyBindings()
        def complete_now() -> bool:
            assert self.prompt_session is not None   # set to the session built here
            return is_complete(self.prompt_session.default_buffer.text)

        complete = Condition(complete_now)

        @kb.add("enter", filter=completion_is_selected)
        def _take_completion(event) -> None:
            # Enter on a highlighted completion keeps it and closes the menu, as in editors;
            # it must not run or break the statement
            event.current_buffer.complete_state = None

        @kb.add("enter", filter=complete & ~completion_is_selected)
        def _submit(event) -> None:
            event.current_buffer.validate_and_handle()

        return PromptSession(
            message=[("class:prompt", "dpsql=> ")], multiline=True,
            prompt_continuation=lambda width, line, wrap: [("class:prompt", "...> ".rjust(width))],
            lexer=SqlLexer(), completer=SqlCompleter(self.catalog, completion_table()),
            complete_while_typing=False, history=history, key_bindings=kb, style=STYLE,
            bottom_toolbar=self.toolbar, editing_mode=EditingMode.VI if self.vi else EditingMode.EMACS,
            include_default_pygments_style=False, input=self.input, output=self.output,
            enable_history_search=False, search_ignore_case=True)

    def set_vi(self, on: bool) -> None:
        self.vi = on
        if self.prompt_session is not None:
            self.prompt_session.editing_mode = EditingMode.VI if on else EditingMode.EMACS

    # -- status --------------------------------------------------------------------------
    def refresh_status(self) -> None:
        """Re-read the budget after each statement; the toolbar is redrawn on every key
        press and must not query the ledger or convert ρ to ε each time."""
        from dpsql.privacy.accountant import rho_to_epsilon

        try:
            b = self.session.budget()
            rho, delta = b["remaining_rho"], float(b["delta"])   # ρ exact (a Fraction)
            eps = b.get("remaining_epsilon")    # the server's (dpsql_budget), as dpsql budget rounds it
            self._budget = (rho, delta, eps if eps is not None else rho_to_epsilon(rho, delta) if rho > 0 else 0.0)
        except (errors.Error, KeyError, TypeError):
            self._budget = None

    def toolbar(self):
        parts = [("class:bottom-toolbar.key", " user "), ("", str(self.session.user))]
        if self._budget is None:
            parts += [("class:bottom-toolbar.key", "  budget "), ("", "unavailable")]
        else:
            rho, delta, eps = self._budget
            style = "class:bottom-toolbar.warn" if rho <= 0 else ""
            parts += [("class:bottom-toolbar.key", "  left "),
                      (style, f"ε={eps:.4g} (δ={delta:g}) ρ={format_rho(rho, 'down', 4)}")]
        if self.remote:   # the server's model answers; where it runs is what the analyst knows
            parts += [("class:bottom-toolbar.key", "  server "), ("", str(getattr(self.connection, "where", "")))]
        else:
            model = f"v{self.model_version}" if self.model_version else "none yet"
            if self.model_kind:
                model += f" {self.model_kind}"
            if self.model_note:
                model += f" ({self.model_note})"
            parts += [("class:bottom-toolbar.key", "  model "), ("", model)]
        parts += [("class:bottom-toolbar.key", "  errors "), ("", self.errors),
                  ("class:bottom-toolbar.key", "  keys "), ("", "vi" if self.vi else "emacs"), ("", " ")]
        return parts

    # -- output --------------------------------------------------------------------------
    def _write(self, stream: IO[str], lines: list[str]) -> None:
        stream.write("\n".join(lines) + "\n")
        stream.flush()

    def note(self, text: str) -> None:
        self._write(self.out, [text])

    def emit(self, lines: list[str]) -> None:
        """Print ``lines``, through the pager when they would not fit on the screen."""
        if self.interactive and self.pager and len(lines) > self._screen_rows() - 2:
            from repl.pager import page
            page(lines, input=self.input, output=self.output)
            return
        self._write(self.out, lines)

    def _screen_rows(self) -> int:
        if self.prompt_session is not None:
            return self.prompt_session.app.output.get_size().rows
        return 10 ** 9

    def screen_columns(self) -> int:
        """The terminal's width (80 for scripts, whose output may go anywhere)."""
        if self.prompt_session is not None:
            return self.prompt_session.app.output.get_size().columns
        return 80

    def show_error(self, exc: BaseException, sql: str | None = None, where: str | None = None) -> None:
        lines = render.error_lines(exc, sql)
        if where:
            lines.append(f"({where})")
        self._write(self.err, lines)

    def confirm(self, question: str) -> bool:
        """Ask a yes/no question; anything but yes (including Ctrl-C) is no."""
        asker: PromptSession = PromptSession(input=self.input, output=self.output)
        try:
            answer = asker.prompt(question)
        except (KeyboardInterrupt, EOFError):
            return False
        return answer.strip().lower() in ("y", "yes")

    def set_csv(self, path: str | None) -> None:
        if path is None:
            if self.csv_path:
                self.note(f"Results go to the screen again (was {self.csv_path}).")
            self.csv_path = None
            return
        target = Path(os.path.expanduser(path))
        try:
            target.write_text("", encoding="utf-8")
        except OSError as exc:
            raise errors.InterfaceError(f"cannot write {path}: {exc.strerror or exc}") from None
        self.csv_path = str(target)
        self.note(f"Query results now go to {target} as CSV (\\o alone to stop).")

    # -- running -------------------------------------------------------------------------
    def _on_progress(self, stage: str, info: dict) -> None:
        self._progress = None if info.get("done") else (stage, info)

    def _status(self) -> str | None:
        from dpsql.display import describe_progress
        current = self._progress
        return None if current is None else describe_progress(*current)

    def work(self, fn: Callable[[], T], label: str) -> T:
        self._progress = None
        return work.run(fn, label, input=self.input, output=self.output, interactive=self.interactive,
                        status=self._status)

    def _spend_note(self, request) -> str:
        return (f"Answering needs a new measurement of {request.what} that spends ρ = "
                f"{format_rho(request.rho, 'up')} (ε = {request.epsilon:.4g} at δ = {request.delta:g}) "
                f"of your remaining ρ = {format_rho(request.remaining_rho, 'down')}.")

    def run_sql(self, sql: str, where: str | None = None) -> bool:
        approved: list = []   # the ρ the user agreed to (exact)

        def approve(request) -> bool:
            # runs in the work thread: the question is asked by the main thread (the spinner
            # owns the terminal), then the statement is run again with the answer
            if approved and request.rho <= approved[0] * (1 + 1e-9):
                return True
            raise _NeedsApproval(request)

        while True:
            cursor = self.connection.cursor()  # a fresh cursor: a cancelled run may still hold the old one
            previous = self.session.approve
            if self.interactive:
                self.session.approve = approve
            try:
                label = "fitting the model and answering" if self.model_note else "answering"
                # this iteration's cursor, bound now: a cancelled run's thread must not pick up the next one
                def execute(cur: Any = cursor) -> Any:
                    return cur.execute(sql).result

                result = self.work(execute, label)
                break
            except _NeedsApproval as ask:
                self.note(self._spend_note(ask.request))
                if not self.confirm("Spend it? [y/N] "):
                    self.note("Nothing measured; nothing spent.")
                    return False
                approved[:] = [ask.request.rho]
            except errors.Error as exc:
                self.show_error(exc, sql, where)
                return False
            finally:
                if self.interactive:
                    self.session.approve = previous
        version = result.model_version
        if version:
            if version != self.model_version:
                self.model_note = ""
            self.model_version = version
            self.model_kind = result.model or self.model_kind
        if self.csv_path and result.columns:
            with open(self.csv_path, "a", encoding="utf-8", newline="") as fh:
                if fh.tell() > 0:
                    fh.write("\n")
                n = render.write_csv(result, fh)
            self.note(f"({n} row{'' if n == 1 else 's'} written to {self.csv_path})")
            return True
        self.emit(render.result_lines(result, self.errors, expanded=self.expanded, timing=self.timing))
        return True

    def run_item(self, item: Item, where: str | None = None) -> bool:
        try:
            if item.kind == "meta":
                return self.commands.dispatch(parse_meta(item.text))
            return self.run_sql(item.text, where)
        except (work.Cancelled, KeyboardInterrupt):
            if self.remote:   # the server cancels the statement (57014), as psql's Ctrl-C does
                self.connection.cancel()
            self._write(self.err, ["Cancelled (any work still running finishes in the background; "
                                   "its result is discarded)."])
            return False
        except errors.Error as exc:
            self.show_error(exc, where=where)
            return False
        except Exception as exc:  # noqa: BLE001 - an engine bug must not end the session
            lines = [f"INTERNAL ERROR: {type(exc).__name__}: {exc}",
                     "HINT: this is a bug in dpsql, not in your query; please report it"]
            if where:
                lines.append(f"({where})")
            self._write(self.err, lines)
            return False
        finally:
            self.refresh_status()

    def run_text(self, text: str, *, source: str | None = None, stop_on_error: bool = False) -> bool:
        """Run every statement and meta-command in ``text``; False if any failed."""
        ok = True
        for item in split_script(text):
            where = None
            if source:
                where = f"{source}, line {text.count(chr(10), 0, item.offset) + 1}"
            if not self.run_item(item, where):
                ok = False
                if stop_on_error:
                    break
            if self.done:
                break
        return ok

    def run(self) -> int:
        """The interactive loop; returns the exit code."""
        if self.prompt_session is None:
            raise errors.InterfaceError("this shell was created for scripts",
                                        hint="create it with interactive=True")
        self.note("dpsql shell: SQL ends with ;   \\help for commands, \\q to quit")
        while not self.done:
            try:
                text = self.prompt_session.prompt()
            except KeyboardInterrupt:
                continue
            except EOFError:
                break
            self.run_text(text)
        return 0

    def close(self) -> None:
        if self._unlisten is not None:
            self._unlisten()
        self.connection.close()


class _NeedsApproval(Exception):
    """Raised in the work thread when a statement would spend: the shell asks, then re-runs."""

    def __init__(self, request) -> None:
        super().__init__("spending needs approval")
        self.request = request


__all__ = ["Shell", "history_path"]
