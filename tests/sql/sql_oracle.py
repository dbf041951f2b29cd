"""The semantic oracle for the SQL front end: compiled linear queries vs DuckDB.

For an accepted query, the compiled linear queries are applied to the *exact* marginal
of the attributes they touch (counted in DuckDB from the cell indices that the domain's
``index_sql`` computes), post-processed, and compared with DuckDB's own answer to the same
SQL on the same binned data (every value replaced by its cell's representative: the
value itself for unit bins, the bin midpoint for wide bins).  No noise is involved, so
agreement must be exact up to floating-point rounding.
"""

from __future__ import annotations

import decimal
import math
import re
from pathlib import Path

import duckdb
import numpy as np
import sqlglot
from sqlglot import exp

from dpsql.domain_file import load_domain
from dpsql.measure.cellsql import index_sql
from dpsql.linalg import Kron, Weighted
from dpsql.sql import compile as compile_sql
from dpsql.sql.lower import QuerySpec, build_linear_query
from dpsql.sql.postprocess import run_program

ROOT = Path(__file__).resolve().parents[2]
ADULT_TOML = ROOT / "examples" / "adult" / "adult.toml"
ADULT_CSV = ROOT / "examples" / "adult" / "adult.csv"
FIXTURES = ROOT / "tests" / "fixtures" / "sql"


def load_fixtures(name: str) -> list[dict]:
    """Statements of a fixture file with their ``-- key: value`` header comments."""
    text = (FIXTURES / name).read_text()
    out, meta, buf = [], {}, []
    for line in text.splitlines():
        m = re.match(r"^\s*--\s*(\w+)\s*:\s*(.*?)\s*$", line)
        if m and not "".join(buf).strip():
            meta[m.group(1).lower()] = m.group(2)
            continue
        if line.strip().startswith("--") and not "".join(buf).strip():
            continue
        buf.append(line)
        if line.rstrip().endswith(";"):
            sql = "\n".join(buf).strip().rstrip(";").strip()
            if sql:
                out.append({"sql": sql, **meta})
            meta, buf = {}, []
    rest = "\n".join(buf).strip()
    if rest:
        out.append({"sql": rest, **meta})
    return out


class Oracle:
    """One DuckDB connection with the raw index table and the binned table, shared by tests."""

    def __init__(self) -> None:
        self.catalog = load_domain(ADULT_TOML)
        self._build("adult", f"SELECT * FROM read_csv('{ADULT_CSV}', header=true, nullstr='')")

    def _build(self, table: str, raw_sql: str) -> None:
        """The DuckDB tables of ``self.catalog[table]`` (subclasses over other tables set their
        catalog, then call this): ``raw`` (the rows ``raw_sql`` selects), ``idx`` (each value's
        cell, ``index_sql``) and ``table`` (each value its cell's representative), and the
        values of the cells reported by label (``_midpoints``)."""
        self.schema = self.catalog[table]
        self.con = duckdb.connect()
        self.con.execute(f"CREATE TABLE raw AS {raw_sql}")
        idx = ", ".join(f'{index_sql(a, a.name).sql(dialect="duckdb")} AS "{a.name}"' for a in self.schema.attributes)
        self.con.execute(f"CREATE TABLE idx AS SELECT {idx} FROM raw")
        binned = ", ".join(f'{self._representative(a)} AS "{a.name}"' for a in self.schema.attributes)
        self.con.execute(f'CREATE TABLE "{table}" AS SELECT {binned} FROM idx')
        self._marginals: dict[tuple, tuple] = {}
        self.midpoints = {(a.name, label): v for a in self.schema.attributes for label, v in self._midpoints(a)}

    def _midpoints(self, a) -> list[tuple]:
        """(label, value) of each of ``a``'s cells a result reports by its label: every
        labelled cell of a numeric column, at its representative value."""
        if a.kind == "categorical":
            return []
        return [(label, float(v)) for label, v in zip(a.labels(), a.cell_values()) if label is not None]

    def _representative(self, a) -> str:
        col = f"\"{a.name}\""
        if a.kind == "categorical":
            labels = a.labels()
            lits = ", ".join("NULL" if v is None else "'" + str(v).replace("'", "''") + "'" for v in labels)
            return f"([{lits}])[{col} + 1]"
        vals = a.cell_values()
        unit = a.kind == "integer" and all(b is None or b[0] == b[1] for b in a.bin_bounds())
        lits = ", ".join("NULL" if math.isnan(v) else (str(int(v)) if unit else repr(float(v))) for v in vals)
        cast = "BIGINT" if unit else "DOUBLE"
        return f"CAST(([{lits}])[{col} + 1] AS {cast})"

    # --- exact answers of compiled linear queries ------------------------------------
    def marginal(self, attrs: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
        """The non-zero cells of the marginal on ``attrs``: (cell indices (R, k), counts (R,))."""
        if attrs not in self._marginals:
            if not attrs:
                n = self.con.execute("SELECT COUNT(*) FROM idx").fetchone()[0]
                self._marginals[attrs] = (np.zeros((1, 0), dtype=np.int64), np.array([float(n)]))
            else:
                cols = ", ".join(f"\"{a}\"" for a in attrs)
                rows = np.array(self.con.execute(f"SELECT {cols}, COUNT(*) FROM idx GROUP BY ALL").fetchall(),
                                dtype=np.int64)
                self._marginals[attrs] = (rows[:, :-1], rows[:, -1].astype(float))
        return self._marginals[attrs]

    def answer(self, lq) -> np.ndarray:
        """matrix @ x for the data vector x, via the marginal over the touched attributes.

        Each block is Kron(factors); on the marginal's non-zero cells its answer is
        Σ_cells count · ⊗_a factor_a[:, cell_a] (untouched factors are all-ones rows).
        """
        names = [a.name for a in self.schema.attributes]
        touched = tuple(lq.attributes)
        cells, counts = self.marginal(touched)
        out = []
        for block in lq.matrix.blocks:
            assert isinstance(block, Weighted) and isinstance(block.base, Kron)
            factors = block.base.factors
            assert len(factors) == len(names)
            for a, f in zip(names, factors):
                if a not in touched:
                    assert f.shape[0] == 1 and np.allclose(f.dense(), 1.0), a
            dense = [factors[names.index(a)].dense() for a in touched]
            total = None
            for start in range(0, len(counts), 4096):
                w = counts[start:start + 4096, None]
                for k, f in enumerate(dense):
                    col = f[:, cells[start:start + 4096, k]].T          # (R, m_k)
                    w = (w[:, :, None] * col[:, None, :]).reshape(len(w), -1)
                part = w.sum(axis=0)
                total = part if total is None else total + part
            out.append(block.weight * total)
        return np.concatenate(out)

    # --- the two sides ----------------------------------------------------------------
    def ours(self, sql: str, dialect: str = "postgres", params=None):
        cq = compile_sql(sql, self.catalog, params=params, dialect=dialect)
        answers = {lq.name: self.answer(lq) for lq in cq.linear_queries}
        rows, _ = run_program(cq, answers, None, present=self.present(cq))
        return cq, rows

    @staticmethod
    def programs(cq):
        """Every aggregate SELECT level of a compiled query (stages' inner queries, rankings)."""
        if cq.is_schema_probe or cq.is_explain or cq.exact_rows is not None:
            return []
        prog = cq.program
        if hasattr(prog, "inner"):              # an outer stage
            return Oracle.programs(prog.inner)
        out = [prog]
        for r in prog.restrictions:
            out += Oracle.programs(r.inner)
        return out

    def present(self, cq):
        """Per aggregate level, which listed groups have rows under its WHERE (DuckDB omits
        empty groups; dpsql never does): exact COUNT(*) per group, via the same grouping."""
        out = {}
        for prog in self.programs(cq):
            if not prog.keys:
                continue
            lq = build_linear_query(QuerySpec(name="present", kind="linear", terms=prog.where_terms),
                                    cq.schema, prog.grouping)
            counts = self.answer(lq).reshape(lq.blocks, -1).sum(axis=0)
            out[id(prog)] = counts[np.asarray(prog.grouping.listed)] > 0
        return out or None

    def duck(self, sql: str, dialect: str = "postgres", params=None):
        tree = sqlglot.parse_one(sql, read=dialect)
        tree = tree.transform(self._duck_rewrite)
        text = tree.sql(dialect="duckdb")
        return self.con.execute(text, params or []).fetchall()

    def _int_valued(self, node) -> bool:
        if isinstance(node, exp.Paren):
            return self._int_valued(node.this)
        if isinstance(node, exp.Column):
            if node.name not in self.schema.column_names:
                return False            # a subquery's output column
            a = self.schema.attribute(node.name)
            return a.kind == "integer" and all(b is None or b[0] == b[1] for b in a.bin_bounds())
        if isinstance(node, exp.Literal):
            return not node.is_string and re.fullmatch(r"-?\d+", node.this) is not None
        if isinstance(node, (exp.Add, exp.Sub, exp.Mul, exp.Mod, exp.IntDiv)):
            return self._int_valued(node.this) and self._int_valued(node.expression)
        if isinstance(node, exp.Div):
            return bool(node.args.get("typed")) and self._int_valued(node.this) and \
                self._int_valued(node.expression)
        if isinstance(node, (exp.Floor, exp.Ceil, exp.WidthBucket, exp.Count)):
            return True
        return False

    def _duck_rewrite(self, node):
        if isinstance(node, (exp.Table, exp.Column)) and node.args.get("db") is not None:
            node = node.copy()
            node.set("db", None)
            return node
        # PostgreSQL divides integers by truncation; DuckDB's '/' is always real division.
        if isinstance(node, exp.Div) and node.args.get("typed") and self._int_valued(node.this) \
                and self._int_valued(node.expression):
            return exp.IntDiv(this=node.this, expression=node.expression)
        if isinstance(node, exp.WidthBucket):
            x, lo, hi, n = (node.this, node.args["min_value"], node.args["max_value"], node.args["num_buckets"])
            body = f"(floor(({x.sql('duckdb')} - {lo.sql('duckdb')}) * {n.sql('duckdb')} / " \
                   f"({hi.sql('duckdb')} - {lo.sql('duckdb')})) + 1)"
            return sqlglot.parse_one(
                f"CASE WHEN {x.sql('duckdb')} IS NULL THEN NULL WHEN {x.sql('duckdb')} < {lo.sql('duckdb')} "
                f"THEN 0 WHEN {x.sql('duckdb')} >= {hi.sql('duckdb')} THEN {n.sql('duckdb')} + 1 "
                f"ELSE CAST({body} AS BIGINT) END", read="duckdb")
        return node

    # --- comparison --------------------------------------------------------------------
    def normalise(self, cq, rows):
        """Our labels of wide bins → their midpoints, the value DuckDB sees."""
        attrs = {k.attr.name for prog in self.programs(cq) for k in prog.keys if k.attr.kind != "categorical"}
        text = [j for j, c in enumerate(cq.columns) if c.type == "text"]
        out = []
        for r in rows:
            r = list(r)
            for j in text:
                for a in attrs:
                    if isinstance(r[j], str) and (a, r[j]) in self.midpoints:
                        r[j] = self.midpoints[(a, r[j])]
                        break
            out.append(tuple(r))
        return out


def _norm(v):
    """DuckDB may return Decimal or bool; compare numbers as floats."""
    if isinstance(v, decimal.Decimal):
        return float(v)
    return v


def values_equal(a, b, tol: float = 1e-9) -> bool:
    a, b = _norm(a), _norm(b)
    if a is None or b is None:
        return a is None and b is None
    if isinstance(a, bool) or isinstance(b, bool):
        return a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b)) <= tol * max(1.0, abs(float(b)))
    return str(a) == str(b)


def _sort_key(row):
    out = []
    for v in map(_norm, row):
        if v is None:
            out.append((0, ""))
        elif isinstance(v, (int, float)):
            out.append((1, round(float(v), 6)))
        else:
            out.append((2, str(v)))
    return tuple(out)


def rows_equal(ours, theirs, ordered: bool) -> bool:
    """Rows equal to 1e-9 (relative); without ORDER BY the row order does not matter."""
    if len(ours) != len(theirs):
        return False
    if not ordered:
        ours, theirs = sorted(ours, key=_sort_key), sorted(theirs, key=_sort_key)
    return all(len(x) == len(y) and all(values_equal(p, q) for p, q in zip(x, y)) for x, y in zip(ours, theirs))
