"""One display rule for private values, shared by every front end.

A noisy value has no more precision than its noise, so every front end shows it the same
way (issue 29): rounded at the second significant digit of its 95% interval's half-width
(never coarser than whole units, so a count reads as a whole number), beside its error with
two significant digits: ``12,345 ± 210``, ``1,049.83 ± 0.52``.  A value far inside its error
therefore shows as ``0 ± 42``, never as float noise such as ``2.23e-308 ± 42``.  The value's
rounding uses the 95% half-width whatever error the front end shows (``± stderr`` or none),
so one answer reads the same in every mode.  An inferred value (NaN standard error) is
shown with the range the released measurements allow for it, ``1,136 in [0, 48,842]``,
rounded at that range's half-width.

Two renderings of the one rule:

* text for people (``dpsql query``, the demo, the shell's tables: ``format_cell``,
  ``table_lines``), with thousands separators and the ``±`` signs of a column lined up;
* numbers for programs (the wire server's values in text and binary, the shell's CSV:
  ``rounded_rows``, ``round_value``, ``round_error``): the same rounded number, which a BI
  tool parses as a number; errors and ranges stay in their own columns, never a ``±`` string.
  A range's lower end is rounded down and its upper end up, so it still holds every value
  it held.

The in-process DB-API (``cursor.fetchall``, ``dpsql.read_sql``) returns the unrounded
floats: it is for computing with, and rounding there would only add error.
"""

from __future__ import annotations

import math
import numbers

from dpsql.engine.variance import Z95

NULL_TEXT = "(null)"
INFERRED_MARK = "*"
INFERRED_NOTE = ("* inferred by the model without a supporting measurement: no standard error; "
                 "[lower, upper] is the range the released measurements allow")
BOUNDED_MARK = "(binned)"
BOUNDED_NOTE = ("(binned): the ± also holds a bound on the error of binning (values replaced by their "
                "bin's midpoint): a bounded interval, not a pure 95% CI (docs/sql.md)")
ERROR_MODES = ("ci95", "stderr", "off")
MAX_TEXT_DECIMALS = 6   # text never shows more decimals; programs get the full rounding


def _is_nan(x) -> bool:
    if type(x) is float:     # the common case, without the ABC checks (1,459-row answers)
        return x != x
    return isinstance(x, numbers.Real) and not isinstance(x, numbers.Integral) and math.isnan(x)


def decimals(error) -> int | None:
    """Decimal places that show ``error`` with two significant digits, at least 0 (whole
    units): 1 for 0.52, 0 for 42 or 810.  None when the error is 0, NaN or infinite (an
    exact value, or none to round by)."""
    if error is None:
        return None
    error = abs(float(error))
    if not (error > 0 and math.isfinite(error)):
        return None
    two = float(f"{error:.2g}")   # 9.96 -> 10: the digits are counted after rounding
    return max(0, 1 - math.floor(math.log10(two)))


def value_decimals(stderr) -> int | None:
    """Decimals of a value with this standard error: those of its 95% half-width."""
    if stderr is None or _is_nan(stderr):
        return None
    return decimals(float(stderr) * Z95)


def range_decimals(bound) -> int | None:
    """Decimals of an inferred value and of its range: those of the range's half-width."""
    if bound is None:
        return None
    lo, hi = float(bound[0]), float(bound[1])
    return decimals((hi - lo) / 2) if math.isfinite(hi - lo) else 0


def _round(x, d: int | None):
    if d is None or isinstance(x, bool) or not isinstance(x, numbers.Real):
        return x
    if isinstance(x, numbers.Integral):
        return int(x)
    x = float(x)
    if not math.isfinite(x):
        return x
    return round(x, d) + 0.0   # + 0.0: -0.0 (a small negative rounded) reads as 0


def round_value(value, stderr, bound=None):
    """The number a program receives for ``value``: rounded at its 95% half-width's second
    significant digit (an inferred value at its range's); keys and exact values unchanged."""
    if stderr is not None and _is_nan(stderr):
        return _round(value, range_decimals(bound))
    return _round(value, value_decimals(stderr))


def round_error(error):
    """An error (standard error or half-width) at two significant digits, whole units above 10."""
    if error is None or _is_nan(error):
        return error
    return _round(error, decimals(error))


def _outward(x, d: int | None, up: bool):
    if x is None or d is None or not math.isfinite(float(x)):
        return x
    scaled = float(x) * 10.0 ** d
    return (math.ceil(scaled) if up else math.floor(scaled)) / 10.0 ** d + 0.0


def round_range(bound):
    """An inferred value's (lower, upper) rounded outward at its half-width's decimals."""
    if bound is None:
        return None
    d = range_decimals(bound)
    return _outward(bound[0], d, False), _outward(bound[1], d, True)


def rounded_rows(result) -> list[tuple]:
    """``result.rows`` as programs receive them (the wire, CSV): each value rounded by
    ``round_value``; the columns ``SET dpsql.error_columns`` appended (the last
    ``result.appended``; per value column either its error, or its ci95, lower and upper,
    in the order of ``dpsql.engine.results.error_column_names``) rounded as errors and
    outward as ranges."""
    ncol = len(result.columns)
    # getattr: any front end's result, also a link's or a test double's without these fields
    extra = getattr(result, "appended", 0) or 0
    base = ncol - extra
    stderr = getattr(result, "stderr", None) or []
    bounds = getattr(result, "bounds", None) or []
    valued = [j for j in range(base) if any(j < len(e) and e[j] is not None for e in stderr)]
    per = extra // len(valued) if valued and extra % len(valued) == 0 else 0
    out = []
    for i, row in enumerate(result.rows):
        errs = stderr[i] if i < len(stderr) else ()
        rng = bounds[i] if i < len(bounds) and bounds[i] else ()
        new = list(row)
        for j in range(base):
            e = errs[j] if j < len(errs) else None
            new[j] = round_value(row[j], e, rng[j] if j < len(rng) else None)
        for k, j in enumerate(valued if per else ()):
            at = base + k * per
            new[at] = round_error(row[at])
            if per == 3:   # c_ci95, c_lower, c_upper
                b = rng[j] if j < len(rng) else None
                d = range_decimals(b) if b is not None else None
                new[at + 1] = _outward(row[at + 1], d, False)
                new[at + 2] = _outward(row[at + 2], d, True)
        out.append(tuple(new))
    return out


# -- text for people ------------------------------------------------------------------------

def _fixed(x: float, d: int) -> str:
    text = f"{float(x) + 0.0:,.{d}f}"
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text) else text


def plain(value, group: bool = True) -> str:
    """A key or exact value: integers with separators (none when ``group`` is false), other
    numbers with up to six significant digits (no exponent below 10¹⁵)."""
    if value is None:
        return NULL_TEXT
    if isinstance(value, bool):
        return str(value).lower()
    sep = "," if group else ""
    if isinstance(value, numbers.Integral):
        return f"{int(value):{sep}}"
    if isinstance(value, numbers.Real):
        v = float(value)
        if math.isnan(v):
            return "NaN"
        if math.isinf(v):
            return "Infinity" if v > 0 else "-Infinity"
        if v == int(v) and abs(v) < 1e15:
            return f"{v:{sep}.0f}"
        if abs(v) >= 1e15 or abs(v) < 1e-4:
            return f"{v:.6g}"
        d = max(0, 5 - math.floor(math.log10(abs(v))))
        text = _fixed(v, d) if group else f"{v:.{d}f}"
        return text.rstrip("0").rstrip(".")
    return str(value)


def _error_text(err: float) -> str:
    d = decimals(err)
    if d is None:
        return "0" if err == 0 else plain(err)
    if d > MAX_TEXT_DECIMALS:
        return f"{err:.2g}"
    return _fixed(round(err, d), d)


def format_cell(value, stderr, mode: str = "ci95", bound=None) -> tuple[str, str, bool]:
    """``(value text, error text, inferred)`` for one cell; the error text is "" when hidden
    (mode "off") or when the cell is a key.  An inferred value (NaN stderr) shows its range
    ``bound`` = (lower, upper) as ``in [lower, upper]`` instead of an error."""
    if value is None or stderr is None or isinstance(value, (str, bool)) \
            or (type(value) is not float and not isinstance(value, numbers.Real)):
        # a key (or a value with no error) as PostgreSQL prints it: a year, a code or an
        # EXTRACT(YEAR …) is 2013, not 2,013; separators are for values that carry an error
        return plain(value, group=False), "", False
    if _is_nan(stderr):
        if bound is None or mode == "off":
            return plain(value), "", True
        places = min(range_decimals(bound) or 0, MAX_TEXT_DECIMALS)   # an int: bound is not None
        lo, hi = round_range(bound)
        side = ["?" if not math.isfinite(float(x)) else _fixed(x, places) for x in (lo, hi)]
        return _fixed(round_value(value, stderr, bound), places), f"in [{side[0]}, {side[1]}]", True
    se = float(stderr)
    d = value_decimals(se)
    if d is None:   # an exact value (zero error)
        text = plain(value)
    else:
        text = _fixed(round_value(value, se), min(d, MAX_TEXT_DECIMALS))
    if mode == "off":
        return text, "", False
    return text, "± " + _error_text(se * Z95 if mode == "ci95" else se), False


def format_value(value, stderr=None, mode: str = "ci95", bound=None) -> str:
    """One cell as one string: ``12,345 ± 210``, ``1,136 in [0, 48,842]``, ``(null)``."""
    text, err, _ = format_cell(value, stderr, mode, bound)
    return f"{text} {err}" if err else text


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


def cells(result, mode: str) -> list[list[tuple[str, str, bool]]]:
    """Formatted cells by column (not by row)."""
    ncol = len(result.columns)
    by_col: list[list] = [[] for _ in range(ncol)]
    bounds = getattr(result, "bounds", None) or []
    for i, row in enumerate(result.rows):
        errs = result.stderr[i] if i < len(result.stderr) else ()
        rng = bounds[i] if i < len(bounds) and bounds[i] else ()
        row_cells = [format_cell(row[j], errs[j] if j < len(errs) else None, mode,
                                 rng[j] if j < len(rng) else None) for j in range(ncol)]
        for j in bounded_columns(result, i):
            v, e, m = row_cells[j]
            if e:
                row_cells[j] = (v, f"{e} {BOUNDED_MARK}", m)
        if ncol and i < len(result.inferred) and result.inferred[i] and not any(m for _, _, m in row_cells):
            # the row is flagged but no value says which one: mark the last
            v, e, _ = row_cells[-1]
            row_cells[-1] = (v, e, True)
        for j in range(ncol):
            by_col[j].append(row_cells[j])
    return by_col


def bounded_columns(result, i: int) -> list[int]:
    """Columns of row i whose interval includes a binning bound (``Result.bias``)."""
    bias = getattr(result, "bias", None) or []
    row = bias[i] if i < len(bias) and bias[i] else ()
    return [j for j, b in enumerate(row) if b is not None]


def has_bounded(result) -> bool:
    return any(bounded_columns(result, i) for i in range(len(result.rows)))


def table_lines(result, mode: str = "ci95") -> list[str]:
    """The aligned table: header, rule and one line per row."""
    headers = [c.name for c in result.columns]
    texts = [_aligned(col, _numeric(c)) for col, c in zip(cells(result, mode), result.columns)]
    widths = [max([len(h)] + [len(t) for t in col]) for h, col in zip(headers, texts)]
    lines = [" " + " | ".join(h.center(w) for h, w in zip(headers, widths)).rstrip(),
             "-" + "-+-".join("-" * w for w in widths) + "-"]
    for i in range(len(result.rows)):
        row = [(col[i].rjust(w) if _numeric(c) else col[i].ljust(w))
               for col, c, w in zip(texts, result.columns, widths)]
        lines.append(" " + " | ".join(row) + " ")
    return lines


def describe_progress(stage: str, info: dict) -> str:
    """One line for a progress event of the engine (``Engine.progress`` events)."""
    if stage == "plan":
        return "planning the measurement strategy (HDMM)…"
    if stage == "measure":
        return (f"measuring: counting {info.get('blocks', '?')} marginals in one scan…"
                if not info.get("done") else f"measured {info.get('blocks', '?')} blocks")
    if stage == "fit":
        path = f" ({info['path']}: {info['certificate']})" if "path" in info else ""
        if info.get("loaded"):
            return "model loaded from disk" + path
        if info.get("done"):
            return f"model fitted in {info.get('seconds', 0):.1f} s" + path
        it, total = info.get("iteration", 0), info.get("iterations")
        return f"fitting the model: iteration {it:,}" + (f" of at most {total:,}" if total else "") + \
            (f", loss {info['loss']:.6g}" if "loss" in info else "")
    return f"{stage}…"


__all__ = ["describe_progress", "format_value", "format_cell", "plain", "table_lines", "cells",
           "round_value", "round_error", "round_range", "rounded_rows", "decimals",
           "value_decimals", "range_decimals", "NULL_TEXT", "INFERRED_MARK", "INFERRED_NOTE",
           "BOUNDED_MARK", "BOUNDED_NOTE", "bounded_columns", "has_bounded",
           "ERROR_MODES", "Z95"]
