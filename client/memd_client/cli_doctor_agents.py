"""``memdctl doctor``'s checks of the hooks of the other agents it finds: Codex CLI
(``$CODEX_HOME``, ``~/.codex``) and Gemini CLI (``$GEMINI_CLI_HOME/.gemini``, ``~/.gemini``).

An agent that is not there passes ("not found"). One that is there without memd's hooks is a
warning with the command that installs them, or passes when memd reaches it over MCP
(``memdctl install-mcp``: the agent can ask memd itself). Half an install, a hook command that
cannot run, a Codex hook without the trust Codex wants (it skips it without a word), or the
agent's own switch turning its hooks off, fail.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from memd_client.hooks_codex import (
    codex_home,
    hooks_turned_off,
    read_config,
    trust_entries,
    trusted_state,
)
from memd_client.hooks_install import (
    AGENT_HOOKS,
    AgentHooks,
    MemdHook,
    is_memd_hook,
    parse_memd_hook,
    read_settings,
)


class Found(Protocol):
    """What the doctor gathered that these checks read (``cli_doctor.Facts``)."""

    env: dict[str, str]
    home: Path


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


def check_agent(
    make: Make,
    spec: AgentHooks,
    file: Path,
    settings: dict[str, Any],
    over_mcp: bool,
    extra: Callable[[], tuple[str, str, str] | None],
) -> Any:
    """The check of one agent's hooks file (``extra``: the agent's own further check, giving
    (verdict, detail, fix) when something is wrong)."""
    name, fix = f"{spec.agent} hooks", f"run `memdctl install-hooks --agent {spec.agent}`"
    hooks = settings.get("hooks") if isinstance(settings.get("hooks"), dict) else {}
    assert isinstance(hooks, dict)
    found = {event: memd_hooks(hooks.get(event)) for event in spec.events}
    missing = [event for event, mine in found.items() if not mine]
    if len(missing) == len(spec.events):
        if over_mcp:
            return make(
                name,
                "ok",
                f"none in {file}; memd is reached over MCP, so hooks are optional",
                f"{fix} to have memories brought into prompts",
            )
        return make(name, "warn", f"no memd hook in {file}", fix)
    if missing:
        return make(name, "fail", f"no memd hook for {', '.join(missing)} in {file}", fix)
    every = [h for mine in found.values() for h in mine]
    broken = next((h for h in every if not runnable(h)), None)
    if broken is not None:
        what = broken.module_file or broken.program
        return make(name, "fail", f"the hook's {what} does not exist or cannot run", fix)
    if any(h.agent != spec.agent for h in every):
        return make(name, "fail", f"memd's hook in {file} does not name {spec.agent}", fix)
    problem = extra()
    if problem is not None:
        return make(name, *problem)
    return make(name, "ok", f"memd's hook runs on {', '.join(spec.events)} ({file})")


def check_codex_hooks(f: Found, make: Make, over_mcp: list[str]) -> Any:
    home = codex_home(f.env, f.home)
    if not home.is_dir():
        return make("codex hooks", "ok", f"Codex CLI not found ({home} does not exist)")
    file, config = home / "hooks.json", home / "config.toml"
    try:
        settings, toml = read_settings(file), read_config(config)
    except (OSError, ValueError) as exc:
        return make("codex hooks", "fail", str(exc), "repair it, then install the hooks again")

    def trust() -> tuple[str, str, str] | None:
        off = hooks_turned_off(toml)
        if off:
            return ("fail", f"{config} has {off}: Codex runs no hooks", f"remove {off}")
        state = trusted_state(toml)
        expected = trust_entries(file, settings, is_memd_hook)
        if any(state.get(key) != value for key, value in expected.items()):
            return (
                "fail",
                f"Codex skips memd's hooks: their trust in {config} is missing or stale",
                "run `memdctl install-hooks --agent codex` (it records the trust again)",
            )
        return None

    return check_agent(make, AGENT_HOOKS["codex"], file, settings, "codex" in over_mcp, trust)


def check_gemini_hooks(f: Found, make: Make, over_mcp: list[str], file: Path) -> Any:
    if not file.parent.is_dir():
        return make("gemini hooks", "ok", f"Gemini CLI not found ({file.parent} does not exist)")
    try:
        settings = read_settings(file)
    except (OSError, ValueError) as exc:
        return make("gemini hooks", "fail", str(exc), "repair it, then install the hooks again")

    def switches() -> tuple[str, str, str] | None:
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

    return check_agent(make, AGENT_HOOKS["gemini"], file, settings, "gemini" in over_mcp, switches)
