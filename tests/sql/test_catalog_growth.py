"""An engine adds tables to its catalog at run time (a people schema's on-demand flags,
``Engine.add_person_flags``) while other sessions of the same engine compile statements: name
resolution iterates a snapshot of the catalog's names, so a table added meanwhile cannot make
it fail with "dictionary changed size during iteration".  The addition is made here, at a
fixed point of the iteration (a declared name whose ``lower()`` adds a table), instead of by a
racing thread, so the test is deterministic."""

from __future__ import annotations

from sqlglot import exp

from dpsql.public import StarCatalog
from dpsql.sql.bind import _lookup_table
from dpsql.sql.joins import _table_ref


class _Growing(str):
    """A declared table name whose case folding adds another table to the catalog."""

    catalog: dict = {}

    def lower(self):   # type: ignore[override]
        self.catalog[f"added_{len(self.catalog)}"] = object()
        return str.lower(self)


def _catalog():
    cat = StarCatalog({})
    _Growing.catalog = cat
    for name in ("Orders", "Customers", "Lineitem"):
        cat[_Growing(name)] = object()
    return cat


def test_a_table_added_while_a_name_is_resolved_does_not_break_the_lookup():
    cat = _catalog()
    schema = _lookup_table(cat, exp.to_identifier("orders"))
    assert schema is cat["Orders"]


def test_a_table_added_while_a_join_names_its_tables_does_not_break_them():
    cat = _catalog()

    class _Stmt:
        def pos(self, node):
            return None

    ref = _table_ref(exp.to_table("orders"), cat, _Stmt())
    assert ref is not None and ref.name == "Orders"
