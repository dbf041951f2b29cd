"""The engine's models: load a saved model of a table's releases or fit one (Private-PGM,
exact or relaxed, ``dpsql.pgm.auto.fit``), save it, and serve it to every connection while a
refit runs (thesis ch. 4; docs/engine.md).

``ModelStore`` owns this for ``Engine``, which holds one as ``engine.models`` and delegates
its model methods to it (issue 36 item 3: engine.py held release sync, planning, measuring,
fitting and persistence in one 990-line class, and then inherited this part as a mixin that
read the engine's attributes).  The store is given everything it uses when it is built: the
configuration, the engine's lock, how to look up and to sync a table's state, where progress
goes and how to compile the workload's matrix; it reads nothing else of the engine.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import TYPE_CHECKING

from dpsql.engine.bounds import BoundsModel
from dpsql.engine.state import TableState, _identity, _sha
from dpsql.engine.variance import SupportBlock, VarianceModel
from dpsql.errors import Error, OperationalError
from dpsql.linalg.threads import one_blas_thread
from dpsql.measure import release as rel
from dpsql.pgm.auto import fit
from dpsql.pgm.finishers import fit_key
from dpsql.pgm.measurement import Measurement, estimate_total
from dpsql.pgm.store import load_model, save_model

if TYPE_CHECKING:
    from collections.abc import Callable

    from dpsql.engine.config import Config
    from dpsql.pgm import GraphicalModel

#: Bumped whenever the saved file's layout changes (ModelStore.model_path).  What the fit
#: computes is named by ``fit_key``: its finishers' names and versions and every FitLimits
#: value (it replaced a hand-edited estimator version string, issue 36 item 1).
MODEL_FORMAT = "1"
#: The engine's exact fits run to the gap tolerance at every size (``fit(stop=None)``); they
#: stopped at the discrepancy principle above ``FitLimits.discrepancy_above`` cells, which nothing
#: certifies: on TPC-H's 1.4 M-cell line-item model Q1's counts had realised MSE 2.3 times
#: their reported se² (0.5 fitted to the gap; issue 35 item 6, bench/RESULTS.md "Where the fit
#: stops").  Part of each saved model's key, so a model fitted with the old stop is not loaded.
FIT_STOP: str | None = None


class ModelStore:
    """Loading, fitting, saving and serving the model of each table's releases.

    ``state(table)`` returns the table's ``TableState`` (raising for an unknown table) and
    ``sync(table)`` the same brought up to date with the ledger and the source; both, and
    every read or write of a state here, are under ``lock`` (the engine's, shared with its
    measurements).  ``progress(stage, info)`` reports to the listeners and ``listening()``
    says whether there are any (a fit passes no per-iteration callback otherwise).
    ``workload_matrix(table)`` is the declared workload's matrix on the table as the planner
    scores it (``Engine.workload_for``), compiled only for a fit that uses it."""

    def __init__(self, config: Config, lock: threading.RLock, *,
                 state: Callable[[str], TableState], sync: Callable[[str], TableState],
                 progress: Callable[[str, dict], None], listening: Callable[[], bool],
                 workload_matrix: Callable[[str], object]) -> None:
        self.config = config
        self._lock = lock
        self._state = state
        self._sync = sync
        self._progress = progress
        self._listening = listening
        self._workload_matrix = workload_matrix

    def model(self, table: str, stale_ok: bool = False) -> tuple[GraphicalModel | None, VarianceModel | None, int]:
        """The model of the table's current releases: loaded from its saved file when a
        process fitted it before (``model_path``), else fitted (warm-started from the
        previous model) and saved.  One fit per table at a time: concurrent callers (server
        connections) wait for it instead of fitting again.

        With ``stale_ok``, while that model is not ready the previous one of the same release
        identity answers (its own variance and version) and the fit runs in the background
        (``prepare``): a refit no longer blocks every query on the table (issue 34 item 8).
        ``model_is_current`` tells the caller which one it got."""
        state = self._state(table)
        while True:
            with self._lock:
                self._sync(table)   # releases (any process's) and source changes since the last look
                if not state.released:
                    return None, None, state.model_version
                if state.model is not None:
                    return state.model, state.variance, state.model_version
                stale = state.stale if stale_ok else None
            if stale is not None:
                self.prepare(table)
                return stale
            with state.fit_lock:
                with self._lock:
                    if state.model is not None:
                        continue      # another thread installed it while we waited
                    keys = frozenset(state.release_keys)
                    released = list(state.released)
                    previous = state.model_last
                model = self._load_or_fit(table, state, released, keys, previous)
                with self._lock:
                    state.model_last = model
                    if frozenset(state.release_keys) != keys:
                        continue      # a release arrived during the fit: refit, warm-started
                    dom = state.schema.domain
                    state.model = model
                    state.variance = VarianceModel(dom.attributes, dict(zip(dom.attributes, dom.shape)),
                                                   [SupportBlock(b.clique, b.factors, sd, b.scale, values)
                                                    for b, values, sd in released])
                    state.bounds = None
                    state.stale = None
                    state.model_version += 1
                    return state.model, state.variance, state.model_version

    def model_is_current(self, table: str, version: int) -> bool:
        """Whether ``version`` is the model of the table's current releases (not a stale one)."""
        state = self._state(table)
        with self._lock:
            return state.model is not None and state.model_version == version

    def model_key(self, table: str) -> str:
        """Key of the model fitted from the current releases: a saved model is valid only
        for the same identity and the same set of releases."""
        with self._lock:
            state = self._sync(table)
            return _sha(_identity(state).key(), *sorted(state.release_keys))

    def model_path(self, table: str, release_keys=None) -> Path:
        """Where the model of a set of releases is saved: next to the ledger, keyed by the
        release identity and the releases (``model_key``, or the given release keys, which
        begin with the identity's key) and by what would change the fit (the estimator and
        its options).  The one place that defines a saved model's file."""
        if release_keys is None:
            base = self.model_key(table)
        else:
            with self._lock:
                base = _sha(_identity(self._state(table)).key(), *sorted(release_keys))
        # the declared workload too: the dense-block fit projects in its metric (_fit)
        ident = _sha(MODEL_FORMAT, fit_key(self.config.fit_limits), base, self.config.fit_iters,
                     self.workload_identity(), f"stop={FIT_STOP}")
        return Path(str(self.config.ledger_path) + ".models") / f"{table}-{ident[:40]}.npz"

    def workload_identity(self) -> str:
        """What of the declared workload the fit depends on (its statements, their weights and
        the planner's objective, which scales each query's rows), as text: no compiling, so a
        process loading a saved model stays fast."""
        return _sha(tuple(self.config.workload), tuple(self.config.workload_weights),
                    self.config.planner.objective)

    def fit_workload(self, table: str) -> list:
        """The declared workload's queries on ``table`` as the planner scores them (rows scaled
        for the objective, ``workload_for``), for the fit's metric; empty when none."""
        if not self.config.workload:
            return []
        try:
            return [self._workload_matrix(table)]
        except Error:   # no workload query on this table, or one no longer compiles: no metric
            return []

    def _load_or_fit(self, table: str, state: TableState, released, keys, previous):
        path = self.model_path(table, keys)
        dom = state.schema.domain
        if path.exists():
            model = load_model(path, dom)
            if model is not None:
                self._progress("fit", {"table": table, "loaded": True, "done": True, "seconds": 0.0,
                                      **_report_info(model)})
                return model
        measurements = self.fit_measurements(released)
        if estimate_total(measurements) is None and previous is None:
            # Releases from before optimize_counted existed may not determine it.
            raise OperationalError(
                f"the measurements released on table {table!r} do not determine its number of "
                "records, so no model can be fitted",
                hint=f"measure the total: add SELECT COUNT(*) FROM {table} to the workload and run "
                     "`dpsql measure`")
        model = self._fit(dom, measurements, previous, table)
        try:
            save_model(model, path)
        except OSError:
            pass  # a read-only directory only costs later processes a refit
        return model

    def fit_measurements(self, released) -> list[Measurement]:
        """Releases as the fit's measurements, weighted by their noise's actual standard
        deviation (``release.fit_stddev``: the discrete Gaussian's, far below σ when σ < 1/2).
        Every release in use has the configuration's noise family (it is part of the release
        identity, ``TableIdentity``)."""
        return [Measurement(b.clique, b.query(), values, rel.fit_stddev(b, sd, self.config.noise))
                for b, values, sd in released]

    def prepare(self, table: str) -> Future:
        """Make the model of the current releases ready in a background thread (load or
        fit; progress goes to the listeners).  Returns a Future of the model version;
        a second call while one is running returns the same Future.  Servers call it
        when a release arrives, so that queries find the model fitted once, for all
        connections."""
        state = self._state(table)
        with self._lock:
            if state.pending is not None and not state.pending.done():
                return state.pending
            fut: Future = Future()
            state.pending = fut

        def run() -> None:
            if not fut.set_running_or_notify_cancel():
                return
            try:
                fut.set_result(self.model(table)[2])
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits
                fut.set_exception(exc)

        threading.Thread(target=run, name=f"dpsql-fit-{table}", daemon=True).start()
        return fut

    def model_status(self, table: str) -> dict:
        """Public state of the table's model: version, whether it is ready for the current
        releases, whether a fit is running, and the number of releases."""
        state = self._state(table)
        with self._lock:
            return {"version": state.model_version, "ready": state.model is not None,
                    "fitting": state.fit_lock.locked(), "releases": len(state.release_keys)}

    def bounds(self, table: str) -> BoundsModel | None:
        """Ranges implied by the released measurements (None before any release)."""
        _, variance, version = self.model(table)
        if variance is None:
            return None
        with self._lock:
            state = self._state(table)
            if state.bounds is None:
                dom = state.schema.domain
                state.bounds = BoundsModel(dom.attributes, dict(zip(dom.attributes, dom.shape)),
                                           variance, [b.clique for b, _, _ in state.released])
            return state.bounds

    def _fit(self, domain, measurements, previous, table: str = ""):
        """Exact junction-tree model when it fits the capacity, else the relaxed
        region-graph model (NeurIPS 2021); the model's summary says which and why, and its
        ``report`` (dpsql.pgm.report.FitReport) which finisher ran, which is sent with the
        "fit" progress event that ends the fit (``path``, ``certificate``).  The
        exact fit uses the accelerated method with adaptive curvature: on the adult
        dashboard its largest error on the measured marginals after 1,000 iterations is ~1
        count where plain mirror descent (Alg. 2) is still ~50 off, which would rival the
        noise at ε = 1.

        Every model, whatever its size, is fitted to the gap tolerance (``FIT_STOP``): the
        answers are reported with least squares' standard errors, which hold for the optimum's
        answers, not for an early stop's (docs/engine.md, "Where the fit stops").
        """
        t0 = time.perf_counter()
        iters = self.config.fit_iters

        def callback(p) -> None:
            self._progress("fit", {"table": table, "iteration": p.iteration, "iterations": iters,
                                  "loss": p.loss})

        # One BLAS thread, as the planner: on the loaded 2-core machine the 40-query
        # dashboard's exact fit took 1.70 s against 1.81 s, 300 iterations of the 55-marginal
        # relaxed fit 7.9 s against 9.3 s (bench/trust.py --parts blas, bench/RESULTS.md).
        limits = self.config.fit_limits
        with one_blas_thread():
            # the library's defaults but the stop (the library stops large models at the discrepancy
            # principle; FIT_STOP says why the engine does not)
            model = fit(domain, measurements, iters=iters, warm_start=previous,
                        workload=lambda: self.fit_workload(table), limits=limits,
                        exact_method="adaptive", stop=FIT_STOP, gap=limits.gap,
                        callback=callback if self._listening() else None)
        self._progress("fit", {"table": table, "done": True, "seconds": time.perf_counter() - t0,
                              **_report_info(model)})
        return model


def _report_info(model) -> dict:
    """The fit report's path and certificate for a progress event (public: functions of the
    released measurements and of sizes)."""
    report = getattr(model, "report", None)
    if report is None:
        return {}
    return {"path": report.path, "certificate": report.certificate.describe()}


__all__ = ["FIT_STOP", "ModelStore", "MODEL_FORMAT"]
