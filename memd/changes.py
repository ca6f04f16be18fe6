"""One count of the changes ``status`` shows, for the whole daemon.

``status`` keeps its last reply packed (:mod:`memd.ipc.status`) and sends it again while
this count is what it was when the reply was built (and the reply is younger than
``status``'s time bound, for its figures that move with the clock: uptime, RSS, the last
hour's windows). So every place where something ``status`` shows changes calls
:meth:`Changes.bump` once the change is made: the IPC dispatcher after each request that is
not read-only, the session index when a state is published or dropped, a reload and a new
model client, the cost guard and the usage ledger, the notes and memory jobs as they start
and end, the write-health and refused-entry registries, the watcher's status, the ingest
queue and the server's connections. Reading the count is free; a bump costs a lock (writers
run in worker threads too, and a lost increment could leave the count where a reply was
built).

A module-level object like :data:`memd.writes.WRITES` and :data:`memd.confined.findings`,
whose changes it counts: one per process, nothing to hand down.
"""

from __future__ import annotations

import threading
from typing import Any

_UNSET = object()


class Changes:
    """A count that only grows; :attr:`count` is read without the lock."""

    __slots__ = ("_lock", "count")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.count = 0

    def bump(self) -> None:
        """Something ``status`` shows has changed (call it after the change)."""
        with self._lock:
            self.count += 1


CHANGES = Changes()


class Counted:
    """A base for the mutable records ``status`` reads (a job's phase, the watcher's mode):
    each attribute given another object counts as a change."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if getattr(self, name, _UNSET) is not value:
            super().__setattr__(name, value)
            CHANGES.bump()
