"""The protocol every agent's room implements, and what the house needs of a session.

A :class:`Source` names one agent's folder (``root``, watched down to three folders below it)
and says which files under it are sessions (:meth:`Source.session_key`), how to find them
all (:meth:`Source.walk`) and one by id (:meth:`Source.locate`). A :class:`Reader` is made per
session file; it is fed the file's complete lines in order, with their offsets, and keeps a
:class:`~memd.transcript.conversation.Conversation` of what the agent's model sees, whose
entries read their content back from the file through the reader's own decoder. A reader
also says what it learned of the session: its working dir, and why memd does not follow it
(``ignored``: a sub-agent's file, the agent's own memory job, a file of no project).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from memd.transcript.conversation import Conversation


@dataclass(frozen=True)
class SessionKey:
    """A session file's agent, project (a folder name under the projects root; empty until
    the reader finds the session's working dir) and session id."""

    agent: str
    project: str
    session_id: str


class Reader(Protocol):
    """Turns one session file's lines into its conversation, in file order."""

    @property
    def conversation(self) -> Conversation:
        """The conversation so far (a reader may start a new one, e.g. on a state
        replacement: take it after every :meth:`feed`)."""
        ...

    @property
    def cwd(self) -> str | None:
        """The session's working dir as the agent wrote it, once known."""
        ...

    @property
    def ignored(self) -> str | None:
        """Why memd does not follow this session (no notes, no extraction), or None."""
        ...

    def feed(self, lines: Iterable[tuple[int, bytes]]) -> int:
        """Take the next complete lines ``(offset, line)``; return how many were bad."""
        ...


class Source(Protocol):
    """One agent's sessions on disk."""

    agent: str  # "claude_code", "codex", "gemini": shown with every session
    root: Path  # the folder watched (down to three folders below it)
    create_root: bool  # make the root when it is missing (else wait for it to appear)
    serves_compaction: bool  # whether memd's compaction serves this agent's sessions
    claude_settings: bool  # whether Claude Code's settings say what the agent does itself

    def session_key(self, path: Path) -> SessionKey | None:
        """The session ``path`` (under :attr:`root`) is, or None for any other file."""
        ...

    def walk(self) -> list[tuple[Path, os.stat_result]]:
        """Every candidate session file with its ``lstat`` (blocking, links not followed)."""
        ...

    def locate(self, session_id: str) -> Path | None:
        """The file of session ``session_id``, known to the registry or not (blocking)."""
        ...

    def reader(self, path: str, inode: int) -> Reader:
        """A reader for the session file ``path`` (``inode``: the file the lines come from)."""
        ...

    def project_of(self, key: SessionKey, cwd: str | None) -> str:
        """The project a session is listed under, once its working dir is known."""
        ...

    def own_memory(self, cwd: str) -> str | None:
        """Why memd extracts no memories from this agent's sessions in ``cwd`` (the agent
        keeps its own), or None (blocking: may read the agent's config)."""
        ...

    def unread(self) -> dict[str, int]:
        """What the last :meth:`walk` found under the root and does not read, counted by
        why (for ``status``; no I/O)."""
        ...


def under(root: Path, path: Path) -> Path | None:
    """``path`` relative to ``root``, or None when it is not below it (lexically)."""
    try:
        return path.relative_to(root)
    except ValueError:
        return None


def source_for(sources: Iterable[Source], path: Path) -> tuple[Source, SessionKey] | None:
    """The source ``path`` belongs to and the session it is, or None."""
    for source in sources:
        key = source.session_key(path)
        if key is not None:
            return source, key
    return None


def plain_name(name: str) -> bool:
    """A file name that names a file in its folder: no ``/``, no NUL, not ``.``/``..`` (with
    or without ``.jsonl``), within the 255 bytes a name may have."""
    stem = name.removesuffix(".jsonl")
    return (
        "/" not in name
        and "\0" not in name
        and stem not in ("", ".", "..")
        and len(name.encode("utf-8", "surrogatepass")) <= 255
    )
