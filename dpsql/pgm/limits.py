"""Every size threshold and tolerance that decides how a model is fitted, in one place.

The fit (:func:`dpsql.pgm.auto.fit`) is an ordered list of finishers
(:mod:`dpsql.pgm.finishers`); which one runs, and whether its exact last step is tried, is
decided by the sizes below.  They were module constants of five modules (issue 36 item 1);
here they are one frozen value that the engine's configuration builds
(``Config.fit_limits``) and passes down, and the saved-model key is derived from it
(:func:`dpsql.pgm.finishers.fit_key`), so a changed limit never loads a model fitted under
another.  Every field is public metadata (sizes of the domain and of the query matrices),
never a value computed from the data.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from dpsql.triangulation import MAX_MODEL_CELLS

__all__ = ["FitLimits"]


@dataclass(frozen=True)
class FitLimits:
    """The thresholds of the fit, with the reason for each value."""

    #: JT-SIZE (cells of the junction tree) up to which the exact model is fitted, else the
    #: relaxed one (thesis Remark 1; the engine's ``[planner] max_model_cells``, whose one
    #: default is ``dpsql.triangulation.MAX_MODEL_CELLS``).
    capacity: int = MAX_MODEL_CELLS
    #: Fits end when the estimated (or certified) optimality gap is at most atol + rtol·loss,
    #: the loss in units of each measurement's σ, so the test is the same at every noise
    #: scale.  0.5 bounds every fitted value's distance from the optimum by 0.7 σ in the worst
    #: case and by √(0.5/m) σ ≈ 0.02 σ on average over m ≈ 1,000 noisy values.
    gap_atol: float = 0.5
    gap_rtol: float = 1e-6
    #: With ``fit(stop="discrepancy")`` (the library's default, not the engine's), exact models
    #: above this many cells stop at the discrepancy principle (loss ≤ number of noisy values):
    #: on adult with 15 random triples (5.3 M cells) that is 63 iterations, 44 s and error 0.205
    #: on the measured marginals, where 1,000 iterations took ~11 min of CPU for 0.268.  The
    #: engine fits to the gap instead: that stop left answers outside their reported errors
    #: (dpsql.engine.fitting.FIT_STOP; docs/engine.md, "Where the fit stops").
    discrepancy_above: int = 1_000_000
    #: The relaxed first-order fit's relative gap tolerance floor: it converges as O(1/t), and
    #: at 0.5 absolute a 55-marginal adult fit at ε = 1 ran 11,300 iterations (95 s).
    relaxed_rtol: float = 1e-3
    #: Dense-block solve (``polish.solve_clique``): the joint table of the measured
    #: attributes at most this many cells.
    dense_block_max_cells: int = 4_000_000
    #: Joint dual (``joint_dual``): joint tables up to this many cells (a few transforms of
    #: the table per Newton step) ...
    joint_dual_max_cells: int = 1 << 21
    #: ... and at most this many characters K (each step factors a K × K matrix) ...
    joint_dual_max_features: int = 1000
    #: ... and queries densified per measurement up to this many entries (rows × cells).
    joint_dual_query_entries: int = 1 << 20
    #: Face step after the exact first-order fit (``polish``): tree at most this many cells
    #: and the Hessian PᵀWP at most this many non-zeros (bounded by Σ_rows nnz(row)²) ...
    face_step_max_cells: int = 100_000
    face_step_max_nnz: int = 2_000_000
    #: The exact first-order fit's relative gap tolerance floor when that face step is refused
    #: (nothing but the first-order tail then finishes it; cf. ``relaxed_rtol``).  On
    #: examples/flights (89,031 cells; its 74,409-cell dest × distance clique has a Hessian far
    #: over face_step_max_nnz) 0.5 absolute took 10,269 iterations and 58.5 s of CPU; 1% of
    #: the loss (≈ 16 noise units) stops at ~3,300 iterations, 16 s, with the dashboard's
    #: errors against DuckDB unchanged (bench/RESULTS.md, "Fit of the flights example").
    unpolished_rtol: float = 1e-2
    #: ... with queries up to this many entries densified to build its matrix (32 MB).
    face_step_dense_entries: int = 1 << 22
    #: Workload-metric refit (``workload_fit``): dense workload rows over the joint table at
    #: most this many entries (64 MB; adult/ranges is 202 × 7,326).
    workload_max_entries: int = 1 << 23
    #: The exact first-order fit uses the sparse loss when its matrix has at most this many
    #: non-zeros per measurement (and ``sparse_max_nnz`` in all): on the adult dashboard (39
    #: measurements, 19,173 non-zeros) it is ~4x faster than the sum-tree loss; on NLTCS's 137
    #: marginals inside one 65,536-cell clique (8,978,432 non-zeros) 2 ms against 58 ms.
    sparse_nnz_per_measurement: int = 3000
    sparse_max_nnz: int = 12_000_000
    #: Residual reconstruction (``residual_fit``): attributes of at most this many cells (a
    #: dense eigenbasis per attribute).
    residual_max_attribute_cells: int = 4096
    #: The relaxed exact step (``relaxed_polish``) is first tried after this many first-order
    #: iterations (on adult's 121 marginals at ε = 100 it certified the optimum in 7 rounds
    #: from 300 iterations, whose loss was still 2,600 times the optimum) ...
    relaxed_exact_after: int = 300
    #: ... when its Hessian has at most this many non-zeros ...
    relaxed_step_max_nnz: int = 12_000_000
    #: ... and its estimated peak memory is at most this fraction of the machine's.
    relaxed_step_memory_fraction: float = 0.125
    #: Queries up to this many entries are densified for the relaxed step's matrix.
    relaxed_step_dense_entries: int = 1 << 22

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int | float) or isinstance(value, bool) or value < 0:
                raise ValueError(f"FitLimits.{name} must be a non-negative number, got {value!r}")

    @property
    def gap(self) -> tuple[float, float]:
        """(atol, rtol) of the gap test."""
        return (self.gap_atol, self.gap_rtol)

    def values(self) -> dict[str, int | float]:
        """Every limit by name (for the saved-model key and reports)."""
        return asdict(self)
