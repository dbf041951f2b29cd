"""Plain-text display of private values for the command line and the demo.

A value is shown with the half-width of its 95% interval (or its standard error);
an inferred value, which has no standard error, with the range the released
measurements allow for it.  The shell (``repl/render.py``) has its own aligned tables.
"""

from __future__ import annotations

import math

from dpsql.engine.variance import Z95


def _number(value: float) -> str:
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:,.3g}"


def format_value(value, stderr=None, mode: str = "ci95", bound=None) -> str:
    """``12,345 ± 210`` (95% interval by default); NULL shown distinctly; an inferred value
    (NaN stderr) as ``1,136 in [0, 48,842]`` when its range ``bound`` is known."""
    if value is None:
        return "NULL"
    if isinstance(value, float):
        text = _number(value)
    elif isinstance(value, int):
        text = f"{value:,}"
    else:
        text = str(value)
    if stderr is None or mode == "off":
        return text
    if isinstance(stderr, float) and math.isnan(stderr):
        if bound is None:
            return text
        lo, hi = bound
        side = [("?" if not math.isfinite(x) else _number(float(x))) for x in (lo, hi)]
        return f"{text} in [{side[0]}, {side[1]}]"
    half = stderr * (Z95 if mode == "ci95" else 1.0)
    return f"{text} ± {half:,.0f}" if half >= 10 else f"{text} ± {half:.2g}"


def describe_progress(stage: str, info: dict) -> str:
    """One line for a progress event of the engine (``Engine.progress`` events)."""
    if stage == "plan":
        return "planning the measurement strategy (HDMM)…"
    if stage == "measure":
        return (f"measuring: counting {info.get('blocks', '?')} marginals in one scan…"
                if not info.get("done") else f"measured {info.get('blocks', '?')} blocks")
    if stage == "fit":
        if info.get("loaded"):
            return "model loaded from disk"
        if info.get("done"):
            return f"model fitted in {info.get('seconds', 0):.1f} s"
        it, total = info.get("iteration", 0), info.get("iterations")
        return f"fitting the model: iteration {it:,}" + (f" of at most {total:,}" if total else "") + \
            (f", loss {info['loss']:.6g}" if "loss" in info else "")
    return f"{stage}…"


__all__ = ["describe_progress", "format_value", "Z95"]
