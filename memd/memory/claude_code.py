"""What Claude Code does itself in a session: its own auto memory, dream, memory dir, version.

Claude Code 2.1 (FORMAT.md §13) keeps an auto memory of its own: it loads ``MEMORY.md`` into
every conversation, its main agent writes memory files, and it consolidates them ("auto
dream"). memd must not repeat any of that. What decides it, per session:

* the settings files — user (``~/.claude/settings.json``), project
  (``<project>/.claude/settings.json``), local (``<project>/.claude/settings.local.json``) and
  policy (``/etc/claude-code/managed-settings.json``), later ones winning: ``autoMemoryEnabled``,
  ``autoDreamEnabled`` and ``autoMemoryDirectory``. ``autoMemoryDirectory`` is honoured only
  from the user, local and policy files: a repository's own ``.claude/settings.json`` is
  written by whoever wrote the repository, and must not point memd's writing agents anywhere;
* the environment Claude Code runs in, forwarded by the hook: ``CLAUDE_CODE_DISABLE_AUTO_MEMORY``
  (truthy turns auto memory off, an explicit falsy value forces it on, over
  ``autoMemoryEnabled: false``) and ``CLAUDE_CODE_SIMPLE`` (simple mode, which ``--bare``
  sets, has no auto memory whatever the rest says); ``CLAUDE_PROJECT_DIR`` names the project
  whose settings apply. Three move the memory dir (:func:`moved_memory_dir`, as 2.1.331 does):
  ``CLAUDE_COWORK_MEMORY_PATH_OVERRIDE`` (an absolute path, ``~`` not expanded) before
  ``autoMemoryDirectory``, then ``CLAUDE_CONFIG_DIR`` (the memory dir is under its
  ``projects``) with ``CLAUDE_CODE_PROJECT_DIR_NAME`` naming the project's folder there
  (only with ``CLAUDE_CONFIG_DIR`` set, and only a plain name: ``[A-Za-z0-9_-]{1,64}``, no
  device name);
* the version (from the transcript, else the last one seen in the project): versions before
  :data:`AUTO_MEMORY_SINCE` have no auto memory, and the frontmatter form memory files are
  written in follows the version (:func:`frontmatter_form`).

Every settings file is hostile input, read through :mod:`memd_client.foreign_file` (never
blocking, regular files only, at most :data:`MAX_SETTINGS_BYTES`, nesting judged before the
decoder runs); a file that is not a JSON object, or a key of the wrong type, counts as absent
(and is named in ``problems``, and in ``status``). Nothing here raises for a bad file.
:func:`read_settings` is blocking: call it from a worker thread.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from memd.foreign_reads import noted_as_is
from memd.memory.frontmatter import FrontmatterForm
from memd_client import foreign_file
from memd_client.foreign_file import Unusable

SettingsScope = Literal["user", "project", "local", "policy"]

MAX_SETTINGS_BYTES = 1024 * 1024
POLICY_FILE = "/etc/claude-code/managed-settings.json"
FORWARDED_ENV = (
    "CLAUDE_CODE_DISABLE_AUTO_MEMORY",
    "CLAUDE_CODE_SIMPLE",
    "CLAUDE_PROJECT_DIR",
    "CLAUDE_COWORK_MEMORY_PATH_OVERRIDE",
    "CLAUDE_CODE_PROJECT_DIR_NAME",
    "CLAUDE_CONFIG_DIR",
)
COWORK_ENV = "CLAUDE_COWORK_MEMORY_PATH_OVERRIDE"
DIR_NAME_ENV = "CLAUDE_CODE_PROJECT_DIR_NAME"
MOVING_ENV = (COWORK_ENV, DIR_NAME_ENV, "CLAUDE_CONFIG_DIR")  # what moves the memory dir
AUTO_MEMORY_SINCE = (2, 1, 0)  # the first release line with auto memory on by default
METADATA_TYPE_SINCE = (2, 1, 197)  # the first version seen asking for ``metadata: type:``
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})
_VERSION = re.compile(r"^(\d{1,6})\.(\d{1,6})\.(\d{1,6})")
_DIR_SCOPES: tuple[SettingsScope, ...] = ("user", "local", "policy")
_DIR_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_DEVICE = re.compile(r"^(?:con|prn|aux|nul|com[0-9]|lpt[0-9])$", re.IGNORECASE)


@dataclass(frozen=True)
class Settings:
    """The memory keys of Claude Code's merged settings, and where each came from."""

    auto_memory: bool | None = None
    auto_memory_from: str = ""
    auto_dream: bool | None = None
    auto_dream_from: str = ""
    memory_directory: str | None = None
    memory_directory_from: str = ""
    problems: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClaudeCodeFacts:
    """What Claude Code does itself in one session (see the module docstring)."""

    auto_memory: bool
    auto_memory_reason: str
    auto_dream: bool
    memory_directory: str | None
    version: str | None
    frontmatter_form: FrontmatterForm
    problems: tuple[str, ...] = ()
    memory_directory_from: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "auto_memory": self.auto_memory,
            "auto_memory_reason": self.auto_memory_reason,
            "auto_dream": self.auto_dream,
            "memory_directory": self.memory_directory,
            "memory_directory_from": self.memory_directory_from,
            "version": self.version,
            "frontmatter_form": self.frontmatter_form,
            "problems": list(self.problems),
        }

    def extraction_off(self, beside: bool) -> str | None:
        """Why memd extracts nothing in this session (Claude Code's agent does it), or None;
        ``beside``: ``memory.extract_beside_claude_code``."""
        if beside or not self.auto_memory:
            return None
        return f"Claude Code's own auto memory is on ({self.auto_memory_reason})"


def parse_version(text: object) -> tuple[int, int, int] | None:
    """``"2.1.197"`` → ``(2, 1, 197)``; ``None`` for anything else."""
    match = _VERSION.match(text) if isinstance(text, str) else None
    return (int(match[1]), int(match[2]), int(match[3])) if match else None


def frontmatter_form(version: str | None) -> FrontmatterForm:
    """The form the given Claude Code version writes (an unknown version: the newest)."""
    parsed = parse_version(version)
    return "top-level" if parsed is not None and parsed < METADATA_TYPE_SINCE else "metadata"


def settings_paths(claude_dir: str, project_dir: str | None) -> list[tuple[SettingsScope, str]]:
    """The settings files in precedence order, lowest first."""
    paths: list[tuple[SettingsScope, str]] = [("user", os.path.join(claude_dir, "settings.json"))]
    if project_dir and os.path.isabs(project_dir):
        paths.append(("project", os.path.join(project_dir, ".claude", "settings.json")))
        paths.append(("local", os.path.join(project_dir, ".claude", "settings.local.json")))
    paths.append(("policy", POLICY_FILE))
    return paths


def read_json_object(path: str) -> tuple[dict[str, Any] | None, str | None]:
    """A settings file's object, or ``None`` and why not (``None, None``: no such file).
    Read through :mod:`memd_client.foreign_file`: a link is followed (a dotfiles repository
    is the user's layout), the rest is refused as the door refuses it, and ``status`` lists
    the problem."""
    found = foreign_file.read_json_object(path, MAX_SETTINGS_BYTES, links="follow")
    noted_as_is(found, path)
    if isinstance(found, Unusable):
        return None, found.message()
    return found, None


def read_settings(claude_dir: str, project_dir: str | None) -> Settings:
    """Merge the memory keys of every settings file (blocking; never raises)."""
    merged: dict[str, Any] = {}
    problems: list[str] = []
    for scope, path in settings_paths(claude_dir, project_dir):
        loaded, problem = read_json_object(path)
        if problem:
            problems.append(problem)
        if loaded is not None:
            _merge(merged, scope, path, loaded, problems)
    return Settings(**merged, problems=tuple(problems))


def _merge(
    merged: dict[str, Any],
    scope: SettingsScope,
    path: str,
    loaded: Mapping[str, Any],
    problems: list[str],
) -> None:
    for key, field in (("autoMemoryEnabled", "auto_memory"), ("autoDreamEnabled", "auto_dream")):
        if key not in loaded:
            continue
        if isinstance(loaded[key], bool):
            merged[field], merged[field + "_from"] = loaded[key], f"{scope} settings"
        else:
            problems.append(f"{path}: {key} is not true or false; ignored")
    if "autoMemoryDirectory" not in loaded:
        return
    value = loaded["autoMemoryDirectory"]
    if scope not in _DIR_SCOPES:
        problems.append(f"{path}: autoMemoryDirectory is ignored in project settings")
    elif isinstance(value, str) and value.strip() and "\x00" not in value:
        merged["memory_directory"] = value
        merged["memory_directory_from"] = f"{scope} settings"
    else:
        problems.append(f"{path}: autoMemoryDirectory is not a path; ignored")


def expand_directory(value: str, home: str | None) -> str | None:
    """``autoMemoryDirectory`` as an absolute path (``~`` expanded), else ``None``."""
    if value.startswith("~/") or value == "~":
        if not home:
            return None
        value = home + value[1:]
    return os.path.normpath(value) if os.path.isabs(value) else None


def moved_memory_dir(
    settings: Settings, env: Mapping[str, str], home: str | None, project_folder: str
) -> tuple[str, str] | None:
    """Where Claude Code keeps this session's memories when not in its default place, and
    what moved it: ``CLAUDE_COWORK_MEMORY_PATH_OVERRIDE``, else ``autoMemoryDirectory``, else
    ``$CLAUDE_CONFIG_DIR/projects/<folder>/memory``, the folder being
    ``CLAUDE_CODE_PROJECT_DIR_NAME`` when it is a plain name, else ``project_folder`` (the
    default one's). ``None``: the default place. A value Claude Code ignores (relative, a
    root, a bad name) is ignored."""
    cowork = env.get(COWORK_ENV)
    if isinstance(cowork, str) and (path := _plain_dir(cowork)) is not None:
        return path, COWORK_ENV
    if settings.memory_directory:
        moved = expand_directory(settings.memory_directory, home)
        if moved is not None and _plain_dir(moved) is not None:
            return moved, f"autoMemoryDirectory in {settings.memory_directory_from}"
    config_dir = env.get("CLAUDE_CONFIG_DIR")
    root = _plain_dir(config_dir.strip()) if isinstance(config_dir, str) else None
    if root is None:
        return None
    name = env.get(DIR_NAME_ENV)
    if isinstance(name, str) and _DIR_NAME.match(name) and not _DEVICE.match(name):
        return os.path.join(root, "projects", name, "memory"), f"{DIR_NAME_ENV}={name}"
    if not project_folder:
        return None
    return os.path.join(root, "projects", project_folder, "memory"), "CLAUDE_CONFIG_DIR"


def _plain_dir(value: str) -> str | None:
    """``value`` as a normalised absolute folder, or ``None`` where Claude Code refuses it
    (relative, shorter than 3 characters, a NUL)."""
    if not value or "\x00" in value or not os.path.isabs(value):
        return None
    path = os.path.normpath(value)
    return None if len(path) < 3 else path


def env_flag(env: Mapping[str, str], name: str) -> bool | None:
    """True/False for a set flag, ``None`` when unset or unreadable."""
    raw = env.get(name)
    if not isinstance(raw, str):
        return None
    value = raw.strip().lower()
    return True if value in _TRUE else False if value in _FALSE else None


def decide(
    settings: Settings,
    env: Mapping[str, str],
    version: str | None,
    home: str | None = None,
    project_folder: str = "",
) -> ClaudeCodeFacts:
    """Pure: what Claude Code does itself, from its settings, environment and version."""
    on, reason = _auto_memory(settings, env, version)
    dream = on and settings.auto_dream is not False
    moved = moved_memory_dir(settings, env, home, project_folder)
    return ClaudeCodeFacts(
        auto_memory=on,
        auto_memory_reason=reason,
        auto_dream=dream,
        memory_directory=moved[0] if moved else None,
        memory_directory_from=moved[1] if moved else "",
        version=version,
        frontmatter_form=frontmatter_form(version),
        problems=settings.problems,
    )


def _auto_memory(
    settings: Settings, env: Mapping[str, str], version: str | None
) -> tuple[bool, str]:
    if env_flag(env, "CLAUDE_CODE_SIMPLE"):
        return False, "CLAUDE_CODE_SIMPLE is set"
    disabled = env_flag(env, "CLAUDE_CODE_DISABLE_AUTO_MEMORY")
    if disabled is not None:
        return (
            not disabled,
            f"CLAUDE_CODE_DISABLE_AUTO_MEMORY={env.get('CLAUDE_CODE_DISABLE_AUTO_MEMORY')}",
        )
    if settings.auto_memory is not None:
        return settings.auto_memory, f"autoMemoryEnabled in {settings.auto_memory_from}"
    parsed = parse_version(version)
    if parsed is not None and parsed < AUTO_MEMORY_SINCE:
        return False, f"Claude Code {version} has no auto memory"
    return True, "Claude Code's default"
