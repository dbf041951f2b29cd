"""The query engine: plan → measure → fit → answer (thesis ch. 3–4, "HDMM + PGM").

One ``Engine`` per configuration holds what all users share: the catalog of declared
domains, the measurement backend, the ledger, the released measurements and the fitted
models.  ``Session`` (``dpsql.engine.session``) is one user's view on it.

The engine is built of collaborators, each given what it uses (issue 36 item 3):
``engine.measuring`` (``dpsql.engine.measuring.Measurer``) measures a strategy in the
privacy order (docs/privacy.md, "Measurement": preview, count, durable charge, noise,
release; a crash's unreleased charge completed, never paid twice) and ``engine.models``
(``dpsql.engine.fitting.ModelStore``) loads, fits, saves and serves the models, and
``engine.planning`` (``dpsql.engine.planning.Planner``) plans the workload: its strategy,
expected errors and budget share, from public metadata only.  The engine keeps the catalog,
the release identity and the ledger sync (``_sync``), and what to measure.
"""

from __future__ import annotations

import dataclasses
import threading
from fractions import Fraction
from pathlib import Path
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from dpsql import linalg
from dpsql.public import StarCatalog
from dpsql.engine.config import Config
from dpsql.engine.reports import MeasureReport, PlanReport, QueryReport, ReleaseInfo, SpendPreview
from dpsql.engine.fitting import ModelStore
from dpsql.engine.measuring import Measurer
from dpsql.engine.mixed import is_mixed_strategy
from dpsql.engine.direct import is_direct_payload
from dpsql.engine.ordered import is_ordered_payload
from dpsql.engine.planning import Planner
from dpsql.engine.state import TableState, _retire_model
from dpsql.errors import LedgerCorruptError, ProgrammingError
from dpsql.measure.counting import Backend
from dpsql.measure.router import open_backend
from dpsql.measure import release as rel
from dpsql.measure.identity import TableIdentity
from dpsql.pgm.measurement import Measurement
from dpsql.privacy.ledger import Ledger, LedgerEntry

if TYPE_CHECKING:
    from concurrent.futures import Future

    from dpsql.engine.bounds import BoundsModel
    from dpsql.engine.variance import VarianceModel
    from dpsql.pgm import GraphicalModel
    from dpsql.plan import Strategy, Workload

# The planner (dpsql.plan: scipy.optimize, scipy.linalg) is imported where a
# workload is planned (dpsql/engine/planning.py), not here: a process that answers from a
# saved model never plans (issue 17, a new process answers in ≤ 1 s; tests/engine/test_query_path.py).


class Engine:
    """Shared state for one configuration; thread-safe."""

    #: The ledger principal of the operator's workload measurements: bounded by the total
    #: (and the configured workload budget), never by a user's cap (docs/config.md).
    WORKLOAD_PRINCIPAL = "@workload"

    def __init__(self, config: Config, backend: Backend | None = None,
                 progress: Callable[[str, dict], None] | None = None) -> None:
        # the configuration as loaded, which ``dpsql.connect`` compares to share this engine;
        # ``config`` gets the sources of the tables added at run time (on-demand flags,
        # ``_add_flag``), so that adding one does not make every later connection build an
        # engine of its own (it did: the mutated configuration no longer equalled the file's)
        self.declared_config = config
        config = dataclasses.replace(config, sources=dict(config.sources), table_rows=dict(config.table_rows))
        self.config = config
        # the private tables, with the public ones and the declared keys beside them
        self.catalog = StarCatalog(config.tables, config.public_tables, config.references,
                                   query=config.public_db.query if config.public_db is not None else None,
                                   people=config.people)
        # source files' hashes are kept beside the ledger, so a new process does not read a
        # whole source to know that its releases still apply (issue 17)
        self.backend = backend if backend is not None else open_backend(
            config.sources, fingerprint_store=Path(str(config.ledger_path) + ".sources.json"))
        # A user without their own entry gets the declared default, else 0 (docs/config.md,
        # "Budgets"): falling back to the global total let any unlisted analyst drain it
        # under the `measure` policy (issue 34).  Only the engine's "@" principals (the
        # operator's workload) are bounded by the total alone.
        per_user: dict = {u: b.rho for u, b in config.user_budgets.items()}
        if config.default_user_budget is not None:
            per_user["*"] = config.default_user_budget.rho
        self._ledger_args: dict[str, Any] = dict(total_rho=config.budget.rho, per_user_rho=per_user,
                                                 delta=config.budget.delta)
        self._ledger: Ledger | None = None
        self._ledger_lock = threading.Lock()
        self._listeners: list[Callable[[str, dict], None]] = [progress] if progress else []
        # True (servers): fit in a background thread as soon as a release arrives
        self.fit_in_background = False
        self._lock = threading.RLock()
        self.tables: dict[str, TableState] = {n: TableState(s) for n, s in self.catalog.items()}
        self._seen_seq = 0
        self._charges: dict[int, LedgerEntry] = {}
        self._releases: list = []   # release entries of the ledger, oldest first
        # ad hoc flag tables: their condition (add_person_flags), least recently asked first,
        # and how many running statements hold each (hold_person_flags: never dropped then)
        self._flags: dict[str, dict] = {}
        self._held: dict[str, int] = {}
        # the models of the releases: a collaborator given what it uses, not a base class
        # reading this one's attributes (issue 36 item 3)
        self.models = ModelStore(config, self._lock, state=self._state, sync=self._sync,
                                 progress=self.progress, listening=lambda: bool(self._listeners),
                                 workload_matrix=lambda table: self.workload_for(table)[0].matrix)
        self.measuring = Measurer(config, self.backend, self._lock, ledger=lambda: self.ledger,
                                  state=self._state, sync=self._sync,
                                  unreleased_charge=self._unreleased_charge, progress=self.progress)
        self.planning = Planner(config, self.catalog, self._lock, state=self._state,
                                sums_offsets=hasattr(self.backend, "sum_offsets"),
                                progress=self.progress, listening=lambda: bool(self._listeners))

    @property
    def ledger(self) -> Ledger:
        """The privacy ledger, opened (and created, binding the configured budget to it) on
        first use.  Planning never uses it, so ``dpsql plan`` is free in every sense: it
        neither spends nor fixes a budget (issue 35); ``dpsql.connect`` opens it at once."""
        if self._ledger is None:
            with self._ledger_lock:
                if self._ledger is None:
                    self._ledger = Ledger(self.config.ledger_path, **self._ledger_args)
        return self._ledger

    # -- progress ----------------------------------------------------------------------------
    def add_listener(self, listener: Callable[[str, dict], None]) -> Callable[[], None]:
        """Call ``listener(stage, info)`` on progress ("plan", "measure", "fit"); returns
        a function that removes it.  Listeners must be quick and must not raise."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)
        return remove

    def progress(self, stage: str, info: dict) -> None:
        for listener in list(self._listeners):
            try:
                listener(stage, info)
            except Exception:  # noqa: BLE001 - a display problem must never break a query
                pass

    def refresh(self) -> bool:
        """Bring every table up to date with the ledger and its source (``_sync``): a
        long-lived session sees releases other processes made.  Returns True when a table's
        releases changed; with ``fit_in_background`` its model is then refitted at once."""
        changed = []
        with self._lock:
            for table, state in self.tables.items():
                before = frozenset(state.release_keys)
                self._sync(table)
                if frozenset(state.release_keys) != before:
                    changed.append(table)
        if self.fit_in_background:
            for table in changed:
                self.prepare(table)
        return bool(changed)

    # -- release identity and persisted releases ---------------------------------------------
    def _content(self, table: str) -> dict:
        return self.backend.fingerprint(table)

    def identity(self, table: str) -> TableIdentity:
        """The release identity of ``table`` now (hashes the source only when its size,
        mtime, inode or ctime changed).  Releases are used only under this identity."""
        state = self._state(table)
        return TableIdentity.of(state.schema, self.config.sources[table], self._content(table),
                                self.config.noise)

    def model_key(self, table: str) -> str:
        """Key of the model fitted from the current releases (``ModelStore.model_key``)."""
        return self.models.model_key(table)

    def _read_ledger(self) -> None:
        for entry in self.ledger.entries(since=self._seen_seq):
            if entry.kind == "charge":
                self._charges[entry.seq] = entry
            elif entry.key is not None:
                self._releases.append(entry)
            self._seen_seq = entry.seq

    def _sync(self, table: str) -> TableState:
        """Bring ``table``'s state up to date with the source and the ledger: a changed
        source (or identity) drops the releases and model of the old one; releases made
        since the last look (by any process) under the current identity are loaded."""
        state = self._state(table)
        self._read_ledger()
        content = self._content(table)
        if state.identity is None or content != state.content:
            identity = TableIdentity.of(state.schema, self.config.sources[table], content, self.config.noise)
            if identity != state.identity:
                state.released, state.release_keys = [], set()
                state.offsets, state.offset_models = [], None
                state.ordered, state.ordered_estimate = [], None
                state.direct = []
                state.model = state.variance = state.model_last = state.stale = None
                if state.identity is not None:
                    # sessions cache answers per model version: the old identity's answers
                    # must not outlive its releases (docs/privacy.md §7.3, issue 34)
                    state.model_version += 1
                state.identity = identity
            state.content = content
        prefix = state.identity.key() + ":"
        for entry in self._releases:
            if entry.key is not None and entry.key.startswith(prefix) and entry.key not in state.release_keys:
                payload = self.ledger.release(entry.key)
                if payload is None:   # listed by entries() but unreadable: never guess a release
                    raise LedgerCorruptError(f"the ledger lists release {entry.key!r} but holds no payload for it",
                                             hint="restore the ledger file from a backup")
                if is_direct_payload(payload):
                    from dpsql.engine import direct
                    state.direct.append(direct.unpack(payload))
                    state.release_keys.add(entry.key)
                    continue
                if is_ordered_payload(payload):
                    from dpsql.measure import ordered
                    state.ordered.append(ordered.unpack(payload))
                    state.ordered_estimate = None
                    state.release_keys.add(entry.key)
                    continue
                state.released.extend(rel.unpack(payload))
                offsets = rel.unpack_offsets(payload)
                if offsets:
                    state.offsets.extend(offsets)
                    state.offset_models = None
                state.release_keys.add(entry.key)
                _retire_model(state)  # refit lazily with a warm start
        return state

    def releases(self) -> list[ReleaseInfo]:
        """Every release in the ledger, current or stale (``dpsql budget``)."""
        with self._lock:
            self._read_ledger()
            current = {}
            out = []
            for entry in self._releases:
                charge = self._charges.get(entry.charge_id)
                mech = charge.mechanism if charge is not None and charge.mechanism else {}
                table = mech.get("table") or entry.key.split(":", 1)[0]
                if table not in self.tables and mech.get("flag"):
                    self._restore_flag(table, mech["flag"])   # an ad hoc flag no statement asked yet
                reasons: tuple[str, ...]
                if table not in self.tables:
                    reasons = ("the table is no longer configured",)
                else:
                    if table not in current:
                        current[table] = self.identity(table)
                    ident = current[table]
                    # a bound chosen for a people view (people_bound) is keyed "bound:<identity>:…"
                    # and the rows a bound drops "truncation:<identity>:…" (people_truncation)
                    ok = entry.key.removeprefix("bound:").removeprefix("truncation:").startswith(ident.key() + ":")
                    reasons = () if ok else tuple(ident.differences(mech.get("identity")))
                    if not ok and not reasons:
                        reasons = ("measured under another identity",)
                out.append(ReleaseInfo(entry.key, table, entry.seq,
                                       charge.rho if charge is not None and charge.rho else Fraction(0),
                                       str(mech.get("purpose", "")), not reasons, reasons))
            return out

    # -- planning (``self.planning``, dpsql/engine/planning.py) --------------------------------
    def workload_for(self, table: str, queries: Sequence[str] | None = None):
        """The workload SQL compiled over the table's domain (``Planner.workload_for``)."""
        return self.planning.workload_for(table, queries)

    def plan(self, table: str, queries: Sequence[str] | None = None,
             rho: Fraction | float | None = None) -> PlanReport:
        """The HDMM strategy and its expected errors (``Planner.plan``)."""
        return self.planning.plan(table, queries, rho)

    def rows_sq(self, table: str, strategy: Strategy) -> float:
        """The squared rows-per-unit factor of ``strategy``'s noise (``Planner.rows_sq``)."""
        return self.planning.rows_sq(table, strategy)

    def optimize(self, workload: Workload, rho: Fraction, unit_rows: int = 1, *,
                 table: str | None = None) -> Strategy:
        """HDMM with the configured options and caps (``Planner.optimize``)."""
        return self.planning.optimize(workload, rho, unit_rows, table=table)

    def optimize_counted(self, workload: Workload, rho: Fraction, unit_rows: int = 1,
                         released: Sequence[Measurement] = (), *, table: str | None = None) -> Strategy:
        """``optimize`` with the number of records determined (``Planner.optimize_counted``);
        ``table`` compares candidates with its group bound's row factor (``Planner.row_factor``)."""
        return self.planning.optimize_counted(workload, rho, unit_rows, released, table=table)

    def released_measurements(self, table: str) -> list[Measurement]:
        """The releases in use (current identity; ``_sync``) as PGM measurements."""
        with self._lock:
            state = self._sync(table)
            return [Measurement(b.clique, b.query(), values, sd) for b, values, sd in state.released]

    def workload_rho(self, table: str | None = None) -> Fraction:
        """The exact ρ one workload measurement is given (``Planner.workload_rho``)."""
        return self.planning.workload_rho(table)

    def truncation_rho(self, table: str) -> Fraction:
        """The slice of a bounded view's share for its dropped rows (``Planner.truncation_rho``)."""
        return self.planning.truncation_rho(table)

    def view_shares(self, rho: Fraction) -> dict[str, Fraction]:
        """The workload budget divided across a people schema's views (``Planner.view_shares``)."""
        return self.planning.view_shares(rho)

    # -- measurement -------------------------------------------------------------------------
    def offset_plan(self, table: str, strategy: Strategy, rho: Fraction):
        """The workload's offset blocks and their share of ``rho``, or None (``Planner.offset_plan``)."""
        return self.planning.offset_plan(table, strategy, rho)

    def measure_cost(self, table: str, rho: Fraction | None = None) -> Fraction:
        """ρ the workload measurement would charge now: 0 when it was already released."""
        state = self._state(table)
        if state.strategy is None:
            self.plan(table)
        share = Fraction(rho) if rho is not None else self.workload_rho(table)
        cost = self.measuring.parts_cost(table, self.planning.release_parts(table, state.strategy, share),
                                         None, "workload")
        if rho is None and self.truncation_rho(table) > 0:
            from dpsql.engine.people_truncation import truncation_cost
            cost += truncation_cost(self, table, self.truncation_rho(table))
        return cost

    def unreleased_charges(self) -> list:
        """Ledger charges without a release (their process died before recording it); the
        next request for the same release completes each under its charge (``dpsql budget``)."""
        with self._lock:
            self._read_ledger()
            released = {e.charge_id for e in self._releases}
            return [e for seq, e in sorted(self._charges.items()) if seq not in released]

    def _unreleased_charge(self, key: str):
        """The ledger's charge for release ``key`` that has no release (its process died
        between charging and recording), or None.  Read after ``_sync``."""
        released = {e.charge_id for e in self._releases}
        for seq, entry in self._charges.items():
            if entry.fingerprint == key and seq not in released:
                return entry
        return None

    def spend_preview(self, table: str, strategy: Strategy, rho: Fraction, principal: str,
                      purpose: str) -> SpendPreview:
        """What ``measure_strategy`` with the same arguments would charge now (public;
        ``Measurer.spend_preview``)."""
        if is_mixed_strategy(strategy):
            cost = self.measuring.parts_cost(table, self.planning.release_parts(table, strategy, Fraction(rho)),
                                             principal, purpose)
            return SpendPreview(cost, self.ledger.remaining(principal))
        return self.measuring.spend_preview(table, strategy, rho, principal, purpose)

    def measure_strategy(self, table: str, strategy: Strategy, rho: Fraction, principal: str,
                         purpose: str, requested_by: str | None = None, offsets=None) -> MeasureReport:
        """Measure every block of ``strategy`` at total cost ≤ ``rho``, and the ``offsets``
        (``offset_plan``) in the same release (``Measurer.measure_strategy``); a mixed
        strategy's parts each as a release of its own at its share (``measure_parts``).  With
        ``fit_in_background`` a new release starts its model's refit at once."""
        if is_mixed_strategy(strategy):
            if offsets is not None:
                raise ProgrammingError("a mixed strategy's offsets are planned with its parts",
                                       hint="pass offsets=None")
            return self._measure_parts(table, self.planning.release_parts(table, strategy, Fraction(rho)),
                                       principal, purpose, requested_by, strategy)
        return self._measure_parts(table, [(strategy, rho, offsets)], principal, purpose, requested_by)

    def _measure_parts(self, table: str, parts, principal: str, purpose: str, requested_by: str | None,
                       mixed=None) -> MeasureReport:
        link = None if mixed is None else {
            "mixed": [p.name for p in mixed.parts], "rho": str(sum((Fraction(r) for _, r, _ in parts), Fraction(0))),
            "shares": [str(r) for _, r, _ in parts]}
        report = self.measuring.measure_parts(table, parts, principal, purpose, requested_by, link,
                                              flag=self._flags.get(table))
        if not report.reused and self.fit_in_background and self._state(table).released:
            self.prepare(table)
        return report

    def measure(self, table: str, rho: Fraction | None = None, *,
                requested_by: str | None = None) -> MeasureReport:
        """The workload measurement, charged to the workload principal: one release, or one
        per part of a mixed workload (dpsql/engine/mixed.py), each at its share of ``rho``."""
        state = self._state(table)
        if state.strategy is None:
            self.plan(table)
        configured = rho is None
        rho = rho if rho is not None else self.workload_rho(table)
        report = self._measure_parts(table, self.planning.release_parts(table, state.strategy, Fraction(rho)),
                                     self.WORKLOAD_PRINCIPAL, "workload", requested_by,
                                     state.strategy if is_mixed_strategy(state.strategy) else None)
        slice_ = self.truncation_rho(table) if configured else Fraction(0)
        if slice_ > 0:
            # the rest of the view's share: how many rows its bound drops, with noise
            from dpsql.engine.people_truncation import release_truncation
            released = release_truncation(self, table, slice_)
            report = dataclasses.replace(report, rho=report.rho + released.rho)
        return report

    def offset_models(self, table: str) -> dict:
        """Per column, the least-squares answers of its released binning offsets
        (``dpsql.engine.offsets.offset_models``); empty when none were measured."""
        from dpsql.engine.offsets import offset_models

        state = self._state(table)
        with self._lock:
            self._sync(table)
            if state.offset_models is None:
                state.offset_models = offset_models(state.schema, state.offsets)
            return state.offset_models

    def unsupported_workload(self, table: str, queries: Sequence[str] | None = None) -> list:
        """The workload's linear-query blocks the released measurements do not support (with
        the binning bounds of SUMs/AVGs whose offsets no release measured: an increment
        measures those, and their answers fall back to the bound)."""
        blocks = self.workload_for(table, queries)[2] + self._unmeasured_bounds(table, queries)
        # what a fine column's ordered release or a direct release answers is not the model's
        # to support (an increment would measure the column's part of a mixed workload again);
        # the releases are read once per call, not once per block
        columns = self._ordered_columns(table)
        direct = self.direct_releases(table)
        if columns or direct:
            from dpsql.engine.direct import answers_block
            schema = self._state(table).schema
            blocks = [b for b in blocks if not _ordered_supports(b, columns)
                      and not any(answers_block(schema, r, b) for r in direct)]
        if not blocks:
            return []
        _, variance, _ = self.model(table)
        if variance is None:
            return list(blocks)
        return [b for b in blocks if not variance.analyse(b)[1].all()]

    def direct_releases(self, table: str) -> list:
        """The table's direct releases (``engine.direct.DirectRelease``), latest first."""
        with self._lock:
            state = self._sync(table)
            return list(reversed(state.direct))

    def _ordered_columns(self, table: str) -> list[set[int]]:
        """Per ordered release of the table (``ordered_estimates``), the domain indices of the
        attributes it answers about: its column and its group columns."""
        names = list(self._state(table).schema.domain.attributes)
        return [{names.index(a) for a in (e.strategy.attribute, *e.strategy.groups) if a in names}
                for e in self.ordered_estimates(table)]

    def _unmeasured_bounds(self, table: str, queries: Sequence[str] | None) -> list:
        """Under ``binning = "offsets"`` the workload leaves out the binning-bound queries
        (the offsets replace them), but an increment measures no offsets: the bounds of the
        SUMs/AVGs whose offsets the releases do not support, so that they can fall back."""
        if self.config.planner.binning != "offsets":
            return []
        from dpsql.sql import compile as compile_sql

        models = self.offset_models(table)
        out = []
        for sql in (list(queries) if queries is not None else list(self.config.workload)):
            cq = compile_sql(sql, self.catalog)
            if cq.table != table:
                continue
            pairs = cq.offset_pairs()
            rows = {lq.name: lq for lq in cq.linear_queries}
            for lq in cq.offset_queries:
                bound = pairs.get(lq.name, (None, ""))[0]
                vm = models.get(lq.offset_column)
                if bound in rows and (vm is None or not vm.analyse(lq.matrix)[1].all()):
                    out.append(rows[bound].matrix)
        return out

    def increment_strategy(self, table: str, rho: Fraction, queries: Sequence[str] | None = None):
        """A strategy for only the workload queries no release supports yet (an increment
        that re-uses every earlier measurement), or None when everything is supported."""
        missing = self.unsupported_workload(table, queries)
        if not missing:
            return None
        from dpsql.plan import Workload

        workload = Workload(self._state(table).schema.domain, linalg.Union(missing))
        return self.optimize_counted(workload, rho, self.config.sources[table].unit_rows,
                                     self.released_measurements(table), table=table)

    def measure_increment(self, table: str, rho: Fraction, queries: Sequence[str] | None = None, *,
                          requested_by: str | None = None) -> MeasureReport | None:
        """Measure the workload queries the releases do not support yet, at cost ≤ ``rho``,
        charged to the workload principal (docs/engine.md, "Extending a workload")."""
        strategy = self.increment_strategy(table, rho, queries)
        if strategy is None:
            return None
        return self.measure_strategy(table, strategy, rho, self.WORKLOAD_PRINCIPAL,
                                     "workload-increment", requested_by)

    def ordered_estimate(self, table: str):
        """The closed-form estimate (``measure.ordered.OrderedEstimate``) of the table's
        latest ordered release (a fine column's tree or Toeplitz measurement), or None."""
        estimates = self.ordered_estimates(table)
        return estimates[0] if estimates else None

    def ordered_estimates(self, table: str) -> list:
        """The estimates of the table's ordered releases, latest first, one per column and
        groups measured (the latest release of each): a mixed workload over several fine
        columns releases one per column (dpsql/engine/mixed.py, ``split_columns``), and each
        answers its own column's queries."""
        with self._lock:
            state = self._sync(table)
            if not state.ordered:
                return []
            if state.ordered_estimate is None:
                from dpsql.measure.ordered import OrderedEstimate
                latest: dict[tuple, Any] = {}
                for release in reversed(state.ordered):
                    s = release.strategy
                    latest.setdefault((s.attribute, tuple(s.groups)), release)
                state.ordered_estimate = [OrderedEstimate(r) for r in latest.values()]
            return list(state.ordered_estimate)

    # -- model (``self.models``, dpsql/engine/fitting.py) -------------------------------------
    def model(self, table: str, stale_ok: bool = False) -> tuple[GraphicalModel | None, VarianceModel | None, int]:
        """The model of the table's current releases, its variance and version, loaded or
        fitted once for every connection (``ModelStore.model``)."""
        return self.models.model(table, stale_ok)

    def model_is_current(self, table: str, version: int) -> bool:
        """Whether ``version`` is the model of the table's current releases (not a stale one)."""
        return self.models.model_is_current(table, version)

    def model_path(self, table: str, release_keys=None) -> Path:
        """Where the model of a set of releases is saved (``ModelStore.model_path``)."""
        return self.models.model_path(table, release_keys)

    def workload_identity(self) -> str:
        """What of the declared workload the fit depends on (``ModelStore.workload_identity``)."""
        return self.models.workload_identity()

    def fit_workload(self, table: str) -> list:
        """The declared workload's matrices the fit scores itself on (``ModelStore.fit_workload``)."""
        return self.models.fit_workload(table)

    def fit_measurements(self, released) -> list[Measurement]:
        """Releases as the fit's measurements (``ModelStore.fit_measurements``)."""
        return self.models.fit_measurements(released)

    def prepare(self, table: str) -> Future:
        """Make the model of the current releases ready in a background thread; a Future of
        its version (``ModelStore.prepare``)."""
        return self.models.prepare(table)

    def model_status(self, table: str) -> dict:
        """Public state of the table's model (``ModelStore.model_status``)."""
        return self.models.model_status(table)

    def bounds(self, table: str) -> BoundsModel | None:
        """Ranges implied by the released measurements (``ModelStore.bounds``), the table's
        ordered releases included (``BoundsModel.use_ordered``)."""
        ranges = self.models.bounds(table)
        if ranges is not None:
            ranges.use_ordered(self.ordered_estimates(table))
        return ranges

    def add_person_flags(self, sql: str, hold: bool = False) -> list[str]:
        """Add the table of each per-person flag that statement ``sql`` needs and no workload
        statement declared (a people schema's ad hoc ``COUNT(DISTINCT person) … WHERE
        <condition on a child's rows>``; ``people.flag_table_of``), so that it compiles over
        that table and is measured on demand like any unmeasured query: planned, previewed,
        consented to and charged before noise (``Session._measure_for``).  Public: the SQL
        and the schema; a statement that needs none adds nothing, and a condition of a shape
        the engine may not evaluate is refused (0A000) before any row is read.  Returns the
        tables' names; with ``hold`` each is held until ``release_person_flags`` (a running
        statement's table is never dropped, ``_add_flag``)."""
        people = self.config.people
        if people is None:
            return []
        from dpsql.sql.people import flag_column, person_flags

        names = []
        for table, cond in person_flags([sql], self.catalog):
            if flag_column(table, cond) in self.catalog[people.person].column_names:
                continue      # a workload flag, measured with the person's view
            names.append(self._add_flag(table, cond, hold))
        return names

    def release_person_flags(self, names: list[str]) -> None:
        """End the hold of ``add_person_flags(sql, hold=True)`` on ``names``."""
        with self._lock:
            for name in names:
                left = self._held.get(name, 0) - 1
                if left > 0:
                    self._held[name] = left
                else:
                    self._held.pop(name, None)

    def _add_flag(self, table: str, cond, hold: bool = False) -> str:
        """Add the table of the flag of ``cond`` on ``table``'s rows (``add_person_flags``).

        At most ``[people] max_ad_hoc_flags`` of these tables that no charge names (nothing
        measured them) are kept: beyond, the one asked least recently that no running
        statement holds is dropped (a later statement with its condition adds it again,
        the same table under the same identity), and when every one is held the statement is
        refused (53000, nothing spent).  A measured one is kept, so its release stays
        answerable; their number is bounded by the budget (each first measurement is charged
        a per-query budget).  Public state only: the tables' names and the ledger's charges."""
        from dpsql.engine.people import flag_table_of
        from dpsql.errors import ProgrammingError
        people = self.config.people
        if people is None:
            raise ProgrammingError("no [people] schema is configured")
        name, schema, source = flag_table_of(people, self.catalog, self.config.sources, table, cond)
        with self._lock:
            if name in self.tables:
                self._use_flag(name, hold)
                return name
        # the columns' source types (catalog or file metadata, never a row)
        from dpsql.engine.people import check_flag_types
        check_flag_types(table, cond, self.backend.source_columns(table), self.backend.dialect_of(table))
        with self._lock:
            if name in self.tables:
                self._use_flag(name, hold)
                return name
            self._make_room(name, people.max_ad_hoc_flags)
            # one row per person: the person table's declared public size is its size
            if people.person in self.config.table_rows:
                self.config.table_rows[name] = self.config.table_rows[people.person]
            self.config.sources[name] = source
            self.backend.add_source(name, source)
            # found by name, never listed: its condition is another analyst's question
            self.catalog.add_unlisted(name, schema)
            self.tables[name] = TableState(schema)
            # its releases' charges name the condition, so that a process that has not seen
            # the statement yet lists them as in use (``releases``)
            self._flags[name] = {"table": table, "condition": cond.sql(dialect="postgres")}
            self._use_flag(name, hold)
        return name

    def _use_flag(self, name: str, hold: bool) -> None:
        """Mark flag table ``name`` asked now (the last to drop); hold it for a statement."""
        self._flags[name] = self._flags.pop(name)
        if hold:
            self._held[name] = self._held.get(name, 0) + 1

    def _make_room(self, name: str, cap: int) -> None:
        """Before adding flag table ``name``: drop unmeasured, unheld flag tables, least
        recently asked first, until fewer than ``cap`` unmeasured ones remain; 53000 when
        every unmeasured one is held (``_add_flag``).  Called under the engine's lock."""
        from dpsql.errors import InsufficientResourcesError
        self._read_ledger()
        charged = {(e.mechanism or {}).get("table") for e in self._charges.values()
                   if isinstance(e.mechanism, dict)}
        if name in charged:
            return       # measured: kept regardless of the cap
        unmeasured = [n for n in self._flags if n not in charged and not self.tables[n].release_keys]
        for victim in [n for n in unmeasured if not self._held.get(n)]:
            if len(unmeasured) < cap:
                break
            self._drop_flag(victim)
            unmeasured.remove(victim)
        if len(unmeasured) >= cap:
            raise InsufficientResourcesError(
                f"the engine already holds {len(unmeasured)} on-demand per-person flags that running statements "
                "are measuring, its limit; nothing was spent",
                hint="retry when they finish, ask for a condition already asked, or ask the operator to add the "
                     "statement to [workload] or raise [people] max_ad_hoc_flags")

    def _drop_flag(self, name: str) -> None:
        """Forget flag table ``name`` (unmeasured and unheld: nothing of it is in the ledger)."""
        del self.tables[name]
        del self._flags[name]
        self.catalog.remove_unlisted(name)
        self.config.sources.pop(name, None)
        self.config.table_rows.pop(name, None)
        self.backend.remove_source(name)

    def _restore_flag(self, name: str, flag: dict) -> None:
        """Add the flag's table a charge names (``_add_flag``), if this configuration still
        gives the same table (public: the charge's condition text and the schema)."""
        from dpsql.errors import Error
        from dpsql.sql.people import parse_condition
        people = self.config.people
        if people is None or flag.get("table") not in people.views:
            return
        try:
            cond = parse_condition(str(flag.get("condition")))
            from dpsql.engine.people import flag_table_of
            if flag_table_of(people, self.catalog, self.config.sources, flag["table"], cond)[0] == name:
                self._add_flag(flag["table"], cond)
        except Error:
            return

    def _state(self, table: str) -> TableState:
        try:
            return self.tables[table]
        except KeyError:
            from dpsql.errors import UnknownTableError
            raise UnknownTableError(f"table {table!r} is not a private table of this configuration",
                                    hint=f"tables: {', '.join(sorted(self.catalog))}") from None

    def close(self) -> None:
        self.backend.close()


def _ordered_supports(block, columns: list[set[int]]) -> bool:
    """Whether one ordered release answers every row of ``block``: each term asks about that
    release's column or its group columns (``Engine._ordered_columns``), the others summed out."""
    if not columns:
        return False
    asked = [{i for i, f in enumerate(factors) if not isinstance(f, linalg.Total)}
             for _, factors in linalg.kron_terms(block)]
    return any(all(a <= allowed for a in asked) for allowed in columns)


__all__ = ["Engine", "PlanReport", "QueryReport", "MeasureReport", "ReleaseInfo"]
