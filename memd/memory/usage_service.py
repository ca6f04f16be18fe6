"""What the memory service does with the usage record (issue 36, item 2): injections as the
hook makes them, a look at a session's transcript at each of its turn ends, the record saved
as it changes, and the figures ``memdctl memories`` and ``status`` show.

:class:`UsageService` owns the :class:`~memd.memory.usage.UsageRecord`. The hook tells it
what went into a session (:meth:`~UsageService.injected`, on the event loop, never blocks:
anchored after the line the session's transcript had reached). The memory service's turn-end
signal queues the session (:meth:`~UsageService.turn_ended`); one worker takes them in turn
(a :class:`~memd.queues.CoalescingQueue`: a session queued twice is judged once) and
judges each in a worker thread (:func:`memd.memory.usage_judge.judge_session`) by the rules
of the session's agent (its room's ``usage``). The record is saved in a worker
thread: by each look, after an injection (at most every :data:`SAVE_EVERY_S`), and once more
when the task stops.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from memd.changes import CHANGES
from memd.clock import Clock
from memd.errors import MemdError
from memd.memory.location import Location
from memd.memory.paths import INDEX_FILENAME, TEAM_DIRNAME
from memd.memory.usage import USAGE_FILE, MemoryUsage, UsageRecord, as_dict
from memd.memory.usage_judge import Judged, SessionAt, judge_session
from memd.memory.usage_rank import UsageCounts
from memd.queues import CoalescingQueue
from memd.sources.registry import room_named
from memd.sources.usage import Rules
from memd.state import SessionState
from memd.transcript.view import ConversationReader

log = logging.getLogger(__name__)

SAVE_EVERY_S = 1.0
GLANCE_ENTRIES = 64
MAX_QUEUED = 1_024  # sessions waiting for a look; more are looked at with their next turn end


class UsageService:
    """See the module docstring."""

    def __init__(
        self,
        state_dir: Path,
        clock: Clock,
        conversation_of: Callable[[SessionState], Awaitable[ConversationReader]],
        session_of: Callable[[str], SessionState | None] | None = None,
    ) -> None:
        self.record = UsageRecord(state_dir / USAGE_FILE, clock.now)
        self._clock = clock
        self._conversation_of = conversation_of
        self._session_of = session_of
        self._queue: CoalescingQueue[str] = CoalescingQueue()
        self._waiting: dict[str, tuple[Location, SessionState]] = {}
        self._looks = 0
        self._unsaved = anyio.Event()  # an injection is in the record and not on disk yet
        self.last_judged: dict[str, Judged] = {}  # session -> its last look (bounded)

    # -- what the hook and the turn ends say -------------------------------------------------

    def injected(self, session: str, paths: Collection[str]) -> None:
        """``paths`` (absolute) went into ``session``'s context now (never blocks)."""
        if not session or not paths:
            return
        state = self._session_of(session) if self._session_of else None
        anchor = state.last_uuid if state is not None else ""
        agent = state.agent if state is not None else ""
        self.record.injected(session, paths, anchor=anchor or "", agent=agent)
        self._unsaved.set()

    def chained(
        self, then: Callable[[Location, SessionState], None] | None
    ) -> Callable[[Location, SessionState], None]:
        """The turn-end signal for this service, then for ``then`` (the dream's gate)."""

        def turn_ended(where: Location, state: SessionState) -> None:
            self.turn_ended(where, state)
            if then is not None:
                then(where, state)

        return turn_ended

    def turn_ended(self, where: Location, state: SessionState) -> None:
        """A turn of ``state``'s session ended: look at its transcript soon (never blocks)."""
        if where.opted_out or (
            state.session_id not in self._waiting and len(self._waiting) >= MAX_QUEUED
        ):
            return
        self._waiting[state.session_id] = (where, state)
        self._queue.mark_nowait(state.session_id)

    # -- the task ---------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """The looks and the saves, until cancelled (then a last save)."""
        try:
            async with anyio.create_task_group() as tg:
                tg.start_soon(self._run_looks, name="memory usage looks")
                tg.start_soon(self._run_saves, name="memory usage saves")
                task_status.started()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(self.record.save)

    async def wait_idle(self) -> None:
        """Wait until no look is queued or running."""
        await self._queue.wait_idle()

    async def _run_looks(self) -> None:
        while True:
            session = await self._queue.get()
            try:
                await self._look(session)
            except Exception:  # the isolation boundary of one look: the others go on
                log.exception("memory usage: the look at session %s crashed", session)
            finally:
                self._queue.done(session)

    async def _look(self, session: str) -> None:
        queued = self._waiting.pop(session, None)
        if queued is None:
            return
        where, state = queued
        if not self.record.pending(session) and not await anyio.to_thread.run_sync(
            holds_memories, where.memory_dir
        ):
            return  # nothing injected, and nothing memd's MCP tools could have served
        room = room_named(state.agent)
        rules = room.usage if room is not None else None
        if rules is None:
            log.debug("memory usage: %s says nothing of its memories' use", state.agent)
            return
        try:
            conv = await self._conversation_of(state)
        except MemdError as exc:
            log.debug("memory usage: session %s not read: %s", session, exc)
            return
        at = SessionAt(session, state.agent, state.cwd or conv.cwd or "", where.memory_dir)
        judged = await anyio.to_thread.run_sync(partial(self._judge, at, conv, rules))
        self._looks += 1
        self.last_judged[session] = judged
        while len(self.last_judged) > MAX_QUEUED:
            self.last_judged.pop(next(iter(self.last_judged)))
        CHANGES.bump()

    def _judge(self, at: SessionAt, conv: ConversationReader, rules: Rules) -> Judged:
        judged = judge_session(self.record, at, conv.messages(), rules)
        self.record.save()
        if judged.used or judged.served:
            log.info(
                "memory usage: session %s: %d served over MCP, %d used, %d waiting",
                at.session,
                judged.served,
                len(judged.used),
                judged.waiting,
            )
        return judged

    async def _run_saves(self) -> None:
        """Save the injections the hook recorded (a look saves what it changed itself)."""
        while True:
            await self._unsaved.wait()
            self._unsaved = anyio.Event()
            await anyio.to_thread.run_sync(self.record.save)
            await self._clock.sleep(SAVE_EVERY_S)

    # -- what is shown ----------------------------------------------------------------------------

    def annotate(self, rows: Iterable[dict[str, Any]]) -> None:
        """Add each row's figures (``path``: the memory's absolute path) in place."""
        rows = list(rows)
        found = self.record.rows(str(r.get("path")) for r in rows)
        for row in rows:
            usage = found.get(str(row.get("path")))
            row.update(as_dict(usage if usage is not None else MemoryUsage()))

    def counts(self, memory_dir: Path) -> UsageCounts:
        """How recall reads the use of ``memory_dir``'s memories (by relative path: used and
        ignored, for those with any)."""

        def counts(relatives: Sequence[str]) -> dict[str, tuple[int, int]]:
            rows = self.record.rows(f"{memory_dir}/{r}" for r in relatives)
            prefix = len(str(memory_dir)) + 1
            return {p[prefix:]: (r.used, r.ignored) for p, r in rows.items() if r.used or r.ignored}

        return counts

    def statistics(self) -> dict[str, Any]:
        """For ``status``: the share of injected memories used in the last day and week."""
        return {**self.record.shares(), "looks": self._looks}


def holds_memories(memory_dir: Path) -> bool:
    """Whether ``memory_dir`` holds a topic file (a glance: its first entries, no link
    followed; a folder memd cannot read holds none)."""
    try:
        with os.scandir(memory_dir) as entries:
            for number, entry in enumerate(entries):
                if entry.name.endswith(".md") and entry.name != INDEX_FILENAME:
                    return True
                if entry.name == TEAM_DIRNAME or number >= GLANCE_ENTRIES:
                    return True  # a team folder, or a big dir: look
    except OSError:
        return False
    return False
