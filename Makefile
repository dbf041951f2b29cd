PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-dev
DEMO_STAMP := $(VENV)/.installed

.PHONY: demo test bench clean

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

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
