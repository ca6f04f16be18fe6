"""What an agent's room says of how its transcript shows a memory's use (issue 36): the
shapes :mod:`memd.memory.usage_evidence` judges by, apart, so that a room (imported before
the daemon is ready) holds its rules without importing the judging.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

MAX_CALLS = 512  # tool calls of one window looked at


@dataclass(frozen=True)
class Call:
    """One tool call as the agent made it: its name and its arguments (decoded JSON)."""

    name: str
    args: Mapping[str, Any]


@dataclass(frozen=True)
class Rules:
    """How one agent's transcript shows use (its room fills it in).

    ``file_args``: tool name -> the argument keys that name files it opens (a string or a
    list of strings); ``shell_args``: tool name -> the argument holding a command line (a
    string, or argv as a list); ``mcp_read`` / ``mcp_recall``: the names memd's MCP
    ``read_memory`` and ``recall`` tools have in this agent; ``citations``: the memory files a
    reply's citation tag names (None: the agent writes none); ``calls_in_text``: for an agent
    whose reader writes tool calls into the text (Gemini), the text without them and the
    calls; ``user_words``: a user message's words with the agent's own additions (a hook's
    context it prepended) left out."""

    file_args: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    shell_args: Mapping[str, str] = field(default_factory=dict)
    mcp_read: frozenset[str] = frozenset()
    mcp_recall: frozenset[str] = frozenset()
    citations: Callable[[str], tuple[str, ...]] | None = None
    calls_in_text: Callable[[str], tuple[str, tuple[Call, ...]]] | None = None
    user_words: Callable[[str], str] | None = None
