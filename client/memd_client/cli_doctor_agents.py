"""``memdctl doctor``'s check of each agent's hooks and MCP entries, over the agents' tables
(:mod:`memd_client.agents`).

An agent whose hooks are optional (``required`` false) and is not installed passes ("not
found"); one that is there without memd's hooks is a warning with the command that installs
them, or passes when memd reaches it over MCP (``memdctl install-mcp``: the agent can ask memd
itself). Without the hooks of an agent that needs them, doctor fails unless some agent reaches
memd over MCP. Half an install, a hook command that cannot run or names another agent, or the
agent's own further check (Codex's trust, Gemini's switches) fails; a hook in an older,
slower form, or one the agent waits for needlessly, warns.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from memd_client.agents import AGENTS, UNNAMED
from memd_client.agents.base import AgentTable, HookFiles
from memd_client.config_read import parse_json, parse_toml, read_config_text
from memd_client.hooks_install import MemdHook, parse_memd_hook, read_settings, waited_for


class Found(Protocol):
    """What the doctor gathered that these checks read (``cli_doctor.Facts``)."""

    env: dict[str, str]
    home: Path
    settings: Path  # ``--settings``: the unnamed agent's hooks file, when given


Make = Callable[..., Any]  # cli_doctor.Check's constructor (name, verdict, detail, fix)


def memd_hooks(groups: object) -> list[MemdHook]:
    """memd's hook commands in one event's groups."""
    found = []
    for group in groups if isinstance(groups, list) else []:
        inner = group.get("hooks") if isinstance(group, dict) else None
        for h in inner if isinstance(inner, list) else []:
            parsed = parse_memd_hook(h.get("command")) if isinstance(h, dict) else None
            if parsed is not None:
                found.append(parsed)
    return found


def runnable(hook: MemdHook) -> bool:
    program = hook.program
    if "/" not in program:
        runs = any(os.access(Path(d) / program, os.X_OK) for d in os.get_exec_path())
    else:
        runs = os.access(program, os.X_OK) and Path(program).is_file()
    return runs and (hook.module_file is None or Path(hook.module_file).is_file())


def mcp_agents(env: dict[str, str], home: Path) -> list[str]:
    """The agents whose user-scope MCP config names memd's server (``memdctl install-mcp``)."""
    found = []
    for table in AGENTS:
        if table.mcp is None:
            continue
        path = table.mcp.user(env, home)
        try:
            text = read_config_text(path)
            parse = parse_toml if table.mcp.fmt == "toml" else parse_json
            data = parse(path, text)
        except (OSError, ValueError):
            continue
        servers = data.get(table.mcp.servers)
        if isinstance(servers, dict) and "memd" in servers:
            found.append(table.name)
    return found


def install_fix(table: AgentTable) -> str:
    """The command that installs the agent's hooks."""
    agent = "" if table is UNNAMED else f" --agent {table.name}"
    return f"run `memdctl install-hooks{agent}`"


def hooks_file(table: AgentTable, f: Found) -> Path:
    """The agent's hooks file (``--settings`` names the unnamed agent's)."""
    assert table.hooks is not None
    given = f.settings if table is UNNAMED and str(f.settings) not in ("", ".") else None
    return given or table.hooks.settings(f.env, f.home)


def check_agent_hooks(table: AgentTable, f: Found, make: Make, over_mcp: list[str]) -> Any:
    """The check of one agent's hooks file (see the module doc)."""
    hooks = table.hooks
    assert hooks is not None
    name, fix = f"{table.name} hooks", install_fix(table)
    file = hooks_file(table, f)
    if not hooks.required and not hooks.found(f.env, f.home).is_dir():
        where = hooks.found(f.env, f.home)
        return make(name, "ok", f"{table.title} not found ({where} does not exist)")
    try:
        settings = read_settings(file)
    except (OSError, ValueError) as exc:
        return make(name, "fail", str(exc), f"repair {file}, then {fix}")
    groups = settings.get("hooks") if isinstance(settings.get("hooks"), dict) else {}
    assert isinstance(groups, dict)
    found = {event: memd_hooks(groups.get(event)) for event in hooks.spec.events}
    missing = [event for event, mine in found.items() if not mine]
    unreadable = hooks.check(settings, file, f.env, f.home, False) if hooks.check else None
    if unreadable is not None:
        return make(name, *unreadable)
    if len(missing) == len(found):
        return _none_installed(table, hooks, file, make, over_mcp)
    if missing:
        return make(name, "fail", f"no memd hook for {', '.join(missing)} in {file}", fix)
    every = [h for mine in found.values() for h in mine]
    problem = _command_problem(table, every, settings, file, f)
    if problem is not None:
        return make(name, *problem)
    return make(name, "ok", f"memd's hook runs on {', '.join(hooks.spec.events)} ({file})")


def _none_installed(
    table: AgentTable, hooks: HookFiles, file: Path, make: Make, over_mcp: list[str]
) -> Any:
    """No memd hook at all in the agent's file."""
    name, fix = f"{table.name} hooks", install_fix(table)
    reached = over_mcp if hooks.required else [a for a in over_mcp if a == table.name]
    if reached:
        return make(
            name,
            "ok",
            f"none in {file}; memd is reached over MCP ({', '.join(reached)}), so hooks are "
            "optional",
            f"{fix} to have memories brought into prompts without the agent asking",
        )
    if hooks.required:
        return make(name, "fail", f"no memd hook in {file}", fix)
    return make(name, "warn", f"no memd hook in {file}", fix)


def _command_problem(
    table: AgentTable, every: list[MemdHook], settings: dict[str, Any], file: Path, f: Found
) -> tuple[str, str, str] | None:
    """What is wrong with memd's installed hook commands, as (verdict, detail, fix)."""
    hooks = table.hooks
    assert hooks is not None
    fix = install_fix(table)
    broken = next((h for h in every if not runnable(h)), None)
    if broken is not None:
        what = broken.module_file or broken.program
        return ("fail", f"the hook's {what} does not exist or cannot run", fix)
    if any(h.agent != table.hook_name for h in every):
        named = table.hook_name or "no agent"
        return ("fail", f"memd's hook in {file} does not name {named}", fix)
    problem = hooks.check(settings, file, f.env, f.home, True) if hooks.check else None
    if problem is not None:
        return problem
    older = next((h for h in every if h.form != "interpreter"), None)
    if older is not None:
        detail = f"the hook runs in an older, slower form ({older.form}: {older.program})"
        return ("warn", detail, f"{fix}: it replaces it")
    waited = waited_for(settings, hooks.spec)
    if waited:
        return (
            "warn",
            f"{table.title} waits for memd's {' and '.join(waited)} hook (an older install), "
            "which only tells memd a turn ended: it slows every prompt",
            f"{fix}: it removes that hook and runs the session's end in the background",
        )
    return None
