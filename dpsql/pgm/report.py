"""What a fit did, as data: which finisher ran, its certificate, and why the others did not.

:func:`dpsql.pgm.auto.fit` tries an ordered list of finishers (:mod:`dpsql.pgm.finishers`);
each either refuses the problem with a reason (:class:`Refusal`) or solves it.  The
:class:`FitReport` travels with the model (``model.report``), is saved with it
(:mod:`dpsql.pgm.store`) and is what the engine reports when a fit ends, so which solver ran
is a value rather than attributes set after construction (issue 36 item 1).  Every field is a
function of the released (noisy) measurements and public sizes only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Certificate", "FitReport", "Refusal"]


@dataclass(frozen=True)
class Refusal:
    """A finisher that did not run (or gave up), and why."""

    finisher: str
    reason: str

    def describe(self) -> str:
        return f"{self.finisher}: {self.reason}"


@dataclass(frozen=True)
class Certificate:
    """How close the fit is to the optimum of its problem: ``kind`` names the bound
    ("duality gap", "Frank–Wolfe gap", "Lagrange dual gap", "KKT", "estimated gap",
    "discrepancy"), ``value`` is it in units of the noise (None where the kind is a yes/no
    test), ``certified`` whether it is a proof (a gap bound or KKT conditions) rather than an
    estimate or a stopping rule."""

    kind: str
    value: float | None
    certified: bool

    def describe(self) -> str:
        text = self.kind if self.value is None else f"{self.kind} ≤ {self.value:.3g}"
        return text + (" (certified)" if self.certified else " (not certified)")


@dataclass(frozen=True)
class FitReport:
    """The path a fit took: ``path`` is the finisher that produced the model, ``certificate``
    its bound, ``refusals`` the finishers before it that refused (in order), ``seconds`` the
    fit's wall time."""

    path: str
    certificate: Certificate
    refusals: tuple[Refusal, ...] = ()
    seconds: float | None = None

    def describe(self) -> str:
        """One line: the path and its certificate."""
        return f"{self.path}; {self.certificate.describe()}"

    def lines(self) -> list[str]:
        out = [f"finisher: {self.describe()}"]
        out += [f"refused: {r.describe()}" for r in self.refusals]
        return out

    def to_json(self) -> dict:
        c = self.certificate
        return {"path": self.path, "certificate": [c.kind, c.value, c.certified],
                "refusals": [[r.finisher, r.reason] for r in self.refusals], "seconds": self.seconds}

    @classmethod
    def from_json(cls, data: dict) -> FitReport:
        kind, value, certified = data["certificate"]
        return cls(str(data["path"]), Certificate(str(kind), None if value is None else float(value),
                                                  bool(certified)),
                   tuple(Refusal(str(f), str(r)) for f, r in data["refusals"]), data.get("seconds"))
