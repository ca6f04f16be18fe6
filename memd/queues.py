"""Coalescing work queues.

A key marked while it is already queued is queued once; a key marked while its work is running
is queued again once, after the run. That is the "triggers coalesce into one follow-up run"
rule (R-S6, R-M3) and it bounds the queue by the number of distinct keys.

A key is queued in one of two lanes: ``now`` (a mark) or ``later`` (a mark with
``later=True``: bulk work, a file with more to read than a turn took). ``get`` takes from
``now`` first, and ``get(now_only=True)`` only from it, so a small change never waits behind
bulk work; the ``later`` lane stays first in, first out, so each bulk key gets its turn.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

from memd.changes import CHANGES

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class QueueStats:
    queued: int
    running: int
    marked_total: int
    coalesced_total: int


@dataclass
class _RunsWaiter(Generic[K]):
    queued: set[K]  # the next run of these has not started yet
    running: set[K] = field(default_factory=set)  # their run started after the wait began
    finished: anyio.Event = field(default_factory=anyio.Event)


class CoalescingQueue(Generic[K]):
    """FIFO of distinct keys; ``get`` waits for one, ``done`` ends its run."""

    def __init__(self) -> None:
        self._order: dict[K, None] = {}  # the ``now`` lane: an insertion-ordered set
        self._later: dict[K, None] = {}  # the ``later`` lane; a key is in one lane at most
        self._running: set[K] = set()
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._marked = 0
        self._coalesced = 0
        self._waiters: list[_RunsWaiter[K]] = []

    def mark_nowait(self, key: K, *, later: bool = False) -> None:
        """Queue ``key`` (once), in the ``now`` lane, or with ``later`` in the ``later`` lane.
        A key queued already keeps its place, except that ``later`` moves it from ``now`` to
        the back of ``later`` (bulk work does not take the small changes' lane)."""
        self._marked += 1
        if key in self._later or (key in self._order and not later):
            self._coalesced += 1
            return
        if key in self._order:
            self._coalesced += 1
            del self._order[key]
        (self._later if later else self._order)[key] = None
        CHANGES.bump()  # ``queued`` in ``status``
        self._wake.set()
        if self._idle.is_set():
            self._idle = anyio.Event()

    async def get(self, *, now_only: bool = False) -> K:
        """Wait for a key whose work is not running now, and mark it running: from the
        ``now`` lane first, then (unless ``now_only``) from the ``later`` lane."""
        while True:
            for lane in (self._order,) if now_only else (self._order, self._later):
                for key in lane:
                    if key not in self._running:
                        del lane[key]
                        self._started(key)
                        return key
            if self._wake.is_set():  # every getter waits on the one event: none is left out
                self._wake = anyio.Event()
            await self._wake.wait()

    def _started(self, key: K) -> None:
        self._running.add(key)
        CHANGES.bump()
        for w in self._waiters:
            if key in w.queued:
                w.queued.discard(key)
                w.running.add(key)

    def defer(self, key: K) -> None:
        """Hand back ``key``, taken by ``get`` and not worked on, to the ``later`` lane (at
        its back unless a mark put it there meanwhile): its run has not started."""
        self._running.discard(key)
        self._order.pop(key, None)
        self._later.setdefault(key, None)
        CHANGES.bump()
        for w in self._waiters:
            if key in w.running:
                w.running.discard(key)
                w.queued.add(key)
        self._wake.set()

    def done(self, key: K) -> None:
        self._running.discard(key)
        CHANGES.bump()
        for w in self._waiters:
            if key in w.running:
                w.running.discard(key)
                if not w.queued and not w.running:
                    w.finished.set()
        if self._order or self._later:
            self._wake.set()
        elif not self._running:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Wait until nothing is queued or running."""
        while not self._idle.is_set():
            await self._idle.wait()

    async def wait_runs(self, keys: Iterable[K]) -> None:
        """Wait until each of ``keys`` queued now has had a run that started after this call
        and ended. Marks meanwhile do not extend the wait: a key marked again and again (a
        transcript being written) is done once the run that took the first mark ends."""
        waiter = _RunsWaiter({k for k in keys if self.is_queued(k)})
        if not waiter.queued:
            return
        self._waiters.append(waiter)
        try:
            await waiter.finished.wait()
        finally:
            self._waiters.remove(waiter)

    def is_queued(self, key: K) -> bool:
        return key in self._order or key in self._later

    def is_running(self, key: K) -> bool:
        return key in self._running

    def statistics(self) -> QueueStats:
        queued = len(self._order) + len(self._later)
        return QueueStats(queued, len(self._running), self._marked, self._coalesced)
