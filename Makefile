PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed

.PHONY: demo demo-shop test check lint bench bench-people bench-report bi-check clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $@ $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(VENV)/bin/dpsql demo

# the people example (examples/shop/README.md), on a copy in a new temporary directory
demo-shop: $(DEMO_STAMP)
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" sh examples/shop/demo.sh

# The neighbouring-datasets property test also runs on the lowest DuckDB that pyproject.toml
# allows (installed beside the venv's own, which is the highest), so both ends of the range
# are tested (tests/measure/test_neighbours.py, issue 15).
DUCKDB_LOW := 1.4.5
LOW := $(VENV)/duckdb-$(DUCKDB_LOW)

$(LOW)/.stamp: | $(PY)
	$(PY) -m pip install --quiet --target $(LOW) duckdb==$(DUCKDB_LOW)
	touch $@

# pytest-xdist workers, one per core (`make test WORKERS=1` runs in one process); each file's tests
# on one worker, the files that share the Spark JVM together (tests/conftest.py).
WORKERS ?= auto
XDIST := -n $(WORKERS) --dist loadfile

test: $(STAMP) $(LOW)/.stamp
	$(PY) -m pytest $(XDIST)
	PYTHONPATH=$(LOW) $(PY) -m pytest $(XDIST) -p no:cacheprovider tests/measure/test_neighbours.py tests/measure/test_reader.py

# The edit loop: the static checks, then every test not marked slow (pyproject.toml's marker).
check: lint
	$(PY) -m pytest $(XDIST) -m "not slow"

# Static checks (rules in pyproject.toml); .ci/run runs them before the tests.
lint: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) bench/run_all.py

# Issue 32's acceptance alone: TPC-H people across tables, dpsql vs Tumult's join_private
# (bench/people_tpch.py; creates bench/peers/.venv-tumult, needs a JDK 17). `make bench` runs it too.
# PEOPLE_ARGS="--workload templates" runs the TPC-H query templates instead of the dashboard
# (73 queries: Tumult's side ~30 min per trial on the loaded 2-core VM; --tumult-save runs it apart).
bench-people: $(STAMP)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) bench/people_tpch.py $(PEOPLE_ARGS)

# Evaluation suite against SmartNoise SQL (bench/suite.py; creates bench/peers/.venv-smartnoise),
# then tables in bench/RESULTS.md, plots in docs/img/ and the README's results section.
# SUITE_ARGS=--full runs the whole grid (slow); the default grid (ε 0.1, 1, 10) takes 15-25 min on a
# quiet 2-core VM with a cold plan cache (bench/out/eval/cache), less once strategies are cached.
bench-report: $(PY)
	$(PY) -m pip install --quiet -e '.[dev,bench]'
	$(PY) bench/suite.py $(SUITE_ARGS)
	$(PY) bench/report.py

# Apache Superset against `dpsql serve` through its REST API, screenshots in headless Chromium
# (bicheck/run.sh; creates bicheck/.venv-superset on first use). Not part of `make test`.
bi-check: $(STAMP)
	bash bicheck/run.sh

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
