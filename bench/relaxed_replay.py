"""Replayed adult/marginals releases: where the relaxed model's error sits, and two variants.

    .venv/bin/python bench/relaxed_replay.py /tmp/keep/adult-marginals/eps10-trial0 ... \\
        [--raw bench/out/eval/raw/dpsql-adult-marginals.json] [--later 1000] [--gamma 100]

Each DIR is a release kept by ``bench/suite.py --keep`` (``eps<ε>-trial<i>``); ``--raw`` is that
run's raw answers, which hold least squares' answers to the same release (trial i).  The fit is
the engine's (``dpsql.pgm.auto.fit`` with the engine's arguments, relaxed, one BLAS thread).
Errors are against the exact answers (``suite.truth_for``), split into the cells of queries
least squares answers — by order (total, 1-way, 2-way) — and the cells it leaves NULL (31 pairs
measured only through a block of their interaction, whose one-way parts come from other blocks:
the engine's least squares is local to each block and cannot combine them).  Variants, each
from the same release:

* ``model``: the fit as the engine runs it (300 first-order iterations, then the exact step;
  the exact step's ridge keeps undetermined directions where the first-order fit left them);
* ``later``: the exact step after ``--later`` first-order iterations instead of 300 — does the
  300-iteration value of the undetermined directions matter?
* ``indep``: the model with every NULL-in-least-squares pair table replaced by the product of
  its two one-way tables (what the model would say if those pairs carried no information);
* ``xhat``: the global least-squares estimate x̂ on L(G)'s affine hull (the exact step's
  problem without τ ≥ 0: one KKT solve), which combines all blocks;
* ``wmetric``: the workload-metric projection (thesis §4.3: the fit is the projection of x̂
  onto the polytope in the measurement metric; here in the workload's):
  min γ·‖S(τ − x̂)‖² + Σ w(Pτ − y)² over L(G), τ ≥ 0, S selecting the cells of every workload
  query (each is a region here), γ ``--gamma`` times the largest curvature of the measurement
  loss.  As γ → ∞ it is the projection of x̂ in the workload's metric, never farther from the
  truth than x̂ on the workload (the truth lies in L(G), projections onto convex sets are
  non-expansive), on every release.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import suite  # noqa: E402
from relaxed_exact_step import replay  # noqa: E402


def fit_engine(dom, ms, exact_after=None):
    from dpsql.linalg.threads import one_blas_thread
    from dpsql.pgm.auto import fit
    from dpsql.pgm.limits import FitLimits

    opts = {} if exact_after is None else {"exact_after": exact_after}
    t0 = time.perf_counter()
    with one_blas_thread():
        model = fit(dom, ms, method="relaxed", iters=20000, exact_method="adaptive",
                    stop="discrepancy", gap=FitLimits().gap, **opts)
    return model, time.perf_counter() - t0


def with_tables(model, tables):
    """A RelaxedModel answering from other region tables (counts) on the same graph."""
    from dpsql.pgm.relaxed_model import RelaxedModel

    f = copy.copy(model.fit)
    f.probs = [np.asarray(t, dtype=float) / model.total for t in tables]
    return RelaxedModel(model.domain, f, measured=model.measured)


def tables_of(model):
    return [p * model.total for p in model.fit.probs]


def answers(model, truth):
    out = []
    for q in truth:
        vals = model.marginal(tuple(q["attrs"])).values if q["attrs"] else np.array(model.total)
        out.append(np.array([float(vals[tuple(k)]) if q["attrs"] else float(vals) for k in q["keys"]]))
    return out


def errors(vecs, truth, refused):
    """Squared-error sums and cell counts: by order on LS's cells, and on LS's refused cells."""
    acc = {}
    for q, v, r in zip(truth, vecs, refused):
        key = "refused" if r else f"{len(q['attrs'])}-way"
        sq = float(np.sum((np.asarray(v) - np.asarray(q["truth"])) ** 2))
        a = acc.setdefault(key, [0.0, 0])
        a[0] += sq
        a[1] += len(q["truth"])
        if not r:
            b = acc.setdefault("LS cells", [0.0, 0])
            b[0] += sq
            b[1] += len(q["truth"])
    return acc


def ls_estimate(model, ms):
    """x̂: the loss minimised on L(G)'s affine hull (no τ ≥ 0), from the model's tables (the
    same ridge as the exact step keeps the undetermined directions there)."""
    import scipy.sparse as sp

    from dpsql.pgm import relaxed_polish as rp

    graph, total = model.graph, model.total
    P, w, y = rp.loss_matrix(graph, ms)
    C, b, offsets = rp.local_constraints(graph, total)
    v = np.concatenate([np.ravel(t) for t in tables_of(model)])
    WP = P.multiply(w[:, None]).tocsr()
    H = (2.0 * (P.T @ WP)).tocsc()
    lam = rp.RIDGE * float(H.diagonal().max())
    H = (H + lam * sp.identity(v.size, format="csc")).tocsc()
    g = 2.0 * (WP.T @ (P @ v - y))
    sol = rp._solve(H, C.tocsr(), np.concatenate([-g, b - C @ v]))
    return v + sol[:v.size], (P, w, y), offsets, float(H.diagonal().max())


def wmetric(model, ms, truth, refused, gamma):
    import scipy.sparse as sp

    from dpsql.pgm import relaxed_polish as rp

    graph = model.graph
    xhat, (P, w, y), offsets, top = ls_estimate(model, ms)
    cells = []
    for q in truth:
        if not q["attrs"]:
            continue   # the total: every region sums to it already
        h = graph.host(graph.canonical(tuple(q["attrs"])))
        assert len(graph.regions[h]) == len(q["attrs"]), q["attrs"]   # every query is a region
        cells.append(np.arange(offsets[h], offsets[h + 1]))
    cells = np.concatenate(cells)
    S = sp.csr_matrix((np.ones(cells.size), (np.arange(cells.size), cells)), shape=(cells.size, xhat.size))
    weight = gamma * top / 2.0
    P2 = sp.vstack([S, P]).tocsr()
    w2 = np.concatenate([np.full(cells.size, weight), w])
    y2 = np.concatenate([xhat[cells], y])
    t0 = time.perf_counter()
    step = rp.active_set_step(graph, P2, w2, y2, tables_of(model), model.total)
    seconds = time.perf_counter() - t0
    if isinstance(step, str):
        return None, step, seconds, xhat
    tables, rounds, optimal = step
    return with_tables(model, tables), f"{rounds} rounds, certified {optimal}", seconds, xhat


def indep(model, truth, refused):
    graph = model.graph
    tables = tables_of(model)
    for q, r in zip(truth, refused):
        if not r or len(q["attrs"]) != 2:
            continue
        canon = graph.canonical(tuple(q["attrs"]))
        h = graph.index[canon]
        a = tables[h].sum(axis=1)
        b = tables[h].sum(axis=0)
        tables[h] = np.outer(a, b) / model.total
    return with_tables(model, tables)


def summary(logs) -> int:
    """Per ε and variant: RMSE pooled over releases (√ of the mean per-release MSE) by order,
    and on least squares' cells the wins and paired MSE difference against the model."""
    runs = [json.loads(line[5:]) for log in logs for line in Path(log).read_text().splitlines()
            if line.startswith("JSON ")]
    keys = ["1-way", "2-way", "LS cells", "refused"]
    for eps in sorted({r["eps"] for r in runs}):
        rs = [r for r in runs if r["eps"] == eps]
        print(f"eps={eps:g}: {len(rs)} releases")
        for name in rs[0]["rows"]:
            if not all(name in r["rows"] for r in rs):
                continue
            cells = []
            for k in keys:
                mse = [r["rows"][name][k][0] / r["rows"][name][k][1] for r in rs if k in r["rows"][name]]
                cells.append(f"{k} {np.sqrt(np.mean(mse)):.4f}" if mse else f"{k} —")
            d = np.array([r["rows"][name]["LS cells"][0] / r["rows"][name]["LS cells"][1]
                          - r["rows"]["model"]["LS cells"][0] / r["rows"]["model"]["LS cells"][1] for r in rs])
            se = d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else float("nan")
            print(f"   {name:9s} " + "; ".join(cells)
                  + f"; vs model on LS cells: lower in {(d < 0).sum()}/{len(d)}, MSE diff {d.mean():+.4g} ± {se:.2g}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dirs", nargs="*")
    ap.add_argument("--raw", default=str(suite.OUT / "raw" / "dpsql-adult-marginals.json"))
    ap.add_argument("--later", type=int, default=1000)
    ap.add_argument("--gamma", default="100", help="comma-separated γ (one wmetric variant each)")
    ap.add_argument("--variants", default="model,later,indep,wmetric")
    ap.add_argument("--summary", nargs="+", metavar="LOG",
                    help="pool the JSON lines of earlier runs' output instead of running")
    args = ap.parse_args()
    if args.summary:
        return summary(args.summary)
    variants = args.variants.split(",")
    raw = json.loads(Path(args.raw).read_text())
    truth = suite.truth_for("adult", suite.read_sql(suite.workload_file("adult", "marginals")))
    for d in args.dirs:
        dom, ms, info = replay(d)
        trial = int(Path(d).name.split("trial")[1])
        run = next(r for r in raw["runs"] if float(r["epsilon"]) == info["eps"])
        ls = suite.vectorise("adult", truth, run["trials"][trial]["least_squares"], missing_is_zero=False)
        refused = [v is None for v in ls]
        rows = {"LS": errors([v if v is not None else np.asarray(q["truth"]) for q, v in zip(truth, ls)],
                             truth, refused)}
        model, secs = fit_engine(dom, ms)
        print(f"{d}: eps={info['eps']:g}, fit {secs:.1f} s; {model.stopped}", flush=True)
        rows["model"] = errors(answers(model, truth), truth, refused)
        if "later" in variants:
            later, s2 = fit_engine(dom, ms, exact_after=args.later)
            print(f"   later ({args.later}) fit {s2:.1f} s; {later.stopped}", flush=True)
            rows[f"later{args.later}"] = errors(answers(later, truth), truth, refused)
            diff = [np.abs(a - b).max() for a, b in zip(answers(model, truth), answers(later, truth))]
            print(f"   largest |model − later| per order: refused {max(d_ for d_, r in zip(diff, refused) if r):.3g}, "
                  f"answered {max(d_ for d_, r in zip(diff, refused) if not r):.3g}")
        if "indep" in variants:
            rows["indep"] = errors(answers(indep(model, truth, refused), truth), truth, refused)
        if "wmetric" in variants:
            for gamma in (float(g) for g in args.gamma.split(",")):
                wm, note, s3, xhat = wmetric(model, ms, truth, refused, gamma)
                print(f"   wmetric γ={gamma:g}: {note} ({s3:.1f} s)", flush=True)
                if wm is not None:
                    rows[f"wmetric{gamma:g}"] = errors(answers(wm, truth), truth, refused)
            shapes = [t.shape for t in tables_of(model)]
            ends = np.cumsum([int(np.prod(sh)) for sh in shapes])
            split = [xhat[e - int(np.prod(sh)):e].reshape(sh) for sh, e in zip(shapes, ends)]
            rows["xhat"] = errors(answers(with_tables(model, split), truth), truth, refused)
        keys = ["0-way", "1-way", "2-way", "LS cells", "refused"]
        print("   RMSE      " + "".join(f"{k:>12s}" for k in keys))
        for name, acc in rows.items():
            print(f"   {name:9s} " + "".join(
                f"{np.sqrt(acc[k][0] / acc[k][1]):12.4f}" if k in acc and (name != 'LS' or k != 'refused')
                else f"{'—':>12s}" for k in keys), flush=True)
        print("   cells     " + "".join(f"{rows['model'][k][1]:12d}" if k in rows["model"] else f"{0:12d}"
                                      for k in keys), flush=True)
        print("JSON " + json.dumps({"dir": d, "eps": info["eps"], "rows": rows}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
