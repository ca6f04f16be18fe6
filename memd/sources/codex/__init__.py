"""Codex CLI's room: its sessions, ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-<time>-<thread
id>.jsonl``.

Date-nested, not per project: a session's project is its ``session_meta`` cwd (the registry
lists it under the slug Claude Code would give that dir, and its memories go to the one
memory dir of the cwd's git root, as Claude Code's do). Resume appends to the same file; a
fork is a new file. Codex's own memory jobs and sub-agents' threads are read to their first
line only (``ignored``). Whether Codex keeps memories of its own is read from its
``config.toml`` (:func:`own_memory`): then memd leaves extraction to it. The day folders hold
every project's rollouts: the dream counts and searches those of a project that memd saw end
a turn (:meth:`Codex.dream_scope`). Its hooks: :mod:`.hooks`; ``codex resume <id>`` resumes a
session; a compacted session it resumes: :mod:`.fork`; memd's memories in Codex's own
(``agents.codex.native_memory``): :mod:`.native`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Final

from memd import foreign_reads
from memd.config import LoadedConfig
from memd.memory.paths import project_slug
from memd.sources.base import DreamScope, Layout, OneFile, SessionKey, plain_name, under
from memd.sources.codex.fork import CodexFork
from memd.sources.codex.hooks import CodexHooks
from memd.sources.codex.native import CodexNative
from memd.sources.codex.reader import CodexReader
from memd.sources.codex.usage import RULES as USAGE_RULES
from memd.sources.room import Room
from memd.state import SessionState

AGENT: Final = "codex"
LAYOUT: Final = Layout(depth=3, sessions_at=3)  # YYYY/MM/DD
_ROLLOUT: Final = re.compile(r"rollout-.*?([0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12})")
_CONFIG_MAX: Final = 1024 * 1024


class Codex:
    """The Codex source; ``home`` is ``$CODEX_HOME`` (its ``sessions`` folder is watched)."""

    agent = AGENT
    layout = LAYOUT
    create_root = False

    def __init__(self, home: Path) -> None:
        self.home = home
        self.root = home / "sessions"

    def session_key(self, path: Path) -> SessionKey | None:
        rel = under(self.root, path)
        if rel is None or len(rel.parts) != 4 or rel.suffix != ".jsonl":
            return None
        found = _ROLLOUT.fullmatch(rel.stem)
        if found is None:
            return None
        return SessionKey(AGENT, "", found.group(1))

    def walk(self) -> list[tuple[Path, os.stat_result]]:
        found: list[tuple[Path, os.stat_result]] = []
        for day in _folders(str(self.root), 3):
            try:
                with os.scandir(day) as entries:
                    for entry in entries:
                        if entry.name.endswith(".jsonl"):
                            found.append((Path(entry.path), entry.stat(follow_symlinks=False)))
            except OSError:
                continue
        return found

    def locate(self, session_id: str) -> Path | None:
        if not plain_name(session_id):
            return None
        for path, _ in self.walk():
            found = _ROLLOUT.fullmatch(path.stem)
            if found is not None and found.group(1) == session_id:
                return path
        return None

    def reader(self, path: str, inode: int) -> CodexReader:
        return CodexReader(path, inode)

    def own_id(self, path: Path) -> str | None:
        return None  # the rollout's name ends with its thread id, the id Codex resumes by

    def project_of(self, key: SessionKey, cwd: str | None) -> str:
        return project_slug(cwd) if cwd else ""

    def own_memory(self, cwd: str) -> str | None:
        return own_memory(self.home)

    def unread(self) -> dict[str, int]:
        return {}

    def dream_scope(self, state: SessionState) -> DreamScope | None:
        """The session's own rollout: the day folders hold every project's."""
        path = Path(state.path)
        if self.session_key(path) is None:
            return None
        return DreamScope(path.parent, OneFile(path.name, state.session_id))


def _folders(root: str, depth: int) -> list[str]:
    """The real folders ``depth`` levels below ``root`` (links not followed)."""
    level = [root]
    for _ in range(depth):
        below: list[str] = []
        for folder in level:
            try:
                with os.scandir(folder) as entries:
                    below += [e.path for e in entries if e.is_dir(follow_symlinks=False)]
            except OSError:
                continue
        level = below
    return level


def own_memory(home: Path) -> str | None:
    """Why Codex keeps memories itself (so memd does not extract from its sessions), from
    ``config.toml``: ``[features] memories`` (or ``memory``) true, or a ``[memories]`` table
    that is not turned off. None when it does not, or the file cannot be read."""
    config = _read_config(home / "config.toml")
    features = config.get("features")
    if isinstance(features, dict):
        for key in ("memories", "memory"):
            if features.get(key) is True:
                return f"Codex's own memories are on ([features] {key} = true in config.toml)"
    table = config.get("memories")
    if isinstance(table, dict) and table.get("enabled", True) is not False:
        return "Codex's own memories are on ([memories] in config.toml)"
    return None


def _read_config(path: Path) -> dict[str, Any]:
    """``config.toml``'s data (the user's file: a link is followed), ``{}`` when there is
    none or it cannot be used (:mod:`memd.foreign_reads` says why in ``status``)."""
    return foreign_reads.read_toml(path, _CONFIG_MAX, links="follow") or {}


def _open(loaded: LoadedConfig) -> Codex | None:
    return Codex(loaded.paths.codex_home) if loaded.config.sources.codex else None


def _resume(session_id: str) -> str:
    return f"codex resume {session_id}"


ROOM = Room(
    name=AGENT,
    title="Codex CLI",
    hooks=CodexHooks(),
    open=_open,
    resume=_resume,
    fork=CodexFork(),
    usage=USAGE_RULES,
    native=CodexNative(own_memory),
)
