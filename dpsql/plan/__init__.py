"""HDMM strategy selection (McKenna thesis ch. 3): error model, SVD bound, OPT_0/⊗/+/M.

``optimize(W, noise, ...)`` returns a :class:`Strategy` whose measurement blocks the
measure step counts; ``expected_error``/``rmse``/``svd_bound`` evaluate strategies from
structured grams; ``least_squares`` is the HDMM-only reconstruction baseline.
"""

from dpsql.plan.cache import StrategyCache
from dpsql.plan.calibration import analytic_gaussian_sigma, gaussian_sigma, zcdp_sigma
from dpsql.plan.error import expected_error, per_query_variance, query_errors, rmse, term_errors
from dpsql.plan.objective import QueryPart, QuerySpec
from dpsql.plan.planner import (
    Caps, opt_0, opt_kron, opt_marginals, opt_per_query, opt_union, optimize, round_strategy,
)
from dpsql.plan.reconstruct import LeastSquaresEstimate, least_squares
from dpsql.plan.strategy import MeasurementBlock, Strategy
from dpsql.plan.svd_bound import svd_bound, svd_lower_bound
from dpsql.plan.workload import Workload

__all__ = [
    "Workload", "QuerySpec", "QueryPart", "Strategy", "MeasurementBlock", "Caps",
    "query_errors", "term_errors",
    "expected_error", "rmse", "per_query_variance", "svd_bound", "svd_lower_bound",
    "opt_0", "opt_kron", "opt_union", "opt_marginals", "opt_per_query", "optimize", "round_strategy",
    "least_squares", "LeastSquaresEstimate", "StrategyCache",
    "analytic_gaussian_sigma", "gaussian_sigma", "zcdp_sigma",
]
