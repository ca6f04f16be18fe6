"""Gemini CLI's sessions: ``~/.gemini/tmp/<project>/chats/session-<time>-<id8>.jsonl``.

The project folder's ``.project_root`` holds the project's path (``projects.json`` maps paths
to folders: the fallback); a chat's memories go to the one memory dir of that path's git
root, as Claude Code's do. Sub-agents' chats (``chats/<parent id>/``) are not sessions. A
folder whose project cannot be placed (the legacy ``tmp/<sha256>/`` layout has no
``.project_root``) is listed as not followed, with the reason; the legacy single-JSON chat
files (``*.json``) are not read.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Final

from memd import foreign_reads
from memd.memory.paths import project_slug
from memd.sources.base import SessionKey, plain_name, under
from memd.sources.gemini.reader import GeminiReader

AGENT: Final = "gemini"
_SMALL_FILE: Final = 1024 * 1024
_PATH_MAX: Final = 64 * 1024


class Gemini:
    """The Gemini CLI source; ``home`` is ``~/.gemini`` (its ``tmp`` folder is watched)."""

    agent = AGENT
    create_root = False
    serves_compaction = False
    claude_settings = False

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
        return SessionKey(AGENT, "", rel.stem)

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
        if not plain_name(session_id):
            return None
        return next((p for p, _ in self.walk() if p.stem == session_id), None)

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


def _from_projects(table: dict[str, Any] | None, name: str) -> str | None:
    table = table.get("projects", table) if table is not None else None
    if not isinstance(table, dict):
        return None
    for path, slug in table.items():
        if slug == name and isinstance(path, str) and path.startswith("/") and "\0" not in path:
            return path
    return None
