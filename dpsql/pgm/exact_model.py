"""The exact model as :func:`dpsql.pgm.auto.fit` returns it: a :class:`GraphicalModel` plus
why it was chosen and how its fit ended (``summary()``, ``report``)."""

from __future__ import annotations

from dpsql.domain import Domain
from dpsql.pgm.model import GraphicalModel
from dpsql.pgm.report import FitReport

__all__ = ["ExactModel"]


class ExactModel:
    """A fitted :class:`GraphicalModel` plus the reason it was chosen (``summary()``)."""

    def __init__(self, model: GraphicalModel, reason: str, seconds: float | None = None,
                 stopped: str | None = None, report: FitReport | None = None) -> None:
        self.model = model
        self.reason = reason
        self.seconds = seconds
        self.stopped = stopped
        self.report = report    # the finisher that ran, its certificate, the refusals

    # The GraphicalModel interface, stated explicitly so that it is documented here.
    @property
    def domain(self) -> Domain:
        return self.model.domain

    @property
    def cliques(self):
        return self.model.cliques

    @property
    def total(self) -> float:
        return self.model.total

    def marginal(self, attrs):
        return self.model.marginal(attrs)

    def marginals_many(self, cliques):
        return self.model.marginals_many(cliques)

    def answer(self, query):
        return self.model.answer(query)

    def answer_many(self, queries):
        return self.model.answer_many(queries)

    def supports(self, attrs) -> bool:
        return self.model.supports(attrs)

    def synthetic(self, *args, **kwargs):
        return self.model.synthetic(*args, **kwargs)

    def __getattr__(self, name):
        # Everything else (tree, theta, loss, potentials, ...) is the wrapped model's.
        if name == "model":
            raise AttributeError(name)
        return getattr(self.model, name)

    def summary(self) -> str:
        m = self.model
        lines = [
            "exact model (Private-PGM: mirror descent over the marginal polytope, thesis §4.3)",
            f"why: {self.reason}",
            f"structure: junction tree with {len(m.tree.cliques)} maximal cliques, "
            f"{m.tree.size:,} cells, largest clique "
            f"{max(m.tree.clique_size(c) for c in m.tree.cliques):,} cells",
            f"measured cliques: {len(set(m.measured))}; total N = {m.total:,.6g}",
        ]
        if m.loss:
            lines.append(f"loss: {m.loss[0]:.6g} → {m.loss[-1]:.6g} over {len(m.loss) - 1} iterations")
        if self.stopped:
            lines.append(f"stopped: {self.stopped}")
        if self.report is not None:
            lines += self.report.lines()
        if self.seconds is not None:
            lines.append(f"fitted in {self.seconds:.2f} s")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"ExactModel({self.model!r})"
