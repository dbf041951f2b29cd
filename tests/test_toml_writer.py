"""One TOML writer (dpsql.draft.toml_value) for `dpsql init` and dpsql.testing; every value it
writes reads back equal through tomllib (issue 36 item 4: the two writers disagreed — draft's
refused paths and wrote a raw DEL, which TOML forbids; testing's refused inf/nan)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

from hypothesis import given, settings, strategies as st

from dpsql import testing
from dpsql.draft import toml_key, toml_value

_scalars = st.one_of(st.booleans(), st.integers(-2**63, 2**63 - 1), st.floats(allow_nan=False), st.text())
_values = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                          st.dictionaries(st.text(), inner, max_size=4)),
                       max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(min_size=1), _values, min_size=1, max_size=5))
def test_every_value_reads_back_equal(entries):
    text = "\n".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in entries.items())
    assert tomllib.loads(text) == entries


def test_paths_tuples_non_finite_floats_and_del():
    delete, weird = "a\x7fb", "weird key.\x7f"
    doc = tomllib.loads(f"a = {toml_value(Path('/x/y.csv'))}\nb = {toml_value((1, 'z'))}\n"
                        f"c = {toml_value(float('inf'))}\nd = {toml_value(float('nan'))}\n"
                        f"e = {toml_value(delete)}\n{toml_key(weird)} = 1\n")
    assert doc["a"] == "/x/y.csv" and doc["b"] == [1, "z"] and doc["c"] == math.inf and math.isnan(doc["d"])
    assert doc["e"] == "a\x7fb" and doc["weird key.\x7f"] == 1


def test_the_testing_helper_writes_with_the_same_writer():
    assert testing.toml_value is toml_value
