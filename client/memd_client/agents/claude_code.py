"""Claude Code (the daemon's ``memd/sources/claude_code/``): ``settings.json`` hooks, MCP in
``~/.claude.json`` (through ``claude mcp`` when it is on PATH), and the environment that
decides what its own memory does. Its hook commands name no agent (older installs called it
``claude``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from memd_client.agents.base import AgentTable, Env, HookFiles, McpFiles
from memd_client.hooks_install import AgentHooks

MATCHERS: dict[str, str | None] = {
    # Not at a startup: the first prompt's hook brings the index then (one process fewer
    # before ``claude -p`` answers; BENCHMARKS.md, issue 25).
    "SessionStart": "resume|clear|compact",
    "UserPromptSubmit": None,
    "SessionEnd": None,  # the session's last memory extraction (the hook only notifies memd)
}
HOOK_TIMEOUT_S = 10
# ``--compact-takeover`` (off by default): ``/compact`` served by a fork from the notes
# (memd.compaction.takeover). Claude Code waits for a PreCompact hook until its timeout, then
# kills it and compacts anyway; memd answers in well under a second or lets it through.
TAKEOVER_MATCHERS: dict[str, str | None] = {"PreCompact": "manual"}
TAKEOVER_TIMEOUT_S = 5
# SessionEnd only tells memd the session ended, and each hook Claude Code waits for is a
# process on the prompt path (BENCHMARKS.md, issue 25): its command starts the hook in the
# background (hooks_install.detached), so Claude Code waits for a shell and ``cat`` alone.
# Not ``"async": true``, nor a bare ``… &``: Claude Code (2.1.197, 2.1.331) then writes no
# stdin to a hook whose shell has exited; the shell reads it first. No Stop hook any more:
# memd reads turn ends from the transcript (``turn_duration``), print mode's one turn ends
# with its SessionEnd, and an async Stop made ``claude -p`` wait ~1.5 s at exit (2.1.331).
BACKGROUND = frozenset({"SessionEnd"})
# The part of Claude Code's environment that decides what Claude Code does itself, and the
# variables that move its memory dir (memd.memory.claude_code reads them).
FORWARDED_ENV = (
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY",
    "CLAUDE_CODE_SIMPLE",
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_COWORK_MEMORY_PATH_OVERRIDE",
    "CLAUDE_CODE_PROJECT_DIR_NAME",
    "CLAUDE_CONFIG_DIR",
)

HOOKS = AgentHooks(
    MATCHERS,
    HOOK_TIMEOUT_S,
    optional=tuple(TAKEOVER_MATCHERS),
    background=BACKGROUND,
    retired=("Stop",),
)
TAKEOVER_HOOKS = AgentHooks(
    {**MATCHERS, **TAKEOVER_MATCHERS},
    HOOK_TIMEOUT_S,
    {"PreCompact": TAKEOVER_TIMEOUT_S},
    background=BACKGROUND,
    retired=("Stop",),
)


def claude_dir(env: Env, home: Path) -> Path:
    """Claude Code's config dir: ``$CLAUDE_CONFIG_DIR`` or ``~/.claude``."""
    return Path(env.get("CLAUDE_CONFIG_DIR") or home / ".claude")


def _settings(env: Env, home: Path) -> Path:
    return claude_dir(env, home) / "settings.json"


def _mcp_user(env: Env, home: Path) -> Path:
    given = env.get("CLAUDE_CONFIG_DIR")
    return (Path(given) if given else home) / ".claude.json"


def _mcp_entry(plain: dict[str, Any]) -> dict[str, Any]:
    return {"type": "stdio", **plain, "env": {}}


TABLE = AgentTable(
    name="claude_code",
    title="Claude Code",
    short="claude",
    aliases=("claude",),
    hooks=HookFiles(
        HOOKS,
        settings=_settings,
        found=claude_dir,
        takeover=TAKEOVER_HOOKS,
        named=False,
        required=True,
    ),
    mcp=McpFiles(
        user=_mcp_user,
        project=lambda root: root / ".mcp.json",
        fmt="json",
        servers="mcpServers",
        entry=_mcp_entry,
        cli="claude",
    ),
    forwarded_env=FORWARDED_ENV,
)
