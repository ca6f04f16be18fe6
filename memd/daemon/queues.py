"""Coalescing work queues.

A key marked while it is already queued is queued once; a key marked while its work is running
is queued again once, after the run. That is the "triggers coalesce into one follow-up run"
rule (R-S6, R-M3) and it bounds the queue by the number of distinct keys.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio

K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class QueueStats:
    queued: int
    running: int
    marked_total: int
    coalesced_total: int


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
                    return key
            self._wake = anyio.Event()
            await self._wake.wait()

    def done(self, key: K) -> None:
        self._running.discard(key)
        if self._order:
            self._wake.set()
        elif not self._running:
            self._idle.set()

    async def wait_idle(self) -> None:
        """Wait until nothing is queued or running."""
        while not self._idle.is_set():
            await self._idle.wait()

    def is_queued(self, key: K) -> bool:
        return key in self._order

    def is_running(self, key: K) -> bool:
        return key in self._running

    def statistics(self) -> QueueStats:
        return QueueStats(len(self._order), len(self._running), self._marked, self._coalesced)
