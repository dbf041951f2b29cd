"""Run the authors' reference AIM (mbi's mechanisms/aim.py) on one job; JSON in, JSON out.

Runs under bench/peers/.venv-mbi (mbi 2.0.0 from PyPI), never in dpsql's environment.
The reference sources are *not* part of dpsql: pass a checkout of the public repository's
``mechanisms/`` folder as ``job["reference_src"]`` (bench/aim.py --reference-src).
stdin: {"reference_src", "csv", "domain_json", "workload": [[attrs...]], "epsilon", "delta",
"max_model_size" (MB), "max_iters", "seed", "synth_rows", optional "rounds" (the script's T; its
default 16·d) and "progress" (a line per fit on stderr)}.
stdout (last line): {"seconds", "peak_rss_mb", "model_error", "synth_error", "rounds", "rho",
"profile": where the time went (JAX tracing and compilation, fits, selection; per round)}.
"""

import io
import json
import resource
import sys
import time
import types
import contextlib


def main() -> None:
    job = json.loads(sys.stdin.read())
    # cdp2adp.py imports matplotlib.pyplot without using it; a stub keeps the venv small.
    sys.modules.setdefault("matplotlib", types.ModuleType("matplotlib"))
    sys.modules.setdefault("matplotlib.pyplot", types.ModuleType("matplotlib.pyplot"))
    sys.path.insert(0, job["reference_src"])
    import jax
    jax.config.update("jax_enable_x64", True)
    # mbi 2.0.0 itself warns that JAX's persistent compilation cache is counterproductive for
    # its many small programs; following that advice is the reference's best configuration.
    jax.config.update("jax_enable_compilation_cache", False)
    import numpy as np
    from mbi import Dataset, Domain, estimation
    from aim import AIM

    # API shim, not an algorithm change: the script (mbi repository, a92f266) passes the
    # warm-start potentials as ``potentials=``; mbi 2.0.0 on PyPI names that argument
    # ``warm_start=`` and has no Dataset.load.
    _estimate = estimation.MirrorDescent.estimate

    def estimate(self, domain, loss_fn, *args, potentials=None, **kwargs):
        if potentials is not None:
            kwargs["warm_start"] = potentials
        return _estimate(self, domain, loss_fn, *args, **kwargs)

    estimation.MirrorDescent.estimate = estimate

    # Where the time goes (timing wrappers only; the algorithm is untouched): JAX tracing and
    # XLA compilation (jax.monitoring events), the mirror-descent fits, and the exponential
    # mechanism's scoring pass (one model.project per candidate per round), per round.
    prof = {"trace_s": 0.0, "compile_s": 0.0, "compiles": 0, "fits": [], "select": [], "round_end": []}

    def on_event(event, secs, **_):
        if event == "/jax/core/compile/backend_compile_duration":
            prof["compile_s"] += secs
            prof["compiles"] += 1
        elif event in ("/jax/core/compile/jaxpr_trace_duration",
                       "/jax/core/compile/jaxpr_to_mlir_module_duration"):
            prof["trace_s"] += secs

    jax.monitoring.register_event_duration_secs_listener(on_event)

    def timed(fn, bucket):
        def wrapper(*a, **k):
            t = time.perf_counter()
            c = prof["compile_s"] + prof["trace_s"]
            try:
                return fn(*a, **k)
            finally:
                prof[bucket].append((round(time.perf_counter() - t, 3),
                                     round(prof["compile_s"] + prof["trace_s"] - c, 3)))
                if bucket == "fits":
                    prof["round_end"].append(round(time.perf_counter() - t_start, 1))
                    if job.get("progress"):
                        print(f"fit {len(prof['fits'])}: {prof['fits'][-1]} at {prof['round_end'][-1]} s",
                              file=sys.stderr, flush=True)
        return wrapper

    estimation.MirrorDescent.estimate = timed(estimation.MirrorDescent.estimate, "fits")
    sizes = json.loads(open(job["domain_json"]).read())
    raw = np.loadtxt(job["csv"], delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    header = open(job["csv"]).readline().strip().split(",")
    domain = Domain(tuple(header), tuple(int(sizes[c]) for c in header))
    data = Dataset({c: raw[:, i] for i, c in enumerate(header)}, domain)
    workload = [(tuple(c), 1.0) for c in job["workload"]]
    np.random.seed(job["seed"])
    mech = AIM(job["epsilon"], job["delta"], prng=np.random.RandomState(job["seed"]),
               max_model_size=job["max_model_size"], max_iters=job["max_iters"], rounds=job.get("rounds"))
    mech.worst_approximated = timed(mech.worst_approximated, "select")
    log = io.StringIO()
    t0 = t_start = time.perf_counter()
    with contextlib.redirect_stdout(log):
        model, synth = mech.run(data, workload, num_synth_rows=job.get("synth_rows"))
    seconds = time.perf_counter() - t0
    n = data.records
    model_err, synth_err = [], []
    for cl, _ in workload:
        x = data.project(cl).datavector()
        z = np.asarray(model.project(cl).datavector())
        y = synth.project(cl).datavector()
        model_err.append(np.abs(x - z / z.sum() * n).sum() / n)
        synth_err.append(np.abs(x - y / y.sum() * n).sum() / n)
    print(json.dumps({
        "seconds": seconds,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "model_error": float(np.mean(model_err)), "synth_error": float(np.mean(synth_err)),
        "rounds": log.getvalue().count("Measuring Clique"), "rho": mech.rho,
        "profile": {"trace_s": round(prof["trace_s"], 1), "compile_s": round(prof["compile_s"], 1),
                    "compiles": prof["compiles"],
                    "fit_s": round(sum(f[0] for f in prof["fits"]), 1),
                    "fit_compile_s": round(sum(f[1] for f in prof["fits"]), 1),
                    "select_s": round(sum(f[0] for f in prof["select"]), 1),
                    "select_compile_s": round(sum(f[1] for f in prof["select"]), 1),
                    "fits": prof["fits"], "select": prof["select"]}}))


if __name__ == "__main__":
    main()
