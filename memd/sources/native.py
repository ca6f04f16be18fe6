"""An agent's own memory file, served by memd (issue 35, item 5): the protocol a room
implements when its agent loads memories from a file of its own every request.

memd writes its verified memories into that file as a block it owns (the user's bytes kept
exactly; off again gives them back) and reads back which memories the block held when the
agent loaded it, so its prompt hook does not inject them a second time. What the memory
service hands the room is plain data (:class:`Served`): the room renders it in its agent's
file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from memd.config import LoadedConfig


@dataclass(frozen=True)
class Served:
    """One verified memory as memd serves it in an agent's own file."""

    path: str  # absolute: how the hook knows it (a session's surfaced set)
    name: str
    kind: str  # "user", "project", … or ""
    updated: str  # the day it was last written, YYYY-MM-DD
    content: str


class NativeMemory(Protocol):
    """A room's own memory file (blocking methods: call from a worker thread)."""

    def enabled(self, loaded: LoadedConfig) -> bool:
        """Whether the user turned serving on for this agent."""
        ...

    def budget(self, loaded: LoadedConfig) -> int:
        """The most bytes memd's block may take in the agent's file."""
        ...

    def served(self, loaded: LoadedConfig, cwd: str) -> frozenset[str]:
        """The memories (absolute paths) memd's block holds in the file the agent loads
        for ``cwd`` now; empty when there is none."""
        ...

    def serve(self, loaded: LoadedConfig, cwd: str, memories: Sequence[Served]) -> str:
        """Put ``memories`` in the agent's file for ``cwd`` as memd's block (none: take the
        block out); what happened, in a few words for the log."""
        ...

    def take_out(self, loaded: LoadedConfig) -> int:
        """With serving off, take memd's block out of every project's file (a hook of the
        agent's may never come again: uninstalled); how many files changed."""
        ...

    def trouble(self) -> str | None:
        """Why the last :meth:`serve` wrote nothing (a write that failed, a file left alone
        as not memd's), for ``status``; None once one went through. The next turn's end
        tries again."""
        ...


class Proposals(Protocol):
    """A room's review inbox: new memories from its sessions proposed for the user to take
    or drop in the agent, rather than written (blocking: call from a worker thread)."""

    def enabled(self, loaded: LoadedConfig) -> bool:
        """Whether the user asked for proposals from this agent's sessions."""
        ...

    def propose(self, loaded: LoadedConfig, cwd: str, memories: Sequence[tuple[str, str]]) -> str:
        """Propose ``memories`` (memd's file name in the memory dir, its text) for the
        project at ``cwd``; what happened, in a few words for the run's record."""
        ...
