"""HDMM strategy selection (McKenna thesis ch. 3): error model, SVD bound, OPT_0/⊗/+/M.

``optimize(W, noise, ...)`` returns a :class:`Strategy` whose measurement blocks the
measure step counts; ``expected_error``/``rmse``/``svd_bound`` evaluate strategies from
structured grams.  A strategy's measurements are answered by least squares in the engine
(``dpsql.engine.variance``, on ``dpsql.linalg.rowscaled.GramPinv``), the one implementation.

The names below are imported on first use (PEP 562): a process that only answers from a
saved model imports ``dpsql.plan.joint`` (standard errors of ResidualPlanner releases) and
none of the planner, scipy.optimize or scipy.linalg (issue 17: ≤ 1 s per new process).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "StrategyCache": "cache",
    "analytic_gaussian_sigma": "calibration", "gaussian_sigma": "calibration", "zcdp_sigma": "calibration",
    "expected_error": "error", "per_query_variance": "error", "query_errors": "error", "rmse": "error",
    "term_errors": "error",
    "QueryPart": "objective", "QuerySpec": "objective",
    "OrderedStrategy": "ordered", "opt_ordered": "ordered",
    "Caps": "planner", "RowFactor": "planner", "optimize": "planner",
    "opt_0": "operators", "opt_kron": "operators", "opt_marginals": "operators",
    "opt_per_query": "operators", "opt_union": "operators", "round_strategy": "operators",
    "MeasurementBlock": "strategy", "Strategy": "strategy",
    "svd_bound": "svd_bound", "svd_lower_bound": "svd_bound",
    "Workload": "workload",
}


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dpsql.plan' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"dpsql.plan.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


__all__ = [
    "Workload", "QuerySpec", "QueryPart", "Strategy", "MeasurementBlock", "Caps", "RowFactor",
    "query_errors", "term_errors",
    "expected_error", "rmse", "per_query_variance", "svd_bound", "svd_lower_bound",
    "opt_0", "opt_kron", "opt_union", "opt_marginals", "opt_per_query", "optimize", "round_strategy",
    "OrderedStrategy", "opt_ordered",
    "StrategyCache",
    "analytic_gaussian_sigma", "gaussian_sigma", "zcdp_sigma",
]
