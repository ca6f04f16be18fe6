"""``compact --fork``: plan a forked session from a live conversation, and write its file.

:func:`plan_fork` runs in a worker thread under the session's lock (``registry.read``): it
computes level 1's cut from the notes (:func:`memd.compaction.session_memory.
compact_with_notes`) and has the agent's fork writer (its room's
:class:`~memd.sources.base.ForkWriter`) read the kept lines back and build the new file.
:func:`write_new_session` puts it where the writer says the agent finds it: the old file is
never opened for writing, and the new one is written under a temp name (owner-only), made
durable, then linked to its name, which fails rather than replace a file that exists; the
folder is opened beneath the agent's sessions folder (the source's root), no link on the way
followed, and held by its descriptor.
"""

from __future__ import annotations

import contextlib
import os
import stat
import uuid
from dataclasses import dataclass
from pathlib import Path

from memd.compaction.message import Msg
from memd.compaction.session_memory import (
    Compacted,
    FallThrough,
    covered_end,
)
from memd.compaction.strategy import NotesInput
from memd.config import CompactionConfig
from memd.confined.area import Area
from memd.sources.base import Fork, ForkWriter, plain_name, under
from memd.tokens import estimate_content
from memd.transcript.conversation import Conversation


@dataclass(frozen=True)
class ForkPlan:
    """A fork ready to write: the file and the level-1 figures behind it."""

    fork: Fork
    tokens_before: int
    tokens_after: int
    dropped_messages: int
    uncovered_tokens: int  # of the messages after those the notes cover


def plan_fork(
    conv: Conversation,
    msgs: list[Msg],
    notes: NotesInput,
    *,
    threshold: int,
    cfg: CompactionConfig,
    transcript_path: str,
    writer: ForkWriter,
    session_id: str | None = None,
) -> ForkPlan | FallThrough:
    """The fork of ``conv`` (``msgs``: its messages as compaction input, same order) as
    session ``session_id`` (default: a new id of the writer's), written by ``writer``, or why
    level 1 cannot serve it. Blocking; run under the session's lock. Raises
    :class:`~memd.transcript.content.TranscriptChanged` when the file changed meanwhile."""
    level1 = notes.level1(
        msgs,
        threshold=threshold,
        cfg=cfg,
        estimate=estimate_content,
        trigger="manual",
        transcript_path=transcript_path,
    )
    if isinstance(level1, FallThrough):
        return level1
    kept = conv.outline()[level1.cut_index :]
    fork = writer.write(
        conv,
        kept,
        session_id=session_id or writer.new_id(),
        summary=_summary_text(level1),
        pre_tokens=level1.tokens_before,
    )
    covered = covered_end(msgs, notes.last_summarized_uuid) or 0
    uncovered_tokens = sum(m.tokens for m in msgs[covered:])
    return ForkPlan(
        fork, level1.tokens_before, level1.tokens_after, level1.cut_index, uncovered_tokens
    )


def _summary_text(level1: Compacted) -> str:
    """The notes message level 1 put first: its first block (a kept user message that
    follows it was merged into the same message, and is written as its own line)."""
    text = level1.messages[0].content[0].get("text")
    return text if isinstance(text, str) else ""


class ForkExists(FileExistsError):
    """The new session's name is taken (a uuid4 collision, or a file planted there)."""


def write_new_session(root: Path, path: Path, data: bytes) -> Path:
    """Write ``path`` (a new name in an existing folder below ``root``, the agent's sessions
    folder) with ``data``, owner-only, never over an existing file (:class:`ForkExists`),
    durable before it appears. The folder is opened beneath ``root``'s descriptor, no link on
    the way followed (:class:`memd.confined.area.Area`); a path that is not below ``root``, a
    name that is not a plain file name, a folder of another user's or one anyone may write
    are refused (``PermissionError``) and nothing is written. Blocking; raises ``OSError``."""
    relative = under(root, path.parent)
    if relative is None or ".." in relative.parts or not plain_name(path.name):
        raise PermissionError(f"{path} is not a new file in a folder below {root}")
    with Area.open(root) as area:
        folder = area.open_dir(relative.as_posix() if relative.parts else "")
    try:
        info = os.fstat(folder)
        if info.st_uid != os.getuid() or info.st_mode & stat.S_IWOTH:
            raise PermissionError(f"{path.parent} is not a private folder of this user's")
        name = path.name
        temp = f".{name}.memd-{uuid.uuid4().hex[:8]}.tmp"
        _write_temp(folder, temp, data)
        try:
            os.link(temp, name, src_dir_fd=folder, dst_dir_fd=folder, follow_symlinks=False)
        except FileExistsError:
            raise ForkExists(f"{path} exists already; nothing was written") from None
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temp, dir_fd=folder)
        with contextlib.suppress(OSError):  # some filesystems refuse fsync on a folder
            os.fsync(folder)
    finally:
        os.close(folder)
    return path


def _write_temp(folder: int, temp: str, data: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temp, flags, 0o600, dir_fd=folder)
    try:
        os.fchmod(fd, 0o600)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp, dir_fd=folder)
        raise
    os.close(fd)
