"""``memdctl install-hooks`` / ``uninstall-hooks``: memd's entries in an agent's hooks file.

Claude Code (``settings.json``), Gemini CLI (``settings.json``) and Codex CLI (``hooks.json``;
its trust in ``config.toml``: :mod:`memd.install.codex_hooks`) keep hooks in the same JSON
shape, ``{"hooks": {event: [{"matcher"?, "hooks": [{"type": "command", "command",
"timeout"}]}]}}``; what differs is said by the agent's :class:`AgentHooks` (the events, their
matchers, the timeout in the agent's unit), in its table (:mod:`memd_client.agents`). An
agent's hook command ends with its name, but for the agent a command naming none is for
(:func:`hook_command`).

The command registered (:func:`hook_command`) runs the installed ``memd_client/hook.py`` with
an absolute interpreter path, isolated (``-I``: no ``PYTHONPATH``, no user site, no script
or working directory on ``sys.path``, so nothing in the project Claude Code runs the hook in
can shadow a module), importing it so its cached bytecode is used: this starts faster than
the ``memd-hook`` console script (whose launcher imports ``re``) and than running the file by
path (compiled on every run). See BENCHMARKS.md, "Hook command".

``install-hooks --compact-takeover`` (Claude Code) also registers the hook on PreCompact
(manual ``/compact`` only, with a timeout of its own: its table's ``takeover`` spec);
installing without the flag removes that entry again.

Installing is idempotent (an entry whose command is already there is not added again),
replaces memd's entries in any older form (the ``memd-hook`` console script, ``python -m
memd_client.hook``, ``python …/memd_client/hook.py``) rather than adding beside them, and
keeps every hook the user already has; uninstalling removes only memd's entries, whichever
form. Both edit the file a link names (the link stays), replace it atomically keeping its
mode and layout, and keep the backup of the file as it was before memd first changed it
(:mod:`memd_client.config_backup`). A file memd cannot use (too large, nested too deep, not
UTF-8, not JSON) is refused with one line naming it, before anything is written.
"""

from __future__ import annotations

import json
import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd_client.atomic import write_atomic
from memd_client.config_backup import give_back, keep_first_backup, same_json, undone_on_refusal
from memd_client.config_read import (
    config_path,
    config_text,
    has_bom,
    parse_json,
    read_config_bytes,
    read_config_text,
    with_bom,
)
from memd_client.json_layout import dump_like

# The hook in the background: the shell reads the agent's input, hands it to the hook and
# leaves it running, its output nowhere (the agent waits for its pipes to close).
DETACH_HEAD = 'i=$(cat); printf %s "$i" | '
DETACH_TAIL = " >/dev/null 2>&1 &"


def detached(command: str) -> str:
    """``command`` run in the background by the agent's shell, fed the hook's input."""
    return DETACH_HEAD + command + DETACH_TAIL


def undetached(command: str) -> str | None:
    """The command :func:`detached` made ``command`` of, or None."""
    if command.startswith(DETACH_HEAD) and command.endswith(DETACH_TAIL):
        return command[len(DETACH_HEAD) : -len(DETACH_TAIL)]
    return None


@dataclass(frozen=True)
class AgentHooks:
    """What one agent's hooks file gets from memd: ``events`` (event → matcher, or None for
    none), the ``timeout`` each entry carries, in the agent's unit (``timeouts``: an
    event's own), the events the agent runs in the ``background`` (the command wrapped by
    :func:`detached`); memd's entries in the ``optional`` events it does not list are
    removed, and so are those on the ``retired`` events memd's hook ran on once (an older
    install's, which doctor names)."""

    events: dict[str, str | None]
    timeout: int
    timeouts: dict[str, int] = field(default_factory=dict)
    optional: tuple[str, ...] = ()
    background: frozenset[str] = frozenset()
    retired: tuple[str, ...] = ()

    def entry(self, event: str, command: str) -> dict[str, Any]:
        """The hook entry memd writes for ``event``."""
        if event in self.background:
            command = detached(command)
        timeout = self.timeouts.get(event, self.timeout)
        return {"type": "command", "command": command, "timeout": timeout}


# Run as ``python -I -S -c HOOK_CODE <…/memd_client/hook.py>``: the package's parent dir first
# on sys.path, then the module imported (from its cached bytecode). A constant, so the path is
# an ordinary shell-quoted argument and never has to be escaped inside Python source. ``-S``:
# no ``site`` (the hook needs no site-packages but its own, put on sys.path here), whose
# ``.pth`` files (editable installs, setuptools' hack) cost more than the rest of the start.
# The parent dir is cut from the path by hand (``os.path`` would import ``os``, a sixth of the
# start), and the hook ends its process without the interpreter's teardown (a fifth of it):
# BENCHMARKS.md, issue 25.
HOOK_CODE = (
    "import sys; sys.path.insert(0, sys.argv[1].rsplit('/', 2)[0] or '/'); "
    "from memd_client.hook import main; main(exit_at_once=True)"
)
HOOK_MODULE = "memd_client.hook"
HOOK_FILE_TAIL = ("memd_client", "hook.py")


def hook_command(python: str, hook_file: str, agent: str = "") -> str:
    """The hook command for an agent's hooks file: ``python`` (absolute) runs ``hook_file``
    (the installed ``memd_client/hook.py``), given ``agent``, the agent's name, as its last
    argument (``""``: none, for the agent a command naming none is for). Quoted for a POSIX
    shell (the agents run hook commands with ``sh -c`` or ``bash -c``), whatever the paths
    hold."""
    tail = [agent] if agent else []
    return shlex.join([python, "-I", "-S", "-c", HOOK_CODE, hook_file, *tail])


@dataclass(frozen=True)
class MemdHook:
    """A hook command recognised as memd's: the program it starts and, for the forms that
    name it, the hook module file that must exist (``None``: found by the program)."""

    program: str
    module_file: str | None
    # "interpreter" (what install-hooks writes), "interpreter, older code" (before the
    # hook skipped ``os`` and the teardown), "interpreter with site" (before ``-S``),
    # "script", "module", "console script"
    form: str
    agent: str = ""  # the agent the command names (its last argument), "" for none


def parse_memd_hook(command: object) -> MemdHook | None:
    """The memd hook a command runs, in any form memd has registered or documented; ``None``
    for anything else (a user's own hook)."""
    inner = undetached(command) if isinstance(command, str) else None
    words = _words(inner if inner is not None else command)
    if not words:
        return None
    program, args = words[0], words[1:]
    agent = args[-1] if args and _a_name(args[-1]) else ""
    if os.path.basename(program) == "memd-hook":
        return MemdHook(program, None, "console script", agent)
    if _after(args, "-c")[:1] and f"from {HOOK_MODULE} import main" in _after(args, "-c")[0]:
        file = _after(args, "-c")[1:2]
        form = "interpreter" if _after(args, "-c")[0] == HOOK_CODE else "interpreter, older code"
        if "-S" not in args[: args.index("-c")]:
            form = "interpreter with site"
        return MemdHook(program, file[0] if file else None, form, agent)
    if _after(args, "-m")[:1] == [HOOK_MODULE]:
        return MemdHook(program, None, "module", agent)
    script = next((a for a in args if not a.startswith("-")), None)
    if script is not None and not _after(args, "-c") and Path(script).parts[-2:] == HOOK_FILE_TAIL:
        return MemdHook(program, script, "script", agent)
    return None


def _a_name(word: str) -> bool:
    """Whether a command's last word names an agent (a plain name, not a path, a module
    or a flag)."""
    return word.isidentifier() and word.isascii()


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


def merge_hooks(
    settings: dict[str, Any], command: str, spec: AgentHooks
) -> tuple[dict[str, Any], list[str]]:
    """Return the settings with memd's hooks added (any older memd entry replaced by
    ``command``), and the events that changed."""
    merged, added, replaced = _merge(settings, command, spec)
    changed = [e for e in spec.events if e in added or e in replaced]
    return merged, changed + [e for e in replaced if e not in spec.events]


def _merge(
    settings: dict[str, Any], command: str, spec: AgentHooks
) -> tuple[dict[str, Any], list[str], list[str]]:
    """The merged settings, the events memd's entry was added to, and the events where an
    older memd entry was removed."""
    hooks = settings.get("hooks", {})
    if not isinstance(hooks, dict):
        raise ValueError("the file has a 'hooks' value that is not an object; fix it by hand")
    for event in spec.events:
        if not isinstance(hooks.get(event, []), list):
            raise ValueError(f"the file's hooks.{event} is not a list; fix it by hand")
    wanted = {e: (matcher, spec.entry(e, command)) for e, matcher in spec.events.items()}
    merged, replaced = remove_hooks(settings, keep=wanted)
    unwanted = tuple(e for e in spec.optional if e not in spec.events)
    if unwanted:
        merged, dropped = remove_hooks(merged, events=unwanted)
        replaced += [e for e in dropped if e not in replaced]
    hooks = merged.setdefault("hooks", {})
    added = []
    for event, matcher in spec.events.items():
        groups = hooks.setdefault(event, [])
        if any(_holds(g, wanted[event]) for g in groups):
            continue
        group: dict[str, Any] = {"hooks": [wanted[event][1]]}
        groups.append({"matcher": matcher, **group} if matcher else group)
        added.append(event)
    return merged, added, replaced


Wanted = tuple[str | None, dict[str, Any]]  # an event's matcher and memd's entry under it


def _holds(group: object, wanted: Wanted | None) -> bool:
    """Whether ``group`` is under the wanted matcher and holds the wanted entry."""
    matcher = group.get("matcher") if isinstance(group, dict) else None
    return wanted is not None and matcher == wanted[0] and wanted[1] in _entries(group)


def _entries(group: object) -> list[object]:
    inner = group.get("hooks") if isinstance(group, dict) else None
    return inner if isinstance(inner, list) else []


def remove_hooks(
    settings: dict[str, Any],
    keep: dict[str, Wanted] | None = None,
    events: tuple[str, ...] | None = None,
) -> tuple[dict[str, Any], list[str]]:
    """Return the settings without memd's hook entries (but those equal to ``keep``'s entry
    for their event, under its matcher: an entry of memd's with another command, other flags
    or another matcher goes; only in ``events`` when given), and the events that changed. A
    group left with no hooks is dropped, and so is an event left with no groups."""
    merged = json.loads(json.dumps(settings))  # deep copy of plain JSON
    hooks = merged.get("hooks")
    if not isinstance(hooks, dict):
        return merged, []
    changed = []
    for event in [e for e in hooks if events is None or e in events]:
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        wanted = (keep or {}).get(event)
        kept_groups = [g for g in (_without_memd(g, wanted) for g in groups) if g is not None]
        if kept_groups != groups:
            changed.append(event)
            if kept_groups:
                hooks[event] = kept_groups
            else:
                del hooks[event]
    return merged, changed


def _without_memd(group: object, keep: Wanted | None) -> object | None:
    """The group without memd's entries (but ``keep``); ``None`` when nothing is left."""
    inner = group.get("hooks") if isinstance(group, dict) else None
    if not isinstance(group, dict) or not isinstance(inner, list):
        return group
    entry = keep[1] if keep is not None and group.get("matcher") == keep[0] else None
    kept = [
        h
        for h in inner
        if not (isinstance(h, dict) and h != entry and is_memd_hook(h.get("command")))
    ]
    if len(kept) == len(inner):
        return group  # a user's group, even an empty one, stays as it is
    return {**group, "hooks": kept} if kept else None


def waited_for(settings: dict[str, Any], spec: AgentHooks) -> list[str]:
    """The events where the agent waits for a memd entry it need not wait for: one of
    ``spec.background`` not run in the background, or one on a ``spec.retired`` event (an
    install from before issue 25). Each event once."""
    hooks = settings.get("hooks") if isinstance(settings.get("hooks"), dict) else {}
    assert isinstance(hooks, dict)
    found = []
    for event in [*spec.retired, *sorted(spec.background)]:
        groups = hooks.get(event)
        entries = [h for g in groups for h in _entries(g)] if isinstance(groups, list) else []
        if any(
            isinstance(h, dict)
            and is_memd_hook(h.get("command"))
            and (event in spec.retired or undetached(str(h.get("command"))) is None)
            for h in entries
        ):
            found.append(event)
    return found


def read_settings(settings_path: Path) -> dict[str, Any]:
    """The settings object; ``{}`` for a missing or empty file. Raises ValueError
    (:class:`~memd_client.foreign_file.UnusableFile`), naming the file, for one memd cannot
    use: not a JSON object, nested too deep, too large, not UTF-8, not a regular file."""
    try:
        return parse_json(settings_path, read_config_text(settings_path))
    except FileNotFoundError:
        return {}


def install_hooks(settings_path: Path, command: str, spec: AgentHooks) -> list[str]:
    """Merge into ``settings_path`` (the file it names, when it is a link: the link stays);
    return what was done, in words."""
    real = config_path(settings_path)
    current = read_settings(real)
    merged, added, replaced = _merge(current, command, spec)
    if not added and not replaced:
        return [f"memd hooks already present in {settings_path}"]
    with undone_on_refusal(real):  # no backup left of a file the disk kept as it was
        done = keep_first_backup(real, only_memd=_only_memd(current))
        write_atomic(real, _dump_like(real, merged))
    if replaced:
        done.append(f"removed memd's older hook command for {', '.join(replaced)}")
    if added:
        done.append(f"added memd hooks for {', '.join(added)} to {settings_path}")
    return done


def uninstall_hooks(settings_path: Path) -> list[str]:
    """Remove memd's entries from ``settings_path`` (the file it names, when it is a link);
    return what was done, in words.

    When memd's install was the file's only change since, the bytes saved before it come
    back exactly (and the backup goes); otherwise only memd's entries go, with the ``hooks``
    object if that leaves it empty, and the backup of the user's original stays as it is.
    """
    real = config_path(settings_path)
    merged, changed = remove_hooks(read_settings(real))
    if not changed:
        return [f"no memd hooks in {settings_path}; nothing to remove"]
    if merged.get("hooks") == {}:
        del merged["hooks"]
    done = give_back(real, _dump_like(real, merged), same_json, empty=not merged)
    done.append(f"removed memd hooks for {', '.join(changed)} from {settings_path}")
    return done


def _only_memd(settings: dict[str, Any]) -> bool:
    """Whether the settings hold memd's hooks and nothing else (memd created the file)."""
    rest, changed = remove_hooks(settings)
    return bool(changed) and rest in ({}, {"hooks": {}})


def _dump_like(path: Path, settings: dict[str, Any]) -> bytes:
    """``settings`` as JSON in the layout the file has (indent, line ends, final newline,
    byte order mark)."""
    try:
        data = read_config_bytes(path)
    except FileNotFoundError:
        data = b""
    return with_bom(dump_like(settings, config_text(path, data)), has_bom(data))
