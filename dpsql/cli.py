"""The ``dpsql`` command line.

    dpsql init data.csv                 draft a config from the file's *schema* only
    dpsql plan    [--config C]          plan the workload's measurement strategy (no budget)
    dpsql check   [--config C]          operator data check of the sources (local only)
    dpsql measure [--config C] [--yes] [--mode hdmm|aim]
                                        check, then measure (spends budget; asks first)
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
import importlib
import math
import os
import sys
from pathlib import Path

from dpsql import errors
from dpsql.engine.variance import Z95

DEFAULT_CONFIG = "dpsql.toml"


def _config_path(args) -> str:
    return args.config or os.environ.get("DPSQL_CONFIG") or DEFAULT_CONFIG


def _print_error(exc: errors.Error) -> None:
    print(f"ERROR [{exc.sqlstate}]: {exc.message}", file=sys.stderr)
    if exc.detail:
        print(f"DETAIL: {exc.detail}", file=sys.stderr)
    if exc.hint:
        print(f"HINT: {exc.hint}", file=sys.stderr)


def format_value(value, stderr=None, mode: str = "ci95") -> str:
    """``12,345 ± 210`` (95% interval by default); NULL shown distinctly."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        text = f"{value:,.0f}" if abs(value) >= 100 else f"{value:,.3g}" if value != int(value) else f"{value:,.0f}"
    elif isinstance(value, int):
        text = f"{value:,}"
    else:
        text = str(value)
    if stderr is None or mode == "off" or (isinstance(stderr, float) and math.isnan(stderr)):
        return text
    half = stderr * (Z95 if mode == "ci95" else 1.0)
    return f"{text} ± {half:,.0f}" if half >= 10 else f"{text} ± {half:.2g}"


def print_result(result, out=sys.stdout, mode: str = "ci95") -> None:
    if result.message and not result.columns:
        print(result.message, file=out)
        return
    headers = [c.name for c in result.columns]
    body = []
    for i, row in enumerate(result.rows):
        errs = result.stderr[i] if i < len(result.stderr) else (None,) * len(row)
        cells = [format_value(v, e, mode) for v, e in zip(row, errs)]
        if i < len(result.inferred) and result.inferred[i]:
            cells[-1] += " *"
        body.append(cells)
    widths = [max([len(h)] + [len(r[j]) for r in body]) for j, h in enumerate(headers)]
    print(" | ".join(h.ljust(w) for h, w in zip(headers, widths)), file=out)
    print("-+-".join("-" * w for w in widths), file=out)
    for r in body:
        print(" | ".join(c.rjust(w) if j >= 1 else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))),
              file=out)
    print(f"({len(body)} row{'s' if len(body) != 1 else ''})", file=out)
    if any(result.inferred):
        print("* inferred by the model without a supporting measurement", file=out)


# -- subcommands ----------------------------------------------------------------------------

def cmd_init(args) -> int:
    """Draft a config from the CSV header and column *types* only; domains are left blank
    on purpose: they must come from public documentation, never from the rows."""
    from dpsql.measure.backend import describe_source

    path = Path(args.csv)
    names_types = describe_source(path)
    table = args.table or path.stem.replace("-", "_")
    out = Path(args.output or "dpsql.toml")
    domain_file = out.with_name(f"{table}.domain.toml")
    if (out.exists() or domain_file.exists()) and not args.force:
        raise errors.ConfigError(f"{out} or {domain_file} exists", hint="use --force to overwrite")
    lines = [f"# Domain of table {table}, drafted by `dpsql init` from the header of {path.name}.",
             "# Fill every domain from PUBLIC knowledge (documentation, codebooks, law), never from",
             "# the rows: a domain read off the data would itself leak private information.",
             f"[tables.{table}]", f'source = {{ csv = "{os.path.relpath(path.resolve(), out.resolve().parent)}" }}', ""]
    for name, kind in names_types:
        lines.append(f"[tables.{table}.columns.{name}]")
        if kind == "integer":
            lines += ['type = "integer"', "# lo = ?   (public lower bound)", "# hi = ?   (public upper bound)",
                      "# bin_width = 1"]
        elif kind == "numeric":
            lines += ['type = "numeric"', "# edges = [ ... ]   (public bin edges)"]
        else:
            lines += ['type = "categorical"', "# labels = [ ... ]   (the published list of values)",
                      "# nullable = true"]
        lines.append("")
    domain_file.write_text("\n".join(lines))
    out.write_text("\n".join([
        "# dpsql configuration drafted by `dpsql init` (docs/config.md).",
        "[dpsql]", f'ledger = "{table}.ledger"', 'noise = "gaussian"', 'policy = "infer"', "",
        "[budget]", "epsilon = 1.0", "delta = 1e-6", "",
        f"[tables.{table}]", f'domain = "{domain_file.name}"', 'privacy_unit = "row"', "",
        "[workload]", "queries = []", ""]))
    print(f"wrote {out} and {domain_file}; fill in the domains before planning")
    return 0


def _connect(args):
    import dpsql
    return dpsql.connect(_config_path(args), user=args.user)


def cmd_plan(args) -> int:
    con = _connect(args)
    report = con.session.plan(args.table)
    s = report.strategy
    print(f"table {report.table}: {report.queries} workload queries, {report.rows} linear query rows")
    print(f"strategy {s.operator}: {len(s.blocks)} measurement blocks")
    if getattr(s, "explanation", None):
        print(s.explanation)
    print(f"expected RMSE per query row at rho = {report.rho:.4g}: {report.rmse:,.2f} "
          f"(per-query baseline: {report.baseline_rmse:,.2f})")
    if report.bound_rmse is not None:
        print(f"no strategy can do better than {report.bound_rmse:,.2f} with unbiased answers "
              f"(SVD bound{'' if report.bound_exact else ' of the marginal queries alone'})")
    for line in report.per_query_lines():
        print(line)
    if getattr(report, "advice", None):
        print(f"AIM or HDMM: {report.advice}")
    if con.session.engine.config.planner.mode == "aim":
        _print_aim_plan(con.session, report.table)
    return 0


def _print_aim_plan(session, table) -> None:
    from dpsql.engine.aim import aim_summary
    s = aim_summary(session.engine, table)
    print(f"[planner] mode = \"aim\": adaptive rounds over {s['candidates']} candidate marginals "
          f"(the workload's {s['workload_marginals']} marginals and their subsets), at most "
          f"{s['rounds_bound']} rounds, model capped at {s['max_model_cells']:,} cells")
    print(f"  first: the {s['oneway']} one-way marginals at sigma = {s['sigma0']:,.1f} "
          f"(rho = {s['rho_init']:.4g}); each round then selects (epsilon = {s['epsilon0']:.3g} "
          f"to start) and measures one marginal")
    print(f"  spends rho = {s['rho_select']:.4g} on selection and rho = {s['rho_measure']:.4g} "
          f"on measurement (about; rounds anneal as they learn)")


def _check_tables(tables: dict, backend, table: str | None, out=None) -> bool:
    """Run the operator data check (``DuckDBBackend.data_check``) and print it; True when
    every value of every checked table is a value of its declared domain."""
    from dpsql.measure.backend import DuckDBBackend
    from dpsql.measure.reader import PROBLEMS
    out = out or sys.stdout
    if not isinstance(backend, DuckDBBackend):
        raise errors.NotSupportedError("dpsql check needs the DuckDB backend")
    if table is not None and table not in tables:
        raise errors.UnknownTableError(f"no table {table!r} in the configuration",
                                       hint=f"tables: {', '.join(sorted(tables))}")
    names = [table] if table else sorted(tables)
    ok = True
    for name in names:
        schema = tables[name]
        report = backend.data_check(schema)
        ok &= report.ok
        print(f"table {name}: {report.records:,} records"
              + (f"; {report.dropped:,} not counted (no readable id, or over max_rows per id)"
                 if report.dropped else ""), file=out)
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
                lands = {"below_range": "the first bin (clamped)", "above_range": "the last bin (clamped)",
                         "not_integer": "the bin containing the value"}.get(status, place)
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
    from dpsql.measure.backend import DuckDBBackend
    cfg = load_config(_config_path(args))   # no engine: checking creates no ledger
    backend = DuckDBBackend(cfg.sources)
    try:
        ok = _check_tables(cfg.tables, backend, args.table)
    finally:
        backend.close()
    print("every value is in the declared domain" if ok else
          "some values are not in the declared domain (see ! lines); fix the data or the declarations")
    return 0 if ok else 1


def cmd_measure(args) -> int:
    con = _connect(args)
    session = con.session
    mode = args.mode or session.engine.config.planner.mode
    if not _check_tables(session.engine.catalog, session.engine.backend, args.table):
        if not args.force:
            print("nothing measured, nothing spent: the data check found values outside the declared "
                  "domain (above). Fix them, or measure anyway with --force.", file=sys.stderr)
            return 1
        print("--force: measuring despite the data check", file=sys.stderr)
    rho = session.measure_cost(args.table, mode=mode)
    if not args.yes:
        answer = input(f"Measuring spends rho = {rho:.6g} of the budget. Continue? [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing measured, nothing spent")
            return 1
    report = session.measure(args.table, mode=mode,
                             progress=_aim_progress if mode == "aim" else None)
    if report.reused:
        print("already measured: re-using the released measurements (nothing spent)")
    elif mode == "aim":
        print(f"AIM: {report.rounds} rounds ({report.replayed} re-used from the ledger), "
              f"{report.blocks} marginals ({report.cells:,} cells); spent rho = {report.rho:.6g} now; "
              f"of the run's rho = {report.run_rho:.6g}: {report.rho_select:.4g} selecting, "
              f"{report.rho_measure:.4g} measuring" +
              (f", {report.lost_rho:.4g} lost to an interrupted round" if report.lost_rho else ""))
    else:
        print(f"measured {report.blocks} blocks ({report.cells:,} cells), spent rho = {report.rho:.6g}")
    return 0


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
    con = _connect(args)
    table = con.session.synthetic(args.table, args.rows, numbers=args.numbers, method=args.method,
                                  seed=args.seed)
    path = write_rows(args.out, table.columns, table.rows, fmt=args.format)
    print(f"wrote {len(table.rows):,} synthetic rows of {table.table} to {path} "
          f"(from model version {table.model_version}; post-processing, nothing spent)")
    return 0


def cmd_query(args) -> int:
    con = _connect(args)
    cur = con.cursor()
    cur.execute(args.sql)
    print_result(cur.result, mode=args.errors)
    return 0


def cmd_budget(args) -> int:
    con = _connect(args)
    b = con.session.budget()
    from dpsql.privacy.accountant import rho_to_epsilon
    delta = b["delta"]
    for label, spent, remaining in (("user " + b["user"], b["spent_rho"], b["remaining_rho"]),
                                    ("total", b["total_spent_rho"], b["total_remaining_rho"])):
        eps = rho_to_epsilon(remaining, delta) if remaining > 0 else 0.0
        print(f"{label}: spent rho = {spent:.6g}, remaining rho = {remaining:.6g} "
              f"(epsilon = {eps:.4g} at delta = {delta:g})")
    releases = con.session.engine.releases()
    if releases:
        print(f"releases: {sum(r.current for r in releases)} in use, {sum(not r.current for r in releases)} stale")
        for r in releases:
            state = "in use" if r.current else "STALE (" + "; ".join(r.reasons) + ")"
            print(f"  #{r.seq} {r.table} {r.purpose or 'workload'}: rho = {r.rho:.6g}, {state}")
    return 0


def cmd_demo(args) -> int:
    from dpsql.engine.demo import run_demo
    return run_demo(args)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpsql", description="differentially private SQL")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p):
        p.add_argument("--config", "-C", help="path to dpsql.toml (default: $DPSQL_CONFIG or ./dpsql.toml)")
        p.add_argument("--user", "-U", help="budget principal (default: the config's default user)")
        p.add_argument("--table", help="table (default: the only configured table)")
        return p

    p = sub.add_parser("init", help="draft a config from a CSV's schema")
    p.add_argument("csv")
    p.add_argument("--table")
    p.add_argument("--output", "-o")
    p.add_argument("--force", action="store_true")
    p.set_defaults(func=cmd_init)
    common(sub.add_parser("plan", help="plan the workload strategy (spends nothing)")).set_defaults(func=cmd_plan)
    p = common(sub.add_parser("measure", help="measure the planned strategy (spends budget)"))
    p.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    p.add_argument("--mode", choices=["hdmm", "aim"],
                   help="hdmm: one planned strategy; aim: adaptive rounds (default: [planner] mode)")
    p.add_argument("--force", action="store_true", help="measure even if the data check finds problems")
    p.set_defaults(func=cmd_measure)
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


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "build_parser", "format_value", "print_result"]
