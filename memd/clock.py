"""Time as a seam: the real clock for the daemon, a fake one for tests.

Everything that schedules by time (the cost guard's budget windows and backoff, the ledger's
timestamps, agent run records) takes a :class:`Clock` instead of calling :mod:`time` so tests
can move an hour forward in a microsecond.

``now()`` is wall time (seconds since the epoch): it is persisted and shown to users.
``monotonic()`` never goes backwards: use it for durations. :class:`FakeClock` advances both
together, so ``until - now()`` is a valid sleep duration on either clock.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Protocol

import anyio
import anyio.lowlevel


def iso_utc(ts: float) -> str:
    """UTC ISO time of a timestamp, to the second; "" for none or one no calendar holds (a
    planted mtime).

    Remembered by the second (``status`` and ``sessions`` format one per row, up to 10,000
    for a long history, and most rows keep their time between calls)."""
    if not ts:
        return ""
    try:
        second = math.floor(ts)
    except (OverflowError, ValueError):
        return ""
    text = _ISO_SECONDS.get(second)
    if text is None:
        try:
            text = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(second))
        except (OverflowError, OSError, ValueError):
            text = ""
        if len(_ISO_SECONDS) >= _ISO_KEEP:
            _ISO_SECONDS.clear()
        _ISO_SECONDS[second] = text
    return text


_ISO_KEEP = 16_384
_ISO_SECONDS: dict[int, str] = {}


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds since the epoch."""
        ...

    def monotonic(self) -> float:
        """Seconds from an arbitrary origin; never decreases."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Return after ``seconds`` of this clock's time (at once when ``seconds <= 0``)."""
        ...


async def sleep_or_wake(clock: Clock, seconds: float, wake: anyio.Event) -> None:
    """Sleep ``seconds`` of ``clock``'s time, or less when ``wake`` is set meanwhile."""
    async with anyio.create_task_group() as tg:

        async def sleeper() -> None:
            await clock.sleep(seconds)
            tg.cancel_scope.cancel()

        async def watcher() -> None:
            await wake.wait()
            tg.cancel_scope.cancel()

        tg.start_soon(sleeper)
        tg.start_soon(watcher)


class SystemClock:
    """The real clock."""

    def now(self) -> float:
        return time.time()

    def monotonic(self) -> float:
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        await anyio.sleep(max(0.0, seconds))


@dataclass(eq=False)
class _Sleeper:
    deadline: float  # on the monotonic scale
    order: int
    event: anyio.Event = field(default_factory=anyio.Event)


class FakeClock:
    """A clock that moves only when a test says so.

    ``advance`` wakes every sleeper whose deadline has been reached, in deadline order. Tests
    that drive a scheduler wait for it to go to sleep with :meth:`wait_for_sleepers` and then
    jump to the next deadline with :meth:`advance_to_next`, so no real time passes and the
    interleaving is the same on every run.
    """

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._wall_origin = start
        self._elapsed = 0.0
        self._sleepers: list[_Sleeper] = []
        self._count = 0
        self._changed: anyio.Event | None = None

    def now(self) -> float:
        return self._wall_origin + self._elapsed

    def monotonic(self) -> float:
        return self._elapsed

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await anyio.lowlevel.checkpoint()
            return
        self._count += 1
        sleeper = _Sleeper(self._elapsed + seconds, self._count)
        self._sleepers.append(sleeper)
        self._notify()
        try:
            await sleeper.event.wait()
        finally:
            if sleeper in self._sleepers:  # cancelled before its deadline
                self._sleepers.remove(sleeper)
                self._notify()

    @property
    def sleepers(self) -> int:
        """How many tasks are sleeping on this clock now."""
        return len(self._sleepers)

    def next_deadline(self) -> float | None:
        """Wall time at which the earliest sleeper wakes, or None when nobody sleeps."""
        if not self._sleepers:
            return None
        return self._wall_origin + min(s.deadline for s in self._sleepers)

    def advance(self, seconds: float) -> None:
        """Move time forward and wake every sleeper whose deadline has come."""
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        self._elapsed += seconds
        due = sorted(
            (s for s in self._sleepers if s.deadline <= self._elapsed),
            key=lambda s: (s.deadline, s.order),
        )
        for sleeper in due:
            self._sleepers.remove(sleeper)
            sleeper.event.set()
        if due:
            self._notify()

    def advance_to_next(self) -> bool:
        """Jump to the earliest sleeper's deadline and wake it; False when nobody sleeps."""
        deadline = self.next_deadline()
        if deadline is None:
            return False
        self.advance(max(0.0, deadline - self.now()))
        return True

    async def wait_for_sleepers(self, count: int = 1) -> None:
        """Return once at least ``count`` tasks sleep on this clock."""
        while len(self._sleepers) < count:
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()
            self._changed = None
