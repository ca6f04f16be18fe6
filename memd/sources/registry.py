"""Every source memd follows, from the resolved paths: the one list of agents' rooms."""

from __future__ import annotations

from memd.config import ResolvedPaths
from memd.sources.base import Source
from memd.sources.claude_code import ClaudeCode


def sources_for(paths: ResolvedPaths) -> list[Source]:
    """Claude Code's projects root first (its root is made when missing)."""
    return [ClaudeCode(paths.projects_root)]
