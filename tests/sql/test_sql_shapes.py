"""Semantics of the BI shapes beyond equality with DuckDB (issue 21): standard errors through
outer stages, top-N chosen from the (noisy) answers, parameter order, the empty string."""

from __future__ import annotations

import math

import numpy as np
import pytest

import dpsql.errors as errors
from dpsql.domain import Categorical, IntegerRange, TableSchema
from dpsql.sql import compile as compile_sql


def _answers(cq, value=1.0, stderr=1.0):
    answers = {lq.name: np.full(lq.matrix.shape[0], value) for lq in cq.linear_queries}
    return answers, {k: np.full_like(v, stderr) for k, v in answers.items()}


def test_outer_stage_keeps_the_inner_standard_errors(catalog):
    inner = compile_sql("SELECT sex, COUNT(*) AS n FROM adult GROUP BY sex", catalog)
    outer = compile_sql("SELECT s.sex AS g, s.n, 2 * s.n AS twice FROM (SELECT sex, COUNT(*) AS n FROM adult "
                        "GROUP BY sex) s", catalog)
    a, e = _answers(inner, 10.0, 3.0)
    rows, errs = inner.postprocess(a, e)
    orows, oerrs = outer.postprocess(*_answers(outer, 10.0, 3.0))
    assert [r[:2] for r in orows] == rows
    assert [x[1] for x in oerrs] == [x[1] for x in errs]
    assert [x[2] for x in oerrs] == pytest.approx([2 * x[1] for x in errs])


def test_coarser_sum_adds_the_rows_variances(catalog):
    cq = compile_sql("SELECT sex, SUM(n) AS total FROM (SELECT sex, race, COUNT(*) AS n FROM adult "
                     "GROUP BY sex, race) t GROUP BY sex", catalog)
    rows, errs = cq.postprocess(*_answers(cq, 2.0, 3.0))
    # five races per sex, each count 2 ± 3
    assert rows == [("Female", 10.0), ("Male", 10.0)]
    assert [e[1] for e in errs] == pytest.approx([3.0 * math.sqrt(5)] * 2)


def test_top_n_follows_the_released_ranking_not_the_truth(catalog):
    cq = compile_sql("SELECT race, COUNT(*) AS n FROM adult JOIN (SELECT race AS r, COUNT(*) AS m FROM adult "
                     "GROUP BY race ORDER BY m DESC LIMIT 2) t ON race = r GROUP BY race ORDER BY race", catalog)
    ranking = [lq for lq in cq.linear_queries if lq.name.startswith("s")]
    assert ranking, "the ranking's linear queries are answered by the engine with the others"
    races = ["White", "Asian-Pac-Islander", "Amer-Indian-Eskimo", "Other", "Black"]
    noisy = {lq.name: np.array([1.0, 50.0, 3.0, 40.0, 2.0]) for lq in cq.linear_queries}
    rows, _ = cq.postprocess(noisy)
    assert rows == sorted((races[i], noisy[cq.linear_queries[0].name][i]) for i in (1, 3))


def test_a_limit_zero_ranking_keeps_nothing(catalog):
    cq = compile_sql("SELECT race, COUNT(*) FROM adult WHERE race IN (SELECT race FROM adult GROUP BY race "
                     "ORDER BY COUNT(*) DESC LIMIT 0) GROUP BY race", catalog)
    assert cq.postprocess(_answers(cq)[0])[0] == []


@pytest.mark.parametrize("sql,params", [
    ("SELECT sex, COUNT(*) FROM adult GROUP BY sex ORDER BY 1 LIMIT ? OFFSET ?", (1, 1)),
    ("SELECT sex, COUNT(*) FROM adult GROUP BY sex ORDER BY 1 OFFSET ? LIMIT ?", (1, 1)),
    ("SELECT sex, COUNT(*) FROM adult GROUP BY sex ORDER BY 1 LIMIT $2 OFFSET $1", (1, 1)),
    ("SELECT sex, COUNT(*) FROM adult WHERE age > ? GROUP BY sex HAVING COUNT(*) > ? ORDER BY 1 "
     "FETCH FIRST ? ROWS ONLY OFFSET ?", (0, -1, 1, 1)),
])
def test_parameters_bind_in_text_order(catalog, sql, params):
    cq = compile_sql(sql, catalog, params=params)
    rows, _ = cq.postprocess(_answers(cq)[0])
    assert [r[0] for r in rows] == ["Male"]


def test_empty_string_on_an_open_categorical_is_refused():
    schema = TableSchema("t", (Categorical("c", ["a", "b"], nullable=True, closed=False),
                               IntegerRange("x", 0, 9)))
    catalog = {"t": schema}
    with pytest.raises(errors.DomainViolationError) as info:
        compile_sql("SELECT COUNT(*) FROM t WHERE c = ''", catalog)
    assert "undeclared" in info.value.message and info.value.position == 30
    closed = {"t": TableSchema("t", (Categorical("c", ["a", "b"], nullable=True, closed=True),))}
    cq = compile_sql("SELECT COUNT(*) FROM t WHERE c = '' OR c IS NULL", closed)
    factor = cq.linear_queries[0].matrix.blocks[0].base.factors[0].dense()
    assert factor.tolist() == [[0.0, 0.0, 1.0]]          # only the NULL cell


def test_constant_aggregates(catalog):
    cq = compile_sql("SELECT SUM(1), SUM(2.5), AVG(7), COUNT(1 + 1), COUNT(NULL), SUM(CAST(1 AS BIGINT)) "
                     "FROM adult", catalog)
    assert len(cq.linear_queries) == 1                   # all of them are the one COUNT(*)
    rows, errs = cq.postprocess(*_answers(cq, 4.0, 1.0))
    assert rows == [(4.0, 10.0, 7.0, 4.0, 0.0, 4.0)]
    assert errs[0][1] == pytest.approx(2.5) and errs[0][2] == 0.0
    with pytest.raises(errors.UnsupportedQueryError):
        compile_sql("SELECT SUM('a') FROM adult", catalog)
