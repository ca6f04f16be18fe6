"""The compaction service: what the ``should_compact``, ``compact`` and ``microcompact``
methods do, around the pure ladder in :mod:`memd.compaction.strategy`.

It owns the per-session circuit breakers (persisted), waits for an in-flight notes extraction
before level 1 (R-S8), gathers what the client must restore (R-C5) and records what a
compaction cost.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import anyio

from memd.atomic import persist
from memd.compaction.forked_session import ForkPlan, plan_fork, write_new_session
from memd.compaction.message import Msg
from memd.compaction.microcompact import Microcompacted, microcompact
from memd.compaction.results import (
    Compacted,
    Compaction,
    ContextFile,
    CutPlan,
    DryRun,
    Forked,
    ForkResult,
    NotCompacted,
    NotForked,
    Restore,
    ShouldCompact,
)
from memd.compaction.session_memory import FallThrough, compact_with_notes
from memd.compaction.strategy import NotesInput, Outcome, compact, files_to_restore
from memd.compaction.takeover import TakeoverRecord
from memd.compaction.threshold import (
    BreakerState,
    Trigger,
    auto_compact_threshold,
    should_compact,
)
from memd.compaction.tokencache import TokenCache
from memd.config import Config
from memd.errors import CompactionFailed, LLMDisabled, LLMError
from memd.llm.client import Disabled, Usage
from memd.llm.ledger import Ledger
from memd.llm.models import Models, Route, job_route
from memd.regular_file import read_regular, read_text_target
from memd.sources.base import Fork, ModelWindow
from memd.sources.room import Room
from memd.state import SessionState
from memd.tokens import estimate_content
from memd.transcript.conversation import Conversation
from memd.window import Window, session_window

log = logging.getLogger(__name__)

BREAKERS_FILE = "compaction-breakers.json"
MAX_BREAKERS_BYTES = 4 << 20
CLAUDE_MD_NAMES = ("CLAUDE.md", ".claude/CLAUDE.md", "CLAUDE.local.md")
# A plan or CLAUDE.md larger than this is not restored (it would not fit a context anyway).
CONTEXT_FILE_MAX_BYTES = 1024 * 1024

NotesProvider = Callable[[str], Awaitable[NotesInput | None]]


class ForkNotes(Protocol):
    """The notes a fork starts with (the notes scheduler; blocking, run in a thread)."""

    def seed(self, state: SessionState, fork: Fork, notes: str) -> None:
        """Give ``fork`` of ``state`` the notes it was made from; raises ``OSError``."""
        ...

    def unseed(self, state: SessionState, fork_id: str) -> None:
        """Take them back: the fork was not written."""
        ...


ExtractionWaiter = Callable[[str], Awaitable[object]]
IndexProvider = Callable[[str], Awaitable[str | None]]
ConversationReader = Callable[[SessionState, Callable[[Conversation], Any]], Awaitable[Any]]


WindowOf = Callable[[SessionState], ModelWindow | None]


def messages_of(conv: Conversation, cache: TokenCache | None = None) -> list[Msg]:
    """A session's active conversation as compaction input, with token estimates."""
    count = cache.tokens if cache is not None else (lambda m: estimate_content(m.content))
    return [
        Msg.of(m.role, m.content, uuid=m.last_uuid, line_uuids=m.uuids, tokens=count(m))
        for m in conv.messages()
    ]


def messages_from_client(raw: Sequence[Any]) -> list[Msg]:
    """Decode a client-supplied API message list; raises ValueError naming the bad entry."""
    out = []
    for i, item in enumerate(raw):
        if not isinstance(item, dict):
            raise ValueError(f"messages[{i}] must be a map with 'role' and 'content'")
        try:
            msg = Msg.from_api(item)
        except ValueError as exc:
            raise ValueError(f"messages[{i}]: {exc}") from None
        out.append(
            Msg.of(msg.role, msg.content, uuid=msg.uuid, tokens=estimate_content(list(msg.content)))
        )
    return out


def plan_file(claude_dir: Path, slug: str | None) -> ContextFile | None:
    """The session's plan (``<claude_dir>/plans/<slug>.md``), read now, if it exists."""
    if not slug or "/" in slug or slug.startswith("."):
        return None
    path = claude_dir / "plans" / f"{slug}.md"
    content = read_text_target(path, CONTEXT_FILE_MAX_BYTES)
    return None if content is None else ContextFile(str(path), content)


def session_start_context(cwd: Path | None, home: Path) -> list[ContextFile]:
    """CLAUDE.md files that start every session: the user's, then the project's, root first."""
    found: list[Path] = [home / ".claude" / "CLAUDE.md"]
    if cwd is not None:
        chain = [cwd, *cwd.parents]
        for directory in reversed(chain):
            found += [directory / name for name in CLAUDE_MD_NAMES]
    out = []
    for path in dict.fromkeys(found):
        content = read_text_target(path, CONTEXT_FILE_MAX_BYTES)
        if content is not None:
            out.append(ContextFile(str(path), content))
    return out


class CompactionService:
    def __init__(
        self,
        config: Config,
        state_dir: Path,
        *,
        home: Path,
        claude_dir: Path,
        ledger: Ledger,
        get_llm: Callable[[], Models | None],
        tokens: TokenCache | None = None,
        notes_for: NotesProvider | None = None,
        wait_extraction: ExtractionWaiter | None = None,
        memory_index_for: IndexProvider | None = None,
        fork_notes: ForkNotes | None = None,
        window_of: WindowOf | None = None,
    ) -> None:
        self.config = config
        self.home = home
        self.claude_dir = claude_dir
        self.ledger = ledger
        self.get_llm = get_llm
        self.notes_for = notes_for
        self.wait_extraction = wait_extraction
        self.memory_index_for = memory_index_for
        self.fork_notes = fork_notes
        self.window_of = window_of  # a session's window, from its agent
        self.tokens = tokens if tokens is not None else TokenCache()
        self._breakers_path = state_dir / BREAKERS_FILE
        self._breakers: dict[str, BreakerState] = _load_breakers(self._breakers_path)
        self.takeover = TakeoverRecord(state_dir)

    def input_of(self, conv: Conversation) -> list[Msg]:
        """Compaction input for a session with cached estimates (blocking: run in a thread)."""
        return messages_of(conv, self.tokens)

    def wants_warming(self, state: SessionState) -> bool:
        """Sessions past half their threshold get their estimates computed ahead of time."""
        return state.context_tokens >= self.threshold(self.window({}, state)) // 2

    def window(self, params: dict[str, Any], state: SessionState | None = None) -> Window:
        """The window of a compaction (issue 38): the request's ``context_window``, else the
        one the session's agent gives the model its transcript records (:attr:`window_of`,
        Claude Code's ``[1m]`` and 1M-native models), else the config's default."""
        known = self.window_of(state) if state is not None and self.window_of else None
        asked, output = params.get("context_window"), params.get("max_output_tokens")
        return session_window(self.config.compaction, known, asked, output)

    def threshold(self, window: Window) -> int:
        return auto_compact_threshold(
            window.context_window, window.max_output_tokens, self.config.compaction
        )

    def should_compact(self, session_id: str, tokens: int, window: Window) -> ShouldCompact:
        decision = should_compact(
            tokens, window.context_window, window.max_output_tokens, self.config.compaction
        )
        breaker = self._breakers.get(session_id, BreakerState())
        allowed = breaker.allows("auto", self.config.compaction)
        return ShouldCompact(
            compact=decision.compact and allowed,
            tokens=tokens,
            threshold=decision.threshold,
            context_window=window.context_window,
            window_source=window.source,
            effective_window=decision.effective_window,
            tokens_left=decision.tokens_left,
            percent_of_threshold=round(decision.percent_of_threshold, 1),
            circuit_open=not allowed,
            consecutive_failures=breaker.consecutive_failures,
        )

    async def notes_input(self, session_id: str | None) -> NotesInput | None:
        if session_id is None or self.notes_for is None:
            return None
        if self.wait_extraction is not None:
            await self.wait_extraction(session_id)
        return await self.notes_for(session_id)

    async def dry_run(
        self,
        msgs: list[Msg],
        session_id: str | None,
        window: Window,
        *,
        trigger: Trigger,
        transcript_path: str | None,
        context_tokens: int | None = None,
    ) -> DryRun:
        """Which level would serve, and where level 1 would cut; never calls a model.
        ``context_tokens``: the session's live figure, carried in the plan."""
        notes = await self.notes_input(session_id)
        before = sum(m.tokens for m in msgs)
        base = DryRun(before, self.threshold(window), None, context_tokens=context_tokens)
        if notes is None:
            return self._level2_plan(base, "the session has no notes")
        level1 = compact_with_notes(
            msgs,
            notes=notes.notes,
            template=notes.template,
            last_summarized_uuid=notes.last_summarized_uuid,
            threshold=self.threshold(window),
            cfg=self.config.compaction,
            estimate=estimate_content,
            trigger=trigger,
            notes_path=notes.notes_path,
            transcript_path=transcript_path,
        )
        if isinstance(level1, FallThrough):
            return self._level2_plan(base, level1.detail)
        cut = CutPlan(
            level1.tokens_after,
            level1.cut_index,
            level1.kept_count,
            level1.cut_index,
            tuple(level1.truncated_sections),
        )
        return replace(base, level=1, cut=cut)

    def _level2_plan(self, base: DryRun, reason: str) -> DryRun:
        """Level 2 needs a model: with none, a real compaction would be refused, and the dry
        run says so (``level: None``, ``disabled``) instead of promising a summary call."""
        llm = job_route(self.get_llm(), "compact")
        if isinstance(llm, Disabled):
            return replace(base, level=None, reason=reason, disabled=llm.reason)
        return replace(base, level=2, reason=reason)

    async def compact(
        self,
        msgs: list[Msg],
        *,
        session_id: str | None,
        project: str,
        window: Window,
        trigger: Trigger,
        custom_instructions: str | None,
        cwd: Path | None,
        transcript_path: str | None,
        slug: str | None = None,
    ) -> Compacted:
        key = session_id or ""
        breaker = self._breakers.get(key, BreakerState())
        if key and not breaker.allows(trigger, self.config.compaction):
            return NotCompacted(
                f"auto-compaction stopped after {breaker.consecutive_failures} "
                "failures in a row; a manual compaction still runs and resets it"
            )
        route = job_route(self.get_llm(), "compact")
        began = time.monotonic()
        try:
            outcome = await compact(
                msgs,
                notes=await self.notes_input(session_id),
                llm=route.llm if isinstance(route, Route) else None,
                model=route.model if isinstance(route, Route) else "",
                threshold=self.threshold(window),
                cfg=self.config.compaction,
                estimate=estimate_content,
                trigger=trigger,
                custom_instructions=custom_instructions,
                transcript_path=transcript_path,
                summary_max_tokens=self.config.compaction.summary_max_tokens,
                call_timeout=self.config.llm.timeout_s,
            )
        except LLMDisabled:
            raise  # no model is not a failed compaction
        except (CompactionFailed, LLMError):
            if key:
                await self._set_breaker(key, breaker.after_failure())
            raise
        if key:
            await self._set_breaker(key, breaker.after_success())
        self._record(outcome, project, key, route, time.monotonic() - began)
        return await self._result(msgs, outcome, cwd, slug)

    async def _result(
        self, before: list[Msg], outcome: Outcome, cwd: Path | None, slug: str | None
    ) -> Compaction:
        restored = await files_to_restore(
            before, outcome, estimate=estimate_content, cfg=self.config.compaction, cwd=cwd
        )
        index = await self.memory_index_for(str(cwd)) if self.memory_index_for and cwd else None
        context = await anyio.to_thread.run_sync(session_start_context, cwd, self.home)
        plan = await anyio.to_thread.run_sync(plan_file, self.claude_dir, slug)
        return Compaction(outcome, Restore(tuple(restored), tuple(context), plan, index))

    async def fork(
        self,
        state: SessionState,
        room: Room,
        read: ConversationReader,
        window: Window,
        *,
        root: Path,
        wait: bool = True,
        fork_id: str | None = None,
        fresh_only: bool = False,
    ) -> ForkResult:
        """Write a level-1 compaction of ``state`` as a new session of its agent, ``room``, in
        the agent's own format and place (no model call; see :mod:`memd.compaction.
        forked_session`), below ``root``, its sessions folder (the source's). ``read`` runs a
        function on the session's conversation under its lock (``registry.read``); ``wait``
        False does not wait for an in-flight notes extraction (the hook cannot); ``fork_id``
        names the new session (default: a new id of the agent's); ``fresh_only`` refuses notes
        that are behind (more than ``keep_max_tokens`` of messages after what they cover).
        Result: ``forked`` and the new ``session``, its ``path`` and the ``resume`` command, or
        ``forked: False`` and why."""
        writer = room.fork
        if writer is None:
            return NotForked(f"memd cannot write a {room.title} session yet")
        if wait:
            notes = await self.notes_input(state.session_id)
        else:
            notes = await self.notes_for(state.session_id) if self.notes_for else None
        if notes is None:
            return NotForked("the session has no notes yet")
        threshold = self.threshold(window)

        def plan(conv: Conversation) -> ForkPlan | FallThrough:
            msgs = messages_of(conv, self.tokens)
            return plan_fork(
                conv,
                msgs,
                notes,
                threshold=threshold,
                cfg=self.config.compaction,
                transcript_path=state.path,
                writer=writer,
                session_id=fork_id,
            )

        planned = await read(state, plan)
        if isinstance(planned, FallThrough):
            return NotForked(planned.detail, planned.reason)
        behind = planned.uncovered_tokens - self.config.compaction.keep_max_tokens
        if fresh_only and behind > 0:
            return NotForked(f"the notes are {behind} tokens behind")
        return await self._write_fork(state, room, root, planned, notes.notes or "")

    async def _write_fork(
        self, state: SessionState, room: Room, root: Path, planned: ForkPlan, notes: str
    ) -> ForkResult:
        """Write the planned fork where the agent finds it, with the notes it was made from
        given to it first (:mod:`memd.session.forked`); :meth:`fork`'s result."""
        fork = planned.fork
        assert room.fork is not None
        path = room.fork.place(Path(state.path), fork.session_id)
        seeded = self.fork_notes is not None
        if self.fork_notes is not None:
            try:
                await anyio.to_thread.run_sync(self.fork_notes.seed, state, fork, notes)
            except OSError as exc:  # the fork starts without notes: they are made again
                log.warning("the fork of %s starts without notes: %s", state.session_id, exc)
                seeded = False
        try:
            await anyio.to_thread.run_sync(write_new_session, root, path, fork.data)
        except OSError as exc:
            log.warning("fork of %s not written: %s", state.session_id, exc)
            if seeded and self.fork_notes is not None:
                await anyio.to_thread.run_sync(self.fork_notes.unseed, state, fork.session_id)
            return NotForked(f"writing the new session in {path.parent} failed: {exc}")
        log.info(
            "forked %s into %s: %d -> %d tokens, %d messages kept, no API call",
            state.session_id,
            fork.session_id,
            planned.tokens_before,
            planned.tokens_after,
            fork.kept_messages,
        )
        return Forked(
            session=fork.session_id,
            from_session=state.session_id,
            path=str(path),
            resume=room.resume(fork.session_id),
            tokens_before=planned.tokens_before,
            tokens_after=planned.tokens_after,
            kept_messages=fork.kept_messages,
            dropped_messages=planned.dropped_messages,
        )

    def microcompact(self, msgs: list[Msg], keep_recent: int | None) -> Microcompacted:
        keep = (
            self.config.compaction.microcompact_keep_recent if keep_recent is None else keep_recent
        )
        return microcompact(msgs, keep_recent=keep, estimate=estimate_content)

    def breaker_of(self, session_id: str) -> BreakerState:
        return self._breakers.get(session_id, BreakerState())

    def _record(
        self,
        outcome: Outcome,
        project: str,
        session: str,
        route: Route | Disabled | None,
        seconds: float,
    ) -> None:
        spent = outcome.spent
        if spent.api_calls:
            usage = Usage(
                spent.input_tokens,
                spent.output_tokens,
                spent.cache_creation_input_tokens,
                spent.cache_read_input_tokens,
            )
            routed = route if isinstance(route, Route) else None
            self.ledger.record(
                "compact",
                usage,
                project=project,
                session=session,
                backend=routed.backend if routed else "",
                priced=routed.priced if routed else True,
                seconds=seconds,
            )
        log.info(
            "compaction of %s: level %d, %d -> %d tokens, %d API calls",
            session or "(client messages)",
            outcome.level,
            outcome.tokens_before,
            outcome.tokens_after,
            spent.api_calls,
        )

    async def _set_breaker(self, session_id: str, state: BreakerState) -> None:
        self._breakers[session_id] = state
        snapshot = {
            k: v.consecutive_failures for k, v in self._breakers.items() if v.consecutive_failures
        }
        await anyio.to_thread.run_sync(persist, self._breakers_path, json.dumps(snapshot).encode())


def _load_breakers(path: Path) -> dict[str, BreakerState]:
    try:
        raw = json.loads(read_regular(path, MAX_BREAKERS_BYTES))  # a FIFO here never blocks
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, RecursionError) as exc:
        log.warning("ignoring unreadable %s: %s", path, exc)
        return {}
    if not isinstance(raw, dict):
        return {}
    return {str(k): BreakerState(int(v)) for k, v in raw.items() if isinstance(v, int)}
