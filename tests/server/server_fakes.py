"""A deterministic stand-in for the engine link, for protocol tests that must not depend on
the DP engine: it answers aggregate queries over the adult domain with values derived from
a hash of (SQL, parameters), refuses row-level queries like the engine (42501), records
every compile and execute, and can block an execution until released (cancel tests)."""

from __future__ import annotations

import hashlib
import threading
from dataclasses import dataclass
from pathlib import Path

import sqlglot
from sqlglot import exp

from dpsql import errors
from dpsql.domain_file import load_domain

ROOT = Path(__file__).resolve().parents[2]
ADULT_CONFIG = ROOT / "examples" / "adult" / "dpsql.toml"
PASSWORD = "s3cret-pw"   # every test user's password (see conftest.users_file)


@dataclass
class FakeColumn:
    name: str
    type: str


@dataclass
class FakeResult:
    columns: list
    rows: list
    message: str | None = None


@dataclass
class FakeCompiled:
    columns: list
    is_schema_probe: bool


class FakeLink:
    catalog = load_domain(ROOT / "examples" / "adult" / "adult.toml")
    log: list = []
    gate: threading.Event | None = None

    def __init__(self, user):
        self.user = user
        self.settings = {"dpsql.error_columns": "off"}

    def _shape(self, sql, params):
        tree = sqlglot.parse_one(sql, read="postgres")
        # '?' markers, or the client's $n (the server passes them through; the compiler binds by number)
        holes = {n.sql() for n in tree.walk() if isinstance(n, (exp.Placeholder, exp.Parameter))}
        holes = [n for n in tree.walk() if isinstance(n, exp.Placeholder)] or sorted(holes)
        if len(holes) != len(params or ()):
            raise errors.InterfaceError("parameter count mismatch")
        if any(isinstance(e, exp.Star) for e in tree.expressions):
            raise errors.PrivacyViolationError("SELECT * would reveal individual rows",
                                               hint="aggregate: SELECT col, COUNT(*) ... GROUP BY col", position=8)
        schema = self.catalog["adult"]
        cols, group = [], None
        for e in tree.expressions:
            inner = e.this if isinstance(e, exp.Alias) else e
            if isinstance(inner, exp.Column):
                attr = schema.attribute(inner.name)
                cols.append(FakeColumn(e.alias_or_name, "integer" if attr.kind == "integer" else "text"))
                group = group or attr
            elif isinstance(inner, exp.Count):
                cols.append(FakeColumn(e.alias or "count", "integer"))
            elif isinstance(inner, (exp.Avg, exp.Sum)):
                cols.append(FakeColumn(e.alias or inner.key, "double"))
            else:
                raise errors.PrivacyViolationError("only aggregates and group keys may be selected")
        probe = tree.args.get("limit") is not None and tree.args["limit"].expression.name == "0"
        return cols, group, probe

    def compile(self, sql, params):
        self.log.append(("compile", self.user, sql, tuple(params or ())))
        cols, _, probe = self._shape(sql, params)
        return FakeCompiled([(c.name, c.type) for c in cols], probe)

    def execute(self, sql, params):
        if sql.strip().upper().startswith(("SET", "SHOW")):
            return FakeResult([], [], message="SET")
        cols, group, probe = self._shape(sql, params)
        self.log.append(("execute", self.user, sql, tuple(params or ())))
        if self.gate is not None:
            self.gate.wait(30)
        if probe:
            return FakeResult(cols, [])
        labels = group.labels() if group is not None else [None]
        rows = []
        for label in labels[:6]:
            seed = hashlib.sha256(repr((sql, tuple(params or ()), label)).encode()).digest()
            row = []
            for c in cols:
                if c.name == (group.name if group else None):
                    row.append(label)
                elif c.type == "integer":
                    row.append(int.from_bytes(seed[:3], "big"))
                else:
                    row.append(int.from_bytes(seed[3:6], "big") / 1000.0)
            rows.append(tuple(row))
        return FakeResult(cols, rows)

    def close(self):
        pass
