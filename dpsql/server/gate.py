"""Admission of connections that have not authenticated yet (sans-IO; issue 34 item 6).

PostgreSQL bounds a login by ``authentication_timeout``; the asyncio driver does the same
(``auth_timeout``, from accept to authenticated, the whole handshake) and, because a socket
costs an attacker almost nothing, also bounds how many connections may be authenticating at
once (``max_unauthenticated``).  Every one of them is read from the start (nothing queues
unread), so the rule that decides who stays can look at how each one behaves:

* **Stalled time** is the time the server has been waiting for the client's *current*
  handshake message: the clock starts when the server is ready for the next message (after
  its reply) and stops only when a complete message has arrived.  Bytes that do not complete
  a message do not count (the byte-rate rule against slowloris, where a socket sends one byte
  now and then), and time the server spends itself (its reply, the failure delay) does not
  count against the client.  A real client sends each message in one write, a round trip
  after the server's reply, so its stalls are a round trip long.
* When the table is full, a newcomer takes the place of the connection that deserves it least:
  first one stalled for at least ``grace`` seconds, then the one that completed the fewest
  handshake messages, then one from the peer address holding the most places, then the
  longest stalled.  Only connections waiting for the client can be dropped; when every place
  is busy on the server's side the newcomer is closed at once.

So sockets that trickle bytes or hold still are dropped as soon as anyone else needs the
place, whatever their number: a real client sends its startup packet as it connects, and from
then on ranks above every socket that has not completed one; sockets that do complete messages
and then hold still are dropped once stalled for ``grace``.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Generic, TypeVar

K = TypeVar("K")    # a connection's key (the server uses its asyncio task)


@dataclass
class Pending:
    """One connection still authenticating."""

    host: str
    stalled_since: float | None       # None while the server is working on its last message
    messages: int = 0                 # complete handshake messages received

    def waiting(self, now: float) -> None:
        """The server waits for the client's next message (idempotent: trickled bytes keep the clock)."""
        if self.stalled_since is None:
            self.stalled_since = now

    def progressed(self) -> None:
        """A complete message arrived: the server works on it."""
        self.stalled_since = None
        self.messages += 1


class Gate(Generic[K]):
    def __init__(self, capacity: int, grace: float) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self.capacity = capacity
        self.grace = grace
        self.pending: dict[K, Pending] = {}

    def __len__(self) -> int:
        return len(self.pending)

    def admit(self, key: K, host: str, now: float) -> tuple[bool, K | None]:
        """Whether ``key`` (a new connection from ``host``) may start its handshake, and the key of
        the connection it displaces (to be closed by the caller), if any."""
        victim = None
        if len(self.pending) >= self.capacity:
            victim = self.victim(now)
            if victim is None:
                return False, None
            del self.pending[victim]
        self.pending[key] = Pending(host, now)      # stalled from accept until its first message
        return True, victim

    def victim(self, now: float) -> K | None:
        counts = Counter(p.host for p in self.pending.values())
        best: K | None = None
        best_rank = None
        for key, p in self.pending.items():
            if p.stalled_since is None:
                continue
            stalled = now - p.stalled_since
            rank = (stalled >= self.grace, -p.messages, counts[p.host], stalled)
            if best_rank is None or rank > best_rank:
                best, best_rank = key, rank
        return best

    def leave(self, key: K) -> None:
        self.pending.pop(key, None)
