"""``memd-mcp`` in each agent's MCP configuration: install and uninstall (R-I8).

Where each agent keeps its MCP servers is its table's (:mod:`memd_client.agents`,
``McpFiles``):

=============  ==============================================  ==============================
agent          user scope                                      project scope
=============  ==============================================  ==============================
claude_code    ``claude mcp add -s user`` when the CLI is on   ``.mcp.json`` (``claude mcp
               PATH, else ``~/.claude.json`` ``mcpServers``    add -s project`` when on PATH)
codex          ``$CODEX_HOME/config.toml`` (``~/.codex``)      ``.codex/config.toml``
               ``[mcp_servers.memd]``
cursor         ``~/.cursor/mcp.json`` ``mcpServers``           ``.cursor/mcp.json``
gemini         ``~/.gemini/settings.json`` ``mcpServers``      ``.gemini/settings.json``
=============  ==============================================  ==============================

An agent's own CLI is preferred where its table names one (Claude Code's: a running Claude
Code rewrites ``~/.claude.json`` from memory and would drop an entry written behind its back).

The user-scope command is this interpreter with ``-m memd.mcp`` (absolute, so it works
from GUI agents without the user's PATH); the project-scope command is ``memd-mcp``, since
a project file is shared with other machines.

Each write is atomic, keeps the file's mode and formatting (:mod:`.config_files`), goes
through symlinks to the real file, and keeps the first ``<file>.memd-backup``, shared with
``install-hooks`` (:mod:`memd_client.config_backup`: the file as it was before memd first
changed it). Installing twice changes nothing; uninstalling removes only memd's entry and,
when nothing else changed since, puts back the original bytes (a file memd created goes).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memd.install.config_files import (
    ConfigFileError,
    Format,
    add_entry,
    parsed,
    remove_entry,
)
from memd_client.agents import AGENTS as TABLES
from memd_client.agents import named
from memd_client.agents.base import AgentTable, McpFiles
from memd_client.atomic import write_atomic
from memd_client.config_backup import (
    Original,
    backup_path,
    give_back,
    keep_first_backup,
    read_backup,
    same_json,
    same_toml,
    undone_on_refusal,
    write_refused,
)
from memd_client.config_read import (
    config_path,
    config_text,
    has_bom,
    read_config_bytes,
    read_config_text,
    with_bom,
)
from memd_client.foreign_file import UnusableFile

AGENTS = tuple(t.name for t in TABLES if t.mcp is not None)  # every agent with MCP
NAMES = tuple(n for t in TABLES if t.mcp is not None for n in (t.name, *t.aliases))
SERVER_NAME = "memd"
Scope = Literal["user", "project"]
Action = Literal["install", "uninstall"]


@dataclass(frozen=True)
class Target:
    agent: str
    path: Path
    fmt: Format
    keys: tuple[str, ...]
    entry: dict[str, Any]
    new_mode: int


@dataclass(frozen=True)
class Outcome:
    agent: str
    where: str  # the file, or "claude CLI"
    result: str  # installed, updated, unchanged, removed, absent, failed
    detail: str = ""
    backup: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "agent": self.agent,
            "where": self.where,
            "result": self.result,
            "detail": self.detail,
            "backup": self.backup,
        }


def server_command(scope: Scope) -> list[str]:
    """User scope: memd's own interpreter, ``-P`` so that a ``memd/`` or ``memd.py`` in the
    folder the agent starts the server in cannot shadow the package (``-I`` would also drop
    the user's site-packages, where ``pip install --user`` puts memd)."""
    return [sys.executable, "-P", "-m", "memd.mcp"] if scope == "user" else ["memd-mcp"]


def mcp_of(agent: str) -> tuple[AgentTable, McpFiles]:
    """The agent's table and where it keeps MCP servers (``ValueError`` for another name)."""
    table = named(agent)
    if table is None or table.mcp is None:
        raise ValueError(f"unknown agent {agent!r}; one of {', '.join(AGENTS)}")
    return table, table.mcp


def target_for(agent: str, scope: Scope, env: Mapping[str, str], project: Path) -> Target:
    """Where ``agent`` keeps its MCP servers for ``scope``, and memd's entry there."""
    table, mcp = mcp_of(agent)
    home = Path(env.get("HOME") or Path.home())
    command, *args = server_command(scope)
    user = scope == "user"
    path = mcp.user(env, home) if user else mcp.project(project)
    entry = mcp.entry({"command": command, "args": args})
    return Target(table.name, path, mcp.fmt, (mcp.servers,), entry, 0o600 if user else 0o644)


# ---------------------------------------------------------------------------------------------
# Files


def apply_file(target: Target, action: Action) -> Outcome:
    """Install or uninstall memd's entry in ``target``'s file."""
    real = config_path(target.path)
    where = str(target.path)
    try:
        old: bytes | None = read_config_bytes(real)
    except FileNotFoundError:
        old = None
    except UnusableFile as exc:
        return Outcome(target.agent, where, "failed", str(exc))
    except OSError as exc:
        return Outcome(target.agent, where, "failed", f"cannot read it: {exc}")
    try:
        text = config_text(real, old) if old is not None else ""
    except UnusableFile as exc:
        return Outcome(target.agent, where, "failed", str(exc))
    bom = old is not None and has_bom(old)
    if action == "uninstall" and old is None:
        return Outcome(target.agent, where, "absent", "no such file")
    try:
        if action == "install":
            new = add_entry(target.fmt, text, target.keys, SERVER_NAME, target.entry)
        else:
            new = remove_entry(target.fmt, text, target.keys, SERVER_NAME)
    except ConfigFileError as exc:
        return Outcome(target.agent, where, "failed", f"{where}: {exc}")
    if new is None:
        return Outcome(target.agent, where, "unchanged" if action == "install" else "absent")
    backup = backup_path(real)
    try:
        if action == "uninstall":
            return _write_uninstalled(target, real, with_bom(new, bom))
        with undone_on_refusal(real):  # no backup left of a file the disk kept as it was
            done = keep_first_backup(real, only_memd=old is not None and _only_memd(target, text))
            mode = None if old is not None else target.new_mode
            write_atomic(real, with_bom(new, bom), mode=mode)
    except OSError as exc:  # a full or read-only disk: this agent fails, the others go on
        return Outcome(target.agent, where, "failed", write_refused(exc, target.path))
    result = (
        "installed" if old is None or SERVER_NAME not in _servers_of(target, text) else "updated"
    )
    detail = "; ".join(line for line in done if line.startswith("left "))
    saved = read_backup(backup)
    kept = isinstance(saved, Original) and saved.data is not None
    return Outcome(target.agent, where, result, detail, backup=str(backup) if kept else None)


def _only_memd(target: Target, text: str) -> bool:
    """Whether the file says nothing but memd's entry (memd created it)."""
    rest = remove_entry(target.fmt, text, target.keys, SERVER_NAME)
    return rest is not None and not parsed(target.fmt, rest)


def _servers_of(target: Target, text: str) -> Mapping[str, Any]:
    node: Any = parsed(target.fmt, text)
    for key in target.keys:
        node = node.get(key, {}) if isinstance(node, dict) else {}
    return node if isinstance(node, dict) else {}


def _write_uninstalled(target: Target, real: Path, new: bytes) -> Outcome:
    same = same_json if target.fmt == "json" else same_toml
    empty = not parsed(target.fmt, config_text(real, new))
    done = give_back(real, new, same, empty=empty)
    restored = any(line.startswith(("restored", "removed")) for line in done)
    detail = "restored the file as it was before the install" if restored else ""
    said = "; ".join([detail, *(line for line in done if line.startswith("left "))])
    return Outcome(target.agent, str(target.path), "removed", said.strip("; "))


# ---------------------------------------------------------------------------------------------
# The agent's own CLI (Claude Code's)


def agent_cli(agent: str, env: Mapping[str, str]) -> str | None:
    """The agent's own CLI that edits its MCP config, when its table names one on PATH."""
    cli = mcp_of(agent)[1].cli
    return shutil.which(cli, path=env.get("PATH")) if cli else None


def apply_claude_cli(
    cli: str, target: Target, scope: Scope, action: Action, project: Path, env: Mapping[str, str]
) -> Outcome:
    """``claude mcp add/remove`` (it edits the files a running Claude Code also edits).

    Whether memd is there is read from the file the CLI writes (``claude mcp get`` waits
    ~20 s on network checks); the file itself is only ever written by the CLI.
    """

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [cli, "mcp", *args],
            cwd=project,
            env=dict(env),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )

    try:
        text = read_config_text(target.path)
    except FileNotFoundError:
        text = ""
    except (OSError, ValueError) as exc:
        return Outcome(target.agent, str(target.path), "failed", f"cannot read it: {exc}")
    try:
        current = _servers_of(target, text).get(SERVER_NAME)
    except ConfigFileError as exc:
        return Outcome(target.agent, str(target.path), "failed", f"{target.path}: {exc}")
    where = f"{Path(cli).name} CLI"
    if action == "install" and current == target.entry:
        return Outcome(target.agent, where, "unchanged", "memd is already configured")
    if current is None and action == "uninstall":
        return Outcome(target.agent, where, "absent")
    if current is not None:
        done = run("remove", SERVER_NAME, "-s", scope)
        if done.returncode != 0 or action == "uninstall":
            return _cli_outcome(target, where, done, "removed")
    done = run("add", "-s", scope, SERVER_NAME, "--", *server_command(scope))
    return _cli_outcome(target, where, done, "installed" if current is None else "updated")


def _cli_outcome(
    target: Target, where: str, done: subprocess.CompletedProcess[str], result: str
) -> Outcome:
    if done.returncode != 0:
        message = (done.stderr or done.stdout).strip().splitlines()
        return Outcome(target.agent, where, "failed", message[-1] if message else "failed")
    return Outcome(target.agent, where, result)


def apply(
    agents: Sequence[str], scope: Scope, action: Action, project: Path, env: Mapping[str, str]
) -> list[Outcome]:
    """Install or uninstall for each agent; one agent's failure does not stop the others."""
    outcomes = []
    for agent in agents:
        cli = agent_cli(agent, env)
        target = target_for(agent, scope, env, project)
        if cli is not None:
            outcomes.append(apply_claude_cli(cli, target, scope, action, project, env))
        else:
            outcomes.append(apply_file(target, action))
    return outcomes
