"""The TPC-H query templates as a people workload (``bench/people_tpch.py --workload templates``).

A module, not a bench script (``bench/run_all.py`` skips names starting with "_").

Every query below is an instance of a TPC-H query template (TPC-H specification 3.0.1, §2.4,
"Substitution Parameters" of each query) with one value of its substitution parameters.  The
list was fixed, by the rules below, before anything was measured on it, and is not tuned
after: the bench reports what it gives.

**Which templates.**  Those over customer, orders and line item (the person's tables) and the
public nation/region lists: Q1, Q3, Q4, Q5, Q6, Q10, Q12.  Not the others: Q2, Q9, Q11, Q16,
Q17, Q19, Q20 read part/partsupp/supplier alone or aggregate per part, Q14 per part type (not
on the person's path); Q13 is a histogram of per-customer order counts, Q18 and Q21 rank
single orders or suppliers, Q22 needs customers without orders: none is a COUNT or SUM over
groups of attributes.

**How a template becomes queries.**
* A parameter chosen by equality among a public list (Q3's SEGMENT, Q5's REGION, Q12's
  SHIPMODE1/2) becomes a GROUP BY over that column: one query answers every value, for both
  systems alike.  A template's per-row grouping that would single out a person or an order
  (Q3's ``l_orderkey``, Q10's ``c_custkey``, their top-N) is replaced by the grouping column
  the template also outputs (Q3: the segment, Q10: ``n_name`` = the customer's nation): the
  total revenue of the rows the template qualifies, per group.
* A range parameter (dates, DISCOUNT, QUANTITY, DELTA) becomes one query per value.  Values:
  every year where the spec draws a year; every third month from the range's first where it
  draws a month (Q4: the quarter starts 1993-01..1997-10; Q10: 1993-02, 05, 08, 11, 1994-02,
  05, 08, 11); DISCOUNT every other value from 0.02 (0.02, 0.04, 0.06, 0.08); QUANTITY its
  first value, 24.  (The full ranges would be 58 Q4 months, 24 Q10 months and 80 Q6 triples:
  Tumult runs every query as a Spark job, ~40 s each on the loaded 2-core VM.)
* **Dates are declared DATE columns with month bins** (``type = "date"``, ``bin = "month"``):
  the day domain (2,526 ship days, times the other columns a query reads) is far larger than
  anything the workload needs, and every template's date range is whole months or years
  except Q1's and Q3's, which are coarsened to the nearest month boundary: Q1's DELTA takes
  the two values of [60, 120] whose cutoff 1998-12-01 − DELTA is a month's last day (62:
  ≤ 1998-09-30; 92: ≤ 1998-08-31); Q3's DATE (a day of March 1995) takes its two ends, each
  off by one day on one side (DATE = 1995-03-01: ``o_orderdate < 1995-03-01`` exact,
  ``l_shipdate ≥ 1995-03-01`` where the spec has > ; DATE = 1995-03-31: ``l_shipdate >
  1995-03-31`` exact, ``o_orderdate < 1995-04-01`` where the spec has < 1995-03-31).
* Expressions are columns prepared once from the generated rows, read by both systems and
  by the exact answers alike: ``l_revenue`` = round(l_extendedprice·(1 − l_discount)) (Q3,
  Q5, Q10, Q1's sum_disc_price), ``l_discrev`` = round(l_extendedprice·l_discount) (Q6),
  ``l_discount`` in whole percent, ``o_late`` (Q4's EXISTS: the order has a line item with
  l_commitdate < l_receiptdate), ``l_q12`` (Q12's l_commitdate < l_receiptdate AND
  l_shipdate < l_commitdate), ``l_local`` (Q5's c_nationkey = s_nationkey: the line item's
  supplier is in its customer's nation).  Q1's sum_charge (tax) and its AVGs (ratios of the
  sums and the count) are left out.

The queries (73; template: parameter values → aggregate and grouping, number of queries):

* Q1 pricing summary: DELTA 62, 92 → COUNT(*), SUM(l_quantity), SUM(l_extendedprice),
  SUM(l_revenue) by l_returnflag, l_linestatus: 8.
* Q3 shipping priority: DATE 1995-03-01, 1995-03-31; SEGMENT all → SUM(l_revenue) by
  c_mktsegment: 2.
* Q4 order priority checking: DATE 1993-01-01, 1993-04-01, …, 1997-10-01 (3-month windows) →
  COUNT(*) of late orders by o_orderpriority: 20.
* Q5 local supplier volume: DATE 1993-01-01 … 1997-01-01 (1 year); REGION all → SUM(l_revenue)
  of local lines by c_nationkey: 5.
* Q6 forecasting revenue change: DATE 1993 … 1997 (1 year) × DISCOUNT 0.02, 0.04, 0.06, 0.08;
  QUANTITY 24 → SUM(l_discrev): 20.
* Q10 returned item reporting: DATE 1993-02-01, 05-01, 08-01, 11-01, 1994-02-01, 05-01, 08-01,
  11-01 (3-month windows) → SUM(l_revenue) of returned lines by c_nationkey: 8.
* Q12 shipping modes and order priority: DATE 1993 … 1997 (1 year); SHIPMODE1/2 all →
  high_line_count and low_line_count (COUNT(*) of the orders' priority 1-2 / 3-5) by
  l_shipmode: 10.
"""

from __future__ import annotations

HIGH = ["1-URGENT", "2-HIGH"]
LOW = ["3-MEDIUM", "4-NOT SPECIFIED", "5-LOW"]
# the public value lists of the TPC-H specification the workloads group by (also the
# dashboard's, bench/people_tpch.py)
LABELS = {"c_mktsegment": ["AUTOMOBILE", "BUILDING", "FURNITURE", "HOUSEHOLD", "MACHINERY"],
          "o_orderpriority": HIGH + LOW, "l_returnflag": ["A", "N", "R"], "l_linestatus": ["F", "O"],
          "l_shipmode": ["AIR", "FOB", "MAIL", "RAIL", "REG AIR", "SHIP", "TRUCK"]}
DATE_COLUMNS = ("o_orderdate", "l_shipdate", "l_receiptdate")
# SUM clamping ranges (public: the specification's ranges, whole dollars)
SUM_RANGE = {"l_quantity": (1, 50), "l_extendedprice": (0, 104950), "l_revenue": (0, 104950),
             "l_discrev": (0, 10495)}
OWNER = {**{c: "customers" for c in ("c_mktsegment", "c_nationkey")},
         **{c: "orders" for c in ("o_orderdate", "o_orderpriority", "o_late")},
         **{c: "lineitem" for c in ("l_shipdate", "l_receiptdate", "l_returnflag", "l_linestatus",
                                    "l_shipmode", "l_quantity", "l_discount", "l_extendedprice",
                                    "l_revenue", "l_discrev", "l_q12", "l_local")}}


def _add_months(day: str, months: int) -> str:
    y, m, d = (int(x) for x in day.split("-"))
    m += months
    y, m = y + (m - 1) // 12, (m - 1) % 12 + 1
    return f"{y:04d}-{m:02d}-{d:02d}"


def _window(column: str, start: str, months: int) -> list:
    return [(column, ">=", start), (column, "<", _add_months(start, months))]


def _dated(template: str, start: str, months: int, column: str, group: list[str], agg: str,
           conditions: list, params: str = "") -> tuple:
    """One instance of a template whose DATE parameter is ``start``: the window of ``months``
    months from it over ``column``, then the template's other ``conditions``; ``params`` names
    its other parameter values after the date."""
    return (f"{template} DATE={start}{params}", group, agg, _window(column, start, months) + conditions)


# the DATE values the templates draw: each year's first day (Q5, Q6, Q12) and every third
# month's (Q4: the quarter starts 1993-01 .. 1997-10)
YEARS = [f"{year}-01-01" for year in range(1993, 1998)]
QUARTERS = [f"{year}-{month:02d}-01" for year in range(1993, 1998) for month in (1, 4, 7, 10)
            if (year, month) <= (1997, 10)]


def workload() -> list[tuple]:
    """(name, group columns, "count" or the summed column, conditions): a condition is
    (column, op, value) with op one of = < <= > >= between in."""
    queries: list[tuple] = []
    for delta, cutoff in ((62, "1998-09-30"), (92, "1998-08-31")):
        for agg, label in (("count", "count_order"), ("l_quantity", "sum_qty"),
                           ("l_extendedprice", "sum_base_price"), ("l_revenue", "sum_disc_price")):
            queries.append((f"Q1 DELTA={delta} {label}", ["l_returnflag", "l_linestatus"], agg,
                            [("l_shipdate", "<=", cutoff)]))
    for date, order_before, ship_after in (("1995-03-01", "1995-03-01", "1995-02-28"),
                                           ("1995-03-31", "1995-04-01", "1995-03-31")):
        queries.append((f"Q3 DATE={date}", ["c_mktsegment"], "l_revenue",
                        [("o_orderdate", "<", order_before), ("l_shipdate", ">", ship_after)]))
    queries += [_dated("Q4", start, 3, "o_orderdate", ["o_orderpriority"], "count", [("o_late", "=", 1)])
                for start in QUARTERS]
    queries += [_dated("Q5", start, 12, "o_orderdate", ["c_nationkey"], "l_revenue", [("l_local", "=", 1)])
                for start in YEARS]
    queries += [_dated("Q6", start, 12, "l_shipdate", [], "l_discrev",
                       [("l_discount", "between", (discount - 1, discount + 1)), ("l_quantity", "<", 24)],
                       f" DISCOUNT=0.0{discount} QUANTITY=24") for start in YEARS for discount in (2, 4, 6, 8)]
    queries += [_dated("Q10", start, 3, "o_orderdate", ["c_nationkey"], "l_revenue", [("l_returnflag", "=", "R")])
                for start in ("1993-02-01", "1993-05-01", "1993-08-01", "1993-11-01",
                              "1994-02-01", "1994-05-01", "1994-08-01", "1994-11-01")]
    queries += [_dated("Q12", start, 12, "l_receiptdate", ["l_shipmode"], "count",
                       [("l_q12", "=", 1), ("o_orderpriority", "in", priorities)], f" {label}")
                for start in YEARS for label, priorities in (("high_line_count", HIGH), ("low_line_count", LOW))]
    return queries


def categorical(labels) -> dict:
    """A closed categorical column's domain entries (the specification's value list)."""
    return {"type": "categorical", "labels": list(labels), "closed": True}


def integer(lo: int, hi: int, note: str | None = None, **more) -> dict:
    """An integer column's domain entries (``more``: ``bin_width`` or ``edges``)."""
    return {**({"#": note} if note else {}), "type": "integer", "lo": lo, "hi": hi, **more}


def months(lo: str, hi: str, note: str) -> dict:
    """A DATE column's domain entries, by month."""
    import datetime as dt
    return {"#": note, "type": "date", "lo": dt.date.fromisoformat(lo), "hi": dt.date.fromisoformat(hi),
            "bin": "month"}


def domain_toml(header: str, owner: dict[str, str], columns: dict[str, dict]) -> str:
    """A domain file (docs/domains.md): ``header`` (its comment lines), then each of
    ``columns`` under its table (``owner``), its entries in order; an entry "#" is a comment
    line (where a range comes from).  Both TPC-H workloads of ``bench/people_tpch.py``
    declare their columns with it."""
    import datetime as dt

    from dpsql.draft import toml_value

    lines = [header, ""]
    for column, entries in columns.items():
        lines.append(f"[tables.{owner[column]}.columns.{column}]")
        lines += [f"# {v}" if k == "#" else f"{k} = {v.isoformat() if isinstance(v, dt.date) else toml_value(v)}"
                  for k, v in entries.items()]
        lines.append("")
    return "\n".join(lines)


# the columns the template workload reads, with their public domains: the specification's
# value lists and ranges, dates by month
COLUMNS = {
    "c_mktsegment": categorical(LABELS["c_mktsegment"]),
    "c_nationkey": integer(0, 24),
    "o_orderdate": months("1992-01-01", "1998-08-02", "the specification's STARTDATE .. ENDDATE - 151 days"),
    "o_orderpriority": categorical(LABELS["o_orderpriority"]),
    "o_late": integer(0, 1),
    "l_shipdate": months("1992-01-01", "1998-12-31", "order date + 1..121 days"),
    "l_receiptdate": months("1992-01-01", "1998-12-31", "ship date + 1..30 days"),
    "l_returnflag": categorical(LABELS["l_returnflag"]),
    "l_linestatus": categorical(LABELS["l_linestatus"]),
    "l_shipmode": categorical(LABELS["l_shipmode"]),
    "l_quantity": integer(1, 50, "Q6's QUANTITY 24 is a bin edge (a SUM adds the rows' offsets from their "
                          "bin's middle)", edges=[1, 24]),
    "l_discount": integer(0, 10, "whole percent"),
    "l_extendedprice": integer(0, 104950, bin_width=5000),
    "l_revenue": integer(0, 104950, bin_width=5000),
    "l_discrev": integer(0, 10495, bin_width=1000),
    "l_q12": integer(0, 1),
    "l_local": integer(0, 1),
}
DOMAIN = domain_toml("# TPC-H (generated by tpchgen-cli), the columns the template workload reads.  Public "
                     "domains from\n# the TPC-H specification's value lists and ranges; dates by month; keys "
                     "only link the tables.", OWNER, COLUMNS)


def prepare(con, raw: dict[str, str], data) -> None:
    """Write templates_{customers,orders,lineitem}.parquet and the line items with their
    order's customer (Tumult) from the raw tpchgen-cli files (``raw``: table -> quoted path)."""
    con.execute(f"COPY (SELECT c_custkey, c_mktsegment, CAST(c_nationkey AS INTEGER) AS c_nationkey "
                f"FROM {raw['customer']}) TO '{data / 'templates_customers.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY (SELECT o_orderkey, o_custkey, CAST(o_orderdate AS DATE) AS o_orderdate, o_orderpriority, "
                f"CAST(EXISTS (SELECT 1 FROM {raw['lineitem']} l WHERE l.l_orderkey = o.o_orderkey "
                f"AND l.l_commitdate < l.l_receiptdate) AS INTEGER) AS o_late FROM {raw['orders']} o) "
                f"TO '{data / 'templates_orders.parquet'}' (FORMAT parquet)")
    line = (f"SELECT l.l_orderkey, CAST(l.l_shipdate AS DATE) AS l_shipdate, "
            f"CAST(l.l_receiptdate AS DATE) AS l_receiptdate, l.l_returnflag, l.l_linestatus, l.l_shipmode, "
            f"CAST(l.l_quantity AS INTEGER) AS l_quantity, CAST(round(l.l_discount * 100) AS INTEGER) AS l_discount, "
            f"CAST(round(l.l_extendedprice) AS INTEGER) AS l_extendedprice, "
            f"CAST(round(l.l_extendedprice * (1 - l.l_discount)) AS INTEGER) AS l_revenue, "
            f"CAST(round(l.l_extendedprice * l.l_discount) AS INTEGER) AS l_discrev, "
            f"CAST(l.l_commitdate < l.l_receiptdate AND l.l_shipdate < l.l_commitdate AS INTEGER) AS l_q12, "
            f"CAST(s.s_nationkey = c.c_nationkey AS INTEGER) AS l_local "
            f"FROM {raw['lineitem']} l JOIN {raw['orders']} o ON l.l_orderkey = o.o_orderkey "
            f"JOIN {raw['customer']} c ON o.o_custkey = c.c_custkey "
            f"JOIN {raw['supplier']} s ON l.l_suppkey = s.s_suppkey")
    con.execute(f"COPY ({line}) TO '{data / 'templates_lineitem.parquet'}' (FORMAT parquet)")
    con.execute(f"COPY (SELECT o.o_custkey AS custkey, l.l_orderkey AS o_orderkey, l.* EXCLUDE (l_orderkey) "
                f"FROM '{data / 'templates_lineitem.parquet'}' l JOIN '{data / 'templates_orders.parquet'}' o "
                f"ON l.l_orderkey = o.o_orderkey) TO '{data / 'templates_lineitem_people.parquet'}' (FORMAT parquet)")


# -- the SVD bound of each template family on its own marginal (public: no data) ----------------

def _months(first: str, last: str) -> list[tuple]:
    """(first day, last day) of each month from ``first``'s month to ``last`` (cut there)."""
    import datetime as dt
    lo, hi = dt.date.fromisoformat(first), dt.date.fromisoformat(last)
    out, day = [], lo
    while day <= hi:
        nxt = dt.date(day.year + day.month // 12, day.month % 12 + 1, 1)
        out.append((day.isoformat(), min(nxt - dt.timedelta(days=1), hi).isoformat()))
        day = nxt
    return out


def _bins(lo: int, hi: int, width: int) -> list[tuple]:
    return [(a, min(a + width - 1, hi)) for a in range(lo, hi + 1, width)]


def _cells(entries: dict) -> list[tuple]:
    """(first, last) value of each cell of a column as its domain entries (``COLUMNS``)
    declare it: a label, a month, an integer bin (``bin_width``, or from each of ``edges``
    to the next)."""
    if entries["type"] == "categorical":
        return [(v, v) for v in entries["labels"]]
    if entries["type"] == "date":
        return _months(entries["lo"].isoformat(), entries["hi"].isoformat())
    if "edges" in entries:
        starts = entries["edges"]
        return [(a, b - 1) for a, b in zip(starts, starts[1:])] + [(starts[-1], entries["hi"])]
    return _bins(entries["lo"], entries["hi"], entries.get("bin_width", 1))


# each column's cells as dpsql's domain declares them (DOMAIN above): (first, last) values
CELLS = {column: _cells(entries) for column, entries in COLUMNS.items()}


def _holds(cell: tuple, op: str, value) -> bool:
    import operator
    ops = {"=": operator.eq, "<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}

    def one(x):
        if op == "between":
            return value[0] <= x <= value[1]
        if op == "in":
            return x in value
        return ops[op](x, value)
    first, last = one(cell[0]), one(cell[1])
    if first != last:
        raise ValueError(f"{op} {value!r} splits the cell {cell}")
    return first


def family_bounds(queries: list[tuple]) -> list[tuple[str, int, int, float]]:
    """Per family (template × aggregate): its queries, their rows and the SVD bound of the
    family alone as a multiple of its per-query baseline's RMSE (Li & Miklau's
    (Σσᵢ)²/n over the cells its queries read, Gaussian, sensitivity 1; the baseline
    measures each of its m queries with ρ/m: Σ_q rows_q·m·Δ_q²).  Budget- and bound-free:
    no unbiased strategy answers the family, measured on its own, with a lower RMSE."""
    from functools import reduce
    from itertools import product

    import numpy as np

    families: dict[tuple, list] = {}
    for q in queries:
        families.setdefault((q[0].split()[0], q[2]), []).append(q)
    out = []
    for (template, agg), qs in families.items():
        cols = sorted({c for _, g, a, conds in qs for c in g + ([] if a == "count" else [a]) + [x[0] for x in conds]})
        rows, base = [], 0.0
        for _, group, a, conds in qs:
            first = len(rows)
            for key in product(*[[cell[0] for cell in CELLS[c]] for c in group]):
                vecs = []
                for c in cols:
                    v = np.ones(len(CELLS[c]))
                    for column, op, value in conds:
                        if column == c:
                            v *= [_holds(cell, op, value) for cell in CELLS[c]]
                    if c in group:
                        v *= [cell[0] == key[group.index(c)] for cell in CELLS[c]]
                    if c == a:
                        v *= [(lo + hi) / 2 for lo, hi in CELLS[c]]
                    vecs.append(v)
                rows.append(reduce(np.kron, vecs))
            # a record lies in one row of a GROUP BY: the query's L2 sensitivity is its largest entry
            base += (len(rows) - first) * len(qs) * max(float(np.abs(r).max()) for r in rows[first:]) ** 2
        matrix = np.array(rows)
        # cells no query reads are dropped: a strategy restricted to the read cells answers the
        # family as well, so the bound over them alone is valid and tighter (n smaller)
        matrix = matrix[:, np.any(matrix != 0, axis=0)]
        singular = np.linalg.svd(matrix, compute_uv=False)
        bound = float(singular.sum()) ** 2 / matrix.shape[1]
        out.append((f"{template} {agg}", len(qs), len(rows), (bound / base) ** 0.5))
    return out
