"""A wide table's two-way marginals (issue 35 item 3): fit + answer time and accuracy.

temporal-match2 (a public census extract, /work/shared/data/temporal-match2: 35 discretised
attributes, 170,254 rows); workload: all 595 two-way marginals, planned by
``dpsql.plan.optimize`` (ResidualPlanner, Gaussian noise, the engine's default caps: 631
blocks) and measured at ε (δ = 10⁻⁶, zCDP calibration) with discrete Gaussian noise from a
seeded bit source — one release per trial, which every candidate fits:

* ``residual``: the engine's choice for it, ``dpsql.pgm.auto.fit`` with the engine's
  arguments (GReM least squares + local non-negativity, ``dpsql.pgm.residual_fit``);
* ``ls``: GReM's least-squares marginals alone (consistent, not non-negative);
* ``relaxed``: the same call with ``method="relaxed"`` (Prox-PGM over the saturated region
  graph, what the engine ran before), stopped after ``--relaxed-seconds`` of CPU at its
  current iterate (it ran > 20 minutes in the issue);
* ``mbi``: the authors' Private-PGM (mbi 2.0.0, JAX; ``bench/.venv-mbi`` from
  bench/peers/requirements-mbi.txt) on the same noisy values, in its own process: its
  ``estimation.mirror_descent`` with the measurements as LinearMeasurements, ``--mbi-iters``
  iterations.

Accuracy: per two-way marginal, L1 = ‖m̂ − m‖₁/N and L2 = ‖m̂ − m‖₂/N against the truth,
averaged over the 595 marginals.  Fit time is CPU seconds of the fitting process (one BLAS
thread, as the engine), answer time the CPU seconds to read all 595 marginals from the model.

    .venv/bin/python bench/wide.py --eps 1 --trials 1 [--skip relaxed,mbi]
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

DATA = Path("/work/shared/data/temporal-match2")
OUT = HERE / "out" / "wide"
MBI_PYTHON = HERE / ".venv-mbi" / "bin" / "python"
DELTA = 1e-6


class SeededBits:
    """A reproducible bit source for dpsql.privacy.noise (benchmarks only)."""

    def __init__(self, seed: int) -> None:
        self._g = np.random.default_rng(seed)

    def random_bytes(self, n: int) -> bytes:
        return self._g.bytes(n)


def load():
    from dpsql.domain import Domain

    sizes = json.loads((DATA / "temporal-match2-domain.json").read_text())
    dom = Domain(list(sizes), [int(v) for v in sizes.values()])
    cache = OUT / "data.npy"
    if cache.exists():
        data = np.load(cache)
    else:
        data = np.loadtxt(DATA / "temporal-match2.csv", delimiter=",", skiprows=1, dtype=np.int64)
        OUT.mkdir(parents=True, exist_ok=True)
        np.save(cache, data)
    return dom, data


def counts(dom, data, clique) -> np.ndarray:
    cols = [dom.attributes.index(a) for a in clique]
    shape = [dom[a] for a in clique]
    if not cols:
        return np.array([float(data.shape[0])])
    flat = np.ravel_multi_index(tuple(data[:, c] for c in cols), shape)
    return np.bincount(flat, minlength=int(np.prod(shape))).astype(float)


def strategy(dom):
    """ResidualPlanner's strategy for all two-way marginals (cached: planning is public)."""
    from dpsql.linalg import Marginals
    from dpsql.plan import Workload, optimize

    path = OUT / "strategy.pkl"
    if path.exists():
        return pickle.loads(path.read_bytes()), None
    sizes = dict(zip(dom.attributes, dom.shape))
    t0 = time.process_time()
    s = optimize(Workload(dom, Marginals(sizes, list(itertools.combinations(dom.attributes, 2)))),
                 noise="gaussian")
    cpu = time.process_time() - t0
    OUT.mkdir(parents=True, exist_ok=True)
    path.write_bytes(pickle.dumps(s))
    return s, cpu


def release(dom, data, strat, eps: float, seed: int):
    """The measurements of one release (as ``Engine.fit_measurements`` builds them)."""
    from dpsql.pgm import Measurement
    from dpsql.plan import gaussian_sigma
    from dpsql.privacy import noise

    sigma = float(gaussian_sigma(eps, DELTA, "zcdp")) * float(strat.sensitivity(2))
    bits = SeededBits(seed)
    ms = []
    for block in strat.blocks:
        exact = np.asarray(block.query.matvec(counts(dom, data, block.clique)), dtype=float)
        y = exact + noise.discrete_gaussian(sigma * sigma, exact.size, rng=bits) / block.weight
        ms.append(Measurement(tuple(block.clique), block.query, y, sigma / block.weight))
    return ms, sigma


def truth(dom, data) -> dict:
    return {A: counts(dom, data, A) for A in itertools.combinations(dom.attributes, 2)}


def errors(tables: dict, true: dict, N: int) -> tuple[float, float]:
    """Mean over the two-way marginals of ‖m̂ − m‖₁/N and ‖m̂ − m‖₂/N."""
    l1 = [float(np.abs(np.ravel(tables[A]) - t).sum()) / N for A, t in true.items()]
    l2 = [float(np.linalg.norm(np.ravel(tables[A]) - t)) / N for A, t in true.items()]
    return float(np.mean(l1)), float(np.mean(l2))


def answer_all(model, pairs) -> tuple[dict, float]:
    t0 = time.process_time()
    out = {A: model.marginal(A).values for A in pairs}
    return out, time.process_time() - t0


def run_dpsql(dom, ms, pairs, method: str, cpu_limit: float) -> dict:
    """The engine's fit call (``ModelStore._fit``'s arguments), ``method`` "auto" or "relaxed"."""
    from dpsql.linalg.threads import one_blas_thread
    from dpsql.pgm.auto import fit
    from dpsql.pgm.limits import FitLimits

    t0, w0 = time.process_time(), time.perf_counter()
    state = {"iterations": 0}

    def callback(p):
        state["iterations"] = p.iteration
        return time.process_time() - t0 > cpu_limit

    with one_blas_thread():
        model = fit(dom, ms, method=method, iters=20000, exact_method="adaptive", stop="discrepancy",
                    gap=FitLimits().gap, callback=callback)
        fit_s = time.process_time() - t0
        tables, answer_s = answer_all(model, pairs)
    return {"fit_s": fit_s, "answer_s": answer_s, "tables": tables, "summary": model.summary(),
            "wall_s": time.perf_counter() - w0,
            "iterations": state["iterations"], "stopped": time.process_time() - t0 > cpu_limit}


def run_ls(dom, ms, pairs) -> dict:
    from dpsql.pgm.residual_fit import residual_form

    t0 = time.process_time()
    form = residual_form(dom, ms)
    tables = dict(zip(pairs, form.least_squares(pairs)))
    return {"fit_s": time.process_time() - t0, "answer_s": 0.0, "tables": tables}


def dump_release(ms, path: Path) -> None:
    """The release as plain arrays for the mbi process (per measurement: clique, scale,
    per-attribute factors in clique order, None for an identity; values; σ)."""
    from dpsql.pgm.residual_fit import _kron_factors

    out = []
    for m in ms:
        scale, fs = _kron_factors(m.query)
        mats = [None if type(f).__name__ == "Identity" else np.asarray(f.dense(), dtype=float)
                for f in fs]
        out.append((m.clique, scale, mats, np.asarray(m.values), float(m.stddev)))
    path.write_bytes(pickle.dumps(out))


def side_mbi(release_path: str, out_path: str, iters: int, attrs: list, shape: list) -> None:
    """Runs in bench/.venv-mbi: mbi's approximate mirror descent (Convex-GBP on the saturated
    region graph, NeurIPS 2021) on the release; writes the two-way marginals."""
    import dataclasses

    import jax

    # N = 170,254 > 10⁵: mbi warns that float32 can stall; its advice is float64.
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp
    from mbi import Domain, LinearMeasurement
    from mbi.approximate_oracles import mirror_descent
    from mbi.marginal_loss import from_linear_measurements

    @dataclasses.dataclass(frozen=True, eq=False)
    class KronQuery:
        clique: tuple
        scale: float
        mats: tuple

        def __call__(self, f):
            vals = jnp.transpose(f.values, [f.domain.attributes.index(a) for a in self.clique])
            for j, M in enumerate(self.mats):
                if M is not None:
                    vals = jnp.moveaxis(jnp.tensordot(jnp.asarray(M), vals, axes=([1], [j])), 0, j)
            return self.scale * vals.reshape(-1)

        def op_norm_sq(self) -> float:
            out = self.scale ** 2
            for M in self.mats:
                if M is not None:
                    out *= float(np.linalg.norm(M, 2) ** 2)
            return out

        def __hash__(self) -> int:
            return id(self)

        def __eq__(self, other) -> bool:
            return self is other

    rel = pickle.loads(Path(release_path).read_bytes())
    dom = Domain(attrs, shape)
    t0 = time.process_time()
    meas = [LinearMeasurement(y, tuple(c), sd, KronQuery(tuple(c), s, tuple(mats)))
            for c, s, mats, y, sd in rel]
    loss = from_linear_measurements(meas, dom)
    total = float(sum(y[0] for c, s, mats, y, sd in rel if not c) or 0) or None
    from mbi.estimation import minimum_variance_unbiased_total
    total = float(minimum_variance_unbiased_total(meas)) if total is None else total
    mu = mirror_descent(dom, loss, known_total=total, stepsize=1.0 / (loss.lipschitz * total),
                        iters=iters)
    fit_s = time.process_time() - t0
    t1 = time.process_time()
    pairs = list(itertools.combinations(attrs, 2))
    # the approximate estimator's pseudo-marginals are normalised to 1: scale to the total
    tables = {f"{a}|{b}": np.asarray(mu.project((a, b)).values) * total for a, b in pairs}
    answer_s = time.process_time() - t1
    np.savez(out_path, fit_s=fit_s, answer_s=answer_s, total=total, **tables)


def run_mbi(dom, ms, pairs, iters: int, tag: str) -> dict | None:
    if not MBI_PYTHON.exists():
        print("  mbi: bench/.venv-mbi is missing (pip install -r bench/peers/requirements-mbi.txt)")
        return None
    rel, out = OUT / f"release-{tag}.pkl", OUT / f"mbi-{tag}.npz"
    dump_release(ms, rel)
    args = [str(MBI_PYTHON), __file__, "--side-mbi", str(rel), str(out), "--mbi-iters", str(iters)]
    proc = subprocess.run(args, capture_output=True, text=True,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS":
                               "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"})
    if proc.returncode != 0:
        print("  mbi failed:", proc.stderr[-2000:])
        return None
    with np.load(out) as z:
        tables = {A: z[f"{A[0]}|{A[1]}"] for A in pairs}
        return {"fit_s": float(z["fit_s"]), "answer_s": float(z["answer_s"]), "tables": tables,
                "iterations": iters}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0])
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--skip", default="", help="comma-separated candidates to skip")
    ap.add_argument("--relaxed-seconds", type=float, default=1200.0)
    ap.add_argument("--mbi-iters", type=int, default=1000)
    ap.add_argument("--side-mbi", nargs=2, metavar=("RELEASE", "OUT"))
    a = ap.parse_args()
    sizes = json.loads((DATA / "temporal-match2-domain.json").read_text())
    if a.side_mbi:
        side_mbi(a.side_mbi[0], a.side_mbi[1], a.mbi_iters, list(sizes), [int(v) for v in sizes.values()])
        return 0
    skip = set(filter(None, a.skip.split(",")))
    dom, data = load()
    N = data.shape[0]
    strat, plan_s = strategy(dom)
    pairs = list(itertools.combinations(dom.attributes, 2))
    true = truth(dom, data)
    print("load average at start:", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"temporal-match2: {len(dom.attributes)} attributes, {N:,} rows, {len(pairs)} pairs; "
          f"{len(strat.blocks)} blocks ({strat.operator})" + (f", planned in {plan_s:.1f} s CPU" if plan_s else ""))
    rows = []
    for eps in a.eps:
        for trial in range(a.trials):
            ms, sigma = release(dom, data, strat, eps, trial)
            tag = f"eps{eps:g}-t{trial}"
            print(f"ε = {eps:g}, trial {trial}: σ = {sigma:.3g}", flush=True)
            cands = {}
            if "residual" not in skip:
                cands["dpsql auto (residual)"] = run_dpsql(dom, ms, pairs, "auto", 1e9)
            if "ls" not in skip:
                cands["GReM least squares"] = run_ls(dom, ms, pairs)
            if "mbi" not in skip:
                r = run_mbi(dom, ms, pairs, a.mbi_iters, tag)
                if r is not None:
                    cands[f"mbi approx. MD ({a.mbi_iters} it)"] = r
            if "relaxed" not in skip:
                cands["dpsql relaxed (before)"] = run_dpsql(dom, ms, pairs, "relaxed", a.relaxed_seconds)
            for name, r in cands.items():
                l1, l2 = errors(r["tables"], true, N)
                neg = min(float(np.min(t)) for t in r["tables"].values())
                note = "stopped at the CPU limit" if r.get("stopped") else ""
                rows.append((eps, trial, name, r["fit_s"], r["answer_s"], l1, l2, neg, note))
                wall = f" (wall {r['wall_s']:.0f} s)" if "wall_s" in r else ""
                print(f"  {name:28s} fit {r['fit_s']:8.1f} s{wall}  answer {r['answer_s']:6.2f} s  "
                      f"L1 {l1:.4f}  L2 {l2:.5f}  min cell {neg:.3g} {note}", flush=True)
                if "summary" in r:
                    print("    " + r["summary"].replace("\n", "\n    "))
    print("load average at the end:", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print("\n| ε | trial | candidate | fit (CPU s) | answer 595 (CPU s) | mean L1/N | mean L2/N | min cell | note |")
    print("|---|---|---|---|---|---|---|---|---|")
    for eps, trial, name, fs, ans, l1, l2, neg, note in rows:
        print(f"| {eps:g} | {trial} | {name} | {fs:.1f} | {ans:.2f} | {l1:.4f} | {l2:.5f} | {neg:.3g} | {note} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
