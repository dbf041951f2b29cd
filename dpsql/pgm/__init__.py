"""Private-PGM reconstruction: fit a graphical model to noisy measurements (thesis ch. 4).

``estimate(domain, measurements)`` returns a :class:`GraphicalModel` from which any
marginal, Kronecker query or synthetic dataset is answered.  This package knows
nothing of SQL, DuckDB or privacy budgets: it post-processes noisy numbers.
"""

from dpsql.pgm.clique_vector import CliqueVector
from dpsql.pgm.estimation import DEFAULT_CAPACITY, Progress, estimate
from dpsql.pgm.factor import Factor
from dpsql.pgm.junction_tree import JunctionTree, model_size
from dpsql.pgm.measurement import Measurement
from dpsql.pgm.model import GraphicalModel
from dpsql.pgm.appgm import (ConvexGBP, ExactModel, RegionGraph, RelaxedModel, estimate_relaxed, fit,
                             max_entropy_marginal)

__all__ = ["CliqueVector", "ConvexGBP", "DEFAULT_CAPACITY", "ExactModel", "Factor", "GraphicalModel",
           "JunctionTree", "Measurement", "Progress", "RegionGraph", "RelaxedModel", "estimate",
           "estimate_relaxed", "fit", "max_entropy_marginal", "model_size"]
