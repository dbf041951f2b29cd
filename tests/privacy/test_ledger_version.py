"""The ledger's format version is explicit, and a ledger or release from a newer dpsql is
refused with LedgerVersionError (SQLSTATE 0AP02, a hint, the file untouched), not called
corrupt or failed on with a KeyError from inside a payload (issue 35: a dpsql before the
factor records read a new ledger's releases with ``KeyError: 'b0f0 is not a file in the
archive'``)."""

from __future__ import annotations

import hashlib
import io
import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from dpsql.errors import LedgerCorruptError, LedgerVersionError, NotSupportedError
from dpsql.measure import release as rel
from dpsql.privacy import ledger as ledger_mod
from dpsql.privacy.ledger import Ledger


def _config(path: Path) -> dict:
    with sqlite3.connect(path) as con:
        return json.loads(con.execute("SELECT value FROM meta WHERE key = 'config'").fetchone()[0])


def _restamp(path: Path, version) -> None:
    """Rewrite an empty ledger's configuration record with another format version and a
    matching genesis (what a dpsql writing that version would have created)."""
    config = {**_config(path), "version": version}
    text = json.dumps(config, sort_keys=True, separators=(",", ":"))
    genesis = hashlib.sha256(("genesis\n" + text).encode()).hexdigest()
    with sqlite3.connect(path) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'config'", (text,))
        con.execute("UPDATE meta SET value = ? WHERE key IN ('genesis', 'head_hash')", (genesis,))


def test_a_new_ledger_records_its_format_version(tmp_path):
    path = tmp_path / "t.ledger"
    Ledger(path, total_rho=1)
    assert _config(path)["format"] == "dpsql-ledger"
    assert _config(path)["version"] == ledger_mod.VERSION == 2 and ledger_mod.READS == (1, 2)


def test_a_version_1_ledger_still_opens_and_charges(tmp_path):
    path = tmp_path / "t.ledger"
    Ledger(path, total_rho=1)
    _restamp(path, 1)
    led = Ledger(path, total_rho=1)
    led.charge("alice", 0.25, "fp", {"purpose": "test"})
    assert Ledger(path, total_rho=1).remaining("alice") == 0.75
    assert _config(path)["version"] == 1            # kept: the record is bound into the chain


def test_a_ledger_from_a_newer_dpsql_is_refused_clearly_and_left_alone(tmp_path):
    path = tmp_path / "t.ledger"
    Ledger(path, total_rho=1)
    _restamp(path, 3)
    before = path.read_bytes()
    with pytest.raises(LedgerVersionError) as info:
        Ledger(path, total_rho=1)
    err = info.value
    assert isinstance(err, NotSupportedError) and not isinstance(err, LedgerCorruptError)
    assert err.sqlstate == "0AP02"
    assert "newer dpsql" in err.message and "version 3" in err.message and "reads versions 1, 2" in err.message
    assert err.hint and "not changed" in err.hint
    assert path.read_bytes() == before


@pytest.mark.parametrize("version", [0, "2", None, 2.0])
def test_a_version_that_is_no_format_is_corruption(tmp_path, version):
    path = tmp_path / "t.ledger"
    Ledger(path, total_rho=1)
    _restamp(path, version)
    with pytest.raises(LedgerCorruptError, match="unsupported format"):
        Ledger(path, total_rho=1)


def _payload(stamp: dict | None) -> bytes:
    block = rel.LatticeBlock(("a",), (np.eye(3, dtype=np.int64),), 1.0, 1.0)
    payload = rel.pack([(block, np.arange(3.0), 1.0)])
    with np.load(io.BytesIO(payload)) as z:
        arrays = {k: z[k] for k in z.files}
    del arrays["__version__"]
    if stamp is not None:
        arrays["__version__"] = np.frombuffer(json.dumps(stamp).encode(), dtype=np.uint8)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def test_a_release_payload_carries_its_version():
    payload = rel.pack([(rel.LatticeBlock(("a",), (np.eye(3, dtype=np.int64),), 1.0, 1.0), np.arange(3.0), 1.0)])
    with np.load(io.BytesIO(payload)) as z:
        assert json.loads(bytes(z["__version__"]).decode()) == {"format": "dpsql-release", "version": 2}
    assert len(rel.unpack_all(payload)) == 1
    # without the entry (written before it existed) and at this version: read alike
    for stamp in (None, {"format": "dpsql-release", "version": 2}, {"format": "dpsql-release", "version": 1}):
        (block, values, sd), = rel.unpack_all(_payload(stamp))
        assert np.array_equal(np.asarray(block.factors[0]), np.eye(3)) and values.tolist() == [0, 1, 2]


@pytest.mark.parametrize("stamp", [{"format": "dpsql-release", "version": 3}, {"format": "other", "version": 1},
                                   {"format": "dpsql-release", "version": "3"}, {}])
def test_a_release_payload_from_a_newer_dpsql_is_refused_clearly(stamp):
    with pytest.raises(LedgerVersionError, match="written by a newer dpsql") as info:
        rel.unpack_all(_payload(stamp))
    assert info.value.sqlstate == "0AP02" and info.value.hint


def test_a_direct_payload_carries_its_version_and_a_newer_one_is_refused():
    from dpsql.engine import direct
    block = rel.LatticeBlock(("a",), (np.eye(3, dtype=np.int64),), 1.0, 1.0)
    release = direct.DirectRelease({"a": (0, 2, 5)}, [(block, np.arange(3.0), 1.0)])
    payload = direct.pack(release)
    assert direct.is_direct_payload(payload)
    with np.load(io.BytesIO(payload)) as z:
        arrays = {k: z[k] for k in z.files}
    assert json.loads(bytes(arrays["__version__"]).decode()) == {"format": "dpsql-direct-release", "version": 1}
    back = direct.unpack(payload)
    assert back.starts == {"a": (0, 2, 5)} and np.array_equal(back.released[0][1], np.arange(3.0))
    for stamp, ok in ((None, True), ({"format": "dpsql-direct-release", "version": 2}, False)):
        out = {k: v for k, v in arrays.items() if k != "__version__"}
        if stamp is not None:
            out["__version__"] = np.frombuffer(json.dumps(stamp).encode(), dtype=np.uint8)
        buf = io.BytesIO()
        np.savez(buf, **out)
        if ok:
            assert direct.unpack(buf.getvalue()).starts == {"a": (0, 2, 5)}
        else:
            with pytest.raises(LedgerVersionError, match="newer dpsql"):
                direct.unpack(buf.getvalue())
