"""What memdctl knows of one agent: the table each agent's module fills in.

memdctl does not import ``memd`` (msgpack only), so it mirrors the daemon's agent rooms
(``memd/sources/<agent>/``) with one :class:`AgentTable` per agent: its one name (the room's,
and the older names it accepts), where its hooks and its MCP servers are configured and what
memd writes there, what ``doctor`` checks for it, and the environment its hook hands the
daemon. ``install-hooks``, ``install-mcp``, ``doctor``, the hook and ``top`` loop over
:data:`memd_client.agents.AGENTS`; nothing else names an agent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memd_client.hooks_install import AgentHooks

Env = Mapping[str, str]
# Where a file lives for an agent, from the environment and the home dir.
Place = Callable[[Env, Path], Path]
# A further doctor check of the agent's hooks: (verdict, detail, fix), or None when all is
# well; given the parsed hooks file, its path, the environment, the home dir and whether
# memd's hooks are installed there.
Problem = tuple[Literal["ok", "warn", "fail"], str, str]
HookCheck = Callable[[Mapping[str, Any], Path, Env, Path, bool], Problem | None]


@dataclass(frozen=True)
class HookFiles:
    """The agent's hooks file and what memd writes into it.

    ``spec``: the events, matchers and timeouts of memd's entries (``takeover``: those
    ``install-hooks --compact-takeover`` writes instead, when the agent has it);
    ``settings``: the user-scope file; ``found``: the folder whose presence says the agent
    is installed (``doctor`` passes an agent that is not); ``named``: the hook command names
    the agent (its last argument; hooks of the agent a command naming none is for do not);
    ``installer``: a ``python -m`` module that installs them (``install``/``uninstall``), when
    editing the JSON file is not all it takes; ``required``: ``doctor`` fails rather than
    warns without them; ``check``: ``doctor``'s further check; ``edit_hint``: what to say
    when memd cannot edit the file as JSON."""

    spec: AgentHooks
    settings: Place
    found: Place
    takeover: AgentHooks | None = None
    named: bool = True
    installer: str | None = None
    required: bool = False
    check: HookCheck | None = None
    edit_hint: str = ""


@dataclass(frozen=True)
class McpFiles:
    """Where the agent keeps its MCP servers: ``user`` (from the environment and the home
    dir) and ``project`` (from the project's root) files, their format, the key of the
    servers table, memd's entry shaped from ``{"command", "args"}`` and, when the agent
    has one, its own CLI that edits the file (preferred when it is on PATH)."""

    user: Place
    project: Callable[[Path], Path]
    fmt: Literal["json", "toml"]
    servers: str
    entry: Callable[[dict[str, Any]], dict[str, Any]] = dict
    cli: str | None = None


@dataclass(frozen=True)
class AgentTable:
    """One agent, as memdctl knows it (see the module doc)."""

    name: str  # the daemon's room's name: in status, hook commands, install and doctor
    title: str  # the agent's own name, for people
    short: str  # at most six characters: the AGENT column of ``memdctl top``
    aliases: tuple[str, ...] = ()  # older names still accepted
    hooks: HookFiles | None = None
    mcp: McpFiles | None = None
    forwarded_env: tuple[str, ...] = ()  # variables its hook hands the daemon

    def called(self, name: str) -> bool:
        """Whether ``name`` is this agent's name or one it had."""
        return name == self.name or name in self.aliases

    @property
    def hook_name(self) -> str:
        """The name its hook command ends with (``""``: none)."""
        return self.name if self.hooks is not None and self.hooks.named else ""
