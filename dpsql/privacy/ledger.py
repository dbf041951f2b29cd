"""The privacy ledger: a durable, append-only, hash-chained record of every charge.

Invariants (argued in ``docs/privacy.md``, "Ledger"):

1. *Never overspent.*  A charge is checked and appended inside one SQLite
   ``BEGIN IMMEDIATE`` transaction, which holds the database's single write lock, so
   charges from all threads and processes are serialised; the check uses exact
   rational sums of every charge in the file.  A request that does not fit raises
   :class:`~dpsql.errors.BudgetExhaustedError` and writes nothing.
2. *Charge before release.*  :meth:`Ledger.charge` returns only after the transaction
   has committed with ``synchronous=FULL`` (fsync of the database and its journal), so
   a noisy value computed afterwards is always covered by a durable charge.  A crash
   between charge and :meth:`Ledger.record_release` leaves the charge in place (budget
   spent, nothing released): the safe direction.
3. *Pay once.*  Released measurements are stored under a key; :meth:`Ledger.release`
   returns them so that a restart reuses what was paid for instead of paying again.
   :meth:`Ledger.measurement_lock` (an OS file lock beside the ledger) serialises whole
   measurements across processes: the engine re-reads the ledger under it, so no process
   counts and pays for a key another process has already released.
4. *Tamper-evident, never reset.*  Each entry stores SHA-256(previous hash, entry); the
   chain starts from a hash of the ledger's configuration and its head is kept in the
   metadata.  An empty, truncated or malformed file, a failed ``PRAGMA
   integrity_check``, a wrong format/version, or any break in the chain raises
   :class:`~dpsql.errors.LedgerCorruptError`; the ledger then refuses charges.  A
   format version above :data:`VERSION` (a newer dpsql's ledger) raises
   :class:`~dpsql.errors.LedgerVersionError` instead: not corrupt, only not readable here.  A ledger
   file is only ever created by atomically linking a complete new file into place, so an
   existing path is never re-initialised.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, UTC
from fractions import Fraction
from pathlib import Path
from typing import Any, TypeVar

from dpsql.errors import (BudgetExhaustedError, ConfigError, IntegrityError,
                          LedgerCorruptError, LedgerVersionError, OperationalError)
from dpsql.privacy.accountant import format_rho, rho_to_epsilon, to_rho

__all__ = ["Ledger", "Charge", "LedgerEntry", "Preview", "FORMAT", "VERSION"]

FORMAT = "dpsql-ledger"
# The format version a new ledger is created with; READS the versions this code opens.  2:
# its release payloads may store factors as records and carry their own version
# (``measure.release.PAYLOAD_VERSION``); a dpsql before it read such payloads with a KeyError
# and now refuses a version-2 ledger when it opens it.  A version-1 ledger keeps its version
# (the configuration record is bound into the hash chain) and is read as before.
VERSION = 2
READS = (1, 2)
RhoLike = Fraction | float | str     # taken at its exact value (accountant.to_rho)
T = TypeVar("T")
_SQLITE_MAGIC = b"SQLite format 3\x00"
# probe connections (Ledger._version) inherited through a fork: kept, never closed by the child
_INHERITED: list[sqlite3.Connection] = []
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE entries (
    seq INTEGER PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('charge', 'release')),
    created TEXT NOT NULL,
    principal TEXT,
    fingerprint TEXT,
    rho TEXT,
    mechanism TEXT,
    charge_seq INTEGER,
    release_key TEXT UNIQUE,
    payload BLOB,
    payload_sha256 TEXT,
    prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL
);
"""
_COLUMNS = ("seq, kind, created, principal, fingerprint, rho, mechanism, charge_seq, "
            "release_key, payload_sha256, prev_hash, hash")


@dataclass(frozen=True)
class Charge:
    """A committed charge: ``id`` is its position in the ledger."""

    id: int
    principal: str
    rho: Fraction
    fingerprint: str
    mechanism: dict[str, Any]
    created: str
    hash: str


@dataclass(frozen=True)
class LedgerEntry:
    """One verified ledger entry (a charge or a release)."""

    seq: int
    kind: str
    created: str
    principal: str | None
    fingerprint: str | None
    rho: Fraction | None
    mechanism: dict[str, Any] | None
    charge_id: int | None
    key: str | None
    payload_sha256: str | None
    hash: str


@dataclass(frozen=True)
class Preview:
    """Whether a charge would fit now, without charging."""

    fits: bool
    requested: Fraction
    remaining: Fraction         # what this principal can still spend (min of both limits)
    remaining_global: Fraction
    remaining_user: Fraction | None


def _rho_text(rho: Fraction) -> str:
    return f"{rho.numerator}/{rho.denominator}"


def _parse_rho(text: str) -> Fraction:
    num, _, den = text.partition("/")
    value = Fraction(int(num), int(den))
    if value < 0:
        raise ValueError("negative rho")
    return value


def _canonical(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      allow_nan=False, default=_json_default)


def _json_default(obj: object) -> Any:
    if isinstance(obj, Fraction):
        return _rho_text(obj)
    if hasattr(obj, "item"):  # numpy scalars
        return obj.item()
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def _entry_hash(prev_hash: str, fields: list[Any]) -> str:
    return hashlib.sha256((prev_hash + "\n" + _canonical(fields)).encode()).hexdigest()


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


def _budget_words(rho: Fraction, delta: float | None, other: Fraction | None = None) -> str:
    """A budget as an operator wrote it: ε at the configuration's δ, and ρ as a decimal
    (rounded down, like every budget shown).  With ``other``, ρ gets as many digits as
    it takes to tell the two apart (ledgers made before budgets were exact differ from
    today's reading of the same ε only in the 16th digit, issue 28)."""
    digits = 6
    while other is not None and other != rho and digits < 40 and \
            format_rho(rho, "down", digits) == format_rho(other, "down", digits):
        digits += 1
    rho_text = f"ρ = {format_rho(rho, 'down', digits)}"
    if delta is None or not 0 < delta < 1:
        return rho_text
    return f"ε = {rho_to_epsilon(rho, delta):.4g} at δ = {delta:g} ({rho_text})"


def _caps_words(spec: Mapping[str, Any], delta: float | None, other: Mapping[str, Any]) -> list[str]:
    """The per-user caps of a ledger configuration record, one phrase per cap."""
    kind = spec.get("kind")
    if kind == "none":
        return ["no per-user caps"]
    if kind == "uniform":
        return [f"every user capped at {_budget_words(_parse_rho(spec['limit']), delta)}"]
    limits = spec.get("limits", {})
    theirs = other.get("limits", {}) if other.get("kind") == "map" else {}
    out = []
    for name in sorted(limits, key=lambda n: (n != "*", n)):
        if theirs.get(name) == limits[name]:
            continue   # the same on both sides: not part of the difference
        who = "users without their own cap ([budget.per_user])" if name == "*" else f"user {name!r}"
        other_rho = _parse_rho(theirs[name]) if name in theirs else None
        out.append(f"{who} capped at {_budget_words(_parse_rho(limits[name]), delta, other_rho)}")
    missing = sorted(set(theirs) - set(limits))
    out += [("no default cap (users without their own may spend nothing)" if n == "*"
             else f"no cap of its own for user {n!r}") for n in missing]
    return out


def _mismatch(path: Path, stored: Mapping[str, Any], current: Mapping[str, Any],
              delta: float | None) -> ConfigError:
    """The budget-mismatch error in the words the operator configured (ε, δ; ρ in
    decimals), naming what differs and what to change; never the raw record."""
    parts, back = [], []
    old_total, new_total = _parse_rho(stored["total_rho"]), _parse_rho(current["total_rho"])
    if old_total != new_total:
        parts.append(f"the total budget was {_budget_words(old_total, delta, new_total)} when the "
                     f"ledger was created, the configuration now says {_budget_words(new_total, delta, old_total)}")
        back.append(f"[budget] to {_budget_words(old_total, delta)}")
    old_caps, new_caps = stored.get("per_user", {}), current.get("per_user", {})
    if old_caps != new_caps:
        was = "; ".join(_caps_words(old_caps, delta, new_caps)) or "the same caps for fewer users"
        now = "; ".join(_caps_words(new_caps, delta, old_caps)) or "the same caps for fewer users"
        parts.append(f"per-user caps were: {was}; the configuration now says: {now}")
        back.append("the per-user caps ([budget.per_user], [budget.users.NAME]) to what they were")
    if not parts:   # only the record's spelling differs (a different dpsql version wrote it)
        parts.append("its budget record was written differently (another dpsql version)")
    note = "" if delta is None else f" (ε shown at the configuration's δ = {delta:g}; the ledger records ρ)"
    return ConfigError(
        f"privacy ledger {path} was created with a different budget: " + "; ".join(parts) + note,
        hint="a ledger's budget is fixed when it is created. To keep using this ledger (and its "
             "history), set " + (" and ".join(back) or "the budget back to what it was") + "; to start "
             "over with the new budget, point `ledger =` in [dpsql] at a new file (the old one "
             "keeps its history). `dpsql plan --epsilon E` compares budgets without a ledger.")


def _user_spec(per_user_rho: RhoLike | Mapping[str, RhoLike] | None) -> dict[str, Any]:
    if per_user_rho is None:
        return {"kind": "none"}
    if isinstance(per_user_rho, Mapping):
        return {"kind": "map",
                "limits": {str(k): _rho_text(to_rho(v)) for k, v in per_user_rho.items()}}
    return {"kind": "uniform", "limit": _rho_text(to_rho(per_user_rho))}


class Ledger:
    """Durable zCDP budget ledger in a SQLite file (format: ``docs/privacy.md``).

    ``total_rho`` bounds the sum of all charges; ``per_user_rho`` is ``None`` (no
    per-principal limit), one number (the same limit for everyone) or a dict from
    principal to limit where the key ``"*"`` gives the default (a principal with no
    entry and no default has a limit of 0).  Both are fixed when the file is created.
    """

    def __init__(self, path: str | os.PathLike[str], *, total_rho: RhoLike,
                 per_user_rho: RhoLike | Mapping[str, RhoLike] | None = None, timeout: float = 60.0,
                 delta: float | None = None) -> None:
        self.path = Path(path)
        self._delta = delta     # only to word a budget mismatch in ε; the ledger keeps ρ
        self.total_rho = to_rho(total_rho)
        if self.total_rho <= 0:
            raise ConfigError("total_rho must be positive", hint="set a positive privacy budget")
        self._user_spec = _user_spec(per_user_rho)
        self._timeout = timeout
        self._lock = threading.RLock()
        self._measure_lock = threading.RLock()
        self._corrupt: str | None = None
        self._verified_seq = 0
        self._verified_hash = ""
        self._spent_total = Fraction(0)
        self._spent_by: dict[str, Fraction] = {}
        # change detection for reads (``_version``): a connection kept open only to ask
        # SQLite whether anything was committed since the last verified read
        self._probe: sqlite3.Connection | None = None
        self._probe_of: tuple[int, int, int] | None = None     # (pid, st_dev, st_ino) it was opened for
        # how many probes this instance has opened (a forked child's copy counts on from the
        # parent's): part of the version, as a new connection's data_version restarts
        self._probe_count = 0
        self._synced: tuple[object, ...] | None = None                     # _version() before the last verified read
        self._config_text = self._config_of(VERSION)
        if not self.path.exists():
            self._create()
        self._open_and_verify()

    def _config_of(self, version: int) -> str:
        """The configuration record of this budget in format ``version``."""
        return _canonical({"format": FORMAT, "version": version, "total_rho": _rho_text(self.total_rho),
                           "per_user": self._user_spec})

    # --- creation and verification ----------------------------------------------------

    def _create(self) -> None:
        directory = self.path.parent if str(self.path.parent) else Path(".")
        directory.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ledger-", suffix=".tmp", dir=directory)
        os.close(fd)
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                # WAL + synchronous=FULL: a commit returns only after the WAL is fsync'd
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.executescript(_SCHEMA)
                genesis = hashlib.sha256(("genesis\n" + self._config_text).encode()).hexdigest()
                conn.execute("BEGIN")
                conn.executemany("INSERT INTO meta VALUES (?, ?)", [
                    ("config", self._config_text), ("created", _now()),
                    ("genesis", genesis), ("head_seq", "0"), ("head_hash", genesis)])
                conn.execute("COMMIT")
            finally:
                conn.close()
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            try:
                # link() never replaces an existing file: if another process created the
                # ledger first we simply open theirs.
                os.link(tmp, self.path)
            except FileExistsError:
                pass
            dir_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        finally:
            os.unlink(tmp)

    def _fail(self, reason: str) -> LedgerCorruptError:
        self._corrupt = reason
        return LedgerCorruptError(
            f"privacy ledger {self.path} is corrupt: {reason}",
            hint="no further charges are accepted; restore the ledger from a backup or "
                 "investigate the file -- it is never reset automatically")

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None)
            conn.execute("PRAGMA synchronous=FULL")
            conn.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            raise self._fail(f"cannot open database ({exc})") from exc
        return conn

    def _version(self) -> tuple[object, ...] | None:
        """A value that changes whenever the ledger file may have changed, or None when it
        cannot be read (then nothing is skipped).  It is ``PRAGMA data_version`` of a
        connection kept open for this alone (SQLite documents that it differs after any other
        connection commits, in this or another process: every commit of this ledger is made
        on another connection) with the identity, size and times of the file and of its WAL
        (a file replaced, or written other than through SQLite, to the file system's time
        resolution).  The probe connection is reopened when the path names another file or
        in a forked child, and a reopened probe's version never equals an older one's."""
        stats: list[tuple[int, ...] | None] = []
        for p in (self.path, self.path.with_name(self.path.name + "-wal")):
            try:
                st = os.stat(p)
            except FileNotFoundError:
                stats.append(None)
                continue
            except OSError:
                return None
            # not the WAL's ctime: SQLite changes it whenever a connection opens the WAL
            stats.append((st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
                         + ((st.st_ctime_ns,) if not stats else ()))
        if stats[0] is None:
            return None
        owner = (os.getpid(), stats[0][0], stats[0][1])
        try:
            if self._probe is None or self._probe_of != owner:
                if self._probe is not None:
                    if self._probe_of is not None and self._probe_of[0] == os.getpid():
                        self._probe.close()
                    else:   # opened before a fork: closing it here could disturb the parent's locks
                        _INHERITED.append(self._probe)
                self._probe = None
                self._probe_count += 1
                self._probe = sqlite3.connect(self.path, timeout=self._timeout, isolation_level=None,
                                              check_same_thread=False)
                self._probe_of = owner
            data_version = self._probe.execute("PRAGMA data_version").fetchall()[0][0]
        except sqlite3.Error:
            return None
        # data_version is one connection's: a new probe's (a forked child's, or after the file
        # was replaced) starts where the old one's did, 2, whatever was committed meanwhile
        return self._probe_count, data_version, tuple(stats)

    @staticmethod
    def _checkpoint(conn: sqlite3.Connection) -> None:
        """Copy a committed write from the WAL into the ledger file.  SQLite does this when
        the last connection to a file closes; the probe of ``_version`` stays open, so
        without it the newest entries would live only in ``<ledger>-wal`` and a copy of the
        ledger file alone (a backup) would miss them.  Best effort and PASSIVE (it never waits
        for a reader, as FULL/RESTART/TRUNCATE would, up to the busy timeout): the write is
        durable in the WAL already, and a reader of another process may hold frames back."""
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
        except sqlite3.Error:
            pass

    def _open_and_verify(self) -> None:
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as fh:
                magic = fh.read(len(_SQLITE_MAGIC))
        except OSError as exc:
            raise self._fail(f"cannot read file ({exc})") from exc
        if size == 0 or magic != _SQLITE_MAGIC:
            raise self._fail("empty or not an SQLite database (truncated?)")
        conn = self._connect()
        try:
            try:
                rows = conn.execute("PRAGMA integrity_check").fetchall()
                if rows != [("ok",)]:
                    raise self._fail("integrity_check: " + "; ".join(r[0] for r in rows[:3]))
                meta = dict(conn.execute("SELECT key, value FROM meta").fetchall())
            except sqlite3.DatabaseError as exc:
                raise self._fail(f"unreadable ({exc})") from exc
            self._check_meta(meta)
            conn.execute("BEGIN")
            try:
                self._sync(conn)
            finally:
                conn.execute("ROLLBACK")
        except sqlite3.DatabaseError as exc:
            raise self._fail(f"unreadable ({exc})") from exc
        finally:
            conn.close()

    def _check_meta(self, meta: dict[str, str]) -> None:
        config = meta.get("config")
        if config is None or "genesis" not in meta:
            raise self._fail("missing ledger metadata")
        try:
            stored = json.loads(config)
        except ValueError:
            raise self._fail("unreadable configuration record") from None
        version = stored.get("version")
        if stored.get("format") == FORMAT and type(version) is int and version > VERSION:
            raise LedgerVersionError(
                f"privacy ledger {self.path} was written by a newer dpsql: ledger format version "
                f"{version}, this dpsql reads versions {', '.join(map(str, READS))}",
                hint="open it with the dpsql version that wrote it or a newer one; the file was "
                     "not changed and nothing was charged")
        if stored.get("format") != FORMAT or type(version) is not int or version not in READS:
            raise self._fail(f"unsupported format {stored.get('format')!r} "
                             f"version {version!r}")
        expected = hashlib.sha256(("genesis\n" + config).encode()).hexdigest()
        if meta["genesis"] != expected:
            raise self._fail("configuration record does not match the chain's genesis")
        if config != self._config_of(version):
            try:
                error = _mismatch(self.path, stored, json.loads(self._config_of(version)), self._delta)
            except (KeyError, ValueError, TypeError, AttributeError, ZeroDivisionError):
                raise self._fail("unreadable budget in the configuration record") from None
            raise error
        self._genesis = meta["genesis"]

    def _sync(self, conn: sqlite3.Connection) -> None:
        """Verify entries appended since the last check and fold them into the sums.

        Must run inside a transaction so the view is consistent.  Also re-checks that the
        last verified entry is unchanged and that the stored head matches.
        """
        if self._corrupt:
            raise LedgerCorruptError(f"privacy ledger {self.path} is corrupt: {self._corrupt}",
                                     hint="no further charges are accepted")
        if self._verified_seq == 0:
            self._verified_hash = self._genesis
        else:
            row = conn.execute("SELECT hash FROM entries WHERE seq = ?",
                               (self._verified_seq,)).fetchone()
            if row is None or row[0] != self._verified_hash:
                raise self._fail(f"entry {self._verified_seq} changed or vanished")
        seq, prev = self._verified_seq, self._verified_hash
        spent_total, spent_by = self._spent_total, dict(self._spent_by)
        cursor = conn.execute(f"SELECT {_COLUMNS}, payload FROM entries WHERE seq > ? "
                              "ORDER BY seq", (seq,))
        for row in cursor:
            (r_seq, kind, created, principal, fingerprint, rho, mechanism, charge_seq,
             key, payload_sha, prev_hash, digest, payload) = row
            if r_seq != seq + 1 or prev_hash != prev:
                raise self._fail(f"hash chain broken at entry {r_seq}")
            fields = [r_seq, kind, created, principal, fingerprint, rho, mechanism,
                      charge_seq, key, payload_sha]
            if _entry_hash(prev_hash, fields) != digest:
                raise self._fail(f"entry {r_seq} does not match its hash")
            if kind == "charge":
                try:
                    value = _parse_rho(rho)
                except (TypeError, ValueError, ZeroDivisionError, AttributeError):
                    raise self._fail(f"entry {r_seq} has an unreadable rho") from None
                spent_total += value
                spent_by[principal] = spent_by.get(principal, Fraction(0)) + value
            elif payload is None or hashlib.sha256(payload).hexdigest() != payload_sha:
                raise self._fail(f"release payload of entry {r_seq} does not match its hash")
            seq, prev = r_seq, digest
        head = dict(conn.execute("SELECT key, value FROM meta WHERE key IN "
                                 "('head_seq', 'head_hash')").fetchall())
        count = conn.execute("SELECT count(*) FROM entries").fetchone()[0]
        if head.get("head_seq") != str(seq) or head.get("head_hash") != prev or count != seq:
            raise self._fail("entries are missing or the head record disagrees (truncated?)")
        self._verified_seq, self._verified_hash = seq, prev
        self._spent_total, self._spent_by = spent_total, spent_by

    def _append(self, conn: sqlite3.Connection, fields: dict[str, Any], payload: bytes | None
                ) -> tuple[list[Any], str]:
        seq = self._verified_seq + 1
        values = [seq, fields["kind"], _now(), fields.get("principal"),
                  fields.get("fingerprint"), fields.get("rho"), fields.get("mechanism"),
                  fields.get("charge_seq"), fields.get("key"), fields.get("payload_sha256")]
        digest = _entry_hash(self._verified_hash, values)
        conn.execute(f"INSERT INTO entries ({_COLUMNS}, payload) VALUES "
                     "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                     (*values, self._verified_hash, digest, payload))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'head_seq'", (str(seq),))
        conn.execute("UPDATE meta SET value = ? WHERE key = 'head_hash'", (digest,))
        return values, digest

    # --- transactions -----------------------------------------------------------------

    def _run(self, body: Callable[[sqlite3.Connection], T], *, write: bool) -> T:
        """Run body(conn) in one transaction (IMMEDIATE for writes) after a sync."""
        with self._lock:
            # read before the transaction: a commit landing after it changes the version
            # again, so the next read syncs (never a stale "unchanged")
            version = self._version()
            self._synced = None
            conn = self._connect()
            try:
                try:
                    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                except sqlite3.OperationalError as exc:
                    raise OperationalError(f"privacy ledger {self.path} is busy ({exc})",
                                           hint="another process holds the ledger lock; "
                                                "retry") from exc
                committed = False
                saved = (self._verified_seq, self._verified_hash, self._spent_total,
                         dict(self._spent_by))
                try:
                    self._sync(conn)
                    result = body(conn)
                    conn.execute("COMMIT")
                    committed = True
                    self._synced = version
                    if write:
                        self._checkpoint(conn)
                    return result
                finally:
                    if not committed:
                        if self._corrupt is None:
                            # the body may have advanced the in-memory view before a
                            # failed or refused commit: forget it, the file is the truth
                            (self._verified_seq, self._verified_hash, self._spent_total,
                             self._spent_by) = saved
                        try:
                            conn.execute("ROLLBACK")
                        except sqlite3.Error:
                            pass
            except LedgerCorruptError:
                raise
            except sqlite3.OperationalError as exc:
                raise OperationalError(f"privacy ledger {self.path}: {exc}",
                                       hint="check the file system and retry") from exc
            except sqlite3.DatabaseError as exc:
                raise self._fail(f"database error ({exc})") from exc
            finally:
                conn.close()

    # --- limits -----------------------------------------------------------------------

    def _user_limit(self, principal: str) -> Fraction | None:
        spec = self._user_spec
        if spec["kind"] == "none" or principal.startswith("@"):
            # "@…" principals are the engine's own (the operator's workload measurement):
            # bounded by the total, never by a user's cap (users may not take such names)
            return None
        if spec["kind"] == "uniform":
            return _parse_rho(spec["limit"])
        limits = spec["limits"]
        text = limits.get(principal, limits.get("*"))
        return Fraction(0) if text is None else _parse_rho(text)

    def _preview_locked(self, principal: str, rho: Fraction) -> Preview:
        remaining_global = self.total_rho - self._spent_total
        limit = self._user_limit(principal)
        remaining_user = None
        remaining = remaining_global
        if limit is not None:
            remaining_user = limit - self._spent_by.get(principal, Fraction(0))
            remaining = min(remaining, remaining_user)
        return Preview(rho <= remaining, rho, max(remaining, Fraction(0)),
                       max(remaining_global, Fraction(0)),
                       None if remaining_user is None else max(remaining_user, Fraction(0)))

    # --- public API -------------------------------------------------------------------

    def preview(self, principal: str, rho: RhoLike) -> Preview:
        """Would ``charge(principal, rho, ...)`` fit right now?  Charges nothing."""
        value = self._check_rho(rho)
        principal = self._check_principal(principal)
        return self._run(lambda conn: self._preview_locked(principal, value), write=False)

    def charge(self, principal: str, rho: RhoLike, fingerprint: str, mechanism: dict[str, Any]) -> Charge:
        """Durably record a charge of ``rho`` or raise BudgetExhaustedError.

        Returns only after the charge is committed and fsync'd; nothing noisy may be
        released before this returns.
        """
        value = self._check_rho(rho, allow_zero=False)
        principal = self._check_principal(principal)
        if not isinstance(fingerprint, str) or not fingerprint:
            raise ConfigError("charge needs a non-empty fingerprint string")
        try:
            mech_text = _canonical(mechanism)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"mechanism description is not JSON-serialisable ({exc})",
                              hint="describe the mechanism with str/int/float/Fraction "
                                   "values") from None

        def body(conn: sqlite3.Connection) -> Charge:
            view = self._preview_locked(principal, value)
            if not view.fits:
                who = "" if view.remaining_user is None or \
                    view.remaining_user > view.remaining_global else f" for {principal!r}"
                raise BudgetExhaustedError(
                    f"privacy budget exhausted{who}: the request needs rho={format_rho(value, 'up')} "
                    f"but only rho={format_rho(view.remaining, 'down')} remains",
                    requested_rho=Fraction(value), remaining_rho=view.remaining,
                    hint="ask for fewer or coarser statistics, reuse released answers, or "
                         "have the operator grant a new budget (a new ledger)")
            values, digest = self._append(conn, {"kind": "charge", "principal": principal,
                                                 "fingerprint": fingerprint,
                                                 "rho": _rho_text(value),
                                                 "mechanism": mech_text}, None)
            self._verified_seq, self._verified_hash = values[0], digest
            self._spent_total += value
            self._spent_by[principal] = self._spent_by.get(principal, Fraction(0)) + value
            return Charge(values[0], principal, value, fingerprint, json.loads(mech_text),
                          values[2], digest)

        return self._run(body, write=True)

    def record_release(self, charge_id: int, key: str, payload: bytes) -> None:
        """Durably store the noisy values paid for by ``charge_id`` under ``key``."""
        if not isinstance(key, str) or not key:
            raise ConfigError("release key must be a non-empty string")
        data = bytes(payload)
        digest_payload = hashlib.sha256(data).hexdigest()

        def body(conn: sqlite3.Connection) -> None:
            row = conn.execute("SELECT kind FROM entries WHERE seq = ?",
                               (int(charge_id),)).fetchone()
            if row is None or row[0] != "charge":
                raise IntegrityError(f"no charge with id {charge_id} in the ledger",
                                     hint="record a release only for a charge you made")
            existing = conn.execute("SELECT payload_sha256 FROM entries WHERE release_key = ?",
                                    (key,)).fetchone()
            if existing is not None:
                if existing[0] == digest_payload:
                    return None
                raise IntegrityError(f"release key {key!r} already holds different values",
                                     hint="reuse the stored release instead of re-measuring")
            values, digest = self._append(conn, {"kind": "release", "charge_seq": int(charge_id),
                                                 "key": key,
                                                 "payload_sha256": digest_payload}, data)
            self._verified_seq, self._verified_hash = values[0], digest
            return None

        self._run(body, write=True)

    def release(self, key: str) -> bytes | None:
        """The payload recorded under ``key`` (verified against the chain), or None."""
        def body(conn: sqlite3.Connection) -> bytes | None:
            row = conn.execute("SELECT payload, payload_sha256 FROM entries WHERE "
                               "release_key = ?", (key,)).fetchone()
            if row is None:
                return None
            if hashlib.sha256(row[0]).hexdigest() != row[1]:
                raise self._fail(f"release {key!r} does not match its hash")
            return bytes(row[0])

        return self._run(body, write=False)

    def spent(self, principal: str | None = None) -> Fraction:
        """Exact rho spent overall, or by one principal."""
        def body(conn: sqlite3.Connection) -> Fraction:
            if principal is None:
                return self._spent_total
            return self._spent_by.get(principal, Fraction(0))

        return self._run(body, write=False)

    def remaining(self, principal: str | None = None) -> Fraction:
        """Exact rho left overall, or what ``principal`` may still spend (both limits)."""
        if principal is None:
            return self._run(lambda conn: max(self.total_rho - self._spent_total, Fraction(0)),
                             write=False)
        return self.preview(principal, 0).remaining

    @contextmanager
    def measurement_lock(self, timeout: float | None = None) -> Iterator[None]:
        """Hold the ledger's measurement lock (threads of this process and, through
        ``flock`` on ``<ledger>.lock``, every other process).  A measurement holds it from
        re-reading the ledger to recording its release, so two processes never count and
        charge the same key; the OS drops it if the process dies."""
        wait = max(self._timeout, 600.0) if timeout is None else timeout
        with self._measure_lock:
            lock_path = str(self.path) + ".lock"
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                deadline = time.monotonic() + wait
                while True:
                    try:
                        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                        break
                    except BlockingIOError:
                        if time.monotonic() > deadline:
                            raise OperationalError(
                                f"another process has been measuring with ledger {self.path} "
                                f"for over {wait:.0f} s", hint="retry when it has finished") from None
                        time.sleep(0.05)
                yield
            finally:
                os.close(fd)  # releases the flock

    def entries(self, since: int = 0) -> list[LedgerEntry]:
        """Every entry after ``since`` (a seq), verified, oldest first.

        Asked for the entries after the last one verified, and nothing committed to the file
        since that verification (``_version``), it answers [] without opening the file: a
        session asks this before every statement, and the verification re-reads the last
        entry's hash, which SQLite stores after the release payload (megabytes on a large
        categorical: 6 ms a read, issue 35)."""
        with self._lock:
            if (since >= self._verified_seq and self._corrupt is None and self._synced is not None
                    and self._version() == self._synced):
                return []

        def body(conn: sqlite3.Connection) -> list[LedgerEntry]:
            out = []
            for row in conn.execute(f"SELECT {_COLUMNS} FROM entries WHERE seq > ? AND seq <= ? "
                                    "ORDER BY seq", (int(since), self._verified_seq)):
                (seq, kind, created, principal, fingerprint, rho, mechanism, charge_seq,
                 key, payload_sha, _prev, digest) = row
                out.append(LedgerEntry(seq, kind, created, principal, fingerprint,
                                       None if rho is None else _parse_rho(rho),
                                       None if mechanism is None else json.loads(mechanism),
                                       charge_seq, key, payload_sha, digest))
            return out

        return self._run(body, write=False)

    def unreleased_charge(self, fingerprint: str) -> LedgerEntry | None:
        """The charge for ``fingerprint`` that has no release (its process died between
        charging and recording), or None: the next request completes it under that charge
        (docs/privacy.md §6)."""
        entries = self.entries()
        released = {e.charge_id for e in entries if e.kind == "release"}
        return next((e for e in entries if e.kind == "charge" and e.fingerprint == fingerprint
                     and e.seq not in released), None)

    def verify(self) -> None:
        """Full re-verification from the first entry (e.g. for an operator's check)."""
        with self._lock:
            if self._corrupt:
                raise LedgerCorruptError(f"privacy ledger {self.path} is corrupt: "
                                         f"{self._corrupt}", hint="no charges are accepted")
            self._verified_seq, self._verified_hash = 0, ""
            self._spent_total, self._spent_by = Fraction(0), {}
            self._synced = None
            self._open_and_verify()

    # --- validation -------------------------------------------------------------------

    @staticmethod
    def _check_rho(rho: RhoLike, *, allow_zero: bool = True) -> Fraction:
        value = to_rho(rho)
        if value == 0 and not allow_zero:
            raise ConfigError("a charge must have rho > 0",
                              hint="do not record charges for computations that use no data")
        return value

    @staticmethod
    def _check_principal(principal: object) -> str:
        if not isinstance(principal, str) or not principal:
            raise ConfigError("principal must be a non-empty string",
                              hint="charge on behalf of a named user")
        return principal
