"""``optimize``'s candidates (plan/planner.py): each operator's applicability is decided from
what it measures, before any optimisation runs, and the plan's explanation names the
candidate that was refused."""

import pytest

from dpsql.errors import UnsupportedQueryError
from dpsql.plan import Caps, optimize
from dpsql.plan import planner


def test_a_refused_mixed_candidate_is_named_as_itself(workloads):
    # range-union has one marginal term and two range terms: OPT_M and OPT_M+ both optimise
    # one weight per marginal of the downward closure, and both are over a cap of one. The
    # note said "OPT_M skipped" for OPT_M+ too.
    s = optimize(workloads["range-union"], "laplace", restarts=1,
                 caps=Caps(marginal_parameters=1))
    assert "OPT_M skipped: " in s.explanation
    assert "OPT_M+ skipped: " in s.explanation


def test_an_unknown_operator_is_refused_before_any_operator_runs(workloads, monkeypatch):
    ran = []
    real = planner.CANDIDATES["OPT_M"]
    monkeypatch.setitem(planner.CANDIDATES, "OPT_M",
                        planner.Candidate("OPT_M", lambda *a, **k: ran.append(1) or real.solve(*a, **k),
                                          marginals="all", weights_optimised=True))
    with pytest.raises(UnsupportedQueryError, match="unknown operator 'OPT_X'") as info:
        optimize(workloads["marginals"], "gaussian", restarts=1, operators=("OPT_M", "OPT_X"))
    assert ran == []
    assert "OPT_kron" in info.value.hint


@pytest.mark.parametrize("kind", ["marginals", "prefix-kron", "range-union"])
def test_the_unrounded_error_is_evaluated_only_when_nothing_rounds_it(workloads, kind):
    # defer (an explicit argument, no longer a module-level ContextVar): the operator skips
    # the evaluation optimize redoes on the rounded strategy
    W = workloads[kind]
    cand = planner.CANDIDATES["OPT_M"]
    for defer in (True, False):
        p = planner.Problem(planner.workload_terms(W), "gaussian", Caps(), 1,
                            planner.np.random.default_rng(0), None, defer=defer)
        assert cand.applies(p) is None
        err = cand.run(p).expected_error
        assert (err != err) if defer else err > 0          # NaN when deferred
