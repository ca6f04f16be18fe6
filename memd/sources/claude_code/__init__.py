"""Claude Code's room: its sessions, ``<projects root>/<project>/<session>.jsonl`` (FORMAT.md).

The project is the folder a transcript sits in (the slug of the dir Claude Code started in);
lines are parsed by :mod:`memd.transcript.parse`, the format the common model was made from;
a line of a type Claude Code is not known to write (:mod:`.entry_types`) is counted.
Sub-agent transcripts (``<session>/subagents/…``) and the old ``agent-*.jsonl`` layout are
not main conversations (R-T1). Every session of a project folder counts for the dream and is
searched by it. Its hooks: :mod:`.hooks`; a compacted session it resumes: :mod:`.fork`
(``claude --resume <id>``); its own memory is decided per session from its settings
(:mod:`memd.memory.claude_code`); the window of a session, from its model: :mod:`.window`.
Older hook commands and installs call it ``claude``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from memd.config import LoadedConfig
from memd.sources.base import DreamScope, Layout, SessionKey, any_session, plain_name, under
from memd.sources.claude_code.entry_types import KNOWN
from memd.sources.claude_code.fork import ClaudeFork
from memd.sources.claude_code.hooks import ClaudeHooks
from memd.sources.claude_code.usage import RULES as USAGE_RULES
from memd.sources.claude_code.window import model_window
from memd.sources.room import Room
from memd.state import SessionState
from memd.transcript.content import FileLines
from memd.transcript.conversation import Conversation
from memd.transcript.parse import BadLine, parse_kind

log = logging.getLogger(__name__)

AGENT = "claude_code"
# Project folder (1), a session's folder (2), its ``subagents`` folder (3).
LAYOUT = Layout(depth=3, sessions_at=1)


class ClaudeCode:
    """The Claude Code source; ``root`` is the projects root."""

    agent = AGENT
    layout = LAYOUT
    create_root = True

    def __init__(self, root: Path) -> None:
        self.root = root

    def session_key(self, path: Path) -> SessionKey | None:
        """``<root>/<project>/<session>.jsonl`` names a main transcript; nothing else does."""
        rel = under(self.root, path)
        if rel is None or len(rel.parts) != 2:
            return None
        if rel.suffix != ".jsonl" or rel.name.startswith("agent-"):
            return None
        return SessionKey(AGENT, sys.intern(rel.parts[0]), rel.stem)  # one copy per project

    def walk(self) -> list[tuple[Path, os.stat_result]]:
        found: list[tuple[Path, os.stat_result]] = []
        try:
            projects = list(os.scandir(self.root))
        except FileNotFoundError:
            return found
        for project in projects:
            if not project.is_dir(follow_symlinks=False):
                continue
            try:
                entries = list(os.scandir(project.path))
            except OSError:
                continue
            for entry in entries:
                try:
                    if entry.name.endswith(".jsonl"):  # whatever it is: R-T7 reports the odd ones
                        found.append((Path(entry.path), entry.stat(follow_symlinks=False)))
                except OSError:
                    continue
        return found

    def locate(self, session_id: str) -> Path | None:
        """The main transcript named ``session_id`` in any project folder (a stat per
        project folder). None for a name that is no plain file name."""
        name = f"{session_id}.jsonl"
        if not plain_name(name):
            return None
        try:
            projects = list(os.scandir(self.root))
        except OSError:
            return None
        for project in projects:
            try:
                if project.is_dir(follow_symlinks=False) and os.path.lexists(
                    path := os.path.join(project.path, name)
                ):
                    return Path(path)
            except (OSError, ValueError):
                continue
        return None

    def reader(self, path: str, inode: int) -> ClaudeReader:
        return ClaudeReader(path, inode)

    def own_id(self, path: Path) -> str | None:
        return None  # the file's name is the session's id

    def project_of(self, key: SessionKey, cwd: str | None) -> str:
        return key.project

    def own_memory(self, cwd: str) -> str | None:
        return None  # decided per session from its settings and hooks (memory_per_session)

    def unread(self) -> dict[str, int]:
        return {}  # links and unreadable folders: the watcher's ``skipped``

    def dream_scope(self, state: SessionState) -> DreamScope | None:
        """Every transcript in the session's project folder (Claude Code's own count)."""
        folder = Path(state.path).parent
        if not state.path or folder.parent != self.root:
            return None
        return DreamScope(folder, any_session)


class ClaudeReader:
    """Claude Code's lines, one entry each, into one conversation."""

    ignored = None
    session_id = None  # the file's name is the session's id

    def __init__(self, path: str, inode: int) -> None:
        self.path = path
        self.conversation = Conversation(lines=FileLines(path, inode))

    @property
    def cwd(self) -> str | None:
        return self.conversation.cwd

    def feed(self, lines: Iterable[tuple[int, bytes]]) -> int:
        conv = self.conversation
        bad = 0
        for at, line in lines:
            try:
                entry = parse_kind(line, at)
            except BadLine as exc:
                bad += 1
                log.debug("skipping a bad line in %s: %s", self.path, exc)
                continue
            if isinstance(entry, str):
                if entry not in KNOWN:
                    conv.count_unknown(entry)
            elif entry is not None:
                conv.add(entry)
        return bad


def _open(loaded: LoadedConfig) -> ClaudeCode:
    return ClaudeCode(loaded.paths.projects_root)


def _resume(session_id: str) -> str:
    return f"claude --resume {session_id}"


ROOM = Room(
    name=AGENT,
    title="Claude Code",
    hooks=ClaudeHooks(),
    open=_open,
    resume=_resume,
    aliases=("claude",),
    fork=ClaudeFork(),
    memory_per_session=True,
    usage=USAGE_RULES,
    window=model_window,
)
