"""Gemini CLI (the daemon's ``memd/sources/gemini/``): hooks and MCP servers in its
``settings.json`` (``$GEMINI_CLI_HOME/.gemini``, ``~/.gemini``)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd_client.agents.base import AgentTable, Env, HookFiles, McpFiles, Problem
from memd_client.hooks_install import AgentHooks, is_memd_hook

# Gemini's prompt event is BeforeAgent, its turn end AfterAgent; its timeouts are milliseconds.
HOOKS = AgentHooks({"SessionStart": None, "BeforeAgent": None, "AfterAgent": None}, 10_000)
EDIT_HINT = (
    ". If it holds comments (Gemini allows them), memd cannot edit it without losing them: "
    "remove them, or add memd's SessionStart, BeforeAgent and AfterAgent hooks by hand"
)


def gemini_dir(env: Env, home: Path) -> Path:
    """Gemini's folder: ``$GEMINI_CLI_HOME/.gemini`` or ``~/.gemini``."""
    return Path(env.get("GEMINI_CLI_HOME") or home) / ".gemini"


def _switches(
    settings: Mapping[str, Any], file: Path, env: Env, home: Path, installed: bool
) -> Problem | None:
    """Gemini's own switches that turn memd's hook (or every hook) off."""
    if not installed:
        return None
    config = settings.get("hooksConfig")
    config = config if isinstance(config, dict) else {}
    if config.get("enabled") is False:
        return (
            "fail",
            f"{file} has hooksConfig.enabled false: Gemini runs no hooks",
            'set "hooksConfig": {"enabled": true}',
        )
    disabled = config.get("disabled")
    if isinstance(disabled, list) and any(is_memd_hook(d) for d in disabled):
        return (
            "fail",
            f"memd's hook is in hooksConfig.disabled in {file}",
            "remove it from that list (or `/hooks enable` it in Gemini)",
        )
    return None


TABLE = AgentTable(
    name="gemini",
    title="Gemini CLI",
    short="gemini",
    hooks=HookFiles(
        HOOKS,
        settings=lambda env, home: gemini_dir(env, home) / "settings.json",
        found=gemini_dir,
        check=_switches,
        edit_hint=EDIT_HINT,
    ),
    mcp=McpFiles(
        user=lambda env, home: home / ".gemini" / "settings.json",
        project=lambda root: root / ".gemini" / "settings.json",
        fmt="json",
        servers="mcpServers",
    ),
)
