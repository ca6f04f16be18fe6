"""``memdctl install-hooks`` / ``uninstall-hooks``: memd's entries in Claude Code's settings.

Installing is idempotent (an entry whose command is already there is not added again) and
keeps every hook the user already has; uninstalling removes only memd's entries (a command
that is, or ends in, ``memd-hook``). Both write a backup of the previous file and replace the
file atomically, keeping its mode.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from memd_client.atomic import write_atomic, write_text_atomic

MATCHERS = {
    "SessionStart": "startup|resume|clear|compact",
    "UserPromptSubmit": None,
    "Stop": None,
    "SessionEnd": None,  # the session's last memory extraction (the hook only notifies memd)
}
HOOK_TIMEOUT_S = 10


def merge_hooks(settings: dict[str, Any], command: str) -> tuple[dict[str, Any], list[str]]:
    """Return the settings with memd's hooks added, and the events that changed."""
    merged = json.loads(json.dumps(settings))  # deep copy of plain JSON
    hooks = merged.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ValueError("settings.json has a 'hooks' value that is not an object; fix it by hand")
    changed = []
    for event, matcher in MATCHERS.items():
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ValueError(f"settings.json hooks.{event} is not a list; fix it by hand")
        present = any(
            isinstance(h, dict) and h.get("command") == command
            for g in groups
            if isinstance(g, dict)
            for h in g.get("hooks", [])
        )
        if present:
            continue
        group: dict[str, Any] = {
            "hooks": [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}]
        }
        if matcher:
            group = {"matcher": matcher, **group}
        groups.append(group)
        changed.append(event)
    return merged, changed


def is_memd_hook(command: object) -> bool:
    """Whether a hook command is memd's (its program is ``memd-hook``, wherever it lives)."""
    if not isinstance(command, str) or not command.strip():
        return False
    program = command.strip().split()[0]
    return program == "memd-hook" or program.endswith("/memd-hook")


def remove_hooks(settings: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Return the settings without memd's hook entries, and the events that changed. A group
    left with no hooks is dropped, and so is an event left with no groups."""
    merged = json.loads(json.dumps(settings))
    hooks = merged.get("hooks")
    if not isinstance(hooks, dict):
        return merged, []
    changed = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if not isinstance(inner, list):
                kept_groups.append(group)
                continue
            kept = [
                h for h in inner if not (isinstance(h, dict) and is_memd_hook(h.get("command")))
            ]
            if kept:
                kept_groups.append({**group, "hooks": kept})
        if kept_groups != groups:
            changed.append(event)
            if kept_groups:
                hooks[event] = kept_groups
            else:
                del hooks[event]
    return merged, changed


def read_settings(settings_path: Path) -> dict[str, Any]:
    """The settings object; ``{}`` for a missing or empty file. Raises ValueError, naming the
    file, for one that is not a JSON object."""
    if not settings_path.exists():
        return {}
    text = settings_path.read_text(encoding="utf-8", errors="replace")
    try:
        loaded = json.loads(text) if text.strip() else {}
    except ValueError as exc:
        raise ValueError(f"{settings_path} is not valid JSON ({exc}); fix it first") from exc
    if not isinstance(loaded, dict):
        raise ValueError(f"{settings_path} does not hold a JSON object; fix it first")
    return loaded


def install_hooks(settings_path: Path, command: str) -> list[str]:
    """Merge into ``settings_path``; return what was done, in words."""
    merged, changed = merge_hooks(read_settings(settings_path), command)
    if not changed:
        return [f"memd hooks already present in {settings_path}"]
    done = _replace(settings_path, merged)
    done.append(f"added memd hooks for {', '.join(changed)} to {settings_path}")
    return done


def uninstall_hooks(settings_path: Path) -> list[str]:
    """Remove memd's entries from ``settings_path``; return what was done, in words."""
    merged, changed = remove_hooks(read_settings(settings_path))
    if not changed:
        return [f"no memd hooks in {settings_path}; nothing to remove"]
    done = _replace(settings_path, merged)
    done.append(f"removed memd hooks for {', '.join(changed)} from {settings_path}")
    return done


def _replace(settings_path: Path, settings: dict[str, Any]) -> list[str]:
    done = []
    if settings_path.exists():
        backup = settings_path.with_name(settings_path.name + ".memd-backup")
        mode = settings_path.stat().st_mode & 0o7777
        write_atomic(backup, settings_path.read_bytes(), mode=mode)
        done.append(f"backed up the previous settings to {backup}")
    write_text_atomic(settings_path, json.dumps(settings, indent=2) + "\n")
    return done
