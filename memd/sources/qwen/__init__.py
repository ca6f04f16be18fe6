"""Qwen Code's room: its sessions, ``~/.qwen/projects/<project>/chats/<session id>.jsonl``.

What the real CLI writes is in ``FORMAT.md`` beside this module. The project folder is the
session's working dir with every character but ASCII letters and digits made ``-`` (as
Claude Code names its own); each record says the working dir itself (``cwd``), which is what
memd places a session by: its memories go to the one memory dir of that dir's git root, as
Claude Code's do. A resume (``qwen --continue``, ``--resume <id>``) appends to the same file,
so a session is its file and its id the file's name. Qwen's own auto memory (its
``projects/<project>/memory/``) is its own: memd extracts into the shared memory dir all the
same, so a fact said to Qwen reaches the other agents. A project's sessions count for the
dream and are searched by it. Its hooks: :mod:`.hooks`; ``qwen --resume <id>`` resumes a
session; a compacted session it resumes: :mod:`.fork`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Final

from memd.config import LoadedConfig
from memd.memory.paths import project_slug
from memd.sources.base import DreamScope, Layout, SessionKey, plain_name, under
from memd.sources.qwen.fork import QwenFork
from memd.sources.qwen.hooks import QwenHooks
from memd.sources.qwen.reader import QwenReader
from memd.sources.room import Room
from memd.state import SessionState

AGENT: Final = "qwen"
LAYOUT: Final = Layout(depth=2, sessions_at=2)  # <project>/chats/
# A session's file: its id, a UUID (``--session-id`` takes nothing else). Beside them Qwen
# keeps ``<id>.ledger.jsonl`` (a prompt ledger) and ``<id>.runtime.json``: not sessions.
_SESSION: Final = re.compile(r"[0-9a-fA-F]{8}(?:-[0-9a-fA-F]{4}){3}-[0-9a-fA-F]{12}\.jsonl")


class Qwen:
    """The Qwen Code source; ``home`` is ``~/.qwen`` (its ``projects`` folder is watched)."""

    agent = AGENT
    layout = LAYOUT
    create_root = False

    def __init__(self, home: Path) -> None:
        self.home = home
        self.root = home / "projects"

    def session_key(self, path: Path) -> SessionKey | None:
        rel = under(self.root, path)
        if rel is None or len(rel.parts) != 3 or rel.parts[1] != "chats":
            return None
        if _SESSION.fullmatch(rel.name) is None:
            return None
        return SessionKey(AGENT, "", rel.stem)

    def walk(self) -> list[tuple[Path, os.stat_result]]:
        found: list[tuple[Path, os.stat_result]] = []
        try:
            projects = list(os.scandir(self.root))
        except OSError:
            projects = []
        for project in projects:
            try:
                if not project.is_dir(follow_symlinks=False):
                    continue
                with os.scandir(os.path.join(project.path, "chats")) as entries:
                    for entry in entries:
                        if _SESSION.fullmatch(entry.name):
                            found.append((Path(entry.path), entry.stat(follow_symlinks=False)))
            except OSError:
                continue
        return found

    def locate(self, session_id: str) -> Path | None:
        if not plain_name(session_id):
            return None
        name = session_id + ".jsonl"
        return next((path for path, _ in self.walk() if path.name == name), None)

    def own_id(self, path: Path) -> str | None:
        return None  # the file's name is the session id Qwen prints and resumes by

    def reader(self, path: str, inode: int) -> QwenReader:
        return QwenReader(path, inode)

    def project_of(self, key: SessionKey, cwd: str | None) -> str:
        return project_slug(cwd) if cwd else ""

    def own_memory(self, cwd: str) -> str | None:
        return None  # Qwen's auto memory is its own folder: memd's is the one the agents share

    def unread(self) -> dict[str, int]:
        return {}

    def dream_scope(self, state: SessionState) -> DreamScope | None:
        """Every session in the session's project folder (``projects/<project>/chats``)."""
        path = Path(state.path)
        if self.session_key(path) is None:
            return None
        return DreamScope(path.parent, _session_of)


def _session_of(name: str) -> str | None:
    return name.removesuffix(".jsonl") if _SESSION.fullmatch(name) else None


def _open(loaded: LoadedConfig) -> Qwen | None:
    return Qwen(loaded.paths.qwen_dir) if loaded.config.sources.qwen else None


def _resume(session_id: str) -> str:
    return f"qwen --resume {session_id}"


ROOM = Room(
    name=AGENT,
    title="Qwen Code",
    hooks=QwenHooks(),
    open=_open,
    resume=_resume,
    fork=QwenFork(),
)
