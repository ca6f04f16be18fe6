"""Every agent memdctl knows, one table each (:mod:`memd_client.agents.base`): the list that
``install-hooks``, ``install-mcp``, ``doctor``, the hook and ``top`` loop over. A new agent is
a new module here and one line in :data:`AGENTS` (beside its room in ``memd/sources/``)."""

from __future__ import annotations

from memd_client.agents import claude_code, codex, cursor, gemini, qwen
from memd_client.agents.base import AgentTable

AGENTS: tuple[AgentTable, ...] = (
    claude_code.TABLE,
    codex.TABLE,
    gemini.TABLE,
    qwen.TABLE,
    cursor.TABLE,
)
# The agent of a hook command that names none, and of install-hooks without --agent.
UNNAMED = AGENTS[0]


def named(name: str) -> AgentTable | None:
    """The table of the agent called ``name`` (its name or an older one), or None."""
    return next((table for table in AGENTS if table.called(name)), None)


def choices(*, hooks: bool = False, mcp: bool = False) -> tuple[str, ...]:
    """The names (and older names) ``--agent`` takes: of the agents with hooks, with MCP."""
    return tuple(
        name
        for table in AGENTS
        if (table.hooks is not None or not hooks) and (table.mcp is not None or not mcp)
        for name in (table.name, *table.aliases)
    )
