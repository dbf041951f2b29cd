"""Issue 29 (items 1, 3 and 5): intervals and ranges that are honest on real tables.

Each test reproduces a reported failure on the adult example or a synthetic table."""

from __future__ import annotations


import pytest

import dpsql
from dpsql.testing import write_config

# -- item 5: never-measured values are not answered as if informed ------------------------------

COARSE = ["SELECT sex, COUNT(*) FROM adult GROUP BY sex",
          "SELECT COUNT(*) FROM adult WHERE hours_per_week >= 40"]


@pytest.fixture(scope="module")
def coarse(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("coarse")
    con = dpsql.connect(write_config(tmp, queries=COARSE), user="ana")
    con.session.measure()
    yield con
    con.close()


def test_an_attribute_measured_only_through_a_threshold_is_refused_value_by_value(coarse):
    """hours_per_week is in a measured clique only through `>= 40`: its values one by one were
    answered "inferred" with ~300 rows each (the model's even spread) and the range [0, N]."""
    cur = coarse.cursor()
    with pytest.raises(dpsql.UnsupportedQueryError) as info:
        cur.execute("SELECT hours_per_week, COUNT(*) FROM adult GROUP BY hours_per_week")
    assert "hours_per_week was measured only through coarser queries" in info.value.message
    assert "GROUP BY hours_per_week" in info.value.hint
    # the measured threshold itself is answered, with a standard error
    cur.execute("SELECT COUNT(*) FROM adult WHERE hours_per_week >= 40")
    assert cur.inferred == [False] and cur.stderr[0][0] > 0
    # and 'infer' still shows the model's guess, flagged, with its range
    cur.execute("SET dpsql.policy = 'infer'")
    try:
        rows = cur.execute("SELECT hours_per_week, COUNT(*) FROM adult GROUP BY hours_per_week").fetchall()
        assert len(rows) == 99 and all(cur.inferred)
    finally:
        cur.execute("RESET dpsql.policy")
    assert "measured only through coarser queries" in coarse.session.explain(
        "SELECT hours_per_week, COUNT(*) FROM adult GROUP BY hours_per_week")
