"""The ``agents`` section of the config: what memd does inside each agent's own files.

Issue 35, item 5. Both are opt-in: serving writes into a file the agent (and its user) own,
and a proposal waits for the user's review in the agent's own inbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ServedMemoryConfig:
    """One agent's own memory, as memd serves it (``agents.<agent>.*``)."""

    # Serve memd's verified memories in the agent's own memory files, in files or a block
    # memd owns (Gemini CLI: ~/.gemini/tmp/<project>/memory/MEMORY.md; Codex CLI: a memory
    # extension, ~/.codex/memories/extensions/memd/); off takes them out again.
    native_memory: bool = False
    # What memd serves there for one project, in bytes (Gemini sends its block with every
    # request; Codex folds its extension into the summary it sends).
    native_max_bytes: int = 8_192


@dataclass(frozen=True)
class NativeMemoryConfig(ServedMemoryConfig):
    """An agent whose own memory also has a review inbox (Gemini CLI)."""

    # New memories from the agent's sessions go to its review inbox as a proposal instead
    # of being written (Gemini CLI: `/memory inbox`).
    propose_memories: bool = False


@dataclass(frozen=True)
class AgentsConfig:
    gemini: NativeMemoryConfig = field(default_factory=NativeMemoryConfig)
    codex: ServedMemoryConfig = field(default_factory=ServedMemoryConfig)
