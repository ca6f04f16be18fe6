"""Qwen Code (the daemon's ``memd/sources/qwen/``): hooks and MCP servers in its
``settings.json`` (``$QWEN_HOME``, else ``~/.qwen``; a project's in ``<root>/.qwen/``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd_client.agents.base import AgentTable, Env, HookFiles, McpFiles, Problem
from memd_client.hooks_install import AgentHooks

# Qwen's hooks are Claude Code's events; its command timeouts are seconds.
HOOKS = AgentHooks({"SessionStart": None, "UserPromptSubmit": None, "Stop": None}, 10)


def qwen_dir(env: Env, home: Path) -> Path:
    """Qwen's config folder: ``$QWEN_HOME`` or ``~/.qwen``."""
    given = env.get("QWEN_HOME")
    return Path(given) if given else home / ".qwen"


def _switches(
    settings: Mapping[str, Any], file: Path, env: Env, home: Path, installed: bool
) -> Problem | None:
    """Qwen's own switch that turns every hook off."""
    if installed and settings.get("disableAllHooks") is True:
        return (
            "fail",
            f"{file} has disableAllHooks true: Qwen Code runs no hooks",
            'remove "disableAllHooks" (or set it false)',
        )
    return None


TABLE = AgentTable(
    name="qwen",
    title="Qwen Code",
    short="qwen",
    hooks=HookFiles(
        HOOKS,
        settings=lambda env, home: qwen_dir(env, home) / "settings.json",
        found=qwen_dir,
        check=_switches,
    ),
    mcp=McpFiles(
        user=lambda env, home: qwen_dir(env, home) / "settings.json",
        project=lambda root: root / ".qwen" / "settings.json",
        fmt="json",
        servers="mcpServers",
    ),
)
