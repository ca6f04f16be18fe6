"""Turn-end detection for memory extraction (R-M3): growth, Stop hooks and quiet timers.

On every transcript growth (:meth:`TurnEnds.notify_growth`) a grown ``turn_ends`` counts as
a turn end at once; otherwise a quiet timer is armed, and when the transcript stays quiet for
``memory.extraction_quiet_s`` after an answer with no tool calls, that counts as a turn end
too. A Stop hook (:meth:`TurnEnds.on_stop`) is a turn end in its own right (print mode
writes no ``turn_duration`` entry, FORMAT.md §13), and so is ``SessionEnd``. A Stop may
arrive before its transcript holds the answer, or before the file exists at all (a new
print-mode session's file is created ~50 ms after its Stop hook): the turn end then waits,
by watching the transcript's growth (the daemon's watcher), for the answer Claude Code sent
as ``last_assistant_message``, at most :data:`STOP_WAIT_S`; a file that never appears is
not an error (the session wrote nothing to extract). Each turn end queues the session's
project with :class:`~memd.memory.jobs.ExtractionJobs`, unless memory is off for it, or the
session's agent keeps its own memory (``extraction_off``); a Claude Code session whose auto
memory is on first waits for it (:mod:`memd.memory.beside_wait`).
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread

from memd.clock import Clock, sleep_or_wake
from memd.config import Config
from memd.errors import MemdError
from memd.memory.jobs import ExtractionJobs
from memd.memory.location import Location
from memd.state import SessionState
from memd.transcript.view import ConversationReader

if TYPE_CHECKING:
    from memd.memory.beside import Beside
    from memd.memory.beside_wait import BesideWaits

log = logging.getLogger(__name__)

STOP_WAIT_S = 10.0  # how long a Stop waits for its transcript to catch up
EARLY_STOPS_MAX = 64  # Stops of sessions not read yet, kept for their first growth
_EXPECT_CHARS = 200


@dataclass(frozen=True)
class _Watch:
    deadline: float  # monotonic
    state: SessionState
    quiet: bool  # fire only if the transcript paused after an answer
    expect: str | None = None  # a Stop: the answer the transcript must hold ("" any)
    give_up: float = 0.0  # a Stop: when to stop waiting for it


class TurnEnds:
    """Which sessions' turns ended; the quiet timers that decide it for paused transcripts."""

    def __init__(
        self,
        config: Callable[[], Config],
        clock: Clock,
        jobs: ExtractionJobs,
        conversation_of: Callable[[SessionState], Awaitable[ConversationReader]],
        *,
        disabled_reason: Callable[[], str | None],
        locate: Callable[[str], Awaitable[Location]],
        session_of: Callable[[str], SessionState | None] | None = None,
        after_turn: Callable[[Location, SessionState], None] | None = None,
        extraction_off: Callable[[SessionState], Awaitable[str | None]] | None = None,
        beside: Beside | None = None,
        waits: BesideWaits | None = None,
    ) -> None:
        """``waits``: where a session whose extraction waits for its Claude Code's own memory
        (``beside.waits_for``) waits."""
        self._beside = beside
        self._waits = waits
        self._config = config
        self._after_turn = after_turn  # the dream's gate check listens to the same signal
        self._extraction_off = extraction_off
        self._clock = clock
        self._jobs = jobs
        self._conversation_of = conversation_of
        self._disabled_reason = disabled_reason
        self._locate = locate
        self._session_of = session_of
        self._started_at = clock.now()
        self._turns_seen: dict[str, int] = {}
        self._last_trigger: dict[str, str] = {}
        self._watches: dict[str, _Watch] = {}
        self._early: dict[str, tuple[str, float]] = {}  # session id: (expect, give up)
        self._wake = anyio.Event()

    def notify_growth(self, state: SessionState) -> None:
        """A transcript grew (call on every growth; never blocks)."""
        if self._disabled_reason() or state.mtime < self._started_at:
            return
        before = self._turns_seen.get(state.session_id)
        self._turns_seen[state.session_id] = state.turn_ends
        now = self._clock.monotonic()
        early = self._early.pop(state.session_id, None)
        if early is not None and now < early[1]:  # a Stop came before the session was read
            self._watches[state.session_id] = _Watch(now, state, False, early[0], early[1])
            self._wake.set()
            return
        waiting = self._watches.get(state.session_id)
        if waiting is not None and waiting.expect is not None:  # a Stop waits for this growth
            self._watches[state.session_id] = dataclasses.replace(
                waiting, deadline=now, state=state
            )
        elif before is not None and state.turn_ends > before:
            self._watches[state.session_id] = _Watch(now, state, quiet=False)
        else:
            quiet = self._config().memory.extraction_quiet_s
            self._watches[state.session_id] = _Watch(now + quiet, state, quiet=True)
        self._wake.set()

    def on_stop(self, session_id: str, transcript_path: str, cwd: str, answer: str = "") -> bool:
        """A Stop (``answer``: its ``last_assistant_message``) or ``SessionEnd`` (``""``): the
        turn ended. Queued at once when the transcript holds it, else when it catches up.
        Never blocks; False when there is nothing to go on."""
        state = self._session_of(session_id) if self._session_of else None
        if state is None and not transcript_path and not self._disabled_reason():
            return self._stop_before_read(session_id, answer)
        if state is None:
            if not transcript_path.startswith("/") or not transcript_path.endswith(".jsonl"):
                return False
            project = os.path.basename(os.path.dirname(transcript_path))
            state = SessionState(session_id, project, transcript_path, cwd=cwd)
        elif cwd and not state.cwd:
            state = dataclasses.replace(state, cwd=cwd)
        if self._disabled_reason():
            return False
        now = self._clock.monotonic()
        expect = " ".join(answer.split())[:_EXPECT_CHARS]
        self._watches[session_id] = _Watch(now, state, False, expect, now + STOP_WAIT_S)
        self._wake.set()
        return True

    def _stop_before_read(self, session_id: str, answer: str) -> bool:
        """Another agent's Stop (no Claude Code transcript path) for a session the watcher has
        not read yet: kept for the session's first growth, at most :data:`STOP_WAIT_S`."""
        if not session_id:
            return False
        now = self._clock.monotonic()
        for sid in [s for s, (_, give_up) in self._early.items() if give_up <= now]:
            del self._early[sid]
        while len(self._early) >= EARLY_STOPS_MAX:
            del self._early[next(iter(self._early))]
        expect = " ".join(answer.split())[:_EXPECT_CHARS]
        self._early[session_id] = (expect, now + STOP_WAIT_S)
        return True

    async def on_turn_end(self, state: SessionState) -> bool:
        """Queue an extraction for the session's project; False when memory is off for it."""
        self._watches.pop(state.session_id, None)
        if self._disabled_reason():
            return False
        cwd = state.cwd or await self._cwd_from_transcript(state)
        if not cwd:
            self._jobs.note_error("", f"session {state.session_id}: no working directory known")
            return False
        try:
            where = await self._locate(cwd)
        except ValueError as exc:
            self._jobs.note_error("", f"session {state.session_id}: {exc}")
            return False
        if where.opted_out:
            return False
        off = await self._extraction_off(state) if self._extraction_off is not None else None
        if off:
            log.debug("memory: no extraction for session %s: %s", state.session_id, off)
        else:
            self._last_trigger[state.session_id] = state.last_uuid
            waits = self._waits
            if waits is not None and self._beside and await self._beside.waits_for(state):
                await waits.begin(where, state, cwd)  # Claude Code's own memory first
            else:
                await self._jobs.enqueue(where, state, cwd)
        if self._after_turn is not None:
            self._after_turn(where, state)  # the dream's gate: a turn ended either way
        return not off

    async def _cwd_from_transcript(self, state: SessionState) -> str:
        try:
            conv = await self._conversation_of(state)
        except MemdError:
            return ""
        return conv.cwd or ""

    async def resume_pending(self) -> None:
        """Treat each session the cursors mark pending as a turn end (call once, at start)."""
        store = await self._jobs.cursors()
        for record in store.pending():
            state = self._session_of(record.session_id) if self._session_of else None
            if state is None:
                state = SessionState(record.session_id, record.project, record.path, cwd=record.cwd)
            log.info("memory: resuming the extraction of session %s", record.session_id)
            await self.on_turn_end(
                state if state.cwd else dataclasses.replace(state, cwd=record.cwd)
            )

    async def run_timers(self) -> None:
        """Fire the quiet timers as they come due, until cancelled."""
        while True:
            self._wake = anyio.Event()  # before looking, so no growth after it goes unseen
            now = self._clock.monotonic()
            due = [s for s, w in self._watches.items() if w.deadline <= now]
            for session_id in due:
                watch = self._watches.get(session_id)
                if watch is not None and watch.deadline <= now:  # not replaced while firing
                    del self._watches[session_id]
                    await self._fire(watch)
            if due:
                continue
            if not self._watches:
                await self._wake.wait()
                continue
            left = min(w.deadline for w in self._watches.values()) - now
            await sleep_or_wake(self._clock, left, self._wake)

    async def _fire(self, watch: _Watch) -> None:
        try:
            if watch.expect is not None and not await self._caught_up(watch):
                return
            if watch.quiet and not await self._paused(watch.state):
                return
            await self.on_turn_end(watch.state)
        except Exception:  # one session's trouble must not stop the timers of the others
            log.exception("memory: handling the turn end of %s failed", watch.state.session_id)

    async def _caught_up(self, watch: _Watch) -> bool:
        """Whether a Stop's transcript holds its answer; if not, wait for the next growth
        (until ``give_up``: then go ahead if the file exists, drop it if not)."""
        late = self._clock.monotonic() >= watch.give_up
        if not await anyio.to_thread.run_sync(os.path.exists, watch.state.path):
            if late:
                log.info(
                    "memory: session %s has no transcript; no turn end", watch.state.session_id
                )
                return False
            self._park(watch)
            return False
        if late or not watch.expect:
            return True
        try:
            conv = await self._conversation_of(watch.state)
        except MemdError:
            self._park(watch)
            return False
        answers = [m for m in conv.messages() if m.role == "assistant"]
        text = " ".join(
            " ".join(str(b.get("text") or "").split())
            for b in (answers[-1].content if answers else [])
            if b.get("type") == "text"
        )
        if watch.expect in text:
            return True
        self._park(watch)
        return False

    def _park(self, watch: _Watch) -> None:
        if watch.state.session_id not in self._watches:  # no newer signal replaced it
            self._watches[watch.state.session_id] = dataclasses.replace(
                watch, deadline=watch.give_up
            )

    async def _paused(self, state: SessionState) -> bool:
        """The transcript ends with an answer that calls no tool, not seen as a turn end yet."""
        conv = await self._conversation_of(state)
        messages = conv.messages()
        if not messages or messages[-1].role != "assistant" or conv.last_assistant_has_tool_calls:
            return False
        return self._last_trigger.get(state.session_id) != conv.last_uuid

    def quiet_timers(self) -> int:
        """How many sessions have a timer armed."""
        return len(self._watches)
