#!/usr/bin/env bash
# `make bi-check`: Apache Superset end to end against `dpsql serve` (see docs/server.md).
# Creates Superset's own venv on first use (bicheck/.venv-superset, ~5 min, ~1 GB), installs
# Debian's chromium for the screenshots if it is missing, then runs bicheck/drive.py.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV=bicheck/.venv-superset
SUPERSET="apache-superset==6.1.0"
# Superset 6.1.0 imports rich and cachetools without declaring them, and calls flask-caching's
# memoize with an argument 2.4 removed; psycopg2 is its default PostgreSQL driver; playwright
# drives the system chromium for the screenshots (it downloads no browser of its own).
EXTRA=("psycopg2-binary==2.9.13" "rich" "cachetools" "flask-caching==2.3.1" "playwright==1.65.2")
if [ ! -e "$VENV/.installed" ]; then
    ${PYTHON:-python3} -m venv "$VENV"
    "$VENV/bin/pip" install --quiet --upgrade pip
    "$VENV/bin/pip" install --quiet "$SUPERSET" "${EXTRA[@]}"
    touch "$VENV/.installed"
fi
if ! command -v chromium >/dev/null; then
    if [ "$(id -u)" = 0 ]; then
        apt-get update && apt-get install -y chromium
    else
        echo "bi-check: chromium is not installed (sudo apt-get install chromium)" >&2
        exit 2
    fi
fi
# the adult charts and probes, then a time-series chart on a table with a DATE column (issue 30),
# then a chart over a join of the private table with a public dimension table (issue 31)
status=0
.venv/bin/python bicheck/drive.py "$@" || status=$?
.venv/bin/python bicheck/time_chart.py "$@" || status=$?
.venv/bin/python bicheck/star_chart.py "$@" || status=$?
exit $status
