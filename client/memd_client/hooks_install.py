"""``memdctl install-hooks``: merge memd's hook entries into ``~/.claude/settings.json``.

Idempotent (an entry whose command is already there is not added again), keeps every hook
the user already has, writes a backup of the previous file, and replaces the file atomically.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

MATCHERS = {"SessionStart": "startup|resume|clear|compact", "UserPromptSubmit": None, "Stop": None}
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


def install_hooks(settings_path: Path, command: str) -> list[str]:
    """Merge into ``settings_path``; return what was done, in words."""
    current: dict[str, Any] = {}
    if settings_path.exists():
        text = settings_path.read_text(encoding="utf-8")
        try:
            loaded = json.loads(text) if text.strip() else {}
        except ValueError as exc:
            raise ValueError(f"{settings_path} is not valid JSON ({exc}); fix it first") from exc
        if not isinstance(loaded, dict):
            raise ValueError(f"{settings_path} does not hold a JSON object; fix it first")
        current = loaded
    merged, changed = merge_hooks(current, command)
    if not changed:
        return [f"memd hooks already present in {settings_path}"]
    done = []
    settings_path.parent.mkdir(parents=True, exist_ok=True)
    if settings_path.exists():
        backup = settings_path.with_name(settings_path.name + ".memd-backup")
        backup.write_bytes(settings_path.read_bytes())
        done.append(f"backed up the previous settings to {backup}")
    fd, tmp = tempfile.mkstemp(dir=settings_path.parent, prefix=".settings.", suffix=".tmp")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(merged, f, indent=2)
        f.write("\n")
    os.replace(tmp, settings_path)
    done.append(f"added memd hooks for {', '.join(changed)} to {settings_path}")
    return done
