"""Rendering private answers, errors and CSV for the shell.

A private answer is only useful with its uncertainty, so each value cell reads
``12,345 ± 210``: the half-width of the 95% interval (or the standard error, or nothing,
per ``\\errors``).  The cells follow the one display rule of ``dpsql.display`` (shared with
``dpsql query`` and the wire server): the value rounded at its 95% half-width's second
significant digit, the ``±`` signs of a column lined up; a value the model inferred without
a supporting measurement shows the range the released measurements allow instead,
``1,136 in [0, 48,842]``, is marked ``*`` and explained under the table.  CSV (``\\o``) holds
the same rounded numbers, with the errors and ranges in columns of their own.
"""

from __future__ import annotations

import csv
import math
import numbers
from collections.abc import Sequence
from typing import IO

from dpsql.display import (BOUNDED_NOTE, has_bounded, ERROR_MODES, INFERRED_MARK, INFERRED_NOTE, NULL_TEXT, Z95, cells,  # noqa: F401
                           bounded_columns, format_cell, round_error, round_range, rounded_rows, table_lines)


def _is_nan(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, numbers.Integral) and math.isnan(x)


def _csv_number(x):
    """A whole float as an integer (``16192``, not ``16192.0``), as the wire writes it."""
    if isinstance(x, float) and math.isfinite(x) and x == int(x) and abs(x) < 1e15:
        return int(x)
    return x


def has_inferred(result) -> bool:
    return any(result.inferred) if result.inferred else False


def expanded_lines(result, mode: str = "ci95") -> list[str]:
    """One block per row, one line per column (``\\x``), for wide results."""
    headers = [c.name for c in result.columns]
    by_col = cells(result, mode)
    hw = max((len(h) for h in headers), default=0)
    lines = []
    for i in range(len(result.rows)):
        title = f"-[ RECORD {i + 1} ]"
        lines.append(title + "-" * max(3, hw + 12 - len(title)))
        for j, h in enumerate(headers):
            v, e, m = by_col[j][i]
            text = v + (" " + e if e else "") + (" " + INFERRED_MARK if m else "")
            lines.append(f"{h.ljust(hw)} | {text}")
    return lines


def describe_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    return f"{seconds:.2f} s"


def result_lines(result, mode: str = "ci95", *, expanded: bool = False,
                 timing: bool = True) -> list[str]:
    """Everything the shell prints for one statement's result."""
    if not result.columns:
        return [result.message or "OK"]
    if result.message == "EXPLAIN" and len(result.columns) == 1:
        return [str(row[0]) for row in result.rows]
    lines = expanded_lines(result, mode) if expanded else table_lines(result, mode)
    n = len(result.rows)
    footer = f"({n} row{'' if n == 1 else 's'}"
    if timing:
        footer += f", {describe_seconds(result.seconds)}"
    cost = result.cost or 0.0
    if cost > 0:
        footer += f", spent ρ = {float(cost):.6g}"
    lines.append(footer + ")")
    if has_inferred(result):
        lines.append(INFERRED_NOTE)
    if has_bounded(result) and mode != "off":
        lines.append(BOUNDED_NOTE)
    # public remarks beside the errors: a people view's truncation figure, released with noise
    lines.extend(getattr(result, "notes", ()) or ())
    return lines


def error_lines(exc, sql: str | None = None) -> list[str]:
    """``ERROR [SQLSTATE]: message``, the offending line with a caret, DETAIL and HINT."""
    state = getattr(exc, "sqlstate", None)
    message = getattr(exc, "message", None) or str(exc)
    lines = [f"ERROR [{state}]: {message}" if state else f"ERROR: {message}"]
    pos = getattr(exc, "position", None)
    if sql and isinstance(pos, int) and 1 <= pos <= len(sql) + 1:
        lines += caret_lines(sql, pos)
    if getattr(exc, "detail", None):
        lines.append(f"DETAIL: {exc.detail}")
    if getattr(exc, "hint", None):
        lines.append(f"HINT: {exc.hint}")
    return lines


def caret_lines(sql: str, position: int, width: int = 72) -> list[str]:
    """The line of ``sql`` holding 1-based ``position`` and a caret under it; long lines
    are cut to a window around the position so the caret stays on screen."""
    offset = position - 1
    line_start = sql.rfind("\n", 0, offset) + 1
    line_end = sql.find("\n", offset)
    line_end = len(sql) if line_end < 0 else line_end
    line = sql[line_start:line_end].replace("\t", " ")
    lineno = sql.count("\n", 0, line_start) + 1
    col = offset - line_start
    prefix = f"LINE {lineno}: "
    room = max(20, width - len(prefix))
    if len(line) > room:
        lo = max(0, min(col - room // 2, len(line) - room))
        cut = line[lo:lo + room]
        if lo > 0:
            cut = "..." + cut[3:]
        if lo + room < len(line):
            cut = cut[:-3] + "..."
        line, col = cut, col - lo
    return [prefix + line, " " * (len(prefix) + col) + "^"]


def write_csv(result, fh: IO[str]) -> int:
    """Values with a ``<column>_stderr`` beside each column that has one (and
    ``<column>_lower``/``_upper``, the range of inferred values, when any row is inferred),
    and an ``inferred`` flag per row when any row is inferred (and a ``binned`` flag when any
    value's interval holds a binning bound); returns the number of rows.
    The numbers are those the wire server sends (``dpsql.display.rounded_rows``): values at
    their error's precision, errors at two significant digits, ranges rounded outward."""
    ncol = len(result.columns)
    with_err = [j for j in range(ncol)
                if any(j < len(r) and r[j] is not None for r in result.stderr)]
    flag = has_inferred(result)
    bounds = result.bounds or []
    header: list[str] = []
    for j, c in enumerate(result.columns):
        header.append(c.name)
        if j in with_err:
            header.append(f"{c.name}_stderr")
            if flag:
                header += [f"{c.name}_lower", f"{c.name}_upper"]
    if flag:
        header.append("inferred")
    binned = has_bounded(result)
    if binned:   # which rows' intervals hold a binning bound, not the noise alone
        header.append("binned")
    writer = csv.writer(fh)
    writer.writerow(header)
    for i, row in enumerate(rounded_rows(result)):
        errs = result.stderr[i] if i < len(result.stderr) else ()
        out: list = []
        for j in range(ncol):
            out.append("" if row[j] is None else _csv_number(row[j]))
            if j in with_err:
                se = errs[j] if j < len(errs) else None
                out.append("" if se is None or _is_nan(se) else _csv_number(round_error(se)))
                if flag:
                    b = bounds[i][j] if i < len(bounds) and bounds[i] and j < len(bounds[i]) else None
                    b = round_range(b) if b is not None else None
                    out += ["", ""] if b is None else [_csv_number(x) if math.isfinite(x) else "" for x in b]
        if flag:
            out.append("true" if i < len(result.inferred) and result.inferred[i] else "false")
        if binned:
            out.append("true" if bounded_columns(result, i) else "false")
        writer.writerow(out)
    return len(result.rows)


def grid_lines(headers: Sequence[str], rows: Sequence[Sequence[str]],
               right: Sequence[int] = ()) -> list[str]:
    """A plain aligned table of strings (metadata listings; no errors to format)."""
    widths = [max([len(h)] + [len(r[j]) for r in rows]) for j, h in enumerate(headers)]
    lines = [" " + " | ".join(h.center(w) for h, w in zip(headers, widths)).rstrip(),
             "-" + "-+-".join("-" * w for w in widths) + "-"]
    for r in rows:
        cells = [c.rjust(w) if j in right else c.ljust(w) for j, (c, w) in enumerate(zip(r, widths))]
        lines.append((" " + " | ".join(cells)).rstrip())
    return lines


def kv_lines(rows: Sequence[tuple[str, str]]) -> list[str]:
    """A two-column ``name  value`` listing for reports (plan, budget, settings)."""
    w = max((len(k) for k, _ in rows), default=0)
    return [f"{k.ljust(w)}  {v}" for k, v in rows]


__all__ = ["format_cell", "table_lines", "expanded_lines", "result_lines", "error_lines",
           "caret_lines", "write_csv", "grid_lines", "kv_lines", "describe_seconds", "NULL_TEXT",
           "INFERRED_NOTE", "ERROR_MODES", "Z95"]
