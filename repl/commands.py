"""The shell's backslash meta-commands (``\\d``, ``\\budget``, ``\\plan``, ``\\measure``, …).

Each command is a method taking the argument text and returning whether it succeeded
(scripts stop at the first failure).  They reach dpsql only through the session's public
commands and the catalog of declared domains; ``\\measure`` always states what it would
spend and asks first, because a privacy charge cannot be taken back.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from collections.abc import Callable
from typing import Any, Protocol

from dpsql import errors
from dpsql import labels as wording
from dpsql.privacy.accountant import format_rho
from repl import render
from repl.remote import OPERATOR_ONLY, operator_only
from repl.statements import Meta, split_script


class ShellLike(Protocol):
    """What the meta-commands need from the shell (``repl.app.Shell`` provides it); a
    protocol, so that this module does not import the shell that imports it."""

    session: Any
    remote: bool
    interactive: bool
    table: str | None
    workload: list[str] | None
    workload_source: str
    timing: bool
    expanded: bool
    pager: bool
    vi: bool
    errors: str
    done: bool
    model_note: str
    csv_path: str | None

    def note(self, text: str) -> None: ...
    def emit(self, lines: list[str]) -> None: ...
    def work(self, fn: Callable[[], Any], label: str) -> Any: ...
    def show_error(self, exc: BaseException, sql: str | None = None, where: str | None = None) -> None: ...
    def confirm(self, question: str) -> bool: ...
    def set_vi(self, on: bool) -> None: ...
    def set_csv(self, path: str | None) -> None: ...
    def screen_columns(self) -> int: ...
    def catalog(self) -> Any: ...
    def ledger_entries(self) -> list: ...


@dataclass(frozen=True)
class Command:
    name: str
    usage: str
    help: str
    arg: str | None  # what completion offers for the argument


COMMANDS = [
    Command("d", "\\d [TABLE [COLUMN]]", "list tables, a table's columns, types and declared domains "
            "(long label lists summarised), or every label of one column", "table"),
    Command("budget", "\\budget", "budget spent and remaining (you, all users, per user) and ledger entries", None),
    Command("explain", "\\explain SQL", "compiled factors, supporting measurements, expected error, cost", "sql"),
    Command("workload", "\\workload [FILE]", "load the SQL statements to plan from FILE (show them without FILE)",
            "file"),
    Command("plan", "\\plan [TABLE]", "plan a measurement strategy for the workload (spends nothing)", "table"),
    Command("measure", "\\measure [-y] [TABLE]", "measure the planned strategy (states the cost and asks first)",
            "table"),
    Command("synth", "\\synth [-n ROWS] [--values] [--seed S] FILE",
            "write synthetic rows from the model to FILE (.csv or .parquet; spends nothing)", "file"),
    Command("timing", "\\timing [on|off]", "show how long each statement took", None),
    Command("x", "\\x [on|off]", "expanded display: one block per row", None),
    Command("o", "\\o [FILE]", "write query results to FILE as CSV (no FILE: back to the screen)", "file"),
    Command("errors", "\\errors ci95|stderr|off", "show 95% intervals, standard errors, or no error", "errors"),
    Command("set", "\\set [NAME VALUE]", "settings: vi, timing, expanded, errors, pager (no args: show all)", "set"),
    Command("help", "\\help", "this list", None),
    Command("q", "\\q", "quit (also Ctrl-D)", None),
]
ALIASES = {"?": "help", "h": "help", "quit": "q", "exit": "q", "dt": "d"}


def completion_table() -> dict[str, str | None]:
    """Command names (aliases included) and their argument kinds, for the completer."""
    kinds = {c.name: c.arg for c in COMMANDS}
    for alias, target in ALIASES.items():
        if alias.isalpha():
            kinds[alias] = kinds[target]
    return kinds


def _on_off(arg: str, current: bool, what: str) -> bool:
    word = arg.strip().lower()
    if not word:
        return not current
    if word in ("on", "true", "yes", "1"):
        return True
    if word in ("off", "false", "no", "0"):
        return False
    raise errors.ProgrammingError(f"{what} takes on or off, not {arg!r}", hint=f"e.g. \\{what} on")


def _wrap_list(items: list[str], width: int) -> list[str]:
    """Comma-separated items broken into lines of at most ``width`` characters where
    possible (a single word longer than ``width`` is never cut)."""
    return textwrap.wrap(", ".join(items), width, break_long_words=False, break_on_hyphens=False) or [""]


def describe_domain(attr, table: str | None = None, limit: int | None = wording.DESCRIBE_LIMIT) -> list[str]:
    """The declared domain of one attribute as display items (``dpsql.labels.domain_items``,
    the words of the wire catalog's column comments too)."""
    from repl.remote import RemoteColumn
    if isinstance(attr, RemoteColumn):   # a kind the wire client does not rebuild: the catalog's words
        return [attr.domain_text]
    return wording.domain_items(attr, limit, see_all=f"\\d {table or 'TABLE'} {attr.name} lists all")


def _type(attr) -> str:
    """The column's catalog type (the server's own for a column the client did not rebuild)."""
    return getattr(attr, "data_type", None) or wording.catalog_type(attr)


class MetaCommands:
    """Dispatches ``Meta`` commands to methods ``do_<name>``."""

    def __init__(self, shell: ShellLike) -> None:
        self.shell = shell

    def dispatch(self, meta: Meta) -> bool:
        name = ALIASES.get(meta.name, meta.name)
        if getattr(self.shell, "remote", False) and name in OPERATOR_ONLY:
            raise operator_only(f"\\{name}", OPERATOR_ONLY[name])
        handler: Callable[[str], bool] | None = getattr(self, f"do_{name}", None)
        if handler is None:
            raise errors.ProgrammingError(f"unknown command \\{meta.name}", hint="\\help lists the commands")
        return handler(meta.arg)

    # -- catalog -------------------------------------------------------------------------
    def do_d(self, arg: str) -> bool:
        catalog = self.shell.catalog()
        words = [w.strip('"') for w in arg.strip().rstrip(";").split()]
        name = words[0] if words else ""
        if len(words) > 2:
            raise errors.ProgrammingError("\\d takes a table and at most one column", hint="e.g. \\d adult sex")
        public = getattr(catalog, "public", {})
        if not name:
            rows = [(t, str(len(s.column_names)), f"{s.domain.size():,}") for t, s in sorted(catalog.items())]
            lines = ["Private tables"] + render.grid_lines(["table", "columns", "domain cells"], rows, right=(1, 2))
            if public:
                lines += ["", "Public tables (read exactly, at no privacy cost)"]
                lines += render.grid_lines(["table", "columns"], [(t, str(len(p.columns)))
                                                                  for t, p in sorted(public.items())], right=(1,))
            self.shell.emit(lines)
            return True
        if name not in catalog and name in public:
            return self._describe_public(public[name], words[1:])
        if name not in catalog:
            raise errors.UnknownTableError(f"table {name!r} is not a private table of this configuration",
                                           hint=f"tables: {', '.join(sorted(catalog) + sorted(public))}")
        schema = catalog[name]
        if len(words) == 2:
            return self._describe_column(name, schema, words[1])
        meta = []
        for col in schema.column_names:
            attr = schema.attribute(col)
            sql_type = _type(attr)   # the wire catalog's type too (one rule)
            meta.append(((col, sql_type, attr.kind, "yes" if attr.nullable else "no", f"{attr.size:,}"),
                         describe_domain(attr, name)))
        # wrap the domain column to what the screen has left beside the other columns
        used = sum(max(len(h), *(len(m[0][j]) for m in meta)) + 3
                   for j, h in enumerate(["column", "type", "kind", "null", "cells"]))
        width = max(20, min(100, self.shell.screen_columns() - used - 1))
        grid: list[tuple[str, ...]] = []
        for cells, domain in meta:
            items = _wrap_list(domain, width)
            grid.append(cells + (items[0],))
            grid += [("", "", "", "", "", more) for more in items[1:]]
        lines = [f"Table {name!r}: declared (public) domain of {schema.domain.size():,} cells"]
        lines += render.grid_lines(["column", "type", "kind", "null", "cells", "domain"], grid, right=(4,))
        open_columns = [c for c in schema.column_names if wording.is_open(schema.attribute(c))]
        if open_columns:
            names = ", ".join(repr(c) for c in open_columns)
            note = (f"(any other value): in {names}, every value that is not a declared label is "
                    "counted in one (other) cell per column, which no query can split (GROUP BY "
                    "shows it as '(other)').")
            lines += [""] + textwrap.wrap(note, max(40, self.shell.screen_columns() - 1))
        self.shell.emit(lines)
        return True

    def _describe_public(self, table, columns: list[str]) -> bool:
        """``\\d DIM [COLUMN]`` for a public table: its columns and their real types (public metadata)."""
        shown = [c for c in table.columns if not columns or c.name.lower() == columns[0].lower()]
        if not shown:
            raise errors.UnknownColumnError(f"table {table.name!r} has no column {columns[0]!r}",
                                            hint=f"columns: {', '.join(c.name for c in table.columns)}")
        lines = [f"Public table {table.name!r}: read exactly, at no privacy cost"]
        self.shell.emit(lines + render.grid_lines(["column", "type"], [(c.name, c.type) for c in shown]))
        return True

    def _describe_column(self, table: str, schema, column: str) -> bool:
        """``\\d TABLE COLUMN``: one column's whole declared domain, every label listed."""
        match = [c for c in schema.column_names if c == column] or \
            [c for c in schema.column_names if c.lower() == column.lower()]
        if not match:
            raise errors.UnknownColumnError(f"table {table!r} has no column {column!r}",
                                            hint=f"columns: {', '.join(schema.column_names)}")
        attr = schema.attribute(match[0])
        width = max(20, min(100, self.shell.screen_columns() - 1))
        head = f"Column {attr.name!r} of {table!r}: {_type(attr)}, {attr.kind}, {attr.size:,} cells"
        if attr.kind == "categorical":
            head += f", {len(wording.declared_labels(attr)):,} declared labels"
        lines = [head] + ["  " + line for line in _wrap_list(describe_domain(attr, table, limit=None), width - 2)]
        if wording.is_open(attr):
            lines += [""] + textwrap.wrap(wording.other_cell(attr) + ".", width)
        self.shell.emit(lines)
        return True

    # -- budget --------------------------------------------------------------------------
    def do_budget(self, arg: str) -> bool:
        from dpsql.privacy.accountant import rho_to_epsilon

        b = self.shell.session.budget()
        delta = float(b["delta"])
        if getattr(self.shell, "remote", False):
            return self._remote_budget(b, delta)

        def eps(rho) -> str:
            rho = float(rho)
            return f"{rho_to_epsilon(rho, delta):.4g}" if rho > 0 else "0"

        lines = [f"Budget (ε at δ = {delta:g})"]
        lines += render.grid_lines(
            ["who", "spent ρ", "remaining ρ", "remaining ε"],
            [(f"you ({b['user']})", format_rho(b["spent_rho"], "up"), format_rho(b["remaining_rho"], "down"),
              eps(b["remaining_rho"])),
             ("all users", format_rho(b["total_spent_rho"], "up"), format_rho(b["total_remaining_rho"], "down"),
              eps(b["total_remaining_rho"]))], right=(1, 2, 3))
        charges = [e for e in self.shell.ledger_entries() if e.kind == "charge"]
        per_user: dict[str, list] = {}
        for e in charges:
            per_user.setdefault(e.principal or "?", []).append(Fraction(e.rho or 0))
        if per_user:
            lines += ["", "Spent per user"]
            lines += render.grid_lines(["user", "charges", "spent ρ"],
                                       [(u, str(len(v)), format_rho(sum(v, Fraction(0)), "up"))
                                        for u, v in sorted(per_user.items())],
                                       right=(1, 2))
            lines += ["", "Ledger charges"]
            lines += render.grid_lines(
                ["#", "when", "user", "ρ", "purpose"],
                [(str(e.seq), str(e.created)[:19], e.principal or "", format_rho(Fraction(e.rho or 0), "up"),
                  str((e.mechanism or {}).get("purpose", ""))) for e in charges], right=(0, 3))
        else:
            lines += ["", "The ledger has no charges yet."]
        self.shell.emit(lines)
        return True

    def _remote_budget(self, b: dict, delta: float) -> bool:
        """``\\budget`` over the wire: ``dpsql_budget()``, what remains (the ledger's charges
        are the operator's)."""
        def num(x, fmt: str) -> str:
            return "-" if x is None else format(x, fmt)
        lines = [f"Budget (ε at δ = {delta:g}), from the server's dpsql_budget()"]
        lines += render.grid_lines(
            ["who", "remaining ρ", "remaining ε"],
            [(f"you ({b['user']})", num(b["remaining_rho"], ".6g"), num(b["remaining_epsilon"], ".4g")),
             ("all users", num(b["total_remaining_rho"], ".6g"), num(b["total_remaining_epsilon"], ".4g"))],
            right=(1, 2))
        if b.get("next_rho") is not None:
            lines += ["", f"The next on-demand measurement (policy measure) costs ρ = {b['next_rho']:.6g} "
                          f"(ε = {b['next_epsilon']:.4g})."]
        lines += ["", "Spending per user and the ledger's charges are the operator's (dpsql budget)."]
        self.shell.emit(lines)
        return True

    # -- explain, workload, plan, measure -------------------------------------------------
    def do_explain(self, arg: str) -> bool:
        sql = arg.strip().rstrip(";").strip()
        if not sql:
            raise errors.ProgrammingError(
                "\\explain needs a query", hint="e.g. \\explain SELECT sex, COUNT(*) FROM adult GROUP BY sex")
        try:
            text = self.shell.work(lambda: self.shell.session.explain(sql), "explaining")
        except errors.Error as exc:
            self.shell.show_error(exc, sql)
            return False
        self.shell.emit(str(text).splitlines())
        return True

    def do_workload(self, arg: str) -> bool:
        path = arg.strip()
        if not path:
            if self.shell.workload is None:
                self.shell.note("Workload: the configuration's [workload] (load another with \\workload FILE)")
            else:
                self.shell.emit([f"Workload: {len(self.shell.workload)} statements from {self.shell.workload_source}"]
                                + [f"  {q}" for q in self.shell.workload])
            return True
        file = Path(os.path.expanduser(path))
        try:
            text = file.read_text(encoding="utf-8")
        except OSError as exc:
            raise errors.InterfaceError(f"cannot read workload file {path}: {exc.strerror or exc}") from None
        queries = [it.text for it in split_script(text) if it.kind == "sql"]
        if not queries:
            raise errors.ProgrammingError(f"{path} holds no SQL statements", hint="statements end with ;")
        self.shell.workload = queries
        self.shell.workload_source = str(file)
        self.shell.note(f"Loaded {len(queries)} statements from {file}; \\plan plans them, \\measure measures.")
        return True

    def do_plan(self, arg: str) -> bool:
        table = arg.strip() or self.shell.table
        queries = self.shell.workload
        report = self.shell.work(lambda: self.shell.session.plan(table, queries=queries), "planning")
        s = report.strategy
        lines = [f"Strategy for table {report.table}: {s.operator}, "
                 f"{len(s.blocks)} measurement blocks, planned in {render.describe_seconds(report.seconds)}"]
        if s.explanation:
            lines += str(s.explanation).splitlines()
        lines += report.part_lines()       # a mixed workload's two releases and their shares
        units = getattr(report, "units", ())
        # one line per unit (counts, quantiles, each SUM's column): never an average of
        # counts with minutes (issue 29 item 6)
        errors_by_unit = [(f"expected RMSE [{u.unit}]", f"{u.rmse:,.2f} per row over {u.rows:,} rows "
                           f"(baseline {u.baseline:,.2f}: each query on its own, budget split evenly)")
                          for u in units] or [
            ("expected RMSE", f"{report.rmse:,.2f} per query row"),
            ("baseline RMSE", f"{report.baseline_rmse:,.2f} (each query on its own, budget split evenly)")]
        lines += render.kv_lines([
            ("workload", f"{report.queries} queries, {report.rows:,} linear query rows"),
            ("budget", f"ρ = {report.rho:.6g}"),
        ] + errors_by_unit + ([("lower bound", f"{report.bound_rmse:,.2f} (SVD bound"
                + ("" if report.bound_exact else " of the marginal queries alone")
                + (f", over all rows with units mixed, against {report.rmse:,.2f} planned"
                   if len(units) > 1 else "")
                + "; no strategy does better with unbiased answers)")]
             if report.bound_rmse is not None else [])
            + ([("AIM or HDMM", report.advice)] if report.advice else []))
        lines += report.per_query_lines()
        self.shell.emit(lines)
        return True

    def do_measure(self, arg: str) -> bool:
        from dpsql.privacy.accountant import rho_to_epsilon

        words = arg.split()
        yes = any(w in ("-y", "--yes") for w in words)
        rest = [w for w in words if w not in ("-y", "--yes")]
        table = rest[0] if rest else self.shell.table
        session = self.shell.session
        rho = Fraction(session.measure_cost(table))
        budget = session.budget()
        delta = float(budget["delta"])
        eps = rho_to_epsilon(rho, delta) if rho > 0 else 0.0
        remaining = budget["total_remaining_rho"]
        cost = (f"Measuring the workload spends ρ = {format_rho(rho, 'up')} (ε = {eps:.4g} at δ = {delta:g}) "
                f"of the ρ = {format_rho(remaining, 'down')} left in total (the workload budget, not your own cap).")
        if not yes:
            if not self.shell.interactive:
                raise errors.ProgrammingError(
                    f"\\measure would spend ρ = {format_rho(rho, 'up')}; a script must confirm it explicitly",
                    hint="write \\measure -y to spend the budget without asking")
            self.shell.note(cost)
            if not self.shell.confirm("Measure now? [y/N] "):
                self.shell.note("Nothing measured; nothing spent.")
                return True
        report = self.shell.work(lambda: session.measure(table), "measuring")
        if report.reused:
            self.shell.note("Already measured: re-using the released measurements (nothing spent).")
        else:
            self.shell.note(f"Measured {report.blocks} blocks ({report.cells:,} cells) on {report.table}: "
                            f"spent ρ = {format_rho(report.rho, 'up')} in {render.describe_seconds(report.seconds)}.")
        self.shell.model_note = "refit on next query"
        # Fit and save the model now (issue 17): later queries here, other shells, server
        # connections and new processes load it instead of fitting.  Ctrl-C leaves the fit
        # to the next query; the measurement is recorded either way.
        self.shell.work(lambda: session.prepare_model(table), "fitting the model")
        self.shell.model_note = ""
        return True

    def do_synth(self, arg: str) -> bool:
        from dpsql.measure.export import write_rows

        words = arg.split()
        rows = seed = None
        numbers = "label"
        files = []
        i = 0
        while i < len(words):
            w = words[i]
            if w in ("-n", "--rows", "--seed") and i + 1 < len(words):
                try:
                    value = int(words[i + 1])
                except ValueError:
                    raise errors.ProgrammingError(f"{w} takes a whole number, not {words[i + 1]!r}",
                                                  hint="e.g. \\synth -n 1000 out.csv") from None
                if w == "--seed":
                    seed = value
                else:
                    rows = value
                i += 2
                continue
            if w == "--values":
                numbers = "value"
            elif w == "--labels":
                numbers = "label"
            else:
                files.append(w)
            i += 1
        if len(files) != 1:
            raise errors.ProgrammingError("\\synth needs one output file",
                                          hint="e.g. \\synth -n 1000 synthetic.csv (or .parquet)")
        session = self.shell.session
        table = self.shell.work(lambda: session.synthetic(self.shell.table, rows, numbers=numbers,
                                                          seed=seed), "sampling")
        path = self.shell.work(lambda: write_rows(os.path.expanduser(files[0]), table.columns, table.rows),
                               "writing")
        self.shell.note(f"Wrote {len(table.rows):,} synthetic rows of {table.table} to {path} "
                        f"(drawn from the model: post-processing, nothing spent).")
        return True

    # -- display settings ----------------------------------------------------------------
    def do_timing(self, arg: str) -> bool:
        self.shell.timing = _on_off(arg, self.shell.timing, "timing")
        self.shell.note(f"Timing is {'on' if self.shell.timing else 'off'}.")
        return True

    def do_x(self, arg: str) -> bool:
        self.shell.expanded = _on_off(arg, self.shell.expanded, "x")
        self.shell.note(f"Expanded display is {'on' if self.shell.expanded else 'off'}.")
        return True

    def do_errors(self, arg: str) -> bool:
        mode = arg.strip().lower()
        if mode not in render.ERROR_MODES:
            raise errors.ProgrammingError(f"\\errors takes ci95, stderr or off, not {arg!r}",
                                          hint="ci95: ± half-width of the 95% interval; stderr: ± one standard error")
        self.shell.errors = mode
        self.shell.note(f"Errors shown as {mode}.")
        return True

    def do_o(self, arg: str) -> bool:
        self.shell.set_csv(arg.strip() or None)
        return True

    def do_set(self, arg: str) -> bool:
        parts = arg.split(None, 1)
        if not parts:
            s = self.shell
            self.shell.emit(render.kv_lines([
                ("vi", "on" if s.vi else "off"), ("timing", "on" if s.timing else "off"),
                ("expanded", "on" if s.expanded else "off"), ("errors", s.errors),
                ("pager", "on" if s.pager else "off"), ("output", s.csv_path or "screen")]))
            return True
        name, value = parts[0].lower(), (parts[1] if len(parts) > 1 else "")
        if name == "vi":
            self.shell.set_vi(_on_off(value, self.shell.vi, "set vi"))
            self.shell.note(f"Vi mode is {'on' if self.shell.vi else 'off'}.")
            return True
        if name == "pager":
            self.shell.pager = _on_off(value, self.shell.pager, "set pager")
            self.shell.note(f"Pager is {'on' if self.shell.pager else 'off'}.")
            return True
        if name in ("timing", "x", "expanded", "errors"):
            target = {"expanded": "x"}.get(name, name)
            return getattr(self, f"do_{target}")(value)
        raise errors.ProgrammingError(f"unknown setting {name!r}", hint="settings: vi, timing, expanded, errors, pager")

    def do_help(self, arg: str) -> bool:
        w = max(len(c.usage) for c in COMMANDS)
        lines = ["SQL statements end with ;  (Enter inside a statement starts a new line)."]
        lines += [f"  {c.usage.ljust(w)}  {c.help}" for c in COMMANDS]
        lines += ["Keys: Tab completes; Ctrl-C cancels the running statement or clears the line;",
                  "Ctrl-D quits; Ctrl-R searches the history; Alt-Enter submits at once."]
        self.shell.emit(lines)
        return True

    def do_q(self, arg: str) -> bool:
        self.shell.done = True
        return True


__all__ = ["MetaCommands", "COMMANDS", "ALIASES", "completion_table", "describe_domain"]
