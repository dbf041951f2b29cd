"""The shell as a client of ``dpsql serve`` (``dpsql shell --connect URL``): the analyst's shell.

The threat model gives analysts the server only (docs/privacy.md §1), so the shell they use
must be a wire client with no more power than psql: this module gives the ``Shell`` a
connection over the wire (``dpsql.measure.postgres.WireClient``) that looks like the
in-process one where the shell reads it:

* ``RemoteCursor.execute(sql).result``: a ``Result`` built from the server's rows.  The
  connection asks for ``dpsql.error_columns = bounds`` at startup, so each value column
  ``c`` arrives with ``c_ci95``, ``c_lower``, ``c_upper`` and the row's ``inferred`` flag;
  they become the standard error (``c_ci95`` / Z95), the inferred flag and the range the
  shell's renderer shows as ``± …`` or ``in [lo, hi]`` — the same table as in process; a
  trailing ``binned`` flag marks the row's values ``(binned)`` (``Result.bias``); the server's
  NOTICEs with the answer become its ``notes`` (the rows a view's bound drops, with noise).
* ``RemoteSession.catalog()``: the declared domains rebuilt from the catalog view
  ``dpsql_columns`` (public metadata), so ``\\d`` and label completion work as in process;
  a kind this client cannot rebuild shows the catalog's own description.
* ``RemoteSession.budget()``: ``dpsql_budget()``, the analyst's remainder, for the toolbar
  and ``\\budget``.
* ``RemoteSession.explain(sql)``: the server's ``EXPLAIN``.

The operator's powers (``\\measure``, ``\\plan``, ``\\workload``, ``\\synth``, the ledger's
charges) are not there: the server offers none of them, and the shell refuses them with a
message that says so (``OPERATOR_ONLY``).  Spending under the ``measure`` policy follows the
server's rule: ``SET dpsql.allow_spend = 'on'`` first (the error's hint says so).
"""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

from dpsql import errors
from dpsql.domain import Categorical, IntegerRange, Numeric, TableSchema
from dpsql.engine.results import Column, Result
from dpsql.engine.variance import Z95
from dpsql.public import PublicColumn, PublicTable, StarCatalog

#: Meta-commands that need the engine in process (the operator's), refused over the wire.
OPERATOR_ONLY = {"measure": "measuring spends the workload budget",
                 "plan": "planning runs on the operator's engine",
                 "workload": "the workload is the operator's configuration",
                 "synth": "synthetic data is drawn from the operator's model"}
_CATALOG_SQL = ("SELECT table_name, column_name, kind, is_nullable, cells, lo, hi, bin_width, edges, labels, "
                "open, data_type, description FROM dpsql_columns ORDER BY table_name, ordinal_position")


def operator_only(what: str, why: str) -> errors.Error:
    """The refusal of an operator's power in the analyst's shell (42501, nothing done)."""
    return errors.PrivacyViolationError(
        f"{what} is the operator's: {why}; this shell is connected to dpsql serve as an analyst",
        hint="ask your operator (dpsql shell without --connect, dpsql measure, dpsql budget); "
             "here \\budget shows your budget and \\explain what a query would use")


class RemoteColumn:
    """A column whose kind this client cannot rebuild: its catalog type and description."""

    def __init__(self, name: str, kind: str, nullable: bool, size: int, data_type: str, description: str) -> None:
        self.name, self.kind, self.nullable, self.size = name, kind, nullable, size
        self.data_type = data_type
        # "declared domain (date, 36 cells): 2024-01-01 .. 2026-12-31 by month" -> after the colon
        self.domain_text = description.split("): ", 1)[-1] if description else kind


def _number(x):
    if isinstance(x, Decimal):
        return int(x) if x == x.to_integral_value() else float(x)
    return x


def _attribute(name, kind, nullable, cells, lo, hi, width, edges, labels, is_open, data_type, description):
    """The declared attribute the catalog row describes (the declaration's public fields)."""
    try:
        if kind == "categorical":
            values = [int(v) for v in labels] if data_type == "bigint" else list(labels)
            attr: Any = Categorical(name, values, nullable=nullable, closed=not is_open)
        elif kind == "integer":
            attr = IntegerRange(name, _number(lo), _number(hi), bin_width=int(width or 1),
                                edges=[int(_number(e)) for e in edges] if edges else None, nullable=nullable)
        elif kind == "numeric":
            attr = Numeric(name, [float(e) for e in edges], nullable=nullable)
        else:
            attr = None
    except (errors.Error, TypeError, ValueError):
        attr = None
    if attr is None or attr.size != cells:
        return RemoteColumn(name, kind, nullable, int(cells or 0), data_type, description or "")
    return attr


def remote_catalog(client) -> dict[str, TableSchema]:
    """The private tables' declared domains from ``dpsql_columns`` ({} when the server has no
    catalog: the shell then completes keywords only)."""
    try:
        reply = client.execute(_CATALOG_SQL)
    except errors.Error:
        return {}
    tables: dict[str, list] = {}
    public: dict[str, list] = {}
    for row in reply.rows:
        if row[2] == "public":      # a public table's column: its name and real type, no domain
            public.setdefault(row[0], []).append(PublicColumn(row[1], row[11]))
        else:
            tables.setdefault(row[0], []).append(_attribute(*row[1:]))
    return StarCatalog({name: TableSchema(name, tuple(attrs)) for name, attrs in tables.items()},
                       public={name: PublicTable(name, tuple(cols), ()) for name, cols in public.items()})


def _value_columns(names: list[str]) -> tuple[int, list[int], bool]:
    """(number of base columns, the value columns among them, whether the last is ``inferred``)
    for a reply with ``bounds`` error columns: ``c_ci95, c_lower, c_upper`` per value column
    ``c``, in order, after the base columns."""
    flag = bool(names) and names[-1] == "inferred"
    body = names[:-1] if flag else names
    for k in range(len(body) // 4, 0, -1):
        base = len(body) - 3 * k
        tail = body[base:]
        values = [tail[3 * i][:-len("_ci95")] for i in range(k)]
        if all(tail[3 * i:3 * i + 3] == [f"{v}_ci95", f"{v}_lower", f"{v}_upper"] for i, v in enumerate(values)) \
                and all(v in body[:base] for v in values):
            seen: list[int] = []
            for v in values:
                seen.append(next(j for j in range(base) if body[j] == v and j not in seen))
            return base, seen, flag
    return len(body), [], flag


def to_result(reply, seconds: float) -> Result:
    """A ``Result`` as the engine would give it: the value columns with their standard errors
    (from ``c_ci95``), inferred flags and ranges; the error columns themselves dropped."""
    if not reply.columns:
        return Result([], [], message=reply.status.split(" ")[0] or "OK", seconds=seconds)
    names = [n for n, _ in reply.columns]
    if names == ["QUERY PLAN"]:
        return Result([Column("QUERY PLAN", "text")], reply.rows, message="EXPLAIN", seconds=seconds)
    # a statement over wide bins ends with the row's ``binned`` flag (docs/server.md)
    binned = len(names) > 1 and names[-1] == "binned" and names[-2] == "inferred"
    if binned:
        names = names[:-1]
    base, values, flag = _value_columns(names)
    columns = [Column(n, t) for n, t in reply.columns[:base]]
    rows, stderr, inferred, bounds, bias = [], [], [], [], []
    for full in reply.rows:
        row = full[:-1] if binned else full
        rows.append(tuple(_number(v) for v in row[:base]))
        errs: list[Any] = [None] * base
        rng: list[Any] = [None] * base
        mark = bool(row[-1]) if flag else False
        for i, j in enumerate(values):
            ci95, lower, upper = row[base + 3 * i:base + 3 * i + 3]
            if ci95 is not None:
                errs[j] = float(ci95) / Z95
            elif mark:      # inferred: no error; the range the released measurements allow
                errs[j] = float("nan")
                rng[j] = (float("-inf") if lower is None else float(lower),
                          float("inf") if upper is None else float(upper))
        stderr.append(tuple(errs))
        inferred.append(mark)
        bounds.append(tuple(rng))
        # the wire says the row's interval holds a binning bound, not how large (NaN): the
        # renderer marks its values "(binned)" as in process
        bias.append(tuple(float("nan") if binned and full[-1] and errs[j] is not None
                          and errs[j] == errs[j] else None for j in range(base)))
    # the server's NOTICEs with the answer (a people view's truncation figure, released with
    # noise) are the result's notes, as in process
    return Result(columns, rows, stderr, inferred, seconds=seconds, bounds=bounds, bias=bias,
                  notes=tuple(getattr(reply, "notices", ())))


class RemoteCursor:
    def __init__(self, client) -> None:
        self.client = client
        self.result: Result | None = None

    def execute(self, sql: str, params=None) -> RemoteCursor:
        t0 = time.perf_counter()
        self.result = to_result(self.client.execute(sql, params), time.perf_counter() - t0)
        return self


class RemoteSession:
    """What the shell reads from a session, answered by the server."""

    role = "analyst"
    engine = None            # no engine in this process: no progress events, no ledger
    approve = None           # spending is the server's rule (SET dpsql.allow_spend)

    def __init__(self, client) -> None:
        self.client = client
        self.user = client.user
        self.settings = {"dpsql.error_columns": "off"}   # the shell formats errors itself
        self._catalog: dict[str, TableSchema] | None = None

    def catalog(self) -> dict[str, TableSchema]:
        if self._catalog is None:
            self._catalog = remote_catalog(self.client)
        return self._catalog

    def budget(self) -> dict:
        """``dpsql_budget()``: remaining ρ and ε (as ``dpsql budget`` rounds them) for this
        user and for all users, and the next on-demand measurement's cost (None: none)."""
        rows = {r[0]: r[1:] for r in self.client.execute("SELECT budget, rho, epsilon, delta FROM dpsql_budget()").rows}
        user, total = rows["user_remaining"], rows["total_remaining"]
        nxt = rows.get("next_measurement", (None, None, None))
        return {"user": self.user, "remaining_rho": user[0], "remaining_epsilon": user[1],
                "total_remaining_rho": total[0], "total_remaining_epsilon": total[1], "delta": user[2],
                "next_rho": nxt[0], "next_epsilon": nxt[1]}

    def explain(self, sql: str) -> str:
        return "\n".join(str(r[0]) for r in self.client.execute("EXPLAIN " + sql).rows)


class RemoteConnection:
    """The shell's connection to ``dpsql serve``: ``session``, ``cursor()``, ``close()``."""

    remote = True

    def __init__(self, client) -> None:
        self.client = client
        self.session = RemoteSession(client)
        self.where = f"{client.host}:{client.port}"

    def cursor(self) -> RemoteCursor:
        return RemoteCursor(self.client)

    def cancel(self) -> None:
        """Cancel the running statement on the server (Ctrl-C)."""
        self.client.cancel()

    def close(self) -> None:
        self.client.close()


def connect(conninfo: str = "", **options) -> RemoteConnection:
    """Connect to ``dpsql serve`` as an analyst, with the ``bounds`` error columns the shell
    turns into its ``±`` and ranges."""
    from dpsql.measure.postgres import WireClient
    extra = "-c dpsql.error_columns=bounds"
    options["options"] = f"{options['options']} {extra}" if options.get("options") else extra
    return RemoteConnection(WireClient(conninfo, **options))


__all__ = ["OPERATOR_ONLY", "RemoteColumn", "RemoteConnection", "connect", "operator_only", "remote_catalog",
           "to_result"]
