"""The memory service: index, manifest and recall for clients; background extraction.

What the daemon calls (the IPC methods turn the typed answers into their wire form):

* :meth:`MemoryService.index` — a project's ``MEMORY.md`` cut to the configured lines and
  bytes, with the notice when cut (R-M2);
* :meth:`MemoryService.memories` — the manifest rows of a project's memory dir (R-M5);
* :meth:`MemoryService.recall` — :func:`memd.memory.recall.recall` with the session's
  already-surfaced memories left out, as a :class:`~memd.memory.reads.RecallAnswer`;
  :meth:`mark_surfaced` records what a hook injected (:attr:`usage` too: each session's use
  of its memories, :mod:`.usage_service`);
* :attr:`MemoryService.beside` — what the session's context already holds and what its
  Claude Code does itself (:mod:`memd.memory.beside`);
* :attr:`MemoryService.archive` — the archive of unused memories: its sweeps, restore,
  listing (:mod:`memd.memory.archive_service`);
* :meth:`MemoryService.notify_growth` — on every transcript growth; :meth:`on_turn_end` /
  :meth:`on_stop` take the other signals of a turn end;
* :meth:`MemoryService.run` — the task: quiet timers, extraction workers, usage looks.

Extraction runs once per project at a time (:mod:`memd.memory.jobs`); turn ends are
detected in :mod:`memd.memory.turns`.

Per-project opt-out (``privacy.ignore_projects`` globs, a ``.memd-ignore`` file in the
project root) and ``memory.auto_memory: false`` turn off index, recall and extraction.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Collection, Sequence
from dataclasses import replace
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
from memd.memory.archive_service import ArchiveService, Restored
from memd.memory.beside import Beside, OwnMemory
from memd.memory.beside_wait import BesideWaits
from memd.memory.freshness import RECALL_CAVEAT
from memd.memory.jobs import DirHold, ExtractionJobs
from memd.memory.location import Location, locate_moved, locate_project
from memd.memory.pinned import linked_memories, pinned_memories
from memd.memory.propose import AgentFiles
from memd.memory.rank_index import RecallCache
from memd.memory.reads import (
    ProjectIndex,
    RecallAnswer,
    loaded_index,
    manifest_rows,
    scan_headers,
)
from memd.memory.recall import RecalledMemory, RecallResult, recall
from memd.memory.semantic import SemanticStage, recall_stages
from memd.memory.session_context import opens_with_notes
from memd.memory.trust import CitationChecks
from memd.memory.turns import TurnEnds
from memd.memory.usage_service import UsageService
from memd.state import SessionState
from memd.transcript.view import ConversationReader

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
        agent_files: AgentFiles | None = None,
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
        self.agent_files = agent_files
        self._claude_dir = str(claude_dir or projects_root.parent)
        self.beside = Beside(
            projects_root, self._claude_dir, home, lambda: self.config.memory, own_memory_of
        )
        self.contexts = self.beside.contexts
        self.headers = RecallCache()
        self.semantic = SemanticStage(lambda: self.config.memory, state_dir)
        self.citations = CitationChecks(
            state_dir, lambda: self.config.memory, wall=clock.now, monotonic=clock.monotonic
        )
        self._recalls: Counter[str] = Counter()
        self.usage = UsageService(state_dir, clock, conversation_of, session_of)
        self.archive = ArchiveService(
            state_dir,
            lambda: self.config.memory,
            clock,
            self.usage.record,
            self.citations.log.verified_in,
            hold_dir,
        )
        self._jobs = self._extraction_jobs(hold_dir, agent_files)
        self.waits = self._beside_waits(self._jobs)
        self._turns = self._turn_ends(self._jobs, self.waits, after_turn)

    def _extraction_jobs(
        self, hold_dir: DirHold | None, agent_files: AgentFiles | None
    ) -> ExtractionJobs:
        """The extraction jobs, with what they use of this service."""
        return ExtractionJobs(
            self.state_dir,
            lambda: self.config,
            self._clock,
            self._ledger,
            self._guard,
            self._get_llm,
            self._conversation_of,
            hold_dir=hold_dir,
            form_for=self.beside.form_for,
            cite_files=self.citations.record,
            propose_for=agent_files.propose_for if agent_files else None,
        )

    def _beside_waits(self, jobs: ExtractionJobs) -> BesideWaits:
        """Where an extraction beside Claude Code's own memory waits for it first."""
        return BesideWaits(
            self._clock,
            lambda: self.config.memory.beside_wait_s,
            jobs.enqueue,
            jobs.ours,
            jobs.mark_pending,
        )

    def _turn_ends(
        self,
        jobs: ExtractionJobs,
        waits: BesideWaits,
        after_turn: Callable[[Location, SessionState], None] | None,
    ) -> TurnEnds:
        """The turn ends that start the extraction ``jobs`` (or their ``waits``)."""
        return TurnEnds(
            lambda: self.config,
            self._clock,
            jobs,
            self._conversation_of,
            disabled_reason=self.disabled_reason,
            locate=self.locate,
            session_of=self._session_of,
            after_turn=self.usage.chained(after_turn),
            extraction_off=self.beside.extraction_off,
            beside=self.beside,
            waits=waits,
        )

    def reconfigure(self, config: Config) -> None:
        """New settings (config reload); a running extraction finishes with the old ones."""
        self.config = config
        self.semantic.wake()
        self.archive.wake()

    # -- reading -------------------------------------------------------------------------------

    def disabled_reason(self) -> str | None:
        return None if self.config.memory.auto_memory else "memory.auto_memory is false"

    async def locate(self, cwd: str) -> Location:
        """The memory dir for ``cwd``: where Claude Code's switches move it (the variables
        the newest hook in ``cwd`` forwarded: :func:`~memd.memory.location.locate_moved`),
        else its default under the projects root."""
        globs, env = self.config.privacy.ignore_projects, self.beside.moving_env(cwd)
        find = partial(locate_moved, self.projects_root, cwd, globs, self._home)
        return await anyio.to_thread.run_sync(find, self._claude_dir, env)

    async def index(self, cwd: str, where: Location | None = None) -> ProjectIndex:
        """The project's MEMORY.md as it goes into context (R-M2). ``ValueError`` for a
        relative ``cwd``. ``where``: ``cwd``'s :meth:`locate`, when the caller has it."""
        where = where if where is not None else await self.locate(cwd)
        off = where.opted_out or self.disabled_reason()
        empty = ProjectIndex(str(where.memory_dir), where.opted_out, self.disabled_reason())
        return empty if off else await loaded_index(empty, where.memory_dir, self.config)

    async def memories(
        self,
        *,
        cwd: str | None = None,
        project: str | None = None,
        check: bool = False,
        archived: bool = False,
    ) -> dict[str, Any]:
        """Manifest rows of a project's memories, newest first. Give the session's ``cwd``, or
        ``project``: a project folder name or its path under the projects root. ``check``
        (with ``cwd``): each row also carries its citations and what their check found.
        ``archived``: the memories in its archive instead (``archived``)."""
        where = await self._where(cwd, project)
        result: dict[str, Any] = {
            "memory_dir": str(where.memory_dir),
            "opted_out": where.opted_out,
            "disabled": self.disabled_reason(),
            "memories": [],
        }
        if where.opted_out or self.disabled_reason():
            return {**result, "archived": []} if archived else result
        if archived:
            return {**result, **await self.archive.listing(where.memory_dir)}
        headers = await scan_headers(where.memory_dir, self.config)
        result["memories"] = manifest_rows(headers, int(self._clock.now() * 1000))
        self.usage.annotate(result["memories"])
        if check:
            result["checked"] = await anyio.to_thread.run_sync(
                self.citations.checked_rows, cwd, where.memory_dir, headers, result["memories"]
            )
        return result

    async def restore(
        self, wanted: str, *, cwd: str | None = None, project: str | None = None
    ) -> Restored:
        """Put the archived memory ``wanted`` back into the project's memory dir (named as
        for :meth:`memories`): :meth:`ArchiveService.restore`."""
        where = await self._where(cwd, project)
        return await self.archive.restore(where.memory_dir, wanted)

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
    ) -> RecallAnswer:
        """Memories for ``query`` (R-M6, R-M7), leaving out what ``session`` was shown, then
        those they link to (``where``: as for :meth:`index`)."""
        where = where if where is not None else await self.locate(cwd)
        off = where.opted_out or self.disabled_reason()
        memory_dir = str(where.memory_dir)
        if off:
            self._recalls["none"] += 1
            none = RecallResult((), "none", f"memory is off: {off}", RECALL_CAVEAT, 0, 0.0)
            return RecallAnswer(memory_dir, where.opted_out, none)
        record = self.contexts.peek(session) if session else None
        surfaced = set(already_surfaced) | (record.surfaced if record else set())
        if session:  # a session's recall: memd sees what this dir's memories are used for
            self.usage.record.tracked_since(str(where.memory_dir))
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
        now_ms = int(self._clock.now() * 1000)
        linked = await linked_memories(
            where.memory_dir, self.config, result.memories, surfaced, now_ms, self.headers
        )
        result = replace(result, memories=result.memories + linked)
        return RecallAnswer(memory_dir, where.opted_out, result)

    async def pinned(
        self, cwd: str, session: str = "", where: Location | None = None
    ) -> tuple[RecalledMemory, ...]:
        """The project's pinned memories (at most 4, newest first) that ``session`` has not
        been shown yet, as recall's rows; none when memory is off for ``cwd`` (``where``: as
        for :meth:`index`)."""
        where = where if where is not None else await self.locate(cwd)
        if where.opted_out or self.disabled_reason():
            return ()
        record = self.contexts.peek(session) if session else None
        surfaced = record.surfaced if record else set()
        now_ms = int(self._clock.now() * 1000)
        return await pinned_memories(where.memory_dir, self.config, surfaced, now_ms, self.headers)

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

    def on_stop(
        self, session_id: str, transcript_path: str, cwd: str, answer: str = "", ended: bool = False
    ) -> bool:
        """A Stop (``answer``: its last assistant message) or SessionEnd (``ended``) hook: a
        turn end, queued once the transcript holds it (never blocks)."""
        if ended:
            self.waits.ended(session_id)
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
            tg.start_soon(self.waits.run, name="beside Claude Code's memory")
            tg.start_soon(self.semantic.run, name="semantic recall")
            tg.start_soon(self.usage.run, name="memory usage")
            if self.agent_files is not None:  # blocks left where serving is now off
                tg.start_soon(anyio.to_thread.run_sync, self.agent_files.take_out)
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
            "archive": self.archive.statistics(),
            "last_error": jobs.last_error,
            "projects": jobs.projects,
            "claude_code": self.beside.statistics(self.waits.waiting),
        }
