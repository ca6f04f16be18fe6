"""Gemini CLI's room: its sessions, ``~/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl``.

The project folder's ``.project_root`` holds the project's path (``projects.json`` maps paths
to folders: the fallback); a chat's memories go to the one memory dir of that path's git
root, as Claude Code's do. Sub-agents' chats (``chats/<parent id>/``) are not sessions. A
folder whose project cannot be placed (the legacy ``tmp/<sha256>/`` layout has no
``.project_root``) is listed as not followed, with the reason; the legacy single-JSON chat
files (``*.json``) are not read. A project's chats count for the dream and are searched by
it (the files of one chat, which a resume in a new minute leaves, count once). Its hooks:
:mod:`.hooks`; ``gemini --resume <id>`` resumes a session; a compacted session it resumes:
:mod:`.fork`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from memd import foreign_reads, regular_file
from memd.config import LoadedConfig
from memd.memory.paths import project_slug
from memd.sources.base import DreamScope, Layout, SessionKey, plain_name, under
from memd.sources.common import decode_line
from memd.sources.gemini.fork import GeminiFork
from memd.sources.gemini.hooks import GeminiHooks
from memd.sources.gemini.inbox import GeminiInbox
from memd.sources.gemini.native import GeminiNative
from memd.sources.gemini.reader import GeminiReader, header_id
from memd.sources.gemini.usage import RULES as USAGE_RULES
from memd.sources.gemini.wire import line_decoder
from memd.sources.room import Room
from memd.state import SessionState
from memd.transcript.parse import BadLine

AGENT: Final = "gemini"
LAYOUT: Final = Layout(depth=3, sessions_at=2)  # <project>/chats/, sub-agents' chats below
_SMALL_FILE: Final = 1024 * 1024
_PATH_MAX: Final = 64 * 1024
_HEADER_MAX: Final = 64 * 1024  # a chat's first line: its header, a few hundred bytes


class Gemini:
    """The Gemini CLI source; ``home`` is ``~/.gemini`` (its ``tmp`` folder is watched)."""

    agent = AGENT
    layout = LAYOUT
    create_root = False

    def __init__(self, home: Path) -> None:
        self.home = home
        self.root = home / "tmp"
        self._unread: dict[str, int] = {}

    def session_key(self, path: Path) -> SessionKey | None:
        rel = under(self.root, path)
        if rel is None or len(rel.parts) != 3 or rel.parts[1] != "chats":
            return None
        if rel.suffix != ".jsonl" or not rel.name.startswith("session-"):
            return None
        return SessionKey(AGENT, "", rel.stem)  # until the header says (own_id)

    def walk(self) -> list[tuple[Path, os.stat_result]]:
        found: list[tuple[Path, os.stat_result]] = []
        legacy = unplaced = 0
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
                        if entry.name.endswith(".jsonl"):
                            found.append((Path(entry.path), entry.stat(follow_symlinks=False)))
                        elif entry.name.endswith(".json"):
                            legacy += 1
                if not os.path.lexists(os.path.join(project.path, ".project_root")):
                    unplaced += 1
            except OSError:
                continue
        self._unread = {
            "legacy single-JSON chats (*.json), not read": legacy,
            "project folders without .project_root (placed by projects.json, or not)": unplaced,
        }
        return found

    def unread(self) -> dict[str, int]:
        return {why: n for why, n in self._unread.items() if n}

    def locate(self, session_id: str) -> Path | None:
        """The chat of ``session_id`` (Gemini's ``sessionId``: of the files that carry it,
        the biggest, which a resume keeps writing; or a file's name, the id memd gave a chat
        before it read Gemini's)."""
        if not plain_name(session_id):
            return None
        found: list[tuple[int, Path]] = []
        for path, info in self.walk():
            if path.stem == session_id:
                return path
            if path.stem.endswith("-" + session_id[:8]) and self.own_id(path) == session_id:
                found.append((info.st_size, path))
        return max(found)[1] if found else None

    def own_id(self, path: Path) -> str | None:
        """Gemini's ``sessionId``, from the chat's header (its first line): the id it
        prints and resumes by, which every file of one chat carries."""
        try:
            with regular_file.open_regular(path) as file:
                head = file.read(_HEADER_MAX)
        except OSError:
            return None
        first, newline, _ = head.partition(b"\n")
        if not newline and len(head) >= _HEADER_MAX:
            return None
        try:
            line = decode_line(line_decoder, first, lossy=True)
        except BadLine:
            return None
        return header_id(line) if line is not None else None

    def reader(self, path: str, inode: int) -> GeminiReader:
        folder = Path(path).parent.parent
        cwd = self.project_path(folder)
        unplaced = None
        if cwd is None:
            unplaced = f"no project: {folder.name} has no .project_root (the legacy layout?)"
        return GeminiReader(path, inode, cwd, unplaced)

    def project_of(self, key: SessionKey, cwd: str | None) -> str:
        return project_slug(cwd) if cwd else ""

    def own_memory(self, cwd: str) -> str | None:
        return None  # Gemini CLI's save_memory writes GEMINI.md only when its model calls it

    def dream_scope(self, state: SessionState) -> DreamScope | None:
        """Every chat in the session's project folder (``tmp/<project>/chats``)."""
        path = Path(state.path)
        if self.session_key(path) is None:
            return None
        return DreamScope(path.parent, chat_of)

    def project_path(self, folder: Path) -> str | None:
        """The project a ``tmp/<project>`` folder is for: its ``.project_root``, else the
        path ``projects.json`` maps to that folder's name. None when neither says."""
        text = foreign_reads.read_name(folder / ".project_root", _PATH_MAX, links="refuse")
        if text is not None:
            path = text.strip()
            if path.startswith("/") and "\n" not in path:
                return path
        projects = self.home / "projects.json"
        table = foreign_reads.read_json_object(projects, _SMALL_FILE, links="refuse")
        return _from_projects(table, folder.name)


def chat_of(name: str) -> str | None:
    """The chat a file in a ``chats`` folder belongs to (the first 8 of its session id, which
    every file of one chat carries), or None for another file."""
    if not name.startswith("session-") or not name.endswith(".jsonl"):
        return None
    return name.removesuffix(".jsonl").rsplit("-", 1)[-1] or None


def _from_projects(table: dict[str, Any] | None, name: str) -> str | None:
    table = table.get("projects", table) if table is not None else None
    if not isinstance(table, dict):
        return None
    for path, slug in table.items():
        if slug == name and isinstance(path, str) and path.startswith("/") and "\0" not in path:
            return path
    return None


def _open(loaded: LoadedConfig) -> Gemini | None:
    return Gemini(loaded.paths.gemini_dir) if loaded.config.sources.gemini else None


def _resume(session_id: str) -> str:
    return f"gemini --resume {session_id}"


ROOM = Room(
    name=AGENT,
    title="Gemini CLI",
    hooks=GeminiHooks(),
    open=_open,
    resume=_resume,
    fork=GeminiFork(),
    usage=USAGE_RULES,
    native=GeminiNative(),
    inbox=GeminiInbox(),
)
