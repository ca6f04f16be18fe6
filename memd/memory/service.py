"""The memory service: index, manifest and recall for clients; background extraction.

What the daemon calls (every method returns plain msgpack-able data):

* :meth:`MemoryService.index` — a project's ``MEMORY.md`` cut to the configured lines and
  bytes, with the notice when cut (R-M2);
* :meth:`MemoryService.memories` — the manifest rows of a project's memory dir (R-M5);
* :meth:`MemoryService.recall` — :func:`memd.memory.recall.recall` with the session's
  already-surfaced memories left out; :meth:`mark_surfaced` records what a hook injected;
* :meth:`MemoryService.notify_growth` — on every transcript growth: a grown ``turn_ends``
  counts as a turn end at once; otherwise a quiet timer is armed, and when the transcript
  stays quiet for ``memory.extraction_quiet_s`` after an answer with no tool calls, that
  counts as a turn end too; :meth:`on_turn_end` / :meth:`on_stop` take the other signals;
* :meth:`MemoryService.run` — the task: the quiet timers and the extraction workers.

Extraction runs once per project at a time (a :class:`CoalescingQueue` keyed by memory
dir): the sessions of a project whose turns ended are handled one after the other, each
through the cost guard. A failure keeps the session pending: a retryable one is queued
again (the guard sleeps through the backoff), a parked one waits for the next turn end.
Pending sessions are persisted with their cursors, so a restart resumes them.

Per-project opt-out (``privacy.ignore_projects`` globs, a ``.memd-ignore`` file in the
project root) and ``memory.auto_memory: false`` turn everything off: no index, no recall,
no extraction.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, assert_never

import anyio
import anyio.abc
import anyio.to_thread

from memd.clock import Clock
from memd.config import Config
from memd.daemon.queues import CoalescingQueue
from memd.errors import MemdError, NotFound
from memd.llm.client import LLM, Disabled
from memd.llm.guard import CostGuard, Parked, Retry, describe
from memd.llm.ledger import Ledger, billed_tokens
from memd.memory.extract import (
    CursorStore,
    ExtractSettings,
    Job,
    SessionCursor,
    Skip,
    extract_memories,
    plan_extraction,
)
from memd.memory.freshness import RECALL_CAVEAT, age_text, freshness_warning
from memd.memory.index import load_index
from memd.memory.paths import MEMORY_DIRNAME, check_opt_out, match_ignore_globs, memory_dir
from memd.memory.recall import recall
from memd.memory.scan import iso_mtime, manifest_line, scan_memories
from memd.memory.store import MemoryStore
from memd.privacy import scrub_text
from memd.state import SessionState
from memd.transcript.conversation import Conversation

log = logging.getLogger(__name__)

MAX_SURFACED_SESSIONS = 1_024
TOOL_WINDOW = 6  # assistant messages whose tool calls count as "in active use"


@dataclass(frozen=True)
class Location:
    memory_dir: Path
    aliases: tuple[str, ...]  # the dir as computed and resolved, for write detection
    opted_out: str | None


def locate(projects_root: Path, cwd: str, globs: Sequence[str], home: str | None) -> Location:
    """Where a session in ``cwd`` keeps its memories, and whether it opted out (blocking)."""
    if not os.path.isabs(cwd):
        raise ValueError(f"cwd must be an absolute path, got {cwd!r}")
    directory = memory_dir(projects_root, Path(cwd))
    aliases = tuple(dict.fromkeys((str(directory), os.path.realpath(directory))))
    opted = check_opt_out(Path(cwd), globs, home=home)
    return Location(directory, aliases, opted.reason if opted else None)


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
class _Project:
    where: Location
    sessions: dict[str, SessionState] = field(default_factory=dict)  # turn ended, not handled
    phase: str = "idle"  # "waiting" (cost guard), "running"
    waiting_reason: str | None = None
    last_run: ProjectRun | None = None


@dataclass(frozen=True)
class _Watch:
    deadline: float  # monotonic
    state: SessionState
    quiet: bool  # fire only if the transcript paused after an answer


class MemoryService:
    def __init__(
        self,
        projects_root: Path,
        state_dir: Path,
        config: Config,
        clock: Clock,
        ledger: Ledger,
        guard: CostGuard,
        get_llm: Callable[[], LLM | Disabled | None],
        conversation_of: Callable[[SessionState], Awaitable[Conversation]],
        *,
        session_of: Callable[[str], SessionState | None] | None = None,
        home: str | None = None,
        workers: int = 2,
    ) -> None:
        self.projects_root = projects_root
        self.state_dir = state_dir
        self.config = config
        self._clock = clock
        self._ledger = ledger
        self._guard = guard
        self._get_llm = get_llm
        self._conversation_of = conversation_of
        self._session_of = session_of
        self._home = home
        self._workers = max(1, workers)
        self._started_at = clock.now()
        self._queue: CoalescingQueue[str] = CoalescingQueue()
        self._projects: dict[str, _Project] = {}
        self._store: CursorStore | None = None
        self._store_lock = anyio.Lock()
        self._surfaced: OrderedDict[str, set[str]] = OrderedDict()
        self._turns_seen: dict[str, int] = {}
        self._last_trigger: dict[str, str] = {}
        self._watches: dict[str, _Watch] = {}
        self._wake = anyio.Event()
        self._last_error: dict[str, Any] | None = None
        self._runs: Counter[str] = Counter()
        self._recalls: Counter[str] = Counter()

    def reconfigure(self, config: Config) -> None:
        """New settings (config reload); a running extraction finishes with the old ones."""
        self.config = config

    # -- reading -------------------------------------------------------------------------------

    def disabled_reason(self) -> str | None:
        return None if self.config.memory.auto_memory else "memory.auto_memory is false"

    async def locate(self, cwd: str) -> Location:
        globs = self.config.privacy.ignore_projects
        return await anyio.to_thread.run_sync(locate, self.projects_root, cwd, globs, self._home)

    async def index(self, cwd: str) -> dict[str, Any]:
        """The project's MEMORY.md as it goes into context (R-M2). ``ValueError`` for a
        relative ``cwd``."""
        where = await self.locate(cwd)
        off = where.opted_out or self.disabled_reason()
        result: dict[str, Any] = {
            "memory_dir": str(where.memory_dir),
            "opted_out": where.opted_out,
            "disabled": self.disabled_reason(),
            "exists": False,
            "text": "",
            "truncated": False,
            "cut": None,
            "total_lines": 0,
            "total_bytes": 0,
        }
        if off:
            return result
        store = MemoryStore(where.memory_dir)
        raw = await anyio.to_thread.run_sync(store.read_index)
        memory = self.config.memory
        clean = scrub_text(raw, secrets=self.config.privacy.redact_secrets)
        loaded = load_index(
            clean, max_lines=memory.index_max_lines, max_bytes=memory.index_max_bytes
        )
        result.update(
            exists=bool(raw),
            text=loaded.text,
            truncated=loaded.truncated,
            cut=loaded.cut,
            total_lines=loaded.total_lines,
            total_bytes=loaded.total_bytes,
        )
        return result

    async def memories(
        self, *, cwd: str | None = None, project: str | None = None
    ) -> dict[str, Any]:
        """Manifest rows of a project's memories, newest first. Give the session's ``cwd``, or
        ``project``: a project folder name or its path under the projects root."""
        where = await self._where(cwd, project)
        result: dict[str, Any] = {
            "memory_dir": str(where.memory_dir),
            "opted_out": where.opted_out,
            "disabled": self.disabled_reason(),
            "memories": [],
        }
        if where.opted_out or self.disabled_reason():
            return result
        memory = self.config.memory
        headers = await anyio.to_thread.run_sync(
            lambda: scan_memories(
                where.memory_dir,
                max_files=memory.scan_max_files,
                head_lines=memory.frontmatter_lines,
            )
        )
        now_ms = int(self._clock.now() * 1000)
        result["memories"] = [
            {
                "path": str(h.path),
                "relative": h.relative,
                "name": h.name,
                "description": h.description,
                "type": h.type,
                "mtime": iso_mtime(h.mtime_ms),
                "age": age_text(h.mtime_ms, now_ms),
                "warning": freshness_warning(h.mtime_ms, now_ms),
                "problems": list(h.problems),
                "line": manifest_line(h),
            }
            for h in headers
        ]
        return result

    async def _where(self, cwd: str | None, project: str | None) -> Location:
        if cwd:
            return await self.locate(cwd)
        if not project:
            raise ValueError("give either 'cwd' or 'project'")
        name = project
        if "/" in project:
            candidate = Path(project)
            if candidate.parent != self.projects_root and candidate.is_absolute():
                return await self.locate(project)  # a project's own path: treat as a cwd
            name = candidate.name
        directory = self.projects_root / name / MEMORY_DIRNAME
        glob = match_ignore_globs([name], self.config.privacy.ignore_projects, home=self._home)
        opted = f"matches privacy.ignore_projects glob {glob!r}" if glob else None
        return Location(directory, (str(directory),), opted)

    async def recall(
        self,
        query: str,
        cwd: str,
        session: str = "",
        recent_tools: Sequence[str] = (),
        already_surfaced: Collection[str] = (),
        *,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        """Memories for ``query`` (R-M6, R-M7), leaving out what ``session`` was shown."""
        where = await self.locate(cwd)
        off = where.opted_out or self.disabled_reason()
        base = {"memory_dir": str(where.memory_dir), "opted_out": where.opted_out}
        if off:
            self._recalls["none"] += 1
            empty = {"memories": [], "method": "none", "reason": f"memory is off: {off}"}
            return {**base, **empty, "caveat": RECALL_CAVEAT, "candidates": 0, "elapsed_ms": 0.0}
        surfaced = set(already_surfaced) | self._surfaced.get(session, set())
        result = await recall(
            query,
            memory_dir=where.memory_dir,
            llm=self._get_llm(),
            cfg=self.config,
            recent_tools=recent_tools,
            already_surfaced=surfaced,
            clock=self._clock,
            guard=self._guard,
            ledger=self._ledger,
            project=where.memory_dir.parent.name,
            session=session,
            timeout_s=timeout_s,
        )
        self._recalls[result.method] += 1
        return {**base, **result.as_dict()}

    def mark_surfaced(self, session: str, paths: Collection[str]) -> None:
        """Remember that ``session`` was shown these memories (absolute paths)."""
        if not session or not paths:
            return
        seen = self._surfaced.setdefault(session, set())
        seen.update(paths)
        self._surfaced.move_to_end(session)
        while len(self._surfaced) > MAX_SURFACED_SESSIONS:
            self._surfaced.popitem(last=False)

    async def recent_tools(self, session_id: str) -> list[str]:
        """Tools the session's agent called in its last few responses (newest first)."""
        state = self._session_of(session_id) if self._session_of else None
        if state is None:
            return []
        try:
            conv = await self._conversation_of(state)
        except MemdError:
            return []
        names: dict[str, None] = {}
        answers = [m for m in conv.messages() if m.role == "assistant"][-TOOL_WINDOW:]
        for message in reversed(answers):
            for block in message.content:
                if block.get("type") == "tool_use" and isinstance(block.get("name"), str):
                    names.setdefault(block["name"], None)
        return list(names)

    # -- turn ends -------------------------------------------------------------------------------

    def notify_growth(self, state: SessionState) -> None:
        """A transcript grew (call on every growth; never blocks)."""
        if self.disabled_reason() or state.mtime < self._started_at:
            return
        before = self._turns_seen.get(state.session_id)
        self._turns_seen[state.session_id] = state.turn_ends
        now = self._clock.monotonic()
        if before is not None and state.turn_ends > before:
            self._watches[state.session_id] = _Watch(now, state, quiet=False)
        else:
            quiet = self.config.memory.extraction_quiet_s
            self._watches[state.session_id] = _Watch(now + quiet, state, quiet=True)
        self._wake.set()

    async def on_stop(self, session_id: str, transcript_path: str, cwd: str) -> bool:
        """A Stop hook: the session's turn ended (the transcript may still lag behind)."""
        state = self._session_of(session_id) if self._session_of else None
        if state is None:
            if not transcript_path:
                return False
            project = Path(transcript_path).parent.name
            state = SessionState(session_id, project, transcript_path, cwd=cwd)
        elif cwd and not state.cwd:
            state = dataclasses.replace(state, cwd=cwd)
        return await self.on_turn_end(state)

    async def on_turn_end(self, state: SessionState) -> bool:
        """Queue an extraction for the session's project; False when memory is off for it."""
        self._watches.pop(state.session_id, None)
        if self.disabled_reason():
            return False
        cwd = state.cwd or await self._cwd_from_transcript(state)
        if not cwd:
            self._note_error("", f"session {state.session_id}: no working directory known")
            return False
        try:
            where = await self.locate(cwd)
        except ValueError as exc:
            self._note_error("", f"session {state.session_id}: {exc}")
            return False
        if where.opted_out:
            return False
        key = str(where.memory_dir)
        project = self._projects.setdefault(key, _Project(where))
        project.sessions[state.session_id] = state
        self._last_trigger[state.session_id] = state.last_uuid
        store = await self._cursors()
        await store.update(_cursor_for(state, cwd, key), pending=True, updated_at=self._clock.now())
        self._queue.mark_nowait(key)
        return True

    async def _cwd_from_transcript(self, state: SessionState) -> str:
        try:
            conv = await self._conversation_of(state)
        except MemdError:
            return ""
        return conv.cwd or ""

    def llm_changed(self) -> None:
        """The model client became available (or changed): run what waited for it."""
        for key, project in self._projects.items():
            if project.sessions:
                self._queue.mark_nowait(key)

    # -- the task ----------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Quiet timers and extraction workers, until cancelled."""
        await self._resume_pending()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._run_timers, name="memory quiet timers")
            for number in range(self._workers):
                tg.start_soon(self._run_worker, name=f"memory extraction {number}")
            task_status.started()

    async def wait_idle(self) -> None:
        """Wait until no extraction is queued or running."""
        await self._queue.wait_idle()

    async def _cursors(self) -> CursorStore:
        async with self._store_lock:
            if self._store is None:
                self._store = await anyio.to_thread.run_sync(CursorStore.load, self.state_dir)
            return self._store

    async def _resume_pending(self) -> None:
        store = await self._cursors()
        for record in store.pending():
            state = self._session_of(record.session_id) if self._session_of else None
            if state is None:
                state = SessionState(record.session_id, record.project, record.path, cwd=record.cwd)
            log.info("memory: resuming the extraction of session %s", record.session_id)
            await self.on_turn_end(
                state if state.cwd else dataclasses.replace(state, cwd=record.cwd)
            )

    async def _run_timers(self) -> None:
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
            await self._sleep_or_wake(min(w.deadline for w in self._watches.values()) - now)

    async def _sleep_or_wake(self, seconds: float) -> None:
        wake = self._wake
        async with anyio.create_task_group() as tg:

            async def sleeper() -> None:
                await self._clock.sleep(seconds)
                tg.cancel_scope.cancel()

            async def watcher() -> None:
                await wake.wait()
                tg.cancel_scope.cancel()

            tg.start_soon(sleeper)
            tg.start_soon(watcher)

    async def _fire(self, watch: _Watch) -> None:
        try:
            if watch.quiet and not await self._paused(watch.state):
                return
            await self.on_turn_end(watch.state)
        except Exception:  # one session's trouble must not stop the timers of the others
            log.exception("memory: handling the turn end of %s failed", watch.state.session_id)

    async def _paused(self, state: SessionState) -> bool:
        """The transcript ends with an answer that calls no tool, not seen as a turn end yet."""
        conv = await self._conversation_of(state)
        messages = conv.messages()
        if not messages or messages[-1].role != "assistant" or conv.last_assistant_has_tool_calls:
            return False
        return self._last_trigger.get(state.session_id) != conv.last_uuid

    async def _run_worker(self) -> None:
        while True:
            key = await self._queue.get()
            try:
                await self._run_project(key)
            except Exception as exc:  # the isolation boundary: the queue goes on
                log.exception("memory extraction for %s crashed", key)
                self._note_error(key, describe(exc))
            finally:
                self._queue.done(key)

    async def _run_project(self, key: str) -> None:
        project = self._projects.get(key)
        if project is None or not project.sessions:
            return
        llm = self._get_llm()
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
            project.phase, project.waiting_reason = "idle", f"parked: {decision.reason}"
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
        self, key: str, project: _Project, state: SessionState, llm: LLM
    ) -> bool:
        """One session's extraction; False when it failed and must be tried again."""
        began = self._clock.monotonic()
        store = await self._cursors()
        default = _cursor_for(state, state.cwd, key)
        cursor = (store.get(state.session_id) or default).cursor
        try:
            conv = await self._conversation_of(state)
            plan = plan_extraction(conv.messages(), cursor, project.where.aliases)
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
            self._note_error(key, f"session {state.session_id}: {exc}")
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
        self, llm: LLM, key: str, project: _Project, state: SessionState, job: Job
    ) -> ProjectRun:
        config = self.config
        turns = config.memory.extraction_max_turns
        settings = ExtractSettings(
            model=config.llm.models.memory_extract,
            max_turns=turns,
            max_tokens=config.llm.max_output_tokens,
            timeout_s=config.llm.timeout_s * max(1, turns),
            index_max_lines=config.memory.index_max_lines,
            index_max_bytes=config.memory.index_max_bytes,
            scan_max_files=config.memory.scan_max_files,
            redact_secrets=config.privacy.redact_secrets,
        )
        result = await extract_memories(
            llm,
            settings,
            job,
            memory_dir=project.where.memory_dir,
            project=project.where.memory_dir.parent.name,
            session=state.session_id,
            ledger=self._ledger,
            clock=self._clock,
        )
        self._guard.record_success("memory_extract", subject=key)
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
        return ProjectRun(
            self._clock.now(), "extracted", state.session_id, detail, result.files_touched, tokens
        )

    async def _covered(
        self, store: CursorStore, default: SessionCursor, project: _Project, cursor: str | None
    ) -> None:
        still = default.session_id in project.sessions  # a newer turn end arrived meanwhile
        await store.update(default, cursor=cursor, pending=still, updated_at=self._clock.now())

    def _failed(self, key: str, project: _Project, state: SessionState, exc: Exception) -> bool:
        verdict = self._guard.record_failure(
            "memory_extract", exc, subject=key, input_key=state.last_uuid
        )
        self._runs["failed"] += 1
        message = describe(exc)
        project.last_run = ProjectRun(self._clock.now(), "failed", state.session_id, message)
        self._note_error(key, f"session {state.session_id}: {message}")
        log.warning("memory extraction for %s failed: %s", key, message)
        if isinstance(verdict, Retry):
            self._queue.mark_nowait(key)  # runs again after the guard's backoff
        return False

    def _note_error(self, key: str, message: str) -> None:
        self._last_error = {"at": self._clock.now(), "project": key, "message": message}

    # -- status --------------------------------------------------------------------------------

    def statistics(self) -> dict[str, Any]:
        """A snapshot for ``memdctl status``."""
        queue = self._queue.statistics()
        llm = self._get_llm()
        reason = self.disabled_reason()
        if reason is None and llm is None:
            reason = "starting: the model client is loading"
        elif reason is None and isinstance(llm, Disabled):
            reason = f"disabled: {llm.reason}"
        return {
            "enabled": reason is None,
            "disabled_reason": reason,
            "queued": queue.queued,
            "running": sum(p.phase == "running" for p in self._projects.values()),
            "waiting": sum(p.phase == "waiting" for p in self._projects.values()),
            "pending_sessions": sum(len(p.sessions) for p in self._projects.values()),
            "quiet_timers": len(self._watches),
            "runs": dict(self._runs),
            "recalls": dict(self._recalls),
            "last_error": self._last_error,
            "projects": {key: _project_row(p) for key, p in self._projects.items()},
        }


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
