"""Codex CLI (the daemon's ``memd/sources/codex/``): hooks in ``$CODEX_HOME/hooks.json`` with
their trust in ``config.toml`` (installed by ``memd.install.codex_hooks``, which edits TOML
keeping its comments), MCP servers in ``config.toml``."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from memd_client.agents.base import AgentTable, Env, HookFiles, McpFiles, Problem
from memd_client.hooks_codex import (
    codex_home,
    hooks_turned_off,
    read_config,
    trust_entries,
    trusted_state,
)
from memd_client.hooks_install import AgentHooks, is_memd_hook

# Codex sends Claude Code's input and takes its output under the same event names (seconds).
# Its Stop is a turn end for extraction: ``codex exec`` ends with no quiet period to wait for.
EVENTS: dict[str, str | None] = {"SessionStart": None, "UserPromptSubmit": None, "Stop": None}
# ``--compact-takeover`` (off by default): ``/compact`` served by a fork from the notes
# (memd.compaction.takeover); Codex stops its compaction when the hook answers
# ``"continue": false``, and compacts as usual when the hook prints nothing or times out.
TAKEOVER_MATCHERS: dict[str, str | None] = {"PreCompact": "manual"}
TAKEOVER_TIMEOUT_S = 5
HOOKS = AgentHooks(EVENTS, 10, optional=tuple(TAKEOVER_MATCHERS))
TAKEOVER_HOOKS = AgentHooks({**EVENTS, **TAKEOVER_MATCHERS}, 10, {"PreCompact": TAKEOVER_TIMEOUT_S})


def _hooks_file(env: Env, home: Path) -> Path:
    return codex_home(env, home) / "hooks.json"


def _mcp_user(env: Env, home: Path) -> Path:
    return Path(env.get("CODEX_HOME") or home / ".codex") / "config.toml"


def _trust(
    settings: Mapping[str, Any], file: Path, env: Env, home: Path, installed: bool
) -> Problem | None:
    """Codex skips a hook nobody trusted, and runs none when its hooks are turned off; a
    ``config.toml`` memd cannot read is a failure whatever is installed."""
    config = file.parent / "config.toml"
    try:
        toml = read_config(config)
    except (OSError, ValueError) as exc:
        return ("fail", str(exc), "repair it, then install the hooks again")
    if not installed:
        return None
    off = hooks_turned_off(toml)
    if off:
        return ("fail", f"{config} has {off}: Codex runs no hooks", f"remove {off}")
    state = trusted_state(toml)
    expected = trust_entries(file, dict(settings), is_memd_hook)
    if any(state.get(key) != value for key, value in expected.items()):
        return (
            "fail",
            f"Codex skips memd's hooks: their trust in {config} is missing or stale",
            "run `memdctl install-hooks --agent codex` (it records the trust again)",
        )
    return None


TABLE = AgentTable(
    name="codex",
    title="Codex CLI",
    short="codex",
    hooks=HookFiles(
        HOOKS,
        settings=_hooks_file,
        found=codex_home,
        installer="memd.install.codex_hooks",
        check=_trust,
        takeover=TAKEOVER_HOOKS,
    ),
    mcp=McpFiles(
        user=_mcp_user,
        project=lambda root: root / ".codex" / "config.toml",
        fmt="toml",
        servers="mcp_servers",
    ),
)
