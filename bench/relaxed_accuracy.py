"""Exact vs relaxed Prox-PGM accuracy: the setting of NeurIPS 2021 Figure 2(a)/(b).

Data (paper App. C.1): 8 attributes of size 4; a random spanning tree over them (seeded),
log-potentials θ_r ~ N(0, 1) on each tree edge, and ``--records`` rows sampled from p_θ
(default 10,000; seeds fixed per trial).  Measurements: k random 3-way marginals,
each with discrete Laplace noise of scale k/ε (L1 sensitivity 1 per marginal, ε = 1
split evenly), drawn by dpsql.privacy.noise from a seeded bit source.  Estimators:
Exact (dpsql.pgm.estimate), Saturated Region Graph and Factor Graph
(dpsql.pgm.relaxed.estimate_relaxed), all with the L2 loss.  Error: L1 distance to the
true marginal divided by the number of records, averaged over the measured
("in-model") 3-way cliques and over the unmeasured ("out-of-model") ones, then over
trials.  "Noisy" is the error of the raw measurements.  Expected ordering (paper):
Exact ≤ Saturated ≤ Factor < Noisy.

    .venv/bin/python bench/relaxed_accuracy.py [--ks 2 4 8 16 32 56] [--trials 3]
        [--iters 1000] [--gap 0.5,1e-3] [--append bench/RESULTS.md]

``--gap ATOL,RTOL`` stops the two relaxed estimators as the engine does (``dpsql.pgm.auto.fit``:
estimated optimality gap ≤ atol + rtol·loss, rtol at least ``FitLimits.relaxed_rtol``), with ``--iters``
only a limit; the table then also gives their mean iterations.
"""

from __future__ import annotations

import argparse
import itertools
import time

import numpy as np

from dpsql.domain import Domain
from dpsql.linalg import Identity
from dpsql.pgm import Measurement, estimate
from dpsql.pgm.appgm import RelaxedModel
from dpsql.pgm.relaxed import estimate_relaxed
from dpsql.privacy import noise

D, SIZE = 8, 4


class SeededBits:
    """A reproducible bit source for dpsql.privacy.noise (benchmarks only)."""

    def __init__(self, seed: int) -> None:
        self._g = np.random.default_rng(seed)

    def random_bytes(self, n: int) -> bytes:
        return self._g.bytes(n)


def synthetic(seed: int, records: int) -> tuple[Domain, np.ndarray]:
    """Appendix C.1: random spanning tree, Gaussian log-potentials, sampled records."""
    rng = np.random.default_rng(seed)
    dom = Domain([f"x{i}" for i in range(D)], [SIZE] * D)
    order = rng.permutation(D)
    logp = np.zeros(dom.shape)
    for k in range(1, D):
        a, b = sorted((int(order[k]), int(order[rng.integers(0, k)])))
        shape = [1] * D
        shape[a] = shape[b] = SIZE
        logp = logp + rng.normal(size=(SIZE, SIZE)).reshape(shape)
    p = np.exp(logp - logp.max())
    counts = rng.multinomial(records, (p / p.sum()).ravel()).reshape(dom.shape).astype(float)
    return dom, counts


def marginal(dom: Domain, counts: np.ndarray, clique) -> np.ndarray:
    axes = tuple(i for i, a in enumerate(dom.attributes) if a not in clique)
    return counts.sum(axis=axes)


def run_trial(k: int, trial: int, records: int, iters: int, epsilon: float = 1.0,
              **options) -> dict:
    dom, counts = synthetic(1000 + trial, records)
    triples = list(itertools.combinations(dom.attributes, 3))
    rng = np.random.default_rng(2000 + 100 * k + trial)
    chosen = [triples[i] for i in sorted(rng.choice(len(triples), k, replace=False))]
    unmeasured = [c for c in triples if c not in chosen]
    scale = k / epsilon
    bits = SeededBits(3000 + 100 * k + trial)
    ms, noisy_err = [], []
    for c in chosen:
        truth = marginal(dom, counts, c).ravel()
        y = truth + noise.discrete_laplace(scale, truth.size, rng=bits)
        noisy_err.append(np.abs(y - truth).sum() / records)
        # Laplace(b) has standard deviation b√2; the loss weights by 1/σ (App. C.2).
        ms.append(Measurement(c, Identity(truth.size), y.astype(float), scale * np.sqrt(2.0)))
    out = {"noisy_in": float(np.mean(noisy_err))}
    models = {}
    t0 = time.perf_counter()
    models["exact"] = estimate(dom, ms, iters=iters, method="md")   # as measured in bench/RESULTS.md
    out["t_exact"] = time.perf_counter() - t0
    for kind in ("saturated", "factor"):
        t0 = time.perf_counter()
        res = estimate_relaxed(dom, ms, region_graph=kind, iters=iters, **options)
        models[kind] = RelaxedModel(dom, res, measured=chosen)
        out[f"t_{kind}"] = time.perf_counter() - t0
        out[f"it_{kind}"] = len(res.loss) - 2   # the loss history ends with the final model's
    for name, model in models.items():
        err_in = [np.abs(model.marginal(c).values - marginal(dom, counts, c)).sum() / records
                  for c in chosen]
        out[f"{name}_in"] = float(np.mean(err_in))
        if unmeasured:
            err_out = [np.abs(model.marginal(c).values - marginal(dom, counts, c)).sum() / records
                       for c in unmeasured]
            out[f"{name}_out"] = float(np.mean(err_out))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ks", type=int, nargs="+", default=[2, 4, 8, 16, 32, 56])
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--records", type=int, default=10_000)
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--damping", type=float, default=None)
    ap.add_argument("--gap", default=None, help="ATOL,RTOL: stop the relaxed fits as the engine does")
    ap.add_argument("--append", default=None)
    args = ap.parse_args()
    header = ("| k | Exact in | Saturated in | Factor in | Noisy in | Exact out | Saturated out "
              "| Factor out | ordering holds | s/fit (exact / sat / factor) |")
    lines = [header, "|" + "---|" * 10]
    for k in args.ks:
        opts = {} if args.damping is None else {"damping": args.damping}
        if args.gap:
            from dpsql.pgm.limits import FitLimits
            atol, rtol = (float(x) for x in args.gap.split(","))
            opts["gap"] = (atol, max(rtol, FitLimits().relaxed_rtol))
        rows = [run_trial(k, t, args.records, args.iters, **opts) for t in range(args.trials)]
        mean = {key: float(np.mean([r[key] for r in rows])) for key in rows[0]}
        ok_in = mean["exact_in"] <= mean["saturated_in"] <= mean["factor_in"] < mean["noisy_in"]
        ok_out = ("exact_out" not in mean
                  or mean["exact_out"] <= mean["saturated_out"] <= mean["factor_out"])
        fmt = lambda key: f"{mean[key]:.4f}" if key in mean else "–"  # noqa: E731
        lines.append(
            f"| {k} | {fmt('exact_in')} | {fmt('saturated_in')} | {fmt('factor_in')} | "
            f"{fmt('noisy_in')} | {fmt('exact_out')} | {fmt('saturated_out')} | "
            f"{fmt('factor_out')} | {'yes' if ok_in and ok_out else 'NO'} "
            f"(in {'✓' if ok_in else '✗'}, out {'✓' if ok_out else '✗'}) | "
            f"{mean['t_exact']:.1f} / {mean['t_saturated']:.1f} / {mean['t_factor']:.1f}"
            + (f" ({mean['it_saturated']:.0f} / {mean['it_factor']:.0f} it)" if args.gap else "") + " |")
        print(lines[-1], flush=True)
    text = "\n".join(lines)
    print()
    print(text)
    if args.append:
        with open(args.append, "a", encoding="utf-8") as fh:
            fh.write(text + "\n")


if __name__ == "__main__":
    main()
