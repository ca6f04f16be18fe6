"""The context window a session is compacted in, and where it came from (issue 38). Pure,
and light: ``status`` and ``sessions`` show it before the compaction service is loaded.

In order: the request's ``context_window`` (a client that knows), else the window the
session's agent gives the model its transcript records (its room's ``window``: Claude Code's
``[1m]`` form and 1M-native models), else the config's ``compaction.default_context_window``.
A room's window is a figure of memd's own table, never one read from a file (a transcript
names a model; the name picks a row, or none); the request's was checked to be a whole
number in range by the IPC layer (:mod:`memd.ipc.params`).
"""

from __future__ import annotations

from dataclasses import dataclass

from memd.config import CompactionConfig
from memd.sources.base import ModelWindow

ASKED_WINDOW = "the request's context_window"
CONFIG_WINDOW = "config: compaction.default_context_window"
AGENT_WINDOW = "transcript: "  # then the room's reason (the model, the table)


@dataclass(frozen=True)
class Window:
    """The model's context window and output reserve, and where the window came from."""

    context_window: int
    max_output_tokens: int
    source: str = CONFIG_WINDOW


def session_window(
    cfg: CompactionConfig,
    known: ModelWindow | None,
    asked: int | None = None,
    max_output: int | None = None,
) -> Window:
    """The window of a compaction (see the module doc): ``asked`` is the request's
    ``context_window`` (falsy: not asked), ``known`` the one the session's agent gives."""
    output = max_output or cfg.default_max_output_tokens
    if asked:
        return Window(asked, output, ASKED_WINDOW)
    if known is not None:
        return Window(known.tokens, output, AGENT_WINDOW + known.why)
    return Window(cfg.default_context_window, output)


def effective_window(window: int, max_output: int, reserve: int = 20_000) -> int:
    """The part of the context window a prompt may use: room is kept for the reply."""
    return window - min(max_output, reserve)


def auto_compact_threshold(window: int, max_output: int, cfg: CompactionConfig) -> int:
    """Token count at which auto-compaction starts (about 93% of the effective window)."""
    return effective_window(window, max_output, cfg.max_output_reserve) - cfg.buffer_tokens
