"""Synthetic data from the fitted adult model: marginals, labels, files, CLI and shell."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import duckdb
import numpy as np
import pytest

import dpsql
from dpsql.cli import main as cli_main
from dpsql.engine.synthetic import decode_cells
from dpsql.errors import ProgrammingError

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "adult" / "dpsql.toml"
WORKLOAD = ["SELECT sex, income, COUNT(*) FROM adult GROUP BY sex, income",
            "SELECT race, sex, COUNT(*) FROM adult GROUP BY race, sex",
            "SELECT education, income, COUNT(*) FROM adult GROUP BY education, income",
            "SELECT age, hours_per_week, COUNT(*) FROM adult GROUP BY age, hours_per_week"]
PAIRS = [("sex", "income"), ("race", "sex"), ("education", "income"), ("age", "hours_per_week")]


def chi2_1e4(df):
    """A generous p ~ 1e-4 bound on a chi-squared statistic (Wilson-Hilferty-ish)."""
    return df + 4.5 * math.sqrt(2 * df) + 10


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("synth")
    kw = dict(user="op", ledger=str(tmp / "s.ledger"), cache_dir=str(tmp / "cache"),
              workload=WORKLOAD, fit_iters=300, budget={"epsilon": 1.0, "delta": 1e-6})
    con = dpsql.connect(CONFIG, **kw)
    con.session.measure()
    return tmp, con, kw


def _cells(con, rows, method, seed):
    engine = con.session.engine
    model, _, _ = engine.model("adult")
    return model, model.synthetic(rows, method=method, rng=np.random.default_rng(seed))


@pytest.mark.parametrize("method", ["sample", "rounding"])
def test_two_way_marginals_of_synthetic_rows_match_the_model(measured, method):
    _, con, _ = measured
    n = 20_000
    model, cells = _cells(con, n, method, 3)
    dom = model.domain
    for pair in PAIRS:
        p = model.marginal(pair).values.reshape(-1)
        p = p / p.sum()
        idx = [dom.attributes.index(a) for a in pair]
        flat = np.ravel_multi_index(tuple(cells[:, i] for i in idx), [dom.shape[i] for i in idx])
        obs = np.bincount(flat, minlength=p.size)
        exp = n * p
        keep = exp >= 5
        stat = float((((obs - exp) ** 2)[keep] / exp[keep]).sum())
        df = int(keep.sum()) - 1
        assert stat < chi2_1e4(df), (pair, stat, df)
        assert obs[~keep].sum() <= max(5 * (~keep).sum(), exp[~keep].sum() + 6 * math.sqrt(exp[~keep].sum() + 1))
        if method == "rounding":  # randomized rounding keeps every separator group's counts tight
            assert np.abs(obs - exp).max() < 6 * math.sqrt(n * p.max()) + 2


def test_rows_carry_declared_labels_and_values_inside_bins(measured):
    _, con, _ = measured
    schema = con.session.engine.catalog["adult"]
    labels = con.session.synthetic(rows=500, seed=1)
    values = con.session.synthetic(rows=500, numbers="value", seed=1)
    names = [c for c, _ in labels.columns]
    assert names == [a.name for a in schema.attributes] and len(labels.rows) == 500
    for j, attr in enumerate(schema.attributes):
        col = [r[j] for r in labels.rows]
        declared = attr.labels()
        bounds = attr.bin_bounds()
        if bounds is None or labels.columns[j][1] == "text":
            assert set(col) <= set(declared)
        else:
            assert all(v is None or isinstance(v, int) for v in col)
        vcol = [r[j] for r in values.rows]
        if bounds is not None:
            kind = values.columns[j][1]
            assert kind in ("integer", "double")
            # the value lies inside the bin the label names (same seed, same cells)
            for lab, v in zip(col, vcol):
                cell = declared.index(lab) if isinstance(lab, str) else declared.index(str(lab))
                lo, hi = bounds[cell]
                assert lo <= v <= hi
    fnlwgt = [a.name for a in schema.attributes].index("fnlwgt")
    assert values.columns[fnlwgt][1] == "integer" and labels.columns[fnlwgt][1] == "text"


def test_decode_handles_null_and_other_cells():
    from dpsql.domain import Categorical, IntegerRange, TableSchema
    schema = TableSchema("t", (Categorical("c", ("a", "b"), nullable=True),
                               IntegerRange("n", 0, 9, bin_width=5, nullable=True)), None)
    # cells of c: a, b, (other), NULL; of n: [0, 4], [5, 9], NULL
    cells = np.array([[0, 0], [3, 2], [2, 1]])
    cols, rows = decode_cells(schema, cells, numbers="value", rng=np.random.default_rng(0))
    assert rows[1] == (None, None) and rows[0][0] == "a" and 0 <= rows[0][1] <= 4 and 5 <= rows[2][1] <= 9
    assert rows[2][0] == "(other)" and cols == [("c", "text"), ("n", "integer")]
    cols, rows = decode_cells(schema, cells, numbers="label")
    assert rows == [("a", "[0, 4]"), (None, None), ("(other)", "[5, 9]")]
    with pytest.raises(ProgrammingError):
        decode_cells(schema, cells, numbers="codes")


@pytest.mark.slow
def test_cli_measure_aim_then_synth_round_trips_through_duckdb(adult_config, tmp_path, capsys):
    cfg = adult_config(queries=WORKLOAD, ledger="cli.ledger", cache_dir="cache", dpsql={"fit_iters": 300},
                       planner={"mode": "aim"})
    assert cli_main(["plan", "--config", str(cfg)]) == 0
    plan = capsys.readouterr().out
    assert 'mode = "aim"' in plan and "on selection" in plan and "on measurement" in plan
    assert cli_main(["measure", "--config", str(cfg), "--yes"]) == 0
    out = capsys.readouterr().out
    assert "round   0: measured 6 one-way marginals" in out and "AIM:" in out and "selecting" in out
    con = dpsql.connect(cfg)
    spent = con.session.engine.ledger.spent()
    assert spent > 0
    for suffix in ("csv", "parquet"):
        path = tmp_path / f"synth.{suffix}"
        assert cli_main(["synth", "--config", str(cfg), "--rows", "3000", "--out", str(path),
                         "--seed", "7"]) == 0
        assert "wrote 3,000 synthetic rows" in capsys.readouterr().out
        got = duckdb.sql(f"SELECT sex, income, COUNT(*) FROM '{path}' GROUP BY ALL ORDER BY ALL").fetchall()
        mine = con.session.synthetic(rows=3000, seed=7)
        names = [c for c, _ in mine.columns]
        want = {}
        for r in mine.rows:
            k = (r[names.index("sex")], r[names.index("income")])
            want[k] = want.get(k, 0) + 1
        assert {(a, b): c for a, b, c in got} == want
        assert [d[0] for d in duckdb.sql(f"SELECT * FROM '{path}' LIMIT 0").description] == names
        assert sum(c for _, _, c in got) == 3000
    assert dpsql.connect(cfg).session.engine.ledger.spent() == spent  # synthetic data is free
    # measuring again re-uses every round
    assert cli_main(["measure", "--config", str(cfg), "--yes"]) == 0
    assert "already measured" in capsys.readouterr().out


def test_synth_needs_a_model(tmp_path):
    con = dpsql.connect(CONFIG, user="op", ledger=str(tmp_path / "x.ledger"), cache_dir=str(tmp_path / "c"))
    with pytest.raises(ProgrammingError):
        con.session.synthetic(rows=10)


def test_shell_synth_writes_a_file(measured, tmp_path):
    sys.path.insert(0, str(ROOT / "tests" / "repl"))
    from driver import ENTER, run_keys
    _, con, _ = measured
    out = tmp_path / "shell.csv"
    text = run_keys(con, f"\\synth -n 200 --seed 3 {out}" + ENTER, limit=120)
    assert "Wrote 200 synthetic rows of adult" in text, text
    assert duckdb.sql(f"SELECT COUNT(*) FROM '{out}'").fetchall()[0][0] == 200
