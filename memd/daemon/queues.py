"""Coalescing work queues.

A key marked while it is already queued is queued once; a key marked while its work is running
is queued again once, after the run. That is the "triggers coalesce into one follow-up run"
rule (R-S6, R-M3) and it bounds the queue by the number of distinct keys.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio

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
        self._order: dict[K, None] = {}  # insertion-ordered set
        self._running: set[K] = set()
        self._wake = anyio.Event()
        self._idle = anyio.Event()
        self._idle.set()
        self._marked = 0
        self._coalesced = 0
        self._waiters: list[_RunsWaiter[K]] = []

    def mark_nowait(self, key: K) -> None:
        self._marked += 1
        if key in self._order:
            self._coalesced += 1
            return
        self._order[key] = None
        self._wake.set()
        if self._idle.is_set():
            self._idle = anyio.Event()

    async def get(self) -> K:
        """Wait for a key whose work is not running now, and mark it running."""
        while True:
            for key in self._order:
                if key not in self._running:
                    del self._order[key]
                    self._running.add(key)
                    for w in self._waiters:
                        if key in w.queued:
                            w.queued.discard(key)
                            w.running.add(key)
                    return key
            self._wake = anyio.Event()
            await self._wake.wait()

    def done(self, key: K) -> None:
        self._running.discard(key)
        for w in self._waiters:
            if key in w.running:
                w.running.discard(key)
                if not w.queued and not w.running:
                    w.finished.set()
        if self._order:
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
        waiter = _RunsWaiter({k for k in keys if k in self._order})
        if not waiter.queued:
            return
        self._waiters.append(waiter)
        try:
            await waiter.finished.wait()
        finally:
            self._waiters.remove(waiter)

    def is_queued(self, key: K) -> bool:
        return key in self._order

    def is_running(self, key: K) -> bool:
        return key in self._running

    def statistics(self) -> QueueStats:
        return QueueStats(len(self._order), len(self._running), self._marked, self._coalesced)
