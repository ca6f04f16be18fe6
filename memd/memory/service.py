"""The memory service: index, manifest and recall for clients; background extraction.

What the daemon calls (every method returns plain msgpack-able data):

* :meth:`MemoryService.index` — a project's ``MEMORY.md`` cut to the configured lines and
  bytes, with the notice when cut (R-M2);
* :meth:`MemoryService.memories` — the manifest rows of a project's memory dir (R-M5);
* :meth:`MemoryService.recall` — :func:`memd.memory.recall.recall` with the session's
  already-surfaced memories left out; :meth:`mark_surfaced` records what a hook injected
  (:attr:`usage` too: each session's use of its memories, :mod:`.usage_service`);
* :meth:`MemoryService.session_context` — what the session's context already holds and what
  its Claude Code does itself (:mod:`memd.memory.session_context`,
  :mod:`memd.memory.claude_code`);
* :meth:`MemoryService.notify_growth` — on every transcript growth; :meth:`on_turn_end` /
  :meth:`on_stop` take the other signals of a turn end;
* :meth:`MemoryService.run` — the task: quiet timers, extraction workers, usage looks.

Extraction runs once per project at a time (:mod:`memd.memory.jobs`); turn ends are
detected in :mod:`memd.memory.turns`.

Per-project opt-out (``privacy.ignore_projects`` globs, a ``.memd-ignore`` file in the
project root) and ``memory.auto_memory: false`` turn off index, recall and extraction.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Awaitable, Callable, Collection, Sequence
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from memd.clock import Clock
from memd.config import Config
from memd.errors import MemdError
from memd.llm.client import Disabled
from memd.llm.guard import CostGuard
from memd.llm.ledger import Ledger
from memd.llm.models import Models, Route, job_route
from memd.memory.claude_code import (
    FORWARDED_ENV,
    MOVING_ENV,
    ClaudeCodeFacts,
    Settings,
    decide,
    read_settings,
)
from memd.memory.freshness import RECALL_CAVEAT
from memd.memory.frontmatter import FrontmatterForm
from memd.memory.jobs import DirHold, ExtractionJobs
from memd.memory.location import Location, locate_moved, locate_project
from memd.memory.paths import memory_dir
from memd.memory.pinned import linked_memories, pinned_memories
from memd.memory.rank_index import RecallCache
from memd.memory.reads import loaded_index, manifest_rows, scan_headers
from memd.memory.recall import recall
from memd.memory.scan import MemoryHeader
from memd.memory.semantic import SemanticStage, recall_stages
from memd.memory.session_context import (
    SessionContext,
    SessionContexts,
    apply,
    opens_with_notes,
    scan_transcript,
)
from memd.memory.trust import CitationChecks
from memd.memory.turns import TurnEnds
from memd.memory.usage_service import UsageService
from memd.state import SessionState
from memd.transcript.view import ConversationReader

# Why memd extracts no memories from a session in a cwd (its agent keeps its own), or None:
# a source's own_memory (memd.sources.base.Source), for the agents whose native memory is not
# decided per session.
OwnMemory = Callable[[str], str | None]
MAX_SURFACED_SESSIONS = 1_024
TOOL_WINDOW = 6  # assistant messages whose tool calls count as "in active use"


class MemoryService:
    def __init__(
        self,
        projects_root: Path,
        state_dir: Path,
        config: Config,
        clock: Clock,
        ledger: Ledger,
        guard: CostGuard,
        get_llm: Callable[[], Models | None],
        conversation_of: Callable[[SessionState], Awaitable[ConversationReader]],
        *,
        session_of: Callable[[str], SessionState | None] | None = None,
        home: str | None = None,
        workers: int = 2,
        hold_dir: DirHold | None = None,
        after_turn: Callable[[Location, SessionState], None] | None = None,
        claude_dir: Path | None = None,
        own_memory_of: Callable[[SessionState], OwnMemory | None] = lambda state: None,
    ) -> None:
        self.projects_root = projects_root
        self._own_memory_of = own_memory_of
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
        self._claude_dir = str(claude_dir or projects_root.parent)
        self.contexts = SessionContexts()
        self.headers = RecallCache()
        self.semantic = SemanticStage(lambda: self.config.memory, state_dir)
        self.citations = CitationChecks(
            state_dir, lambda: self.config.memory, wall=clock.now, monotonic=clock.monotonic
        )
        self._project_versions: OrderedDict[str, str] = OrderedDict()
        # cwd → the variables that move the memory dir, as the newest hook there forwarded
        self._moving_env: OrderedDict[str, dict[str, str]] = OrderedDict()
        self._recalls: Counter[str] = Counter()
        self.usage = UsageService(state_dir, clock, conversation_of, session_of)
        self._jobs, self._turns = self._extraction(hold_dir, after_turn)

    def _extraction(
        self,
        hold_dir: DirHold | None,
        after_turn: Callable[[Location, SessionState], None] | None,
    ) -> tuple[ExtractionJobs, TurnEnds]:
        """The extraction jobs and the turn ends that start them, wired to this service."""
        jobs = ExtractionJobs(
            self.state_dir,
            lambda: self.config,
            self._clock,
            self._ledger,
            self._guard,
            self._get_llm,
            self._conversation_of,
            hold_dir=hold_dir,
        )
        turns = TurnEnds(
            lambda: self.config,
            self._clock,
            jobs,
            self._conversation_of,
            disabled_reason=self.disabled_reason,
            locate=self.locate,
            session_of=self._session_of,
            after_turn=self.usage.chained(after_turn),
            extraction_off=self._extraction_off,
        )
        jobs.form_for = self._form_for
        jobs.cite_files = self.citations.record
        return jobs, turns

    def reconfigure(self, config: Config) -> None:
        """New settings (config reload); a running extraction finishes with the old ones."""
        self.config = config
        self.semantic.wake()

    # -- reading -------------------------------------------------------------------------------

    def disabled_reason(self) -> str | None:
        return None if self.config.memory.auto_memory else "memory.auto_memory is false"

    async def locate(self, cwd: str) -> Location:
        """The memory dir for ``cwd``: where Claude Code's switches move it (the variables
        the newest hook in ``cwd`` forwarded: :func:`~memd.memory.location.locate_moved`),
        else its default under the projects root."""
        globs, env = self.config.privacy.ignore_projects, self._moving_env.get(cwd, {})
        find = partial(locate_moved, self.projects_root, cwd, globs, self._home)
        return await anyio.to_thread.run_sync(find, self._claude_dir, env)

    def _remember_env(self, cwd: str, env: dict[str, str]) -> None:
        self._moving_env[cwd] = {k: v for k, v in env.items() if k in MOVING_ENV}
        self._moving_env.move_to_end(cwd)
        while len(self._moving_env) > MAX_SURFACED_SESSIONS:
            self._moving_env.popitem(last=False)

    def _settings_and_dir(self, project_dir: str, cwd: str) -> tuple[Settings, Path | None]:
        """Claude Code's settings for ``project_dir`` and the memory dir of ``cwd`` (None for
        a relative one), read in one worker thread: ``session`` asks for both on every call."""
        where = memory_dir(self.projects_root, Path(cwd)) if cwd.startswith("/") else None
        return read_settings(self._claude_dir, project_dir), where

    # -- what the session's context holds, what its Claude Code does ---------------------------

    async def session_context(
        self,
        session_id: str,
        transcript: str = "",
        env: dict[str, str] | None = None,
        cwd: str = "",
    ) -> SessionContext:
        """The session's record, caught up with its transcript (the env the hook forwarded
        replaces the one remembered, and moves the memory dir of ``cwd``)."""
        record = self.contexts.get(session_id)
        if env is not None:
            record.env = {k: v[:4096] for k, v in env.items() if k in FORWARDED_ENV}
            if cwd.startswith("/"):
                self._remember_env(cwd, record.env)
        if transcript.startswith("/") and transcript.endswith(".jsonl"):
            record.transcript = transcript
        if record.transcript:
            found = await anyio.to_thread.run_sync(
                scan_transcript, record.transcript, record.scanned_ino, record.scanned_offset
            )
            if found is not None:
                apply(record, found)
        return record

    async def claude_code(self, record: SessionContext, cwd: str) -> ClaudeCodeFacts:
        """What the session's Claude Code does itself (settings, environment, version)."""
        project = record.env.get("CLAUDE_PROJECT_DIR") or cwd
        settings, where = await anyio.to_thread.run_sync(self._settings_and_dir, project, cwd)
        key = cwd or project
        if record.version and key:
            self._project_versions[key] = record.version
            self._project_versions.move_to_end(key)
            while len(self._project_versions) > MAX_SURFACED_SESSIONS:
                self._project_versions.popitem(last=False)
        version = record.version or self._project_versions.get(key)
        folder = where.parent.name if where is not None else ""
        facts = decide(settings, record.env, version, self._home, folder)
        self.contexts.set_facts(record, facts)
        return facts

    async def claude_code_status(self, state: SessionState) -> dict[str, Any]:
        """For ``memdctl session``: what the session's Claude Code does itself, and so what
        memd does and does not do beside it (for another agent: its own memory only)."""
        if self._own_memory_of(state) is not None:
            off = await self._extraction_off(state)
            return {"agent": state.agent, "memd_extraction": f"off: {off}" if off else "on"}
        record = await self.session_context(state.session_id, state.path)
        facts = await self.claude_code(record, state.cwd or "")
        off = facts.extraction_off(self.config.memory.extract_beside_claude_code)
        return {
            **facts.as_dict(),
            "memd_index": "not injected: Claude Code loads MEMORY.md itself"
            if facts.auto_memory
            else ("injected" if record.index_injected else "not injected yet"),
            "memd_extraction": f"off: {off}" if off else "on",
            "surfaced": len(record.surfaced),
            "notes_owed": record.notes_owed,
        }

    def beside_claude_code(self) -> dict[str, Any]:
        """For ``memdctl status``: sessions seen through hooks, by Claude Code's auto memory."""
        return {
            "sessions": self.contexts.decided,
            "claude_auto_memory_on": self.contexts.auto_memory_on,
            "extract_beside_claude_code": self.config.memory.extract_beside_claude_code,
        }

    async def _form_for(self, state: SessionState) -> FrontmatterForm:
        record = await self.session_context(state.session_id, state.path)
        return (await self.claude_code(record, state.cwd or "")).frontmatter_form

    async def _extraction_off(self, state: SessionState) -> str | None:
        """Why memd extracts nothing for this session (Claude Code's agent does it), or None."""
        if self.config.memory.extract_beside_claude_code:
            return None
        own_memory = self._own_memory_of(state)
        if own_memory is not None:
            return await anyio.to_thread.run_sync(own_memory, state.cwd or "")
        record = await self.session_context(state.session_id, state.path)
        facts = await self.claude_code(record, state.cwd or "")
        return facts.extraction_off(self.config.memory.extract_beside_claude_code)

    async def index(self, cwd: str, where: Location | None = None) -> dict[str, Any]:
        """The project's MEMORY.md as it goes into context (R-M2). ``ValueError`` for a
        relative ``cwd``. ``where``: ``cwd``'s :meth:`locate`, when the caller has it."""
        where = where if where is not None else await self.locate(cwd)
        off = where.opted_out or self.disabled_reason()
        result: dict[str, Any] = {
            "memory_dir": str(where.memory_dir),
            "opted_out": where.opted_out,
            "disabled": self.disabled_reason(),
            "exists": False,
            "assembled": False,
            "text": "",
            "truncated": False,
            "cut": None,
            "total_lines": 0,
            "total_bytes": 0,
        }
        if off:
            return result
        result.update(await loaded_index(where.memory_dir, self.config))
        return result

    async def memories(
        self, *, cwd: str | None = None, project: str | None = None, check: bool = False
    ) -> dict[str, Any]:
        """Manifest rows of a project's memories, newest first. Give the session's ``cwd``, or
        ``project``: a project folder name or its path under the projects root. ``check``
        (with ``cwd``): each row also carries its citations and what their check found."""
        where = await self._where(cwd, project)
        result: dict[str, Any] = {
            "memory_dir": str(where.memory_dir),
            "opted_out": where.opted_out,
            "disabled": self.disabled_reason(),
            "memories": [],
        }
        if where.opted_out or self.disabled_reason():
            return result
        headers = await scan_headers(where.memory_dir, self.config)
        result["memories"] = manifest_rows(headers, int(self._clock.now() * 1000))
        self.usage.annotate(result["memories"])
        if check:
            result["checked"] = await self._check_listing(cwd, where, headers, result)
        return result

    async def _check_listing(
        self,
        cwd: str | None,
        where: Location,
        headers: Sequence[MemoryHeader],
        result: dict[str, Any],
    ) -> str:
        """Adds each row's checks; says what was checked against (or why nothing was)."""
        if not cwd:
            return "not checked: give the project's directory, not its folder name"
        if not self.citations.enabled:
            return "not checked: memory.verify_citations is off"
        checks = await anyio.to_thread.run_sync(
            self.citations.listing, cwd, where.memory_dir, headers
        )
        for row in result["memories"]:
            row.update(checks.get(row["relative"], {"citations": [], "checks": []}))
        return f"checked against {cwd}"

    async def _where(self, cwd: str | None, project: str | None) -> Location:
        if cwd:
            return await self.locate(cwd)
        if not project:
            raise ValueError("give either 'cwd' or 'project'")
        globs = self.config.privacy.ignore_projects
        where = locate_project(self.projects_root, project, globs, self._home)
        return where if where is not None else await self.locate(project)

    async def recall(
        self,
        query: str,
        cwd: str,
        session: str = "",
        recent_tools: Sequence[str] = (),
        already_surfaced: Collection[str] = (),
        *,
        timeout_s: float | None = None,
        where: Location | None = None,
    ) -> dict[str, Any]:
        """Memories for ``query`` (R-M6, R-M7), leaving out what ``session`` was shown
        (``where``: as for :meth:`index`)."""
        where = where if where is not None else await self.locate(cwd)
        off = where.opted_out or self.disabled_reason()
        base = {"memory_dir": str(where.memory_dir), "opted_out": where.opted_out}
        if off:
            self._recalls["none"] += 1
            empty = {"memories": [], "method": "none", "reason": f"memory is off: {off}"}
            return {**base, **empty, "caveat": RECALL_CAVEAT, "candidates": 0, "elapsed_ms": 0.0}
        record = self.contexts.peek(session) if session else None
        surfaced = set(already_surfaced) | (record.surfaced if record else set())
        result = await recall(
            query,
            memory_dir=where.memory_dir,
            llm=job_route(self._get_llm(), "recall"),
            cfg=self.config,
            recent_tools=recent_tools,
            already_surfaced=surfaced,
            clock=self._clock,
            guard=self._guard,
            ledger=self._ledger,
            project=where.memory_dir.parent.name,
            session=session,
            timeout_s=timeout_s,
            cache=self.headers,
            checks=partial(self.citations.recalled, cwd, where.memory_dir),
            semantic=self.semantic if self.semantic.enabled else None,
            usage=self.usage.counts(where.memory_dir),
        )
        self._recalls[result.method] += 1
        answer, now_ms = {**base, **result.as_dict()}, int(self._clock.now() * 1000)
        answer["memories"] += await linked_memories(
            where.memory_dir, self.config, answer["memories"], surfaced, now_ms, self.headers
        )
        return answer

    async def pinned(
        self, cwd: str, session: str = "", where: Location | None = None
    ) -> list[dict[str, Any]]:
        """The project's pinned memories (at most 4, newest first) that ``session`` has not
        been shown yet, as recall's rows; none when memory is off for ``cwd`` (``where``: as
        for :meth:`index`)."""
        where = where if where is not None else await self.locate(cwd)
        if where.opted_out or self.disabled_reason():
            return []
        record = self.contexts.peek(session) if session else None
        surfaced = record.surfaced if record else set()
        now_ms = int(self._clock.now() * 1000)
        found = await pinned_memories(where.memory_dir, self.config, surfaced, now_ms, self.headers)
        return [{**m.as_dict(), "pinned": True} for m in found]

    def mark_surfaced(self, session: str, paths: Collection[str]) -> None:
        """Remember that ``session`` was shown these memories (absolute paths)."""
        if not session or not paths:
            return
        self.contexts.get(session).surfaced.update(paths)
        self.usage.injected(self.contexts.get(session).usage_session or session, paths)

    async def recent_tools(self, session_id: str) -> list[str]:
        """Tools the session's agent called in its last few responses (newest first)."""
        conv = await self._reader(session_id)
        if conv is None:
            return []
        names: dict[str, None] = {}
        answers = [m for m in conv.messages() if m.role == "assistant"][-TOOL_WINDOW:]
        for message in reversed(answers):
            for block in message.content:
                if block.get("type") == "tool_use" and isinstance(block.get("name"), str):
                    names.setdefault(block["name"], None)
        return list(names)

    async def holds_notes(self, session_id: str) -> bool:
        """Whether the session's conversation opens with memd's notes (a fork's summary):
        a resume of it owes none."""
        conv = await self._reader(session_id)
        return conv is not None and opens_with_notes(conv.messages())

    async def _reader(self, session_id: str) -> ConversationReader | None:
        state = self._session_of(session_id) if self._session_of else None
        if state is None:
            return None
        try:
            return await self._conversation_of(state)
        except MemdError:
            return None

    # -- turn ends -------------------------------------------------------------------------------

    def notify_growth(self, state: SessionState) -> None:
        """A transcript grew (call on every growth; never blocks)."""
        self._turns.notify_growth(state)

    def on_stop(self, session_id: str, transcript_path: str, cwd: str, answer: str = "") -> bool:
        """A Stop (``answer``: its last assistant message) or SessionEnd hook: a turn end,
        queued once the transcript holds it (never blocks)."""
        return self._turns.on_stop(session_id, transcript_path, cwd, answer)

    async def on_turn_end(self, state: SessionState) -> bool:
        """Queue an extraction for the session's project; False when memory is off for it."""
        return await self._turns.on_turn_end(state)

    def llm_changed(self) -> None:
        """The model client became available (or changed): run what waited for it."""
        self._jobs.llm_changed()

    # -- the task ----------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Quiet timers and extraction workers, until cancelled."""
        await self._turns.resume_pending()
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._turns.run_timers, name="memory quiet timers")
            tg.start_soon(self.semantic.run, name="semantic recall")
            tg.start_soon(self.usage.run, name="memory usage")
            for number in range(self._workers):
                tg.start_soon(self._jobs.run_worker, name=f"memory extraction {number}")
            task_status.started()

    async def wait_idle(self) -> None:
        """Wait until no extraction is queued or running."""
        await self._jobs.wait_idle()

    # -- status --------------------------------------------------------------------------------

    def recall_stages(self, model_off: str | None) -> dict[str, Any]:
        """Which recall stages are on (issue 27): :func:`memd.memory.semantic.recall_stages`."""
        stages = recall_stages(self.config, self.headers.statistics(), model_off, self.semantic)
        route = job_route(self._get_llm(), "recall")
        if isinstance(route, Route):
            stages["model"] = {**stages["model"], "model": route.model, "backend": route.backend}
        return stages

    def statistics(self) -> dict[str, Any]:
        """A snapshot for ``memdctl status``."""
        jobs = self._jobs.statistics()
        llm = job_route(self._get_llm(), "memory_extract")
        reason = self.disabled_reason()
        if reason is None and llm is None:
            reason = "starting: the model client is loading"
        elif reason is None and isinstance(llm, Disabled):
            reason = f"disabled: {llm.reason}"
        return {
            "enabled": reason is None,
            "disabled_reason": reason,
            "queued": jobs.queued,
            "running": jobs.running,
            "waiting": jobs.waiting,
            "pending_sessions": jobs.pending_sessions,
            "quiet_timers": self._turns.quiet_timers(),
            "runs": jobs.runs,
            "recalls": dict(self._recalls),
            "recall_stages": self.recall_stages(reason),
            "citations": self.citations.statistics(),
            "usage": self.usage.statistics(),
            "last_error": jobs.last_error,
            "projects": jobs.projects,
            "claude_code": self.beside_claude_code(),
        }
