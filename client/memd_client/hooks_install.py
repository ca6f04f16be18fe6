"""``memdctl install-hooks`` / ``uninstall-hooks``: memd's entries in Claude Code's settings.

The command registered (:func:`hook_command`) runs the installed ``memd_client/hook.py`` with
an absolute interpreter path, isolated (``-I``: no ``PYTHONPATH``, no user site, no script
or working directory on ``sys.path``, so nothing in the project Claude Code runs the hook in
can shadow a module), importing it so its cached bytecode is used: this starts faster than
the ``memd-hook`` console script (whose launcher imports ``re``) and than running the file by
path (compiled on every run). See BENCHMARKS.md, "Hook command".

Installing is idempotent (an entry whose command is already there is not added again),
replaces memd's entries in any older form (the ``memd-hook`` console script, ``python -m
memd_client.hook``, ``python …/memd_client/hook.py``) rather than adding beside them, and
keeps every hook the user already has; uninstalling removes only memd's entries, whichever
form. Both write a backup of the previous file and replace the file atomically, keeping its
mode.
"""

from __future__ import annotations

import json
import os
import re
import shlex
from dataclasses import dataclass
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
# Run as ``python -I -c HOOK_CODE <…/memd_client/hook.py>``: the package's parent dir first on
# sys.path, then the module imported (from its cached bytecode). A constant, so the path is an
# ordinary shell-quoted argument and never has to be escaped inside Python source.
HOOK_CODE = (
    "import sys, os.path as p; sys.path.insert(0, p.dirname(p.dirname(sys.argv[1]))); "
    "from memd_client.hook import main; sys.exit(main())"
)
HOOK_MODULE = "memd_client.hook"
HOOK_FILE_TAIL = ("memd_client", "hook.py")


def hook_command(python: str, hook_file: str) -> str:
    """The hook command for Claude Code's settings: ``python`` (absolute) runs ``hook_file``
    (the installed ``memd_client/hook.py``). Quoted for a POSIX shell (Claude Code runs hook
    commands with ``bash -c``), whatever the paths hold."""
    return shlex.join([python, "-I", "-c", HOOK_CODE, hook_file])


@dataclass(frozen=True)
class MemdHook:
    """A hook command recognised as memd's: the program it starts and, for the forms that
    name it, the hook module file that must exist (``None``: found by the program)."""

    program: str
    module_file: str | None
    form: str  # "interpreter" (what install-hooks writes), "script", "module", "console script"


def parse_memd_hook(command: object) -> MemdHook | None:
    """The memd hook a command runs, in any form memd has registered or documented; ``None``
    for anything else (a user's own hook)."""
    words = _words(command)
    if not words:
        return None
    program, args = words[0], words[1:]
    if os.path.basename(program) == "memd-hook":
        return MemdHook(program, None, "console script")
    if _after(args, "-c")[:1] and f"from {HOOK_MODULE} import main" in _after(args, "-c")[0]:
        file = _after(args, "-c")[1:2]
        return MemdHook(program, file[0] if file else None, "interpreter")
    if _after(args, "-m")[:1] == [HOOK_MODULE]:
        return MemdHook(program, None, "module")
    script = next((a for a in args if not a.startswith("-")), None)
    if script is not None and not _after(args, "-c") and Path(script).parts[-2:] == HOOK_FILE_TAIL:
        return MemdHook(program, script, "script")
    return None


def _words(command: object) -> list[str]:
    if not isinstance(command, str):
        return []
    try:
        return shlex.split(command)
    except ValueError:  # unbalanced quotes: not a command memd wrote
        return command.split()


def _after(args: list[str], flag: str) -> list[str]:
    """The arguments after the first ``flag`` (empty when it is absent)."""
    return args[args.index(flag) + 1 :] if flag in args else []


def is_memd_hook(command: object) -> bool:
    """Whether a hook command is memd's, in any of its forms (see :func:`parse_memd_hook`)."""
    return parse_memd_hook(command) is not None


def merge_hooks(settings: dict[str, Any], command: str) -> tuple[dict[str, Any], list[str]]:
    """Return the settings with memd's hooks added (any older memd entry replaced by
    ``command``), and the events that changed."""
    merged, added, replaced = _merge(settings, command)
    changed = [e for e in MATCHERS if e in added or e in replaced]
    return merged, changed + [e for e in replaced if e not in MATCHERS]


def _merge(settings: dict[str, Any], command: str) -> tuple[dict[str, Any], list[str], list[str]]:
    """The merged settings, the events memd's entry was added to, and the events where an
    older memd entry was removed."""
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        raise ValueError("settings.json has a 'hooks' value that is not an object; fix it by hand")
    for event in MATCHERS:
        if not isinstance(hooks.get(event, []), list):
            raise ValueError(f"settings.json hooks.{event} is not a list; fix it by hand")
    merged, replaced = remove_hooks(settings, keep=command)
    hooks = merged.setdefault("hooks", {})
    added = []
    for event, matcher in MATCHERS.items():
        groups = hooks.setdefault(event, [])
        if any(command in _commands(g) for g in groups):
            continue
        group: dict[str, Any] = {
            "hooks": [{"type": "command", "command": command, "timeout": HOOK_TIMEOUT_S}]
        }
        groups.append({"matcher": matcher, **group} if matcher else group)
        added.append(event)
    return merged, added, replaced


def _commands(group: object) -> list[object]:
    inner = group.get("hooks") if isinstance(group, dict) else None
    return (
        [h.get("command") for h in inner if isinstance(h, dict)] if isinstance(inner, list) else []
    )


def remove_hooks(
    settings: dict[str, Any], keep: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """Return the settings without memd's hook entries (but those whose command is ``keep``),
    and the events that changed. A group left with no hooks is dropped, and so is an event
    left with no groups."""
    merged = json.loads(json.dumps(settings))  # deep copy of plain JSON
    hooks = merged.get("hooks")
    if not isinstance(hooks, dict):
        return merged, []
    changed = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = [g for g in (_without_memd(g, keep) for g in groups) if g is not None]
        if kept_groups != groups:
            changed.append(event)
            if kept_groups:
                hooks[event] = kept_groups
            else:
                del hooks[event]
    return merged, changed


def _without_memd(group: object, keep: str | None) -> object | None:
    """The group without memd's entries (but ``keep``); ``None`` when nothing is left."""
    inner = group.get("hooks") if isinstance(group, dict) else None
    if not isinstance(group, dict) or not isinstance(inner, list):
        return group
    kept = [
        h
        for h in inner
        if not (isinstance(h, dict) and h.get("command") != keep and is_memd_hook(h.get("command")))
    ]
    return {**group, "hooks": kept} if kept else None


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
    merged, added, replaced = _merge(read_settings(settings_path), command)
    if not added and not replaced:
        return [f"memd hooks already present in {settings_path}"]
    done = _keep_first_backup(settings_path)
    _write_like(settings_path, merged)
    if replaced:
        done.append(f"removed memd's older hook command for {', '.join(replaced)}")
    if added:
        done.append(f"added memd hooks for {', '.join(added)} to {settings_path}")
    return done


def uninstall_hooks(settings_path: Path) -> list[str]:
    """Remove memd's entries from ``settings_path``; return what was done, in words.

    When memd's install was the file's only change since, the bytes saved before it come
    back exactly (and the backup goes); otherwise only memd's entries go, with the ``hooks``
    object if that leaves it empty, and the backup of the user's original stays as it is.
    """
    merged, changed = remove_hooks(read_settings(settings_path))
    if not changed:
        return [f"no memd hooks in {settings_path}; nothing to remove"]
    if merged.get("hooks") == {}:
        del merged["hooks"]
    backup = backup_path(settings_path)
    saved = _saved_settings(backup)
    if saved is not None and saved[1] == merged:
        write_atomic(settings_path, saved[0])
        backup.unlink(missing_ok=True)
        done = [f"restored {settings_path} exactly as it was before memd's hooks"]
    else:
        _write_like(settings_path, merged)
        done = [f"kept the backup of the original settings at {backup}"] if saved else []
    done.append(f"removed memd hooks for {', '.join(changed)} from {settings_path}")
    return done


def backup_path(settings_path: Path) -> Path:
    return settings_path.with_name(settings_path.name + ".memd-backup")


def _keep_first_backup(settings_path: Path) -> list[str]:
    """Save the file as it is before memd first changes it; an existing backup (the user's
    original, from an earlier install) is never overwritten."""
    backup = backup_path(settings_path)
    if not settings_path.exists() or backup.exists():
        return []
    mode = settings_path.stat().st_mode & 0o7777
    write_atomic(backup, settings_path.read_bytes(), mode=mode)
    return [f"backed up the previous settings to {backup}"]


def _saved_settings(backup: Path) -> tuple[bytes, dict[str, Any]] | None:
    """The backup's bytes and what they say, or ``None`` when there is no readable one."""
    try:
        data = backup.read_bytes()
        loaded = json.loads(data) if data.strip() else {}
    except (OSError, ValueError, RecursionError):
        return None
    return (data, loaded) if isinstance(loaded, dict) else None


def _write_like(settings_path: Path, settings: dict[str, Any]) -> None:
    """Write ``settings`` in the layout the file has (indent, line end), atomically."""
    try:
        text = settings_path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        text = ""
    match = re.search(r"^\{\s*\n([ \t]+)\S", text, re.MULTILINE)
    indent: int | str | None = 2
    if match:
        lead = match.group(1)
        indent = lead if "\t" in lead else len(lead)
    elif text.strip() and "\n" not in text.strip():
        indent = None
    ending = "\n" if text.endswith("\n") or not text else ""
    write_text_atomic(settings_path, json.dumps(settings, indent=indent) + ending)
