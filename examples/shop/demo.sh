#!/bin/sh
# The shop example end to end (README.md): plan, a private choice of a bound, measure, the plan
# again with the released truncation, answers over joins, customers counted on demand, budget.
#
#     sh examples/shop/demo.sh [WORKDIR]      # `make demo-shop`; dpsql must be on PATH
#
# It works on a copy in WORKDIR (default: a new temporary directory), so it starts from a fresh
# ledger every time and leaves the example as it is.  tests/engine/test_shop_example.py runs
# these same dpsql commands and checks what they print.
set -e
here=$(cd "$(dirname "$0")" && pwd)
work=${1:-$(mktemp -d)}
cp "$here"/dpsql.toml "$here"/shop.toml "$here"/dashboard.sql "$here"/*.parquet "$work"/
cd "$work"
echo "== working in $work"

# the three views, their bounds (and group bounds), budget shares and expected errors: free
dpsql plan

# how many orders per customer would keep every order of 90% of the customers? A private
# answer (the exponential mechanism), charged to the operator's budget; the config keeps 8
dpsql bound --table orders --epsilon 0.1 --yes

# every view at its share of epsilon = 1, and 5% of each bounded view's share releasing how
# many rows its bound drops (truncation_share)
dpsql measure --yes

# the plan again: now with the released truncation under each view, beside its noise
dpsql plan

# answered from the releases: noise (± 95% interval) and the view's truncation under it
dpsql query 'SELECT l.returnflag, COUNT(*), SUM(l.quantity)
  FROM orders o JOIN lineitem l ON l.orderkey = o.orderkey GROUP BY l.returnflag'
dpsql query 'SELECT c.segment, SUM(l.quantity), AVG(l.discount)
  FROM customers c JOIN orders o ON o.custkey = c.custkey
                   JOIN lineitem l ON l.orderkey = o.orderkey GROUP BY c.segment'

# customers (not rows) with a recent returned line item: no workload statement asked this,
# so it is measured on demand at the per-query epsilon = 0.1 ([policy]; --allow-spend says
# yes to spending it, a terminal would ask), one row per customer: sensitivity 1
dpsql query --allow-spend "SELECT c.region, COUNT(DISTINCT c.custkey) AS returners
  FROM customers c JOIN orders o ON o.custkey = c.custkey
                   JOIN lineitem l ON l.orderkey = o.orderkey
  WHERE l.returnflag = 'R' AND o.year >= 1996 GROUP BY c.region"

# what was spent, and every release in use
dpsql budget
