"""Implicit query matrices: leaves, Kronecker/union composites, workloads.

Workloads and strategies over large product domains are kept as structure (thesis
§3.4) and applied to vectors with thesis Algorithm 1 (§3.9); the factor
building blocks are those of ICML 2019 appendix B.1, Table 2.  See
``docs/architecture.md`` for the contract other packages code against.
"""

from dpsql.linalg.base import DENSE_LIMIT, WORK_LIMIT, Product, QueryMatrix, Transpose, Weighted
from dpsql.linalg.composite import EXACT_SENSITIVITY_LIMIT, Kron, Sum, Union, kron_matmat, max_column_sum
from dpsql.linalg.leaves import (
    Bucket, Diagonal, Explicit, Identity, Indicator, Ones, Total, Values,
)
from dpsql.linalg.ranges import (
    AllRange, Difference, Prefix, Semiseparable, Suffix, Tridiagonal, WidthRange,
    WidthRangeGram,
)
from dpsql.linalg.workloads import (
    Marginals, dense_factors, is_kron_union, kron_terms, to_dense_factors,
)

__all__ = [
    "QueryMatrix", "Transpose", "Weighted", "Product",
    "Identity", "Ones", "Total", "Values", "Indicator", "Bucket", "Diagonal", "Explicit",
    "Prefix", "Suffix", "Difference", "AllRange", "WidthRange", "Semiseparable",
    "Tridiagonal", "WidthRangeGram",
    "Kron", "Union", "Sum", "kron_matmat", "max_column_sum",
    "Marginals", "kron_terms", "is_kron_union", "dense_factors", "to_dense_factors",
    "DENSE_LIMIT", "WORK_LIMIT", "EXACT_SENSITIVITY_LIMIT",
]
