"""Rendering private answers, errors and CSV for the shell.

A private answer is only useful with its uncertainty, so each value cell reads
``12,345 ± 210``: the half-width of the 95% interval (or the standard error, or nothing,
per ``\\errors``), with the value rounded to the error's second significant digit so the
table never shows digits the noise has already destroyed.  The ``±`` signs of a column
line up.  A value the model inferred without a supporting measurement has no unbiased
standard error (the engine reports NaN); it shows the range the released measurements
allow instead, ``1,136 in [0, 48,842]``, is marked ``*`` and explained under the table.
"""

from __future__ import annotations

import csv
import math
import numbers
from collections.abc import Sequence
from typing import IO

from dpsql.engine.variance import Z95

NULL_TEXT = "(null)"
INFERRED_MARK = "*"
INFERRED_NOTE = ("* inferred by the model without a supporting measurement: no standard error; "
                 "[lower, upper] is the range the released measurements allow")
ERROR_MODES = ("ci95", "stderr", "off")


def _is_nan(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, numbers.Integral) and math.isnan(x)


def _decimals(half: float) -> int:
    """Decimals that show ``half`` with two significant digits (0 for half ≥ 10)."""
    if not (half > 0 and math.isfinite(half)):
        return 0
    return max(0, min(6, 1 - math.floor(math.log10(half))))


def _plain(value) -> str:
    if value is None:
        return NULL_TEXT
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        value = float(value)
        if math.isnan(value):
            return "NaN"
        if value == int(value) and abs(value) < 1e15:
            return f"{value:,.0f}"
        return f"{value:,.0f}" if abs(value) >= 1e5 else f"{value:,.2f}"
    return str(value)


def _range_text(bound) -> str:
    lo, hi = bound
    span = hi - lo if math.isfinite(hi) and math.isfinite(lo) else math.inf
    d = _decimals(span / 2) if math.isfinite(span) else 0

    def side(x: float) -> str:
        return "?" if not math.isfinite(x) else f"{x:,.{d}f}"

    return f"in [{side(lo)}, {side(hi)}]"


def format_cell(value, stderr, mode: str, bound=None) -> tuple[str, str, bool]:
    """``(value text, error text, inferred)`` for one cell; error text is "" when hidden.
    An inferred value (NaN stderr) shows its range ``bound`` = (lower, upper) instead."""
    if value is None or stderr is None or isinstance(value, str):
        return _plain(value), "", False
    if _is_nan(stderr):
        if bound is None or mode == "off":
            return _plain(value), "", True
        span = bound[1] - bound[0]
        d = _decimals(span / 2) if math.isfinite(span) else 0
        text = f"{float(value):,.{d}f}" if isinstance(value, numbers.Real) else str(value)
        return text, _range_text(bound), True
    se = float(stderr)
    half = se * Z95 if mode == "ci95" else se
    d = _decimals(half)
    text = f"{float(value):,.{d}f}" if isinstance(value, numbers.Real) else str(value)
    if mode == "off":
        return text, "", False
    return text, f"± {half:,.{d}f}", False


def _aligned(cells: list[tuple[str, str, bool]], right: bool) -> list[str]:
    """Pad value and error parts separately so the ``±`` of a column line up."""
    vw = max((len(v) for v, _, _ in cells), default=0)
    ew = max((len(e) for _, e, _ in cells), default=0)
    mark = any(m for _, _, m in cells)
    out = []
    for v, e, m in cells:
        text = v.rjust(vw) if right else v.ljust(vw)
        if ew:
            text += " " + e.ljust(ew) if e else " " * (ew + 1)
        if mark:
            text += " " + INFERRED_MARK if m else "  "
        out.append(text)
    return out


def _numeric(column) -> bool:
    return getattr(column, "type", "text") in ("integer", "double")


def _cells(result, mode: str) -> list[list[tuple[str, str, bool]]]:
    """Formatted cells by column (not by row)."""
    ncol = len(result.columns)
    by_col: list[list] = [[] for _ in range(ncol)]
    bounds = getattr(result, "bounds", None) or []
    for i, row in enumerate(result.rows):
        errs = result.stderr[i] if i < len(result.stderr) else ()
        rng = bounds[i] if i < len(bounds) else ()
        cells = [format_cell(row[j], errs[j] if j < len(errs) else None, mode,
                             rng[j] if j < len(rng) else None) for j in range(ncol)]
        if ncol and i < len(result.inferred) and result.inferred[i] and not any(m for _, _, m in cells):
            # the row is flagged but no value says which one: mark the last, as `dpsql query` does
            v, e, _ = cells[-1]
            cells[-1] = (v, e, True)
        for j in range(ncol):
            by_col[j].append(cells[j])
    return by_col


def has_inferred(result) -> bool:
    return any(result.inferred) if result.inferred else False


def table_lines(result, mode: str = "ci95") -> list[str]:
    """The aligned table: header, rule and one line per row."""
    headers = [c.name for c in result.columns]
    by_col = _cells(result, mode)
    texts = [_aligned(col, _numeric(c)) for col, c in zip(by_col, result.columns)]
    widths = [max([len(h)] + [len(t) for t in col]) for h, col in zip(headers, texts)]
    lines = [" " + " | ".join(h.center(w) for h, w in zip(headers, widths)).rstrip(),
             "-" + "-+-".join("-" * w for w in widths) + "-"]
    for i in range(len(result.rows)):
        cells = [(col[i].rjust(w) if _numeric(c) else col[i].ljust(w))
                 for col, c, w in zip(texts, result.columns, widths)]
        lines.append(" " + " | ".join(cells) + " ")
    return lines


def expanded_lines(result, mode: str = "ci95") -> list[str]:
    """One block per row, one line per column (``\\x``), for wide results."""
    headers = [c.name for c in result.columns]
    by_col = _cells(result, mode)
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
        footer += f", {describe_seconds(getattr(result, 'seconds', 0.0))}"
    cost = getattr(result, "cost", 0.0) or 0.0
    if cost > 0:
        footer += f", spent ρ = {float(cost):.6g}"
    lines.append(footer + ")")
    if has_inferred(result):
        lines.append(INFERRED_NOTE)
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
    """Raw values with a ``<column>_stderr`` beside each column that has one (and
    ``<column>_lower``/``_upper``, the range of inferred values, when any row is inferred),
    and an ``inferred`` flag per row when any row is inferred; returns the number of rows."""
    ncol = len(result.columns)
    with_err = [j for j in range(ncol)
                if any(j < len(r) and r[j] is not None for r in result.stderr)]
    flag = has_inferred(result)
    bounds = getattr(result, "bounds", None) or []
    header: list[str] = []
    for j, c in enumerate(result.columns):
        header.append(c.name)
        if j in with_err:
            header.append(f"{c.name}_stderr")
            if flag:
                header += [f"{c.name}_lower", f"{c.name}_upper"]
    if flag:
        header.append("inferred")
    writer = csv.writer(fh)
    writer.writerow(header)
    for i, row in enumerate(result.rows):
        errs = result.stderr[i] if i < len(result.stderr) else ()
        out: list = []
        for j in range(ncol):
            out.append("" if row[j] is None else row[j])
            if j in with_err:
                se = errs[j] if j < len(errs) else None
                out.append("" if se is None or _is_nan(se) else se)
                if flag:
                    b = bounds[i][j] if i < len(bounds) and j < len(bounds[i]) else None
                    out += ["", ""] if b is None else [b[0] if math.isfinite(b[0]) else "",
                                                       b[1] if math.isfinite(b[1]) else ""]
        if flag:
            out.append("true" if i < len(result.inferred) and result.inferred[i] else "false")
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
