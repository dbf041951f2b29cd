"""Hand-made stand-ins for a dpsql connection, for testing the shell's UI on its own.

They have the shapes of ``dpsql.engine.results.Result`` and of the session commands the
shell uses, with answers fixed by each test, so rendering, completion, meta-commands and
cancellation can be checked without the engine (and without budget or noise).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

from dpsql import errors
from dpsql.domain_file import load_domain

ROOT = Path(__file__).resolve().parents[2]
ADULT_CONFIG = ROOT / "examples" / "adult" / "dpsql.toml"


@dataclass(frozen=True)
class Column:
    name: str
    type: str


@dataclass
class Result:
    columns: list
    rows: list
    stderr: list = field(default_factory=list)
    inferred: list = field(default_factory=list)
    cost: float = 0.0
    message: str | None = None
    seconds: float = 0.0
    model_version: int = 0
    model: str = ""
    bounds: list = field(default_factory=list)


def adult_catalog():
    return load_domain(ROOT / "examples" / "adult" / "adult.toml")


SEX_COUNTS = Result([Column("sex", "text"), Column("count", "double")],
                    [("Female", 16192.4), ("Male", 32649.7)],
                    [(None, 12.1), (None, 15.3)], [False, False], seconds=0.0123, model_version=1)


class FakeLedger:
    def __init__(self) -> None:
        self.charges: list = []

    def entries(self):
        return list(self.charges)


class FakeSession:
    """Answers from ``results`` (SQL text → Result or exception); ``plan`` can be made to
    block until ``release`` is set, to test cancelling long work."""

    def __init__(self, results=None, *, total_rho=2.0, cost=0.5, block_plan=False) -> None:
        self.user = "alice"
        self.approve = None
        self.settings = {"dpsql.error_columns": "off"}
        self.engine = SimpleNamespace(catalog=adult_catalog(), ledger=FakeLedger())
        self.results = dict(results or {})
        self.total_rho = total_rho
        self.spent = 0.0
        self.cost = cost
        self.block_plan = block_plan
        self.plan_started = threading.Event()
        self.release = threading.Event()
        self.executed: list[str] = []
        self.plans: list = []
        self.measured = 0
        self.prepared = 0

    def execute(self, sql, params=None):
        self.executed.append(sql)
        if sql.upper().startswith("SET "):
            self.settings["dpsql.error_columns"] = "off"
            return Result([], [], message="SET")
        answer = self.results.get(sql)
        if answer is None:
            raise errors.UnknownTableError("table 'nope' is not a private table of this configuration",
                                           hint="tables: adult", position=sql.find("nope") + 1 or None)
        if isinstance(answer, Exception):
            raise answer
        return answer

    def budget(self):
        return {"user": self.user, "spent_rho": self.spent, "remaining_rho": self.total_rho - self.spent,
                "total_spent_rho": self.spent, "total_remaining_rho": self.total_rho - self.spent,
                "delta": 1e-6}

    def measure_cost(self, table=None):
        return self.cost

    def prepare_model(self, table=None):
        self.prepared += 1
        return 1

    def measure(self, table=None):
        self.measured += 1
        self.spent += self.cost
        self.engine.ledger.charges.append(SimpleNamespace(
            seq=len(self.engine.ledger.charges) + 1, kind="charge", created="2026-11-22T14:00:00",
            principal=self.user, rho=self.cost, mechanism={"purpose": "workload"}))
        return SimpleNamespace(table="adult", rho=self.cost, reused=False, blocks=3, cells=1234, seconds=0.5)

    def plan(self, table=None, queries=None):
        self.plans.append(queries)
        if self.block_plan:
            self.plan_started.set()
            self.release.wait(60)
        strategy = SimpleNamespace(operator="OPT_⊗", blocks=[1, 2, 3], explanation="three marginals")
        return SimpleNamespace(table="adult", strategy=strategy, queries=len(queries or [1]), rows=42,
                               rho=0.5, rmse=12.5, baseline_rmse=40.0, seconds=1.5, bound_rmse=None,
                               bound_exact=False, advice=None, per_query_lines=lambda: [],
                               part_lines=lambda: [])

    def explain(self, sql, params=None):
        if "nope" in sql:
            raise errors.UnknownColumnError("unknown column 'nope'", position=sql.find("nope") + 1)
        return f"plan for {sql}\nq0: supported by released measurements; expected stderr ≈ 12.1 per row"


class FakeCursor:
    def __init__(self, connection) -> None:
        self.connection = connection
        self.result = None

    def execute(self, sql, params=None):
        self.result = self.connection.session.execute(sql, params)
        return self


class FakeConnection:
    def __init__(self, session: FakeSession) -> None:
        self.session = session
        self.closed = False

    def cursor(self):
        return FakeCursor(self)

    def close(self):
        self.closed = True
