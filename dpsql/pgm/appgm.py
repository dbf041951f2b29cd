"""Approx-Private-PGM: relaxed marginal consistency (McKenna et al., NeurIPS 2021).

The public surface of region-graph estimation, for when exact inference is too large:

* :func:`fit` — exact Private-PGM when the junction tree fits the capacity, the
  relaxed estimator otherwise (:mod:`dpsql.pgm.auto`);
* :class:`RegionGraph` — saturated region graphs and factor graphs (§4, Figure 1);
* :class:`ConvexGBP` — the approximate marginal oracle (Appendix A, Algorithm 2);
* :func:`estimate_relaxed` — Prox-PGM over the local polytope (Problem 2, §6);
* :func:`max_entropy_marginal` — out-of-model inference (Problem 4, Appendix B.3);
* :class:`RelaxedModel` and :class:`ExactModel` — the fitted models, both with the
  :class:`~dpsql.pgm.model.GraphicalModel` interface plus ``summary()``.
"""

from dpsql.pgm.auto import ExactModel, fit
from dpsql.pgm.convex_gbp import ConvexGBP, GBPResult
from dpsql.pgm.out_of_model import max_entropy_marginal
from dpsql.pgm.region_graph import RegionGraph
from dpsql.pgm.relaxed import RelaxedFit, estimate_relaxed
from dpsql.pgm.relaxed_model import RelaxedModel

__all__ = ["ConvexGBP", "ExactModel", "GBPResult", "RegionGraph", "RelaxedFit", "RelaxedModel",
           "estimate_relaxed", "fit", "max_entropy_marginal"]
