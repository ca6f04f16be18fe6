"""Every source memd follows, from the config: the one list of agents' rooms."""

from __future__ import annotations

from memd.config import LoadedConfig
from memd.sources.base import Source
from memd.sources.claude_code import ClaudeCode
from memd.sources.codex import Codex
from memd.sources.gemini import Gemini


def sources_for(loaded: LoadedConfig) -> list[Source]:
    """Claude Code's projects root first (its root is made when missing), then each other
    agent that ``sources.*`` leaves on."""
    paths, on = loaded.paths, loaded.config.sources
    found: list[Source] = [ClaudeCode(paths.projects_root)]
    if on.codex:
        found.append(Codex(paths.codex_home))
    if on.gemini:
        found.append(Gemini(paths.gemini_dir))
    return found
