"""What memd does beside each session's agent: what the session's context holds, what its
Claude Code does itself, and so whether memd extracts memories from it.

:class:`Beside` keeps, per session, the record of what its context holds
(:mod:`memd.memory.session_context`) and decides from Claude Code's settings, environment and
version what its Claude Code does itself (:mod:`memd.memory.claude_code`); for another agent,
its room says whether it keeps memories of its own (``own_memory_of``). The memory service
asks it; the hooks' environment also moves a project's memory dir (:meth:`Beside.moving_env`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.to_thread

from memd.config import MemoryConfig
from memd.memory.claude_code import (
    FORWARDED_ENV,
    MOVING_ENV,
    ClaudeCodeFacts,
    Settings,
    decide,
    read_settings,
)
from memd.memory.frontmatter import FrontmatterForm
from memd.memory.paths import memory_dir
from memd.memory.session_context import SessionContext, SessionContexts, apply, scan_transcript
from memd.state import SessionState

# Why memd extracts no memories from a session in a cwd (its agent keeps its own), or None:
# a source's own_memory (memd.sources.base.Source), for the agents whose native memory is not
# decided per session.
OwnMemory = Callable[[str], str | None]
MAX_REMEMBERED = 1_024  # projects whose version and moving variables are remembered


class Beside:
    """See the module docstring."""

    def __init__(
        self,
        projects_root: Path,
        claude_dir: str,
        home: str | None,
        config: Callable[[], MemoryConfig],
        own_memory_of: Callable[[SessionState], OwnMemory | None],
    ) -> None:
        self._projects_root = projects_root
        self._claude_dir = claude_dir
        self._home = home
        self._config = config
        self._own_memory_of = own_memory_of
        self.contexts = SessionContexts()
        self._project_versions: OrderedDict[str, str] = OrderedDict()
        # cwd → the variables that move the memory dir, as the newest hook there forwarded
        self._moving_env: OrderedDict[str, dict[str, str]] = OrderedDict()

    def moving_env(self, cwd: str) -> dict[str, str]:
        """The variables that move ``cwd``'s memory dir, as its newest hook forwarded them."""
        return self._moving_env.get(cwd, {})

    def _remember_env(self, cwd: str, env: dict[str, str]) -> None:
        self._moving_env[cwd] = {k: v for k, v in env.items() if k in MOVING_ENV}
        self._moving_env.move_to_end(cwd)
        while len(self._moving_env) > MAX_REMEMBERED:
            self._moving_env.popitem(last=False)

    def _settings_and_dir(self, project_dir: str, cwd: str) -> tuple[Settings, Path | None]:
        """Claude Code's settings for ``project_dir`` and the memory dir of ``cwd`` (None for
        a relative one), read in one worker thread: ``session`` asks for both on every call."""
        where = memory_dir(self._projects_root, Path(cwd)) if cwd.startswith("/") else None
        return read_settings(self._claude_dir, project_dir), where

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
            while len(self._project_versions) > MAX_REMEMBERED:
                self._project_versions.popitem(last=False)
        version = record.version or self._project_versions.get(key)
        folder = where.parent.name if where is not None else ""
        facts = decide(settings, record.env, version, self._home, folder)
        self.contexts.set_facts(record, facts)
        return facts

    async def facts_of(self, state: SessionState) -> tuple[SessionContext, ClaudeCodeFacts]:
        """The record of a session memd reads, and what its Claude Code does itself."""
        record = await self.session_context(state.session_id, state.path)
        return record, await self.claude_code(record, state.cwd or "")

    async def status(self, state: SessionState) -> dict[str, Any]:
        """For ``memdctl session``: what the session's Claude Code does itself, and so what
        memd does and does not do beside it (for another agent: its own memory only)."""
        if self._own_memory_of(state) is not None:
            off = await self.extraction_off(state)
            return {"agent": state.agent, "memd_extraction": f"off: {off}" if off else "on"}
        record, facts = await self.facts_of(state)
        off = facts.extraction_off(self._config().extract_beside_claude_code)
        return {
            **facts.as_dict(),
            "memd_index": "not injected: Claude Code loads MEMORY.md itself"
            if facts.auto_memory
            else ("injected" if record.index_injected else "not injected yet"),
            "memd_extraction": f"off: {off}" if off else _beside_on(facts.auto_memory),
            "surfaced": len(record.surfaced),
            "notes_owed": record.notes_owed,
        }

    def statistics(self, waiting: int) -> dict[str, Any]:
        """For ``memdctl status``: sessions seen through hooks, by Claude Code's auto memory;
        ``waiting``: extractions waiting for it (:class:`~memd.memory.beside_wait.BesideWaits`)."""
        return {
            "sessions": self.contexts.decided,
            "claude_auto_memory_on": self.contexts.auto_memory_on,
            "extract_beside_claude_code": self._config().extract_beside_claude_code,
            "waiting_for_claude_code": waiting,
        }

    async def form_for(self, state: SessionState) -> FrontmatterForm:
        """The frontmatter form the session's Claude Code writes (memd writes the same)."""
        return (await self.facts_of(state))[1].frontmatter_form

    async def waits_for(self, state: SessionState) -> bool:
        """Whether memd's extraction of this session waits for Claude Code's own memory
        (a Claude Code session whose auto memory is on, extraction beside it on, a wait set:
        ``memory.beside_wait_s`` 0 extracts at once)."""
        config = self._config()
        if not config.extract_beside_claude_code or config.beside_wait_s <= 0:
            return False
        if self._own_memory_of(state):
            return False
        return (await self.facts_of(state))[1].auto_memory

    async def extraction_off(self, state: SessionState) -> str | None:
        """Why memd extracts nothing for this session (its agent does it), or None."""
        config = self._config()
        own_memory = self._own_memory_of(state)
        if own_memory is not None:  # another agent's memory, kept apart from memd's
            if config.extract_beside_agent_memory:
                return None
            return await anyio.to_thread.run_sync(own_memory, state.cwd or "")
        if config.extract_beside_claude_code:
            return None
        return (await self.facts_of(state))[1].extraction_off(False)


def _beside_on(auto_memory: bool) -> str:
    if not auto_memory:
        return "on"
    return "on: beside Claude Code's auto memory (a turn it writes memories after is left to it)"
