"""What is already in a session's context, so memd never injects it twice (R-I4, R-B5).

Per session the daemon keeps a :class:`SessionContext`: the memory files already surfaced (by
memd's own recall, or by Claude Code itself), whether memd's index is in the conversation,
whether the notes are owed after a resume, the environment the hook forwarded and the Claude
Code version. It lives in memory (bounded to :data:`MAX_SESSIONS`, least recently used out)
and is rebuilt from the transcript after a daemon restart: :func:`scan_transcript` reads the
``hook_additional_context`` attachments Claude Code records for every hook output (memd's
index, notes and recalled memories are recognised by their head lines), memory paths in any
other attachment (Claude Code's own recalled memories), the summary of a session memd forked
from its notes (the notes are in the conversation), and the ``version`` of the entries.

A scan reads only the bytes added since the previous one (the file's identity is checked; a
replaced file is read again from the start) and at most :data:`MAX_SCAN_BYTES` per call, one
line at a time: a line that is not JSON, or not the shape expected, is skipped.
:func:`scan_transcript` is blocking: call it from a worker thread.
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections import OrderedDict
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memd.compaction.prompts import NOTES_PREAMBLE
from memd.memory.claude_code import ClaudeCodeFacts
from memd.transcript.messages import ApiMessage

MAX_SESSIONS = 1_024
MAX_SCAN_BYTES = 32 * 1024 * 1024
MAX_LINE_BYTES = 4 * 1024 * 1024
_CHUNK = 1024 * 1024

# The head lines of what memd injects (hook_context renders them; the scan recognises them).
INDEX_MARK = "Memory index of this project, kept by memd"
NOTES_MARK = "Working notes of this session, kept by memd"
RECALL_MARK = "Memories from earlier sessions that may help with this prompt (recalled by memd)"
_RECALLED_LINE = re.compile(r"^## .* — (/.+\.md)$", re.MULTILINE)
_MEMORY_PATH = re.compile(r"(/[^\"\s\\]+/memory/[^\"\s\\]+\.md)")
# Claude Code writes compact JSON; a version is digits and dots (FORMAT.md §13: "2.1.197").
_VERSION_FIELD = re.compile(rb'"version": ?"(\d{1,6}\.\d{1,6}\.\d{1,6}[0-9A-Za-z.+-]{0,32})"')
# The summary line of a fork memd wrote (memd.sources.claude_code.fork: compact JSON).
_FORK_SUMMARY = b'"isCompactSummary":true'
_OWN_ATTACHMENTS = frozenset({"hook_success", "hook_additional_context", "hook_non_blocking_error"})


@dataclass
class SessionContext:
    """What one session's conversation already holds (see the module docstring)."""

    session_id: str
    surfaced: set[str] = field(default_factory=set)  # absolute memory paths
    index_injected: bool = False
    notes_owed: bool = False  # a resume happened; the next prompt gets the notes
    notes_delivered: bool = False
    env: dict[str, str] = field(default_factory=dict)
    version: str | None = None
    transcript: str = ""
    scanned_ino: int = 0
    scanned_offset: int = 0
    facts: ClaudeCodeFacts | None = None  # the last decision (for status)
    # The session's name where memd follows its transcript, when the hook's differs (Gemini
    # names a chat by its own id, memd by its file): the usage record's key.
    usage_session: str = ""
    # Which memories the agent's own memory file held when it loaded it was read (those
    # memd serves there are in ``surfaced``: memd.memory.native).
    native_read: bool = False


@dataclass(frozen=True)
class Evidence:
    """What a transcript scan found (only in the bytes it read)."""

    version: str | None = None
    memd_surfaced: frozenset[str] = frozenset()
    claude_surfaced: frozenset[str] = frozenset()
    index_injected: bool = False
    notes_delivered: bool = False
    ino: int = 0
    offset: int = 0


class SessionContexts:
    """The per-session records, least recently used dropped past :data:`MAX_SESSIONS`."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self._records: OrderedDict[str, SessionContext] = OrderedDict()
        self._max = max_sessions
        # Kept as facts change, for ``status``: sessions with a decision, and with Claude
        # Code's auto memory on.
        self.decided = 0
        self.auto_memory_on = 0

    def get(self, session_id: str) -> SessionContext:
        record = self._records.get(session_id)
        if record is None:
            record = self._records[session_id] = SessionContext(session_id)
            while len(self._records) > self._max:
                self._count(self._records.popitem(last=False)[1].facts, -1)
        self._records.move_to_end(session_id)
        return record

    def set_facts(self, record: SessionContext, facts: ClaudeCodeFacts) -> None:
        """Record the last decision about ``record``'s Claude Code (counted while it is kept)."""
        kept = self._records.get(record.session_id) is record
        if kept:
            self._count(record.facts, -1)
        record.facts = facts
        if kept:
            self._count(facts, 1)

    def _count(self, facts: ClaudeCodeFacts | None, step: int) -> None:
        if facts is not None:
            self.decided += step
            self.auto_memory_on += step if facts.auto_memory else 0

    def peek(self, session_id: str) -> SessionContext | None:
        return self._records.get(session_id)

    def __len__(self) -> int:
        return len(self._records)

    def records(self) -> list[SessionContext]:
        return list(self._records.values())


def apply(record: SessionContext, evidence: Evidence) -> None:
    """Fold a scan's findings into ``record``."""
    record.surfaced |= evidence.memd_surfaced | evidence.claude_surfaced
    record.index_injected = record.index_injected or evidence.index_injected
    record.notes_delivered = record.notes_delivered or evidence.notes_delivered
    if evidence.notes_delivered:
        record.notes_owed = False
    if evidence.version:
        record.version = evidence.version
    record.scanned_ino, record.scanned_offset = evidence.ino, evidence.offset


def opens_with_notes(messages: Sequence[ApiMessage]) -> bool:
    """Whether a conversation opens with memd's notes: the summary of a session memd forked
    from them (any agent's: the fork writers put the notes message first; an agent may put
    its own context before it on resume, as Gemini CLI does): a text block that starts with
    them in the user messages before the first answer."""
    for message in messages:
        if message.role != "user":
            return False
        for block in message.content:
            text = block.get("text")
            if isinstance(text, str) and text.startswith(NOTES_PREAMBLE):
                return True
    return False


def scan_transcript(path: str, ino: int, offset: int) -> Evidence | None:
    """Evidence from the bytes of ``path`` after ``offset`` (from 0 if the file changed
    identity or shrank); ``None`` when the file cannot be read (blocking; never raises)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            return None
        start = offset if info.st_ino == ino and offset <= info.st_size else 0
        found = _Found()
        end = start + _read_lines(fd, start, info.st_size, found)
    except OSError:
        return None
    finally:
        os.close(fd)
    return found.evidence(info.st_ino, end)


class _Found:
    def __init__(self) -> None:
        self.version: str | None = None
        self.memd: set[str] = set()
        self.claude: set[str] = set()
        self.index = False
        self.notes = False

    def evidence(self, ino: int, offset: int) -> Evidence:
        return Evidence(
            self.version,
            frozenset(self.memd),
            frozenset(self.claude),
            self.index,
            self.notes,
            ino,
            offset,
        )

    def line(self, raw: bytes) -> None:
        if _FORK_SUMMARY in raw:
            self._summary(raw)
            return
        if b'"attachment"' not in raw:  # only attachments are decoded: most lines are not
            if (found := _VERSION_FIELD.search(raw)) is not None:
                self.version = found.group(1).decode("ascii")
            return
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):
            return
        attachment = entry.get("attachment") if isinstance(entry, dict) else None
        if isinstance(attachment, dict):
            self._attachment(attachment, raw)

    def _summary(self, raw: bytes) -> None:
        """A compaction summary: memd's notes when memd wrote it (a fork from the notes,
        issue 38: the first resumed prompt must not get them again)."""
        try:
            entry = json.loads(raw)
        except (ValueError, RecursionError):
            return
        message = entry.get("message") if isinstance(entry, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, str) and content.startswith(NOTES_PREAMBLE):
            self.notes = True

    def _attachment(self, attachment: Mapping[str, Any], raw: bytes) -> None:
        kind = attachment.get("type")
        if kind == "hook_additional_context":
            content = attachment.get("content")
            for text in content if isinstance(content, list) else [content]:
                if isinstance(text, str):
                    self.memd_text(text)
        elif kind not in _OWN_ATTACHMENTS:
            text = raw.decode("utf-8", errors="replace")
            self.claude.update(m.group(1) for m in _MEMORY_PATH.finditer(text))

    def memd_text(self, text: str) -> None:
        if INDEX_MARK in text:
            self.index = True
        if NOTES_MARK in text:
            self.notes = True
        if RECALL_MARK in text:
            self.memd.update(injected_paths(text))


def injected_paths(text: str) -> Iterator[str]:
    """The memory paths named by memd's rendered recall (``## name (…) — /abs/path.md``)."""
    return (m.group(1) for m in _RECALLED_LINE.finditer(text))


def _read_lines(fd: int, start: int, size: int, found: _Found) -> int:
    """Feed whole lines from ``start`` to ``found``; the bytes consumed (up to a newline).
    A line longer than :data:`MAX_LINE_BYTES` is skipped unread."""
    budget = min(size - start, MAX_SCAN_BYTES)
    consumed = 0  # bytes of whole lines handled so far
    pending = b""  # the start of a line whose end is not read yet
    skipping = False
    while consumed + len(pending) < budget:
        want = min(_CHUNK, budget - consumed - len(pending))
        chunk = os.pread(fd, want, start + consumed + len(pending))
        if not chunk:
            break
        data = pending + chunk if pending else chunk
        at = 0
        while (cut := data.find(b"\n", at)) >= 0:
            if not skipping:
                found.line(data[at:cut])
            skipping = False
            consumed += cut + 1 - at
            at = cut + 1
        pending = data[at:]
        if len(pending) > MAX_LINE_BYTES:  # one huge line: skip it, keep the scan bounded
            consumed += len(pending)
            pending = b""
            skipping = True
    return consumed
