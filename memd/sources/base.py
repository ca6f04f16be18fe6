"""What a room's source of sessions implements, and what the house needs of a session.

A :class:`Source` is an agent's room opened on this machine's config: it names the agent's
folder (``root``) and how its files are laid out below it (:class:`Layout`: how deep the
watcher goes, which names are session files), says which files are sessions
(:meth:`Source.session_key`), how to find them all (:meth:`Source.walk`) and one by id
(:meth:`Source.locate`), which of them the dream counts and searches with a session's
(:meth:`Source.dream_scope`), and whether the agent keeps memories of its own
(:meth:`Source.own_memory`: its native memory). A :class:`Reader` is made per session file;
it is fed the file's complete lines in order, with their offsets, and keeps a
:class:`~memd.transcript.conversation.Conversation` of what the agent's model sees, whose
entries read their content back from the file through the reader's own decoder. A reader
also says what it learned of the session: its working dir, and why memd does not follow it
(``ignored``: a sub-agent's file, the agent's own memory job, a file of no project).

What needs no paths (the agent's one name, its hook dialect, its resume command, its fork
writer) is the room's itself: :class:`memd.sources.room.Room`.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from memd.state import SessionState
from memd.transcript.conversation import Conversation
from memd.transcript.messages import OutlineMessage


@dataclass(frozen=True)
class Layout:
    """How an agent's files sit below its root: session files end in ``suffix`` and sit
    ``sessions_at`` folders below the root; the watcher watches the real folders down to
    ``depth`` below it (files there may be sessions or their sub-agents')."""

    depth: int = 3
    sessions_at: int = 1
    suffix: str = ".jsonl"

    def names(self, name: str) -> bool:
        """Whether a file of this name may be a session file (or a sub-agent's)."""
        return name.endswith(self.suffix)


@dataclass(frozen=True)
class DreamScope:
    """Sessions the dream counts for its session gate and searches (``TranscriptGrep``) with
    a project's: the files directly in ``folder`` that ``session_of`` names (file name to
    the session it is, None for any other file; files of one session count once)."""

    folder: Path
    session_of: Callable[[str], str | None]


@dataclass(frozen=True)
class OneFile:
    """A :attr:`DreamScope.session_of` that names one file only (an agent whose folders
    hold every project's sessions: only those of the project seen are counted)."""

    name: str
    session_id: str

    def __call__(self, name: str) -> str | None:
        return self.session_id if name == self.name else None


@dataclass(frozen=True)
class Fork:
    """A forked session ready to write: its id, its file's bytes, what they hold, and how
    its messages are named there (``renamed``: a kept message's id in the old session → in
    the new one; ``summary_id``: the message that stands for what was dropped), so the
    notes the new session starts with point at its own messages (issue 38)."""

    session_id: str
    data: bytes
    lines: int
    kept_messages: int
    renamed: Mapping[str, str] = field(default_factory=dict)
    summary_id: str | None = None

    def anchor(self, old: str | None) -> str | None:
        """The new session's id for the old session's message ``old`` that notes cover up
        to: itself when kept, else the summary (the notes cover all it stands for)."""
        return self.renamed.get(old, self.summary_id) if old is not None else self.summary_id


@dataclass(frozen=True)
class ModelWindow:
    """The context window an agent gives a session of some model, and why (for ``status``)."""

    tokens: int
    why: str


class ForkWriter(Protocol):
    """A compacted copy of a session written in its agent's own format, where the agent
    resumes it (``compact --fork``: compaction with no model call)."""

    def new_id(self) -> str:
        """A new session id of the agent's form."""
        ...

    def write(
        self,
        conv: Conversation,
        kept: Sequence[OutlineMessage],
        *,
        session_id: str,
        summary: str,
        pre_tokens: int,
    ) -> Fork:
        """The new session: ``summary`` in place of what came before ``kept`` (the messages
        after the cut, in order), then ``kept``, read back from ``conv``'s file (blocking,
        under the session's lock; raises ``TranscriptChanged`` when the file no longer
        holds them). ``pre_tokens``: the context before the compaction."""
        ...

    def place(self, transcript: Path, session_id: str) -> Path:
        """The new session's file, where the agent finds it (``transcript``: the old one)."""
        ...


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

    @property
    def session_id(self) -> str | None:
        """The agent's own id of the session, as the file says it once read (None: the
        file's name says it: :meth:`Source.session_key`)."""
        ...

    def feed(self, lines: Iterable[tuple[int, bytes]]) -> int:
        """Take the next complete lines ``(offset, line)``; return how many were bad."""
        ...


class Source(Protocol):
    """One agent's sessions on disk."""

    agent: str  # the room's one name (memd.sources.room.Room.name): shown with every session
    root: Path  # the folder watched (down to ``layout.depth`` folders below it)
    layout: Layout
    create_root: bool  # make the root when it is missing (else wait for it to appear)

    def session_key(self, path: Path) -> SessionKey | None:
        """The session ``path`` (under :attr:`root`) is, or None for any other file."""
        ...

    def walk(self) -> list[tuple[Path, os.stat_result]]:
        """Every candidate session file with its ``lstat`` (blocking, links not followed)."""
        ...

    def locate(self, session_id: str) -> Path | None:
        """The file of session ``session_id``, known to the registry or not (blocking)."""
        ...

    def own_id(self, path: Path) -> str | None:
        """The agent's own id of the session file ``path`` when its name does not say it
        (read from its head: blocking, bounded), or None: the name says it, or the file does
        not say (yet)."""
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

    def dream_scope(self, state: SessionState) -> DreamScope | None:
        """The sessions the dream counts and searches with ``state``'s project, or None when
        they do not count (no I/O)."""
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


def any_session(name: str) -> str | None:
    """A :attr:`DreamScope.session_of` for a folder of one project's sessions, one file
    each: every ``*.jsonl`` is the session its name says."""
    return name.removesuffix(".jsonl") if name.endswith(".jsonl") else None


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
