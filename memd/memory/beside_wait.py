"""Extraction beside Claude Code's own auto memory: one memory, not two (issue 36, item 4).

When a Claude Code session's auto memory is on, Claude Code may write memories of a turn
itself, after the turn ends (its own extraction, in the background), into the same memory
dir memd writes. memd extracts from such a session too (``memory.extract_beside_claude_code``,
on by default), but only the turns Claude Code's memory did not take, judged on the memory
dir: at the turn end :class:`BesideWaits` notes every memory file's identity, waits up to
``memory.beside_wait_s`` for Claude Code to write (at once when the session ended: nothing
more comes from it), then looks again. A memory file added or changed meanwhile by anyone
but memd (:func:`written_since`; memd's own extraction runs say what they wrote) means
Claude Code's memory took the turn: the turn is skipped (its messages are covered, never
extracted later). Otherwise memd extracts as for any agent, its model shown the memories
already there. A turn whose agent wrote into the memory dir with its own tools is skipped
anyway (:func:`memd.memory.plan.memory_write`).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import anyio
import anyio.to_thread

from memd.clock import Clock, sleep_or_wake
from memd.memory.location import Location
from memd.memory.scan import is_topic, opened_area
from memd.state import SessionState

log = logging.getLogger(__name__)

Snapshot = dict[str, tuple[int, int, int]]  # relative path -> (inode, size, mtime_ns)
MAX_FILES = 10_000  # memory files one snapshot notes
MAX_WAITING = 1_024  # sessions waiting at once (the oldest judged first when more come)
MAX_ENDED = 1_024


def snapshot(memory_dir: Path) -> Snapshot:
    """Every memory file of ``memory_dir`` and its identity (blocking; links not followed,
    ``{}`` when the dir is not there)."""
    found: Snapshot = {}
    with opened_area(memory_dir) as area:
        if area is None:
            return found
        for entry in area.walk():
            if is_topic(entry.relative):
                info = entry.info
                found[entry.relative] = (info.st_ino, info.st_size, info.st_mtime_ns)
                if len(found) >= MAX_FILES:
                    break
    return found


def written_since(before: Snapshot, after: Snapshot, ours: Mapping[str, int]) -> list[str]:
    """The memory files added or changed from ``before`` to ``after`` that memd did not write
    (``ours``: relative path -> the mtime memd left it with), sorted."""
    return sorted(
        relative
        for relative, identity in after.items()
        if before.get(relative) != identity and ours.get(relative) != identity[2]
    )


@dataclass
class _Waiting:
    deadline: float  # monotonic
    where: Location
    state: SessionState
    cwd: str
    before: Snapshot


Enqueue = Callable[[Location, SessionState, str, str | None], Awaitable[None]]


class BesideWaits:
    """The turns of Claude Code sessions waiting for its own memory (see the module doc).
    ``enqueue(where, state, cwd, taken)`` queues the extraction (``taken``: why Claude Code's
    memory took the turn, then skipped); ``ours(memory_dir)`` what memd wrote there;
    ``pending(where, state, cwd)`` marks the session pending on disk while it waits."""

    def __init__(
        self,
        clock: Clock,
        wait_s: Callable[[], float],
        enqueue: Enqueue,
        ours: Callable[[Path], Mapping[str, int]],
        pending: Callable[[Location, SessionState, str], Awaitable[None]] | None = None,
    ) -> None:
        self._pending = pending
        self._clock = clock
        self._wait_s = wait_s
        self._enqueue = enqueue
        self._ours = ours
        self._waiting: OrderedDict[str, _Waiting] = OrderedDict()
        self._ended: OrderedDict[str, None] = OrderedDict()
        self._wake = anyio.Event()

    async def begin(self, where: Location, state: SessionState, cwd: str) -> None:
        """A turn of ``state`` ended: note the memory dir, judge it after the wait (a turn
        end while one waits keeps the first look and its deadline, with the newest state)."""
        waiting = self._waiting.get(state.session_id)
        if waiting is not None:
            waiting.state, waiting.cwd = state, cwd
            return
        if self._pending is not None:  # a stop while it waits: taken up again at the start
            await self._pending(where, state, cwd)
        before = await anyio.to_thread.run_sync(snapshot, where.memory_dir)
        ended = state.session_id in self._ended
        deadline = self._clock.monotonic() + (0.0 if ended else max(0.0, self._wait_s()))
        self._waiting[state.session_id] = _Waiting(deadline, where, state, cwd, before)
        if len(self._waiting) > MAX_WAITING:  # the oldest is judged now
            self._waiting[next(iter(self._waiting))].deadline = 0.0
        self._wake.set()

    def ended(self, session_id: str) -> None:
        """The session ended (its ``SessionEnd``): what waits for it is judged now."""
        self._ended[session_id] = None
        while len(self._ended) > MAX_ENDED:
            self._ended.popitem(last=False)
        waiting = self._waiting.get(session_id)
        if waiting is not None:
            waiting.deadline = 0.0
        self._wake.set()

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    async def run(self) -> None:
        """Judge the turns as their waits end, until cancelled."""
        while True:
            self._wake = anyio.Event()
            now = self._clock.monotonic()
            due = [sid for sid, w in self._waiting.items() if w.deadline <= now]
            for session_id in due:
                waiting = self._waiting.pop(session_id)
                try:
                    await self._judge(waiting)
                except Exception:  # one session's look; the others still get theirs
                    log.exception("memory: judging session %s beside Claude Code", session_id)
            if due:
                continue
            if not self._waiting:
                await self._wake.wait()
                continue
            left = min(w.deadline for w in self._waiting.values()) - now
            await sleep_or_wake(self._clock, max(0.0, left), self._wake)

    async def _judge(self, waiting: _Waiting) -> None:
        memory_dir = waiting.where.memory_dir
        after = await anyio.to_thread.run_sync(snapshot, memory_dir)
        wrote = written_since(waiting.before, after, self._ours(memory_dir))
        taken = None
        if wrote:
            names = ", ".join(wrote[:3]) + (f" and {len(wrote) - 3} more" if len(wrote) > 3 else "")
            taken = f"Claude Code's auto memory wrote {names} after the turn"
            log.info("memory: session %s: %s: left to it", waiting.state.session_id, taken)
        await self._enqueue(waiting.where, waiting.state, waiting.cwd, taken)
