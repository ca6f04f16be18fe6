"""The per-project memory-extraction worker (R-M3).

Extraction runs once per project at a time (a :class:`CoalescingQueue` keyed by memory
dir): the sessions of a project whose turns ended are handled one after the other, each
through the cost guard. A failure keeps the session pending: a retryable one is queued
again (the guard sleeps through the backoff); a parked one (a prompt-too-long, any 4xx that
is not a rate limit) runs at the first turn end after its back-off, with less input after a
prompt-too-long (R-B1).
Pending sessions are persisted with their cursors, so a restart resumes them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, assert_never

import anyio
import anyio.to_thread

from memd.changes import Counted
from memd.clock import Clock
from memd.config import Config
from memd.errors import MemdError, NotFound, PromptTooLong
from memd.llm.client import Disabled
from memd.llm.guard import CostGuard, Parked, Retry, describe, shrink_input
from memd.llm.ledger import Ledger, billed_tokens
from memd.llm.models import Models, Route, job_route
from memd.memory.cursors import CursorStore, SessionCursor
from memd.memory.extract import ExtractSettings, extract_memories, in_memory_dir, take_snapshot
from memd.memory.frontmatter import FrontmatterForm
from memd.memory.location import Location
from memd.memory.plan import Job, Skip, plan_extraction
from memd.memory.propose import Propose, take_back
from memd.queues import CoalescingQueue
from memd.state import SessionState
from memd.transcript.view import ConversationReader

log = logging.getLogger(__name__)

MAX_OURS = 1_000  # files per memory dir whose last write memd remembers as its own

# Holds a memory dir against other writers in this daemon (a dream): (key, who) -> context.
DirHold = Callable[[str, str], contextlib.AbstractAsyncContextManager[None]]


@dataclass(frozen=True)
class ProjectRun:
    at: float
    outcome: str  # "extracted", "skipped", "failed", "parked"
    session: str
    detail: str
    files: tuple[str, ...] = ()
    tokens: int = 0
    duration_s: float = 0.0


@dataclass
class _Project(Counted):
    where: Location
    sessions: dict[str, SessionState] = field(default_factory=dict)  # turn ended, not handled
    phase: str = "idle"  # "waiting" (cost guard), "running"
    waiting_reason: str | None = None
    last_run: ProjectRun | None = None


@dataclass(frozen=True)
class ExtractionStats:
    """The workers' part of ``memdctl status``."""

    queued: int
    running: int
    waiting: int
    pending_sessions: int
    runs: dict[str, int]
    last_error: dict[str, Any] | None
    projects: dict[str, dict[str, Any]]


class ExtractionJobs:
    """The projects whose turns ended, their queue, and the workers that drain it."""

    def __init__(
        self,
        state_dir: Path,
        config: Callable[[], Config],
        clock: Clock,
        ledger: Ledger,
        guard: CostGuard,
        get_llm: Callable[[], Models | None],
        conversation_of: Callable[[SessionState], Awaitable[ConversationReader]],
        *,
        hold_dir: DirHold | None = None,
        form_for: Callable[[SessionState], Awaitable[FrontmatterForm]] | None = None,
        cite_files: Callable[[str, Path, Sequence[str]], tuple[str, ...]] | None = None,
        propose_for: Callable[[SessionState], Propose | None] | None = None,
    ) -> None:
        """``form_for``: where the type goes in the files of a session's run (its Claude
        Code's form; none: ``metadata``). ``cite_files``: records what the files a kept run
        wrote cite (issue 26): (cwd, memory dir, files). ``propose_for``: where a session's
        new memories go as a proposal instead of being written (its agent's review inbox,
        when the user asked: :mod:`memd.memory.propose`); none: written."""
        self.state_dir = state_dir
        self._hold_dir = hold_dir
        self._config = config  # read per run: a running extraction finishes with the old one
        self._clock = clock
        self._ledger = ledger
        self._guard = guard
        self._get_llm = get_llm
        self._conversation_of = conversation_of
        self._queue: CoalescingQueue[str] = CoalescingQueue()
        self._projects: dict[str, _Project] = {}
        self._store: CursorStore | None = None
        self._store_lock = anyio.Lock()
        self._last_error: dict[str, Any] | None = None
        self._runs: Counter[str] = Counter()
        self._form_for = form_for
        self._cite_files = cite_files
        self._propose_for = propose_for
        # After a prompt-too-long, per (memory dir, session): the most tokens of new
        # conversation one run may send (R-B1); kept while the daemon runs.
        self._input_caps: dict[tuple[str, str], int] = {}
        self._taken: dict[str, str] = {}  # session id -> why its next run skips
        self._ours: dict[str, dict[str, int]] = {}  # memory dir -> file -> mtime memd left

    async def enqueue(
        self, where: Location, state: SessionState, cwd: str, taken: str | None = None
    ) -> None:
        """Queue an extraction for the session's project, marking the session pending on disk;
        ``taken``: why the session's next run skips its new turns instead (its agent's own
        memory took them: :mod:`memd.memory.beside_wait`)."""
        key = str(where.memory_dir)
        project = self._projects.setdefault(key, _Project(where))
        project.sessions[state.session_id] = state
        if taken:  # until a run takes it: a later turn end must not undo it
            self._taken[state.session_id] = taken
            while len(self._taken) > MAX_OURS:
                self._taken.pop(next(iter(self._taken)))
        store = await self.cursors()
        await store.update(_cursor_for(state, cwd, key), pending=True, updated_at=self._clock.now())
        self._queue.mark_nowait(key)

    async def mark_pending(self, where: Location, state: SessionState, cwd: str) -> None:
        """Mark the session pending on disk without queueing it (its turn waits: a restart
        meanwhile takes it up again, :meth:`TurnEnds.resume_pending`)."""
        store = await self.cursors()
        cursor = _cursor_for(state, cwd, str(where.memory_dir))
        await store.update(cursor, pending=True, updated_at=self._clock.now())

    def llm_changed(self) -> None:
        """The model client became available (or changed): run what waited for it."""
        for key, project in self._projects.items():
            if project.sessions:
                self._queue.mark_nowait(key)

    async def wait_idle(self) -> None:
        """Wait until no extraction is queued or running."""
        await self._queue.wait_idle()

    async def cursors(self) -> CursorStore:
        """The sessions' cursors, read from the state dir on first use."""
        async with self._store_lock:
            if self._store is None:
                self._store = await anyio.to_thread.run_sync(CursorStore.load, self.state_dir)
            return self._store

    async def run_worker(self) -> None:
        """Extract the projects the queue hands out, one at a time, until cancelled."""
        while True:
            key = await self._queue.get()
            try:
                if self._hold_dir is None:
                    await self._run_project(key)
                else:
                    await self._run_held(key, self._hold_dir)
            except Exception as exc:  # the isolation boundary: the queue goes on
                log.exception("memory extraction for %s crashed", key)
                self.note_error(key, describe(exc))
            finally:
                self._queue.done(key)

    async def _run_held(self, key: str, hold_dir: DirHold) -> None:
        """Run the project's extraction while no dream runs on its memory dir (it waits)."""
        project = self._projects.get(key)
        if project is not None and project.sessions:
            project.phase, project.waiting_reason = "waiting", "a dream is running there"
        async with hold_dir(key, "memory extraction"):
            await self._run_project(key)

    async def _run_project(self, key: str) -> None:
        project = self._projects.get(key)
        if project is None or not project.sessions:
            return
        llm = job_route(self._get_llm(), "memory_extract")
        if llm is None or isinstance(llm, Disabled):
            project.waiting_reason = "the model client is loading" if llm is None else llm.reason
            return  # kept pending; llm_changed() queues it again
        project.phase, project.waiting_reason = "waiting", "cost guard"
        pending = ",".join(
            sorted(f"{s.session_id}:{s.last_uuid}" for s in project.sessions.values())
        )
        decision = await self._guard.wait_until_allowed(
            "memory_extract", subject=key, input_key=pending
        )
        if isinstance(decision, Parked):
            after = "" if decision.until is None else f", not before {_utc(decision.until)}"
            why = f"parked: {decision.error} ({decision.reason}; runs at a turn end{after})"
            project.phase, project.waiting_reason = "idle", why
            project.last_run = ProjectRun(self._clock.now(), "parked", "", decision.error)
            return
        project.phase, project.waiting_reason = "running", None
        try:
            for session_id in list(project.sessions):
                state = project.sessions.pop(session_id, None)
                if state is not None and not await self._run_session(key, project, state, llm):
                    project.sessions.setdefault(session_id, state)
                    break
        finally:
            project.phase = "idle"

    async def _run_session(
        self, key: str, project: _Project, state: SessionState, llm: Route
    ) -> bool:
        """One session's extraction; False when it failed and must be tried again."""
        began = self._clock.monotonic()
        store = await self.cursors()
        default = _cursor_for(state, state.cwd, key)
        cursor = (store.get(state.session_id) or default).cursor
        try:
            conv = await self._conversation_of(state)
            plan = plan_extraction(conv.messages(), cursor, project.where.aliases)
            taken = self._taken.pop(state.session_id, None)
            if taken and isinstance(plan, Job):
                plan = Skip(taken, plan.covered_uuid)
            match plan:
                case Skip(reason=reason, covered_uuid=covered):
                    run = ProjectRun(self._clock.now(), "skipped", state.session_id, reason)
                    covered = covered or cursor
                case Job(covered_uuid=covered):
                    run = await self._extract(llm, key, project, state, plan)
                case unreachable:
                    assert_never(unreachable)
        except NotFound as exc:  # the transcript is gone: nothing left to extract
            await self._covered(store, default, project, cursor)
            self.note_error(key, f"session {state.session_id}: {exc}")
            return True
        except Exception as exc:  # the isolation boundary of one background job
            if not isinstance(exc, MemdError):
                log.exception("memory extraction for %s crashed", key)
            return self._failed(key, project, state, exc)
        self._runs[run.outcome] += 1
        await self._covered(store, default, project, covered)
        project.last_run = dataclasses.replace(run, duration_s=self._clock.monotonic() - began)
        return True

    async def _extract(
        self, route: Route, key: str, project: _Project, state: SessionState, job: Job
    ) -> ProjectRun:
        config = self._config()
        turns = config.memory.extraction_max_turns
        settings = ExtractSettings(
            model=route.model,
            max_turns=turns,
            max_tokens=config.llm.max_output_tokens,
            timeout_s=config.llm.timeout_s * max(1, turns),
            index_max_lines=config.memory.index_max_lines,
            index_max_bytes=config.memory.index_max_bytes,
            scan_max_files=config.memory.scan_max_files,
            redact_secrets=config.privacy.redact_secrets,
            frontmatter_form=await self._form_for(state) if self._form_for else "metadata",
        )
        where = project.where.memory_dir
        propose = self._propose_for(state) if self._propose_for is not None else None
        before = await anyio.to_thread.run_sync(take_snapshot, where) if propose else None
        result = await extract_memories(
            route.llm,
            settings,
            job,
            memory_dir=project.where.memory_dir,
            project=project.where.memory_dir.parent.name,
            session=state.session_id,
            ledger=self._ledger,
            clock=self._clock,
            input_cap=self._input_caps.get((key, state.session_id)),
            protocol=route.protocol,
        )
        self._guard.record_success("memory_extract", subject=key)
        if propose is not None and before is not None:  # nothing written: proposed
            back = (where, before, result.files_touched, propose, state.cwd)
            said = await anyio.to_thread.run_sync(take_back, *back)
            result = dataclasses.replace(result, files_touched=(), summary=said)
        await self._cite(where, state.cwd, result.files_touched)
        await anyio.to_thread.run_sync(self._note_ours, where, result.files_touched)
        tokens = billed_tokens(result.usage)
        log.info(
            "memory extraction for %s (session %s): %s, %d turns, %d files, %d billed tokens",
            key,
            state.session_id,
            result.outcome,
            result.turns,
            len(result.files_touched),
            tokens,
        )
        detail = f"{result.outcome}: {result.summary}" if result.summary else result.outcome
        if result.denied_calls:  # a wrong tool, a path outside the memory dir: refused
            detail += f" ({result.denied_calls} tool call(s) refused)"
        return ProjectRun(
            self._clock.now(), "extracted", state.session_id, detail, result.files_touched, tokens
        )

    def _note_ours(self, memory_dir: Path, touched: Sequence[str]) -> None:
        """What this run wrote, as it left it: not another writer's (blocking)."""
        ours = self._ours.setdefault(str(memory_dir), {})
        for relative in (r for r in (in_memory_dir(memory_dir, p) for p in touched) if r):
            try:
                ours[relative] = os.stat(memory_dir / relative, follow_symlinks=False).st_mtime_ns
            except OSError:
                ours.pop(relative, None)
        while len(ours) > MAX_OURS:
            ours.pop(next(iter(ours)))

    def ours(self, memory_dir: Path) -> dict[str, int]:
        """The files memd's runs wrote in ``memory_dir``, with the mtime they left."""
        return dict(self._ours.get(str(memory_dir), {}))

    async def _cite(self, memory_dir: Path, cwd: str, touched: Sequence[str]) -> None:
        """Record the citations of the memories a kept run wrote (never raises)."""
        relatives = [r for r in (in_memory_dir(memory_dir, p) for p in touched) if r]
        if self._cite_files is None or not relatives:
            return
        try:
            await anyio.to_thread.run_sync(self._cite_files, cwd, memory_dir, relatives)
        except Exception:  # a citation is a hint: the run's memories are kept without one
            log.exception("recording the citations of %s crashed", memory_dir)

    async def _covered(
        self, store: CursorStore, default: SessionCursor, project: _Project, cursor: str | None
    ) -> None:
        still = default.session_id in project.sessions  # a newer turn end arrived meanwhile
        await store.update(default, cursor=cursor, pending=still, updated_at=self._clock.now())

    def _failed(self, key: str, project: _Project, state: SessionState, exc: Exception) -> bool:
        if isinstance(exc, PromptTooLong) and exc.sent is not None:
            self._input_caps[(key, state.session_id)] = shrink_input(exc.sent, exc.gap)
        verdict = self._guard.record_failure(
            "memory_extract", exc, subject=key, input_key=state.last_uuid
        )
        self._runs["failed"] += 1
        message = describe(exc)
        project.last_run = ProjectRun(self._clock.now(), "failed", state.session_id, message)
        self.note_error(key, f"session {state.session_id}: {message}")
        log.warning("memory extraction for %s failed: %s", key, message)
        if isinstance(verdict, Retry):
            self._queue.mark_nowait(key)  # runs again after the guard's backoff
        return False

    def note_error(self, key: str, message: str) -> None:
        """Remember ``message`` as the last error, for ``memdctl status``."""
        self._last_error = {"at": self._clock.now(), "project": key, "message": message}

    def statistics(self) -> ExtractionStats:
        """A snapshot of the queue, the projects and the runs so far."""
        queue = self._queue.statistics()
        return ExtractionStats(
            queued=queue.queued,
            running=sum(p.phase == "running" for p in self._projects.values()),
            waiting=sum(p.phase == "waiting" for p in self._projects.values()),
            pending_sessions=sum(len(p.sessions) for p in self._projects.values()),
            runs=dict(self._runs),
            last_error=self._last_error,
            projects={key: _project_row(p) for key, p in self._projects.items()},
        )


def _utc(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _cursor_for(state: SessionState, cwd: str, memory_dir: str) -> SessionCursor:
    return SessionCursor(state.session_id, state.project, state.path, cwd, memory_dir)


def _project_row(project: _Project) -> dict[str, Any]:
    last = project.last_run
    return {
        "phase": project.phase,
        "waiting_reason": project.waiting_reason,
        "pending_sessions": sorted(project.sessions),
        "last_run": dataclasses.asdict(last) if last is not None else None,
    }
