"""Release identity: what a released measurement means (``docs/privacy.md`` §7.3).

A noisy measurement is only meaningful together with *which rows* it counted, *how* they
were read and mapped into cells, and *how* they were protected.  :class:`TableIdentity`
names all of it:

* ``table`` — the table name;
* ``domain`` — fingerprint of the declared domain (``dpsql.domain.domain_fingerprint``);
* ``source`` — how the rows are read (kind, path, CSV dialect, reader version) and which
  content was read (file size + SHA-256, or the operator's ``data_version``);
* ``unit`` — the privacy unit and its row bound (``max_rows``);
* ``noise`` — the noise family.

Every release is stored in the ledger with its identity (the charge's ``mechanism``
record), and its key starts with :meth:`TableIdentity.key`; the per-release part (strategy
blocks, lattice, σ, cost, purpose) is hashed after it (``Measurer.release_plan``).  The
engine feeds a model only releases whose identity equals the current one; the others are
*stale* (listed by ``dpsql budget``, never used), so a changed source, domain, unit or noise
needs a new measurement and new budget.  A saved model is valid for exactly one
``(identity, set of release keys)``: ``Engine.model_key``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from dpsql.domain import TableSchema, domain_fingerprint
from dpsql.measure.source import Source

FIELDS = ("table", "domain", "source", "unit", "noise")
_REASONS = {"table": "another table", "domain": "the declared domain changed",
            "source": "the source data or how it is read changed",
            "unit": "the privacy unit changed", "noise": "the noise family changed"}


def _sha(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


@dataclass(frozen=True)
class TableIdentity:
    table: str
    domain: str
    source: str
    unit: str
    noise: str

    @staticmethod
    def of(schema: TableSchema, source: Source, content: dict, noise: str) -> TableIdentity:
        """Identity of ``schema`` read from ``source`` whose content fingerprint is ``content``
        (``Source.fingerprint()`` or what the reader hashed)."""
        unit = ("row" if source.id_column is None
                else f"id={source.id_column};max_rows={source.max_rows_per_id}")
        groups = source.view.groups if source.view is not None else None
        if groups is not None:
            unit += (f";groups={','.join(groups.attributes)};max_groups={groups.max_groups};"
                     f"max_rows_per_group={groups.max_rows_per_group}")
        return TableIdentity(schema.name, domain_fingerprint(schema),
                             _sha({"read": source.describe(), "content": content}), unit, noise)

    def key(self) -> str:
        """``<table>:<hash of all fields>``: the prefix of every release key."""
        return f"{self.table}:{_sha(asdict(self))[:32]}"

    def as_dict(self) -> dict:
        return asdict(self)

    def differences(self, other: TableIdentity | dict | None) -> list[str]:
        """Why a release under ``other`` is not usable now (plain words, public)."""
        if other is None:
            return ["measured before releases carried an identity"]
        theirs = other if isinstance(other, dict) else asdict(other)
        return [_REASONS[f] for f in FIELDS if theirs.get(f) != getattr(self, f)]


__all__ = ["TableIdentity"]
