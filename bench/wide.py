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
  approximate mirror descent (``approximate_oracles.ApproxMirrorDescent``, Convex-GBP on the
  saturated region graph; the exact estimator's junction tree over all pairs is one clique of
  every attribute) with the measurements as LinearMeasurements and the total dpsql holds
  (``estimate_total``).  mbi requires a fixed step; ``--mbi-step c`` uses c/(L·N), L its
  loss's Lipschitz constant: c = 2 is the default step of mbi's exact mirror descent
  (``estimation.mirror_descent``).  It runs until ``--mbi-iters`` iterations, ``--mbi-seconds``
  CPU-s, or until the loss changed by less than ``--mbi-tol`` (relative) over the last
  ``--mbi-every`` iterations; every ``--mbi-every`` iterations it logs CPU-s, loss and mean
  L1/N (the accuracy curve).

``--attrs K`` keeps the first K attributes (all their K(K−1)/2 pairs, planned the same way):
a still-wide instance on which mbi's estimator can run to convergence in minutes.

Every candidate's loss is also computed here, the same way for all: ½ Σ ‖(Q m̂ − y)/σ‖² over
the release (mbi's L2 loss; the optimum of this over the local polytope, total held, is what
both the residual fit and mbi's estimator aim at), so "converged" can be checked against the
residual fit's certified value.

Accuracy: per two-way marginal, L1 = ‖m̂ − m‖₁/N and L2 = ‖m̂ − m‖₂/N against the truth,
averaged over the 595 marginals.  Fit time is CPU seconds of the fitting process (one BLAS
thread, as the engine), answer time the CPU seconds to read all 595 marginals from the model.

    .venv/bin/python bench/wide.py --eps 1 --trials 1 [--skip relaxed,mbi] [--attrs 14]
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


def load(k: int):
    from dpsql.domain import Domain

    sizes = list(json.loads((DATA / "temporal-match2-domain.json").read_text()).items())[:k]
    dom = Domain([a for a, _ in sizes], [int(v) for _, v in sizes])
    cache = OUT / "data.npy"
    if cache.exists():
        data = np.load(cache)
    else:
        data = np.loadtxt(DATA / "temporal-match2.csv", delimiter=",", skiprows=1, dtype=np.int64)
        OUT.mkdir(parents=True, exist_ok=True)
        np.save(cache, data)
    return dom, np.ascontiguousarray(data[:, :k])


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

    k = len(dom.attributes)
    path = OUT / ("strategy.pkl" if k == 35 else f"strategy-{k}.pkl")
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


def loss(dom, ms, tables: dict) -> float:
    """½ Σ ‖(Q m̂_C − y)/σ‖² of a candidate's two-way tables (keys in domain order): one-way
    and total marginals are summed out of a pair containing them (the candidates are consistent)."""
    def table(A):
        return np.reshape(np.asarray(tables[A], dtype=float), (dom[A[0]], dom[A[1]]))

    out = 0.0
    for m in ms:
        c = tuple(m.clique)
        if len(c) == 2:
            t = table(c) if c in tables else table(c[::-1]).T
        elif len(c) == 1:
            A = next(A for A in tables if c[0] in A)
            t = table(A).sum(axis=1 if A[0] == c[0] else 0)
        else:
            t = np.array([table(next(iter(tables))).sum()])
        r = (np.asarray(m.query.matvec(np.ravel(t)), dtype=float) - m.values) / m.stddev
        out += 0.5 * float(r @ r)
    return out


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


def dump_release(ms, total: float, true: dict, path: Path) -> None:
    """The release as plain arrays for the mbi process (per measurement: clique, scale,
    per-attribute factors in clique order, None for an identity; values; σ), the total dpsql
    holds, and the true pair tables (only to log the accuracy curve: this is a benchmark)."""
    from dpsql.pgm.residual_fit import _kron_factors

    out = []
    for m in ms:
        scale, fs = _kron_factors(m.query)
        mats = [None if type(f).__name__ == "Identity" else np.asarray(f.dense(), dtype=float)
                for f in fs]
        out.append((m.clique, scale, mats, np.asarray(m.values), float(m.stddev)))
    path.write_bytes(pickle.dumps({"measurements": out, "total": total,
                                   "truth": {f"{A[0]}|{A[1]}": t for A, t in true.items()}}))


def side_mbi(release_path: str, out_path: str, a, attrs: list, shape: list) -> None:
    """Runs in bench/.venv-mbi: mbi's approximate mirror descent (Convex-GBP on the saturated
    region graph, NeurIPS 2021) on the release; writes the two-way marginals and the trace."""
    import dataclasses

    import jax

    # N = 170,254 > 10⁵: mbi warns that float32 can stall; its advice is float64.
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_enable_compilation_cache", False)
    import jax.numpy as jnp
    from mbi import Domain, LinearMeasurement
    from mbi.approximate_oracles import ApproxMirrorDescent
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
    truth_tables, total = rel["truth"], float(rel["total"])
    N = float(sum(truth_tables[next(iter(truth_tables))]))
    dom = Domain(attrs, shape)
    pairs = list(itertools.combinations(attrs, 2))
    t0 = time.process_time()
    meas = [LinearMeasurement(y, tuple(c), sd, KronQuery(tuple(c), s, tuple(mats)))
            for c, s, mats, y, sd in rel["measurements"]]
    loss_fn = from_linear_measurements(meas, dom)
    step = a.mbi_step / (float(loss_fn.lipschitz) * total)
    est = ApproxMirrorDescent(stepsize=step)
    potentials = _zero_potentials(dom, loss_fn)
    state = est._init(potentials, total)

    def tables_of(mu):
        # Convex-GBP's beliefs are normalised to the total passed (checked: they sum to it)
        return {f"{x}|{y}": np.asarray(mu.project((x, y)).values).reshape(-1) for x, y in pairs}

    def l1_of(tabs):
        return float(np.mean([np.abs(tabs[k] - t).sum() / N for k, t in truth_tables.items()]))

    trace, it, prev, converged, tracking_s = [], 0, None, False, 0.0
    while it < a.mbi_iters:
        for _ in range(a.mbi_every):
            state = est._step(state, total, loss_fn)
        it += a.mbi_every
        jax.block_until_ready(state.potentials)
        t1 = time.process_time()
        cur = float(loss_fn(state.mu))
        l1 = l1_of(tables_of(state.mu))
        tracking_s += time.process_time() - t1
        cpu = time.process_time() - t0 - tracking_s
        trace.append((it, cpu, cur, l1))
        print(f"    mbi it {it:6d}  CPU {cpu:8.1f} s  loss {cur:14.1f}  L1/N {l1:.4f}",
              file=sys.stderr, flush=True)
        if prev is not None and abs(prev - cur) <= a.mbi_tol * abs(cur):
            converged = True
            break
        prev = cur
        if cpu > a.mbi_seconds:
            break
    fit_s = time.process_time() - t0 - tracking_s
    t1 = time.process_time()
    tables = tables_of(state.mu)
    answer_s = time.process_time() - t1
    np.savez(out_path, fit_s=fit_s, answer_s=answer_s, total=total, step=step,
             trace=np.array(trace), converged=converged, iterations=it, **tables)


def _zero_potentials(dom, loss_fn):
    from mbi import CliqueVector

    return CliqueVector.zeros(dom, loss_fn.cliques)


def run_mbi(dom, ms, pairs, true, a, tag: str) -> dict | None:
    from dpsql.pgm.measurement import estimate_total

    if not MBI_PYTHON.exists():
        print("  mbi: bench/.venv-mbi is missing (pip install -r bench/peers/requirements-mbi.txt)")
        return None
    # runs with other steps may share the release, not the output
    rel, out = OUT / f"release-{tag}.pkl", OUT / f"mbi-{tag}-step{a.mbi_step:g}.npz"
    dump_release(ms, estimate_total(ms)[0], true, rel)
    args = [str(MBI_PYTHON), __file__, "--side-mbi", str(rel), str(out),
            "--attrs", str(len(dom.attributes)), "--mbi-iters", str(a.mbi_iters),
            "--mbi-step", str(a.mbi_step), "--mbi-seconds", str(a.mbi_seconds),
            "--mbi-tol", str(a.mbi_tol), "--mbi-every", str(a.mbi_every)]
    proc = subprocess.run(args, stdout=subprocess.PIPE, text=True,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS":
                               "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"})
    if proc.returncode != 0:
        print("  mbi failed (its stderr is above)")
        return None
    with np.load(out) as z:
        tables = {A: z[f"{A[0]}|{A[1]}"] for A in pairs}
        return {"fit_s": float(z["fit_s"]), "answer_s": float(z["answer_s"]), "tables": tables,
                "iterations": int(z["iterations"]), "converged": bool(z["converged"]),
                "step": float(z["step"]), "trace": z["trace"].tolist()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--eps", type=float, nargs="+", default=[1.0])
    ap.add_argument("--trials", type=int, default=1)
    ap.add_argument("--skip", default="", help="comma-separated candidates to skip")
    ap.add_argument("--relaxed-seconds", type=float, default=1200.0)
    ap.add_argument("--attrs", type=int, default=35, help="keep the first K attributes")
    ap.add_argument("--mbi-iters", type=int, default=1000, help="mbi: at most this many iterations")
    ap.add_argument("--mbi-seconds", type=float, default=1e9, help="mbi: CPU-s budget")
    ap.add_argument("--mbi-step", type=float, default=2.0, help="mbi: step c/(L·N)")
    ap.add_argument("--mbi-tol", type=float, default=1e-5,
                    help="mbi: stop when the loss moved less than this (relative) in --mbi-every")
    ap.add_argument("--mbi-every", type=int, default=25, help="mbi: log/check every n iterations")
    ap.add_argument("--side-mbi", nargs=2, metavar=("RELEASE", "OUT"))
    a = ap.parse_args()
    sizes = list(json.loads((DATA / "temporal-match2-domain.json").read_text()).items())[:a.attrs]
    if a.side_mbi:
        side_mbi(a.side_mbi[0], a.side_mbi[1], a, [k for k, _ in sizes], [int(v) for _, v in sizes])
        return 0
    skip = set(filter(None, a.skip.split(",")))
    dom, data = load(a.attrs)
    N = data.shape[0]
    strat, plan_s = strategy(dom)
    pairs = list(itertools.combinations(dom.attributes, 2))
    true = truth(dom, data)
    print("load average at start:", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"temporal-match2, first {len(dom.attributes)} attributes, {N:,} rows, {len(pairs)} pairs; "
          f"{len(strat.blocks)} blocks ({strat.operator})" + (f", planned in {plan_s:.1f} s CPU" if plan_s else ""))
    rows = []
    for eps in a.eps:
        for trial in range(a.trials):
            ms, sigma = release(dom, data, strat, eps, trial)
            tag = f"k{a.attrs}-eps{eps:g}-t{trial}"
            print(f"ε = {eps:g}, trial {trial}: σ = {sigma:.3g}", flush=True)
            cands = {}
            if "residual" not in skip:
                cands["dpsql auto (residual)"] = run_dpsql(dom, ms, pairs, "auto", 1e9)
            if "ls" not in skip:
                cands["GReM least squares"] = run_ls(dom, ms, pairs)
            if "mbi" not in skip:
                r = run_mbi(dom, ms, pairs, true, a, tag)
                if r is not None:
                    cands[f"mbi approx. MD, step {a.mbi_step:g}/(L·N), {r['iterations']} it"] = r
            if "relaxed" not in skip:
                cands["dpsql relaxed (before)"] = run_dpsql(dom, ms, pairs, "relaxed", a.relaxed_seconds)
            for name, r in cands.items():
                l1, l2 = errors(r["tables"], true, N)
                neg = min(float(np.min(t)) for t in r["tables"].values())
                note = "stopped at the CPU limit" if r.get("stopped") else ""
                if "converged" in r:
                    note = (f"loss moved < {a.mbi_tol:g} (relative) in {a.mbi_every} it"
                            if r["converged"] else "not converged (iteration/CPU limit)")
                lo = loss(dom, ms, r["tables"])
                rows.append((eps, trial, name, r["fit_s"], r["answer_s"], l1, l2, neg, lo, note))
                wall = f" (wall {r['wall_s']:.0f} s)" if "wall_s" in r else ""
                print(f"  {name:28s} fit {r['fit_s']:8.1f} s{wall}  answer {r['answer_s']:6.2f} s  "
                      f"L1 {l1:.4f}  L2 {l2:.5f}  min cell {neg:.3g}  loss {lo:,.1f} {note}", flush=True)
                if "summary" in r:
                    print("    " + r["summary"].replace("\n", "\n    "))
    print("load average at the end:", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print(f"\n| ε | trial | candidate | fit (CPU s) | answer {len(pairs)} (CPU s) | mean L1/N | "
          "mean L2/N | min cell | loss ½Σ‖(Qm̂−y)/σ‖² | note |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for eps, trial, name, fs, ans, l1, l2, neg, lo, note in rows:
        print(f"| {eps:g} | {trial} | {name} | {fs:.1f} | {ans:.2f} | {l1:.4f} | {l2:.5f} | {neg:.3g} "
              f"| {lo:,.1f} | {note} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
