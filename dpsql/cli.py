"""The ``dpsql`` command line.

    dpsql init data.csv                 draft a config from the file's *schema* only
    dpsql init --postgres URL --table T / --spark MASTER --table T / 'lake/*.parquet'
                                        the same from a PostgreSQL or Spark catalog
    dpsql plan    [--config C] [--epsilon E [--delta D] | --rho R]
                                        plan the workload's measurement strategy (free: spends
                                        nothing, never creates or opens the ledger)
    dpsql check   [--config C]          operator data check of the sources (local only)
    dpsql measure [--config C] [--yes] [--mode hdmm|aim]
                                        check, measure (spends budget; asks first), then fit
                                        and save the model so later processes load it
    dpsql synth   [--config C] --rows N --out FILE
                                        synthetic rows from the model (spends nothing)
    dpsql query   [--config C] "SQL"    answer a query from the model
    dpsql budget  [--config C]          spent and remaining budget, ledger entries
    dpsql demo                          the adult example end to end
    dpsql shell / serve / user          registered by repl/ and dpsql/server/

Subcommands of other packages register themselves through ``register(subparsers)`` hooks
so each front end owns its own code.
"""

from __future__ import annotations

import argparse
import errno
import importlib
import os
import sys
import time
from fractions import Fraction
from pathlib import Path

from dpsql import errors
from dpsql.display import (BOUNDED_NOTE, INFERRED_NOTE, Z95, has_bounded, describe_progress, format_value,  # noqa: F401  (part of this module's API)
                           table_lines)
from dpsql.privacy.accountant import format_rho

DEFAULT_CONFIG = "dpsql.toml"


def _config_path(args) -> str:
    return args.config or os.environ.get("DPSQL_CONFIG") or DEFAULT_CONFIG


def _print_error(exc: errors.Error) -> None:
    print(f"ERROR [{exc.sqlstate}]: {exc.message}", file=sys.stderr)
    if exc.detail:
        print(f"DETAIL: {exc.detail}", file=sys.stderr)
    operator = getattr(exc, "operator_detail", None)   # set on source errors only (measure/counting.py)
    if operator:
        # The command line is the operator's own (docs/privacy.md, threat model): a source
        # error's own message is shown here, never to analysts over the wire.
        print(f"DETAIL (operator only): {operator}", file=sys.stderr)
    if exc.hint:
        print(f"HINT: {exc.hint}", file=sys.stderr)


def print_result(result, out=None, mode: str = "ci95") -> None:
    """The shell's table (``dpsql.display.table_lines``: one display rule everywhere).
    ``out`` defaults to the current ``sys.stdout`` (not the one at import: a caller that
    redirects it, such as ``contextlib.redirect_stdout``, gets the table)."""
    out = out if out is not None else sys.stdout
    if result.message and not result.columns:
        print(result.message, file=out)
        return
    for line in table_lines(result, mode):
        print(line, file=out)
    n = len(result.rows)
    print(f"({n} row{'s' if n != 1 else ''})", file=out)
    if any(result.inferred):
        print(INFERRED_NOTE, file=out)
    if has_bounded(result) and mode != "off":
        print(BOUNDED_NOTE, file=out)
    for note in getattr(result, "notes", ()):
        print(note, file=out)


# -- progress ------------------------------------------------------------------------------

class StatusLine:
    """Progress of planning, measuring and fitting on stderr: one line rewritten in place on
    a terminal; elsewhere (scripts, pipes, logs) a line when a stage starts and when it is
    done, so no step that takes seconds is silent (issue 35: ``dpsql measure`` printed
    nothing for 2.5 minutes before its prompt).  Every line is public: stage names, counts
    of blocks and cells, iterations and the fit's loss on released (noisy) measurements."""

    def __init__(self, stream=None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.live = bool(getattr(self.stream, "isatty", lambda: False)())
        self._last = 0.0
        self._shown = False
        self._stage: str | None = None

    def __call__(self, stage: str, info: dict) -> None:
        if not self.live:
            # a stage's first event and its end; an end alone (a model loaded from disk) was
            # not a step that took time
            done = bool(info.get("done", False))
            if (stage != self._stage and not done) or (done and stage == self._stage):
                self.stream.write(describe_progress(stage, info) + "\n")
                self.stream.flush()
            self._stage = None if done else stage
            return
        now = time.monotonic()
        done = info.get("done", False)
        if not done and now - self._last < 0.2:
            return
        self._last = now
        text = describe_progress(stage, info)
        self.stream.write("\r\x1b[2K" + text + ("\n" if done else ""))
        self.stream.flush()
        self._shown = not done

    def clear(self) -> None:
        if self.live and self._shown:
            self.stream.write("\r\x1b[2K")
            self.stream.flush()
            self._shown = False


# -- subcommands ----------------------------------------------------------------------------

def cmd_init(args) -> int:
    """Draft a config from a data file's schema (CSV, Parquet, DuckDB) or public metadata
    (SmartNoise YAML, ``*-domain.json``); domains the metadata does not give are left for
    the operator: they must come from public documentation, never from the rows."""
    from dpsql import draft

    if args.postgres or args.spark or (args.source and _is_parquet_set(args.source)):
        return _init_from_catalog(args)
    if not args.source:
        raise errors.ConfigError("dpsql init needs a data file, --postgres URL --table T, or --spark MASTER",
                                 hint="e.g. dpsql init people.csv, or dpsql init --postgres "
                                      "postgresql://dpsql@db/hr --table public.people")
    table = draft.from_file(Path(args.source), args.table)
    out, domain_file, missing = draft.write(table, Path(args.output or "dpsql.toml"), force=args.force)
    print(f"wrote {out} and {domain_file} (table {table.name}, {len(table.columns)} columns, "
          f"from {table.origin})")
    if missing:
        print(f"still to fill in from public documentation ({len(missing)} item"
              f"{'s' if len(missing) != 1 else ''}, marked TO FILL in {domain_file.name}):")
        for item in missing:
            print(f"  - {item}")
    else:
        print("the domain is complete; add workload queries, then run `dpsql plan`")
    return 0


def _is_parquet_set(arg: str) -> bool:
    """A Parquet glob or a directory of Parquet files (a single file is read as before)."""
    return any(c in arg for c in "*?[") or Path(arg).is_dir()


def _init_from_catalog(args) -> int:
    """``dpsql init`` for a PostgreSQL table, a Spark table or Parquet files (a glob or a
    directory): column names and types from the engine's catalog or the file footers, never
    from rows; domains are left for the operator to declare from public knowledge."""
    from dpsql import draft
    from dpsql.measure.catalog import describe
    from dpsql.measure.source import Source

    if args.postgres:
        if not args.table:
            raise errors.ConfigError("--postgres needs --table SCHEMA.TABLE")
        spec = {"postgres": args.postgres, "table": args.table, "data_version": "1"}
        origin = f"the catalog of PostgreSQL table {args.table}"
    elif args.spark:
        if bool(args.table) == bool(args.source):
            raise errors.ConfigError("--spark needs --table DB.TABLE or a Parquet path (not both)")
        spec = {"spark": args.spark, **({"table": args.table} if args.table else {"parquet": args.source})}
        origin = f"Spark's schema of {'table ' + args.table if args.table else args.source}"
    else:
        spec = {"parquet": args.source}
        origin = f"the Parquet footers of {args.source}"
    if args.hive:
        spec["hive_partitioning"] = True
    source = Source.from_config(spec, Path.cwd(), "dpsql init")   # refuses a password in the URL
    if "parquet" in spec and "://" not in spec["parquet"]:
        spec["parquet"] = str(Path(spec["parquet"]).resolve()) if args.spark else str(source.path)
    columns, left_out = [], []
    for name, sql_type, kind in describe(source):
        if kind == "boolean":
            columns.append(draft.ColumnDraft(name, "categorical", {"labels": ["true", "false"], "nullable": True}))
        elif kind == "other":
            left_out.append(f"{name} ({sql_type})")
        else:
            columns.append(draft._typed(name, kind))
    default = (args.table or Path(args.source.split("*")[0].rstrip("/") or "data").name or "data").split(".")[-1]
    table = draft.TableDraft(draft.table_name(args.name or default), spec, columns, origin)
    out, domain_file, missing = draft.write(table, Path(args.output or "dpsql.toml"), force=args.force)
    print(f"wrote {out} and {domain_file} (table {table.name}, {len(columns)} columns, from {origin})")
    if left_out:
        print("left out (no domain column reads these types; cast them to text or a number in a view): "
              + ", ".join(left_out))
    if missing:
        print(f"still to fill in from public documentation ({len(missing)} items, marked TO FILL in "
              f"{domain_file.name})")
    if args.postgres:
        print("data_version = \"1\": bump it whenever the table changes, or replace it by a version_query; "
              "credentials come from PGPASSWORD, PGPASSFILE or ~/.pgpass, never from dpsql.toml")
    return 0


def _connect(args):
    import gc

    import dpsql
    con = dpsql.connect(_config_path(args), user=args.user)
    # Every module of the command is imported now, and those objects live until exit: out of
    # the collector's sight, its full passes no longer rescan them (0.1 of 0.73 CPU-s of a
    # one-shot `dpsql query` went to scanning them, issue 35).  Later objects are collected
    # as before.
    gc.freeze()
    status = StatusLine()
    con.session.engine.add_listener(status)
    return con, status


def _plan_budget(args, config) -> tuple[Fraction | None, str]:
    """The ρ to plan at (None: the configured workload budget) and a line naming it in the
    operator's words: ``--epsilon E [--delta D]`` or ``--rho R``, read as the configuration
    reads a budget (ρ never above what was asked; ``BudgetSpec``)."""
    from dpsql.privacy.accountant import budget_rho, epsilon_delta_to_rho, rho_to_epsilon
    configured = (config.workload_budget or config.budget)
    where = "[workload]" if config.workload_budget else "[budget]"
    if args.delta is not None and args.epsilon is None:
        raise errors.ProgrammingError("--delta is the δ of --epsilon",
                                      hint="give --epsilon E --delta D, or --rho R alone")
    if args.rho is not None:
        rho, delta = budget_rho(args.rho), configured.delta
    elif args.epsilon is not None:
        delta = configured.delta if args.delta is None else args.delta
        if not (args.epsilon > 0 and 0 < delta < 1):
            raise errors.ProgrammingError(f"cannot plan at epsilon = {args.epsilon:g}, delta = {delta:g}",
                                          hint="epsilon must be positive and delta in (0, 1)")
        rho = epsilon_delta_to_rho(args.epsilon, delta)
    else:
        rho, delta = None, configured.delta
    if rho is not None and not rho > 0:
        raise errors.ProgrammingError(f"cannot plan at rho = {args.rho!r}", hint="rho must be positive")

    def words(r: Fraction) -> str:
        return f"epsilon = {rho_to_epsilon(r, delta):.4g} at delta = {delta:g} (rho = {format_rho(r, 'down')})"
    line = f"budget: {words(configured.rho)}, the workload measurement's ({where})"
    if rho is not None:
        line = (f"budget: {words(rho)}, to compare: the configuration says {words(configured.rho)} "
                f"in {where}; nothing is changed")
    return rho, line


def cmd_plan(args) -> int:
    # An engine of its own, not dpsql.connect: planning counts no rows and never opens the
    # ledger, so it neither creates one nor binds the configured budget to it (issue 35)
    from dpsql.engine.config import load_config
    from dpsql.engine.engine import Engine
    from dpsql.engine.session import Session
    engine = Engine(load_config(_config_path(args)))
    rho, budget_line = _plan_budget(args, engine.config)
    status = StatusLine()
    engine.add_listener(status)
    session = Session(engine, args.user)
    people = engine.config.people
    if people is not None and args.table is None:
        # a people schema: every view of the same persons, each at its share (issue 32)
        from dpsql.engine.people_plan import people_plan
        summary = people_plan(engine, rho)
        status.clear()
        print(budget_line)
        for line in summary.lines():
            print(line)
        print("details of one view: dpsql plan --table NAME")
        return 0
    report = session.plan(args.table, rho=rho)
    status.clear()
    if people is not None and args.table in people.views:
        print(f"view {args.table} ({' -> '.join(people.path(args.table))}): at most "
              f"{people.bound(args.table)} row(s) per person; its share of the budget: rho = {report.rho:.4g}")
    s = report.strategy
    view = people.views.get(args.table) if people is not None else None
    if view is not None and view.groups is not None and engine.config.noise == "gaussian" \
            and hasattr(s, "blocks"):
        import math
        # the row factor each block's noise is calibrated with (docs/privacy.md §2a)
        factors = engine.planning.block_rows_sq(args.table, s)
        print(f"noise row factor (rows one person moves a block by, L2) of {len(factors)} block(s): "
              + "; ".join(f"({', '.join(c) or 'total'}) {math.sqrt(r):.4g}" for c, r in factors)
              + f"; weighted: {math.sqrt(engine.rows_sq(args.table, s)):.4g}")
    print(budget_line)
    print(f"table {report.table}: {report.queries} workload queries, {report.rows} linear query rows")
    print(f"strategy {s.operator}: {len(s.blocks)} measurement blocks")
    if s.explanation:
        print(s.explanation)
    for line in report.part_lines() + report.unit_lines():
        print(line)
    if report.bound_rmse is not None:
        # the SVD bound is over every row of the workload, like the planner's objective: a
        # figure in one unit only when the workload has one
        mixed = len(report.units) > 1
        where = f"over all {report.rows:,} rows, units mixed: planned {report.rmse:,.2f}; " if mixed else ""
        print(f"no strategy can do better than {report.bound_rmse:,.2f} with unbiased answers "
              f"({where}SVD bound{'' if report.bound_exact else ' of the marginal queries alone'})")
    for line in report.per_query_lines():
        print(line)
    if report.advice:
        print(f"AIM or HDMM: {report.advice}")
    if engine.config.planner.mode == "aim":
        _print_aim_plan(session, report.table, rho)
    return 0


def cmd_bound(args) -> int:
    """``dpsql bound --table T --epsilon E``: a private suggestion for T's max_rows."""
    from dpsql.engine.people_bound import choose_bound
    from dpsql.privacy.accountant import rho_exponential
    if args.table is None:
        raise errors.InterfaceError("name the view: dpsql bound --table NAME --epsilon E")
    con, status = _connect(args)
    engine = con.session.engine
    epsilon, quantile = Fraction(args.epsilon), Fraction(args.quantile).limit_denominator(10_000)
    cost = rho_exponential(epsilon)
    status.clear()
    delta = engine.config.budget.delta
    if not args.yes and not _ask(f"Choosing the bound of {args.table} spends {_spend_text(cost, delta)} "
                                 "(nothing if it was chosen before with these settings). Continue? [y/N] "):
        print("nothing chosen, nothing spent")
        return 1
    choice = choose_bound(engine, args.table, epsilon, quantile, args.cap)
    spent = "re-used, nothing spent" if choice.reused else f"spent {_spend_text(choice.rho, delta)}"
    print(f"{args.table}: max_rows = {choice.max_rows} (of {', '.join(map(str, choice.candidates))}; aims to keep "
          f"every row of {float(choice.quantile):.0%} of the persons); {spent}")
    print(f"set it in [people.tables.{args.table}] max_rows (docs/config.md, \"People across tables\")")
    con.close()
    return 0


def _ask(question: str) -> bool:
    """A yes/no question (on a terminal or from piped input); anything but yes is no, and
    so is the end of the input (``dpsql measure < /dev/null``)."""
    try:
        answer = input(question)
    except EOFError:
        print("(no answer: standard input ended)")
        return False
    return answer.strip().lower() in ("y", "yes")


def _spend_text(rho, delta: float) -> str:
    """A cost: ρ rounded up (exact in, never shown as less than it is)."""
    from dpsql.privacy.accountant import rho_to_epsilon
    eps = rho_to_epsilon(rho, delta) if rho > 0 else 0.0
    return f"rho = {format_rho(rho, 'up')} (epsilon = {eps:.4g} at delta = {delta:g})"


def _print_aim_plan(session, table, rho=None) -> None:
    from dpsql.engine.aim import aim_summary
    s = aim_summary(session.engine, table, rho)
    print(f"[planner] mode = \"aim\": adaptive rounds over {s['candidates']} candidate marginals "
          f"(the workload's {s['workload_marginals']} marginals and their subsets), at most "
          f"{s['rounds_bound']} rounds, model capped at {s['max_model_cells']:,} cells")
    print(f"  first: the {s['oneway']} one-way marginals at sigma = {s['sigma0']:,.1f} "
          f"(rho = {s['rho_init']:.4g}); each round then selects (epsilon = {s['epsilon0']:.3g} "
          f"to start) and measures one marginal")
    print(f"  spends rho = {s['rho_select']:.4g} on selection and rho = {s['rho_measure']:.4g} "
          f"on measurement (about; rounds anneal as they learn)")


def _check_tables(tables: dict, backend, table: str | None, out=None) -> bool:
    """Run the operator data check (``Backend.data_check``) and print it; True when
    every value of every checked table is a value of its declared domain."""
    from dpsql.measure.reader import PROBLEMS
    out = out or sys.stdout
    if not hasattr(backend, "data_check"):
        raise errors.NotSupportedError("dpsql check needs a backend with a data check")
    if table is not None and table not in tables:
        raise errors.UnknownTableError(f"no table {table!r} in the configuration",
                                       hint=f"tables: {', '.join(sorted(tables))}")
    names = [table] if table else sorted(tables)
    ok = True
    for name in names:
        schema = tables[name]
        # reading every row takes seconds on a large table: say so first (issue 35)
        print(f"checking every value of table {name} against its declared domain…", file=sys.stderr,
              flush=True)
        report = backend.data_check(schema)
        ok &= report.ok
        print(f"table {name}: {report.records:,} records"
              + (f"; {report.dropped:,} not counted (no readable id, or over max_rows per id)"
                 if report.dropped else ""), file=out)
        if getattr(report, "open_quotes", None):
            print(f"  ! {report.open_quotes:,} lines leave a quote open: probably quoted fields holding line "
                  "breaks; every line is a record, so such a person counts as several units. Declare "
                  "source.max_record_lines (docs/config.md) or use an id privacy unit", file=out)
        for col in report.columns:
            att = schema.attribute(col.name)
            problems = col.problems
            parts = [f"{col.counts.get(k, 0):,} {k}" for k in ("value", "other", "null") if col.counts.get(k)]
            print(f"  {col.name}: " + ", ".join(parts) + ("" if problems else "  ok"), file=out)
            inv = att.invalid_index
            label = att.labels()[inv]
            place = ("the NULL cell" if inv == att.null_index else "the (other) cell" if inv == att.other_index
                     else f"cell {inv} ({label!r}); declare nullable = true to keep them apart")
            for status in PROBLEMS:
                n = problems.get(status)
                if not n:
                    continue
                # numbers beyond the range clamp into the end bins; out-of-period times and an
                # integer join key's values (IntegerRange.clamp) go to the invalid place
                clamped = att.kind == "numeric" or (att.kind == "integer" and getattr(att, "clamp", True))
                ranges = {"below_range": "the first bin (clamped)", "above_range": "the last bin (clamped)"} \
                    if clamped else {}
                lands = {**ranges, "not_integer": "the bin containing the value"}.get(status, place)
                if status == "null_not_nullable":
                    lands = place
                examples = ", ".join(f"{_show(v)} ×{c:,}" for v, c in col.examples.get(status, []))
                print(f"    ! {n:,} {status.replace('_', ' ')} → {lands}" + (f"  e.g. {examples}" if examples else ""),
                      file=out)
    return ok


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def cmd_check(args) -> int:
    """Operator data check: reads the raw rows locally and prints per column where values
    landed; never reachable by analysts (no wire command, no policy runs it)."""
    from dpsql.engine.config import load_config
    from dpsql.measure.router import open_backend
    cfg = load_config(_config_path(args))   # no engine: checking creates no ledger
    backend = open_backend(cfg.sources)
    try:
        ok = _check_tables(cfg.tables, backend, args.table)
    finally:
        backend.close()
    print("every value is in the declared domain" if ok else
          "some values are not in the declared domain (see ! lines); fix the data or the declarations")
    return 0 if ok else 1


def cmd_measure(args) -> int:
    con, status = _connect(args)
    session = con.session
    mode = args.mode or session.engine.config.planner.mode
    people = session.engine.config.people
    if people is not None and args.table is None:
        # a people schema: measure every view the workload reads, each at its share; an
        # increment divides its budget across the views that need one the same way
        engine = session.engine
        parts: dict[str, Fraction | None]
        if args.increment:
            from dpsql.engine.people_plan import increment_shares
            parts = dict(increment_shares(engine, _increment_rho(args, engine)))
        else:
            parts = {view: None for view in engine.view_shares(engine.workload_rho())}
        status.clear()
        con.close()
        if not parts:
            print("every workload query is supported by the released measurements: nothing to measure")
            return 0
        rc = 0
        for view, share in parts.items():
            print(f"view {view} ({' -> '.join(people.path(view))}):")
            rc = max(rc, cmd_measure(argparse.Namespace(**{**vars(args), "table": view, "increment_rho": share})))
        return rc
    if not _check_tables(session.engine.catalog, session.engine.backend, args.table):
        if not args.force:
            print("nothing measured, nothing spent: the data check found values outside the declared "
                  "domain (above). Fix them, or measure anyway with --force.", file=sys.stderr)
            return 1
        print("--force: measuring despite the data check", file=sys.stderr)
    engine = session.engine
    table = session._table(args.table)
    delta = engine.config.budget.delta
    if args.increment:
        if mode == "aim":
            raise errors.ProgrammingError("--increment extends a planned (hdmm) workload",
                                          hint="AIM's rounds re-use what was measured: run "
                                               "dpsql measure --mode aim again with a new budget")
        rho = _increment_rho(args, engine, table)
        strategy = engine.increment_strategy(table, rho)
        status.clear()
        if strategy is None:
            print("every workload query is supported by the released measurements: nothing to measure")
            return 0
        missing = len(engine.unsupported_workload(table))
        what = f"the {missing} workload quer{'y' if missing == 1 else 'ies'} no release supports"
        cost = engine.spend_preview(table, strategy, rho, engine.WORKLOAD_PRINCIPAL, "workload-increment").rho
    else:
        cost = session.measure_cost(args.table, mode=mode)
        status.clear()
        what = "the workload" if mode != "aim" else "the workload by AIM's adaptive rounds"
    left = engine.ledger.remaining(None)
    if not args.yes and cost > 0:
        if not _ask(f"Measuring {what} spends {_spend_text(cost, delta)} of the rho = "
                    f"{format_rho(left, 'down')} left. Continue? [y/N] "):
            print("nothing measured, nothing spent (scripts confirm with --yes)")
            return 1
    if args.increment:
        report = engine.measure_increment(table, rho, requested_by=session.user)
    else:
        report = session.measure(args.table, mode=mode,
                                 progress=_aim_progress if mode == "aim" else None)
    status.clear()
    if report is None or report.reused:
        print("already measured: re-using the released measurements (nothing spent)")
    elif mode == "aim":
        print(f"AIM: {report.rounds} rounds ({report.replayed} re-used from the ledger), "
              f"{report.blocks} marginals ({report.cells:,} cells); spent rho = {format_rho(report.rho, 'up')} now; "
              f"of the run's rho = {report.run_rho:.6g}: {report.rho_select:.4g} selecting, "
              f"{report.rho_measure:.4g} measuring" +
              (f", {report.lost_rho:.4g} lost to an interrupted round" if report.lost_rho else ""))
    elif getattr(report, "completed", False):
        print(f"measured {report.blocks} blocks ({report.cells:,} cells) under the charge an interrupted "
              "run made before it could release them (nothing spent now)")
    else:
        print(f"measured {report.blocks} blocks ({report.cells:,} cells), spent {_spend_text(report.rho, delta)}")
    if engine.truncation_rho(table) > 0:
        from dpsql.engine.people_truncation import released_truncation
        released = released_truncation(engine, table)
        if released is not None:
            print(released.line())
    if args.no_fit:
        return 0
    return _prepare_model(engine, table, status)


def _prepare_model(engine, table: str, status: StatusLine) -> int:
    """Fit the model of the table's releases now and save it next to the ledger
    (``Engine.model``), so that the first query of a later process loads it instead of
    fitting (issue 17: 27.9 s on a 55-marginal workload).  The release is already made
    and paid for: a failure or ^C here loses nothing, the first query fits instead."""
    print("fitting the model of the releases (once: later processes load it)…", flush=True)
    t0 = time.monotonic()
    try:
        model, _, _ = engine.model(table)
    except KeyboardInterrupt:
        status.clear()
        print("fit interrupted: the measurements are recorded; the first query fits the model",
              file=sys.stderr)
        return 130
    except errors.Error as exc:
        status.clear()
        print("the measurements are recorded, but no model could be fitted:", file=sys.stderr)
        _print_error(exc)
        return 0
    status.clear()
    if model is not None:
        print(f"model ready in {time.monotonic() - t0:.1f} s, saved in {engine.model_path(table).parent}")
    return 0


def _increment_rho(args, engine, table: str | None = None) -> Fraction:
    """The increment's exact ρ: a view's part of a people schema's increment (set by
    cmd_measure), --rho (read toward privacy, as the configuration's), --epsilon at the
    configured δ (rounded down), or the workload budget — a view's share of it — capped by
    what is left."""
    from dpsql.privacy.accountant import budget_rho, epsilon_delta_to_rho
    if getattr(args, "increment_rho", None) is not None:
        return args.increment_rho
    if args.rho is not None:
        return budget_rho(args.rho)
    if args.epsilon is not None:
        return epsilon_delta_to_rho(args.epsilon, engine.config.budget.delta)
    left = engine.ledger.remaining(None)
    rho = min(engine.workload_rho(table), left)
    if rho <= 0:
        raise errors.BudgetExhaustedError("no budget is left for an increment",
                                          hint="the operator grants a new budget (a new ledger)",
                                          requested_rho=Fraction(0), remaining_rho=Fraction(left))
    return rho


def _aim_progress(event) -> None:
    done = f"{event['rho_used'] / event['rho']:6.1%} of the budget"
    tag = " (re-used)" if event.get("replayed") else ""
    if event["kind"] == "init":
        print(f"round {event['round']:3d}: measured {event['cliques']} one-way marginals at "
              f"sigma = {event['sigma']:,.1f}; {done}{tag}", flush=True)
    else:
        print(f"round {event['round']:3d}: selected ({', '.join(event['selected'])}) of "
              f"{event['candidates']} candidates, epsilon = {event['epsilon']:.3g}, sigma = "
              f"{event['sigma']:,.1f}{', annealed' if event['annealed'] else ''}; {done}{tag}",
              flush=True)


def cmd_synth(args) -> int:
    from dpsql.measure.export import write_rows
    con, status = _connect(args)
    table = con.session.synthetic(args.table, args.rows, numbers=args.numbers, method=args.method,
                                  seed=args.seed)
    path = write_rows(args.out, table.columns, table.rows, fmt=args.format)
    print(f"wrote {len(table.rows):,} synthetic rows of {table.table} to {path} "
          f"(from model version {table.model_version}; post-processing, nothing spent)")
    return 0


def cmd_query(args) -> int:
    con, status = _connect(args)
    session = con.session
    if args.allow_spend:
        session.settings["dpsql.allow_spend"] = "on"
    elif sys.stdin.isatty():
        def approve(request) -> bool:
            status.clear()
            return _ask(f"Answering needs a new measurement of {request.what} that spends "
                        f"{_spend_text(request.rho, request.delta)}. Spend it? [y/N] ")
        session.approve = approve
    else:
        # one statement per run: no SET can precede it, the option can
        session.spend_hint = ("run it with dpsql query --allow-spend to spend without being asked (in a "
                              "terminal it asks instead); or answer from existing measurements: [policy] "
                              "unsupported = \"informed\" in the configuration")
    cur = con.cursor()
    cur.execute(args.sql)
    status.clear()
    print_result(cur.result, mode=args.errors)
    return 0


def cmd_budget(args) -> int:
    con, _ = _connect(args)
    b = con.session.budget()
    from dpsql.privacy.accountant import rho_to_epsilon
    delta = b["delta"]
    for label, spent, remaining in (("user " + b["user"], b["spent_rho"], b["remaining_rho"]),
                                    ("total", b["total_spent_rho"], b["total_remaining_rho"])):
        eps = rho_to_epsilon(remaining, delta) if remaining > 0 else 0.0
        print(f"{label}: spent rho = {format_rho(spent, 'up')}, remaining rho = "
              f"{format_rho(remaining, 'down')} (epsilon = {eps:.4g} at delta = {delta:g})")
    print(f"workload measurements (operator): spent rho = {format_rho(b['workload_spent_rho'], 'up')}")
    releases = con.session.engine.releases()
    if releases:
        print(f"releases: {sum(r.current for r in releases)} in use, {sum(not r.current for r in releases)} stale")
        for r in releases:
            state = "in use" if r.current else "STALE (" + "; ".join(r.reasons) + ")"
            print(f"  #{r.seq} {r.table} {r.purpose or 'workload'}: rho = {format_rho(r.rho, 'up')}, {state}")
    pending = con.session.engine.unreleased_charges()
    if pending:
        print(f"charged, not released (a run stopped before recording it): {len(pending)}; the next identical "
              "measurement (dpsql measure, the same query, AIM's run) releases it without a new charge")
        for e in pending:
            mech = e.mechanism if isinstance(e.mechanism, dict) else {}
            print(f"  #{e.seq} {mech.get('table', '?')} {mech.get('purpose') or 'workload'}: "
                  f"rho = {format_rho(e.rho, 'up')}")
    return 0


def cmd_demo(args) -> int:
    from dpsql.demo import run_demo
    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpsql", description="differentially private SQL")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--config", "-C", help="path to dpsql.toml (default: $DPSQL_CONFIG or ./dpsql.toml)")
        p.add_argument("--user", "-U", help="budget principal (default: the config's default user)")
        p.add_argument("--table", help="table (default: the only configured table)")
        return p

    p = sub.add_parser("init", help="draft a config from a source's schema or public metadata",
                       description="Draft dpsql.toml and <table>.domain.toml from a CSV, Parquet or "
                                   "DuckDB file's schema, a Parquet glob or directory, a PostgreSQL or "
                                   "Spark table's catalog, SmartNoise metadata (.yaml) or a *-domain.json "
                                   "file; lists what is left to fill in from public documentation.")
    p.add_argument("source", nargs="?", help="CSV, Parquet (file, glob or directory), DuckDB database, "
                                             "SmartNoise .yaml or *-domain.json")
    p.add_argument("--table", help="table name (the table to read from a DuckDB file, PostgreSQL or Spark)")
    p.add_argument("--postgres", metavar="URL", help="draft from a PostgreSQL table (with --table)")
    p.add_argument("--spark", metavar="MASTER", help="draft from a Spark table (--table) or Parquet path")
    p.add_argument("--hive", action="store_true", help="Parquet directories are hive-partitioned (key=value)")
    p.add_argument("--name", help="the dpsql table name (default: from the source)")
    p.add_argument("--output", "-o")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_init)
    p = common(sub.add_parser("plan", help="plan the workload strategy (spends nothing, opens no ledger)",
                              description="Plan the workload's measurement strategy and print the "
                                          "expected errors.  Free: counts no rows, spends nothing and "
                                          "never creates or opens the ledger, so budgets can be "
                                          "compared before one is fixed."))
    which = p.add_mutually_exclusive_group()
    which.add_argument("--epsilon", type=float,
                       help="plan at this epsilon instead of the configured workload budget "
                            "(the configuration is not changed)")
    which.add_argument("--rho", type=float, help="plan at this rho instead (zCDP)")
    p.add_argument("--delta", type=float, help="the delta of --epsilon (default: the configured delta)")
    p.set_defaults(func=cmd_plan)
    p = common(sub.add_parser("measure", help="measure the planned strategy (spends budget)"))
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--increment", action="store_true",
                   help="measure only the workload queries no release supports yet (after the "
                        "workload changed; re-uses every earlier measurement)")
    p.add_argument("--epsilon", type=float, help="budget of the increment (at the configured delta)")
    p.add_argument("--rho", type=float, help="budget of the increment in rho")
    p.add_argument("--mode", choices=["hdmm", "aim"],
                   help="hdmm: one planned strategy; aim: adaptive rounds (default: [planner] mode)")
    p.add_argument("--force", action="store_true", help="measure even if the data check finds problems")
    p.add_argument("--no-fit", action="store_true",
                   help="do not fit the model now (the first query that needs it fits it instead)")
    p.set_defaults(func=cmd_measure)
    p = common(sub.add_parser("bound", help="choose a people view's max_rows privately (spends budget)"))
    p.add_argument("--epsilon", type=float, required=True, help="epsilon of the exponential mechanism")
    p.add_argument("--quantile", type=float, default=0.9,
                   help="keep every row of about this share of the persons (default 0.9)")
    p.add_argument("--max", type=int, default=1024, dest="cap", help="largest candidate bound (default 1024)")
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.set_defaults(func=cmd_bound)
    p = common(sub.add_parser("synth", help="write synthetic rows from the model (spends nothing)"))
    p.add_argument("--rows", "-n", type=int, help="number of rows (default: the model's estimated total)")
    p.add_argument("--out", "-o", required=True, help="output file: .csv or .parquet")
    p.add_argument("--format", choices=["csv", "parquet"], help="default: from the file name")
    p.add_argument("--numbers", choices=["label", "value"], default="label",
                   help="binned numbers as their bin labels, or as values drawn inside each bin")
    p.add_argument("--method", choices=["rounding", "sample"], default="rounding",
                   help="rounding: marginals follow the model closely (thesis 4.4.3); sample: i.i.d. rows")
    p.add_argument("--seed", type=int, help="seed for reproducible files (the rows are post-processing)")
    p.set_defaults(func=cmd_synth)
    common(sub.add_parser("check", help="operator data check of the sources (reads raw rows locally)")
           ).set_defaults(func=cmd_check)
    p = common(sub.add_parser("query", help="answer one SQL query"))
    p.add_argument("sql")
    p.add_argument("--errors", choices=["ci95", "stderr", "off"], default="ci95")
    p.add_argument("--allow-spend", action="store_true",
                   help="let a query that needs a new measurement spend without asking")
    p.set_defaults(func=cmd_query)
    common(sub.add_parser("budget", help="show spent and remaining budget")).set_defaults(func=cmd_budget)
    p = sub.add_parser("demo", help="run the adult example end to end")
    p.add_argument("--workdir", help="where to keep the demo's ledger (default: a temp dir)")
    p.add_argument("--epsilon", type=float, default=1.0)
    p.set_defaults(func=cmd_demo)
    for module in ("repl.cli", "dpsql.server.cli"):
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name and module.startswith(exc.name):
                continue
            raise
        mod.register(sub, common)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args) or 0
    except errors.Error as exc:
        _print_error(exc)
        return 2
    except KeyboardInterrupt:
        print("cancelled", file=sys.stderr)
        return 130
    except EOFError:
        print("ERROR: standard input ended before an answer was given; nothing was changed",
              file=sys.stderr)
        print("HINT: run it in a terminal, or give the answer as an option (e.g. --yes, "
              "--password-stdin)", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # the reader went away (`dpsql query … | head`): stop quietly, as Unix tools do
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        except OSError:
            pass
        return 141
    except OSError as exc:
        _print_error(_os_error(exc))
        return 2


def _os_error(exc: OSError) -> errors.Error:
    """An operating-system failure as a message with a hint (never a traceback)."""
    if exc.errno == errno.EADDRINUSE:
        return errors.OperationalError(f"cannot listen: the address is already in use ({exc.strerror})",
                                       hint="another process listens on that port; stop it or choose "
                                            "another with --port")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return errors.OperationalError(f"permission denied: {exc.filename or exc.strerror}",
                                       hint="check the file's permissions (ports below 1024 need "
                                            "privileges)")
    where = f": {exc.filename}" if exc.filename else ""
    return errors.OperationalError(f"{exc.strerror or exc}{where}", hint="check the path and retry")


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "build_parser", "format_value", "print_result"]
