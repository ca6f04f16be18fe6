"""One writer per memory dir inside this daemon: memory extraction or a dream, never both.

Memory extraction holds a memory dir's turn while it runs (:meth:`DirExclusion.hold`); a
dream holds it from before it takes the consolidation lock until it has settled. A writer
that finds the dir taken waits (its work is kept, never dropped). Keys are the memory dir
paths as :func:`memd.memory.location.locate` computes them.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import anyio


class DirExclusion:
    def __init__(self) -> None:
        self._locks: dict[str, anyio.Lock] = {}
        self._holders: dict[str, str] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: str, who: str) -> AsyncIterator[None]:
        """Hold ``key`` for ``who`` ("dream", "memory extraction") for the block."""
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:
            self._holders[key] = who
            try:
                yield
            finally:
                self._holders.pop(key, None)

    def holder(self, key: str) -> str | None:
        """Who holds ``key`` now, if anyone."""
        return self._holders.get(key)
