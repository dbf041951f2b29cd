"""Which release answers a statement of a fine ordered column's workload, from the plan.

Since 82f43be (issue 35 item 6) a workload of a fine column alone may be planned as a split
(``dpsql/engine/mixed.py``): the ordered part, answered from the ordered release, and a rest
of the thin counts the ordered strategy left above their per-query baselines, answered from
the model.  Which statements went to which part is public and recorded in the plan
(``StrategyPart.parts``: indices into ``PlanReport.per_query``), so a test checks a
statement's routing against that membership, not against its text (a check that let any
COUNT come from the model would pass with counts routed to the wrong release).  Used by
tests/engine/test_ordered_{sql,groups,time}.py and tests/server/test_ordered_wire.py.
"""

from __future__ import annotations


def ordered_part(strategy):
    """The ordered strategy, or a split's ordered part."""
    if strategy.operator != "split":
        return strategy
    return next(p.strategy for p in strategy.parts if p.ordered)


def model_statements(report) -> frozenset[str]:
    """The workload statements the plan ``report`` puts in a part answered by the model (a
    split's parts that are not ordered); none for a plan of the ordered strategy alone."""
    strategy = report.strategy
    if strategy.operator != "split":
        return frozenset()
    return frozenset(report.per_query[j].sql for part in strategy.parts if not part.ordered for j in part.parts)


def assert_routed(result, sql: str, report) -> None:
    """``result`` (the answer to ``sql``) came from the model exactly when the plan put
    ``sql`` in the model's part, else from the ordered release; a statement outside the
    workload is the ordered release's (the rest measures its own statements only)."""
    from_model = sql in model_statements(report)
    assert result.model.startswith("ordered") != from_model, (sql, result.model, sorted(model_statements(report)))
