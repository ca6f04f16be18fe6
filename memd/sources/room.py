"""An agent's room: everything about one coding agent, in one place.

A :class:`Room` says what needs no paths: the agent's one name (and the older names memd
still reads from saved state and installed hook commands), its hook dialect
(:mod:`memd.sources.hooks`), how a session of it is resumed, and the writer of a compacted
session in its own format (None: memd cannot write one for it yet). :attr:`Room.open` makes
its :class:`~memd.sources.base.Source` from the config: where its sessions live, their
reader, which of them the dream counts, its native memory (None: memd does not follow its
sessions here). The house knows agents only through rooms: the list is
:data:`memd.sources.registry.ROOMS`, and a new agent is a new package beside the others plus
one line there (``docs/ARCHITECTURE.md``, "Adding an agent").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from memd.config import LoadedConfig
from memd.sources.base import ForkWriter, ModelWindow, Source
from memd.sources.hooks import HookDialect
from memd.sources.native import NativeMemory, Proposals
from memd.sources.usage import Rules


@dataclass(frozen=True)
class Room:
    """One agent (see the module doc)."""

    name: str  # the one name: in state, status, the hook command, install and doctor
    title: str  # the agent's own name, for people ("Codex CLI")
    hooks: HookDialect
    open: Callable[[LoadedConfig], Source | None]  # its sessions here, None: not followed
    resume: Callable[[str], str]  # the shell command that resumes a session of it
    aliases: tuple[str, ...] = ()  # older names read from saved state and hook commands
    fork: ForkWriter | None = None  # writes a compacted session the agent resumes
    # Its native memory is decided per session, from its settings and what its hooks forward
    # (memd.memory.claude_code: it may load MEMORY.md and write memories itself), rather than
    # by its source's ``own_memory``.
    memory_per_session: bool = False
    # How its transcript shows that its agent used a memory memd gave it (issue 36; None:
    # memd does not judge it): memd.memory.usage_evidence.
    usage: Rules | None = None
    # The context window the agent gives a session of a model (its name as the transcript
    # records it), None when it does not say: the config decides (issue 38).
    window: Callable[[str], ModelWindow | None] | None = None
    # The agent's own memory file, loaded with every request, where memd may serve its
    # verified memories (issue 35; None: the agent has none memd can write).
    native: NativeMemory | None = None
    # Its review inbox, where new memories from its sessions may go as proposals (None: none).
    inbox: Proposals | None = None

    def called(self, name: str) -> bool:
        """Whether ``name`` is this agent's name or one it had."""
        return name == self.name or name in self.aliases
