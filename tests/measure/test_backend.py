import csv
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from dpsql.domain_file import load_domain
from dpsql.linalg import Explicit, Identity, Kron, Prefix, Total
from dpsql.measure import release as rel
from dpsql.measure.backend import DuckDBBackend, Source, brute_force_counts, project_counts, reduce_cliques

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "adult"


@pytest.fixture(scope="module")
def adult():
    schema = load_domain(EXAMPLE / "adult.toml")["adult"]
    backend = DuckDBBackend({"adult": Source.from_config(schema.source, EXAMPLE)})
    rows = []
    with open(EXAMPLE / "adult.csv") as fh:
        for r in csv.DictReader(fh):
            row = {}
            for k, v in r.items():
                att = schema.attribute(k)
                if v == "":
                    row[k] = None
                elif att.kind != "categorical":
                    row[k] = int(v)
                else:
                    row[k] = v
            rows.append(row)
    yield schema, backend, rows
    backend.close()


CLIQUES = [("sex",), ("race", "sex"), ("income", "age"), ("workclass", "occupation", "sex"),
           ("fnlwgt",), ("capital_gain", "capital_loss"), ("native_country",), (), ("sex", "race")]


@pytest.mark.slow
def test_grouping_sets_counts_equal_python_mapping(adult):
    schema, backend, rows = adult
    counts = backend.count_marginals(schema, CLIQUES)
    for clique in CLIQUES:
        ref = brute_force_counts(rows, schema, clique)
        assert counts[clique].shape == ref.shape
        assert np.array_equal(counts[clique], ref), clique
        assert counts[clique].sum() == len(rows)


def test_reduce_and_project():
    assert reduce_cliques([("a",), ("a", "b"), ("b", "c"), ("a", "b")]) == [("a", "b"), ("b", "c")]
    x = np.arange(24).reshape(2, 3, 4)
    assert np.array_equal(project_counts(x, ("a", "b", "c"), ("c", "a")), x.sum(axis=1).T)
    assert np.array_equal(project_counts(x, ("a", "b", "c"), ()), x.sum())


def test_unknown_source_file_is_a_config_error(adult):
    schema, _, _ = adult
    from dpsql.errors import ConfigError
    backend = DuckDBBackend({"adult": Source("csv", Path("/nonexistent.csv"))})
    with pytest.raises(ConfigError):
        backend.count_marginals(schema, [("sex",)])


def test_lattice_blocks_are_integer_and_apply_exactly():
    rng = np.random.default_rng(0)
    real = Explicit(rng.random((3, 4)))
    block = rel.to_lattice(("a", "b"), Kron([Identity(2), real]), 0.5)
    assert all(f.dtype == np.int64 for f in block.factors)
    x = rng.integers(0, 50, size=(2, 4))
    y = block.apply(x)
    dense = np.kron(block.factors[0], block.factors[1])
    assert np.array_equal(y, dense @ x.reshape(-1))
    # the rounded strategy is within the declared grid of the real one
    approx = block.scale * block.factors[1]
    assert np.abs(approx - real.dense()).max() <= block.scale / 2 + 1e-12
    assert block.l2_sensitivity_sq() == int((dense ** 2).sum(axis=0).max())


@pytest.mark.parametrize("family", ["gaussian", "laplace"])
def test_calibration_never_exceeds_the_request(family):
    blocks = [rel.to_lattice(("a",), Prefix(5), 1.0), rel.to_lattice(("a", "b"), Kron([Identity(5), Total(3)]), 2.0),
              rel.to_lattice(("b",), Explicit(np.array([[0.3, 1.7, 0.2]])), 0.7)]
    for rho in [1e-4, 0.0173, 1.0, 123.0]:
        plan = rel.calibrate(blocks, rho, family=family, unit_rows=3)
        assert plan.rho <= Fraction(rho)
        assert plan.rho >= Fraction(rho) * Fraction(999, 1000)  # and spends (almost) all of it


def test_relative_noise_follows_planner_weights():
    blocks = [rel.to_lattice(("a",), Identity(4), 1.0), rel.to_lattice(("b",), Identity(4), 2.0)]
    plan = rel.calibrate(blocks, 0.5)
    ratio = float(plan.params[0] / plan.params[1])
    assert ratio == pytest.approx(4.0, rel=1e-6)  # σ_b ∝ 1/w_b


def test_pack_unpack_roundtrip():
    blocks = [rel.to_lattice(("a", "b"), Kron([Identity(2), Prefix(3)]), 1.5)]
    released = [(blocks[0], np.arange(6, dtype=float), 2.5)]
    back = rel.unpack(rel.pack(released))
    (b, y, sd), = back
    assert b.clique == ("a", "b") and b.weight == 1.5 and sd == 2.5
    assert all(np.array_equal(f, g) for f, g in zip(b.factors, blocks[0].factors))
    assert np.array_equal(y, released[0][1])


@pytest.mark.parametrize("d,rho", [(16, 0.0024), (2, 0.0024), (2, 10.0), (5, 0.02)])
def test_high_dimensional_real_strategies_stay_on_a_usable_lattice(d, rho):
    """A Kron of d real factors rounded at 1/4096 each would have spacing 4096^-d and a
    lattice noise far beyond any sampler (σ² ~ 1e117 for d = 16); the resolution adapts."""
    rng = np.random.default_rng(d)
    factor = Explicit(rng.random((2, 2)) + 0.1)  # 2x2: the d = 16 product stays at 65,536 rows
    blocks = [(tuple(f"a{i}" for i in range(d)), Kron([factor] * d), 1.0),
              (("a0",), Identity(2), 0.5)]
    lattice, plan = rel.lattice_blocks(blocks, rho)
    assert plan.rho <= Fraction(rho)
    for p in plan.params:
        assert float(p) <= rel.MAX_LATTICE_SIGMA ** 2
    x = rng.integers(0, 1000, size=(2,) * d)
    exact = lattice[0].apply(x)
    implicit = Kron([Explicit(f.astype(float)) for f in lattice[0].factors]).matvec(x.reshape(-1).astype(float))
    assert np.allclose(np.array(exact, dtype=float), implicit, rtol=1e-9)
    assert all(isinstance(v, int) or np.issubdtype(type(v), np.integer) for v in exact[:10])
    # the noisy release works end to end on this lattice
    y = rel.noisy_values(lattice[0], exact, plan.params[0], plan.family)
    assert np.all(np.isfinite(y))
