"""A Gemini CLI chat into the common conversation model: state replacement, not appends.

The reader keeps the history as Gemini does, message id → its entry, in order:

* a message record appends its id, or replaces it where it is (an upsert: last wins);
* ``{"$set": {"messages": [...]}}`` replaces the whole history (every start and resume, a
  compression, a rewind); ``{"$rewindTo": id}`` drops that message and all after it (an id
  not in the history drops nothing);
* header lines, repeated by a resume, only say whose session it is.

The conversation follows it incrementally where that is what happened: a new id at the end,
or the last message replaced, is one entry added (its parent is the message before it). Any
other change (a ``$set``, a rewind, an upsert mid-history, or replaced entries outnumbering
the history) marks it stale, and at the end of the batch of lines being fed the conversation
is built anew from the history's entries, which point into the file (nothing is read again):
a storm of state replacements costs one rebuild per batch, and memory stays within the
history plus the replaced entries of one batch. A file that holds no message of its own (the
2-line file a resume in a new minute leaves beside the real one) is not followed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Final

import msgspec

from memd.sources.common import checked, decode_line
from memd.sources.gemini.wire import (
    ROLES,
    Line,
    Message,
    blocks_of,
    is_turn_end,
    line_decoder,
    message_decoder,
    outline_of,
    snapshot,
)
from memd.transcript.content import FileLines, TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.model import (
    COMPACT_BOUNDARY,
    TURN_END,
    AssistantEntry,
    Content,
    Entry,
    SystemEntry,
    Usage,
    UserEntry,
)
from memd.transcript.parse import BadLine

log = logging.getLogger(__name__)

NO_MESSAGES: Final = "no message of its own (what a resume leaves beside the real file)"


def header_id(line: Line) -> str | None:
    """The session id a main chat's header line gives (``sessionId``), when it is a plain
    name; None for any other line."""
    sid = line.sessionId
    if sid is None or line.kind not in (None, "main") or line.id is not None:
        return None
    plain = 0 < len(sid) <= 128 and "/" not in sid and "\0" not in sid and sid not in (".", "..")
    return sid if plain else None


SLACK: Final = 64  # replaced entries kept beyond the history's size before a rebuild


class GeminiReader:
    """One chat file's lines, in order, into its conversation."""

    def __init__(self, path: str, inode: int, cwd: str | None, unplaced: str | None) -> None:
        self.path = path
        self.cwd = cwd
        self._unplaced = unplaced  # why the file has no project, or None
        self._contents = SetContents()
        self.conversation = self._new_conversation(inode)
        self._inode = inode
        self._history: dict[str, Entry] = {}
        self._stale = False
        self._replaced = 0
        self._own_messages = False
        self._subagent = False
        self._answered: set[str] = set()  # message ids counted as turn ends
        self._snapshots: set[str] = set()  # ids of compression summaries seen
        self._boundary: SystemEntry | None = None  # the history is a compression's
        self.session_id: str | None = None  # Gemini's sessionId, from the first header

    @property
    def ignored(self) -> str | None:
        if self._unplaced is not None:
            return self._unplaced
        if self._subagent:
            return "a Gemini sub-agent's chat"
        return None if self._own_messages else NO_MESSAGES

    def _new_conversation(self, inode: int) -> Conversation:
        conv = Conversation(lines=FileLines(self.path, inode, decode=self._contents.decode))
        conv.cwd = self.cwd
        return conv

    def feed(self, lines: Iterable[tuple[int, bytes]]) -> int:
        bad = 0
        for at, line in lines:
            try:
                found = decode_line(line_decoder, line, lossy=True)
            except BadLine as exc:
                bad += 1
                log.debug("skipping a bad line in %s: %s", self.path, exc)
                continue
            if found is not None:
                self._take(found, at, len(line))
        if self._stale or self._replaced > len(self._history) + SLACK:
            self._rebuild()
        return bad

    def _take(self, line: Line, at: int, size: int) -> None:
        if line.set is not None:
            if line.set.messages is not None:
                self._replace_all(line.set.messages, at, size)
        elif line.rewind_to is not None:
            self._rewind(line.rewind_to)
        elif line.id is not None and line.type in ROLES:
            self._own_messages = True
            self._upsert(line, f"{at}", at, size, counted=True)
        elif line.sessionId is not None and line.kind not in (None, "main"):
            self._subagent = True
        elif self.session_id is None:
            self.session_id = header_id(line)

    def _entry(self, message: Message, uuid: str, at: int, size: int) -> UserEntry | AssistantEntry:
        role = ROLES[message.type or "user"]
        outline = outline_of(message)
        when = message.timestamp
        if role == "user":
            return UserEntry(uuid=uuid, at=at, size=size, timestamp=when, blocks=outline)
        figures = message.tokens
        usage = None
        if figures is not None and (figures.input or figures.output):
            usage = Usage(prompt_tokens=figures.input or 0, output_tokens=figures.output or 0)
        return AssistantEntry(
            uuid=uuid,
            at=at,
            size=size,
            timestamp=when,
            message_id=uuid,  # one entry per response: a replaced one is never taken back in
            blocks=outline,
            usage=usage,
        )

    def _upsert(self, message: Message, uuid: str, at: int, size: int, *, counted: bool) -> None:
        ident = message.id or uuid
        entry = self._entry(message, uuid, at, size)
        self._place(ident, entry)
        if counted and ident not in self._answered and is_turn_end(message, entry.blocks):
            self._answered.add(ident)
            end = SystemEntry(uuid=f"{uuid}:end", parent_uuid=uuid, subtype=TURN_END, at=at)
            self.conversation.add(end)

    def _place(self, ident: str, entry: Entry) -> None:
        history = self._history
        last = next(reversed(history), None) if history else None
        if ident in history and ident != last:
            history[ident] = entry  # mid-history: its place is kept, the chain is rebuilt
            self._stale = True
            return
        if ident in history:
            self._replaced += 1
            del history[ident]
        parent = history[next(reversed(history))].uuid if history else None
        history[ident] = entry
        if not self._stale:
            self.conversation.add(msgspec.structs.replace(entry, parent_uuid=parent))

    def _replace_all(self, raws: list[msgspec.Raw], at: int, size: int) -> None:
        messages: list[tuple[int, Message]] = []
        for k, raw in enumerate(raws):
            try:
                message = message_decoder.decode(raw)
            except (msgspec.DecodeError, RecursionError):
                continue  # one message of the history: the others stand
            ident = message.id
            if ident is None or message.type not in ROLES or ident.endswith("_response"):
                continue  # a response the history holds twice is taken from its own record
            messages.append((k, message))
        self._history = {}
        self._stale = True
        for k, message in messages:
            ident = message.id or ""
            self._history.pop(ident, None)
            self._history[ident] = self._entry(message, f"{at}/{k}", at, size)
        found = snapshot([m for _, m in messages])
        if found is None:
            self._boundary = None
        elif found not in self._snapshots:  # a resume repeats the compressed history
            self._snapshots.add(found)
            before = self.conversation.context().tokens
            self._boundary = SystemEntry(
                uuid=f"{at}:compressed",
                at=at,
                subtype=COMPACT_BOUNDARY,
                compact_trigger="auto",
                pre_tokens=before,
            )
            self.conversation.add(self._boundary)  # recorded here, with the context before

    def _rewind(self, ident: str) -> None:
        if ident not in self._history:
            return
        kept: dict[str, Entry] = {}
        for key, entry in self._history.items():
            if key == ident:
                break
            kept[key] = entry
        self._history = kept
        self._stale = True

    def _rebuild(self) -> None:
        """The conversation anew from the history (counters and compactions carried)."""
        conv = self._new_conversation(self._inode)
        parent: str | None = None
        if self._boundary is not None:
            conv.add(self._boundary)  # the compressed history starts a new context
            parent = self._boundary.uuid
        for entry in self._history.values():
            conv.add(msgspec.structs.replace(entry, parent_uuid=parent))
            parent = entry.uuid
        conv.carry_from(self.conversation)  # its compactions include the boundary
        self.conversation = conv
        self._stale = False
        self._replaced = 0


class SetContents:
    """Content read back for Gemini entries. A ``$set`` line holds many messages: its list of
    messages (raw) is kept for the last such line read, so reading back a whole history
    decodes that line once, not once per message."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._key: tuple[int, int] | None = None
        self._messages: list[msgspec.Raw] = []

    def decode(self, line: bytes, entry: Entry) -> Content:
        _, _, k = entry.uuid.partition("/")
        try:
            if not k:
                message: Message | None = decode_line(message_decoder, line, lossy=True)
            else:
                message = self._nth(line, entry, int(k))
        except (BadLine, msgspec.DecodeError, RecursionError, ValueError) as exc:
            raise TranscriptChanged(f"the line of {entry.uuid} no longer parses: {exc}") from None
        return checked(blocks_of(message) if message is not None else [], line, entry)

    def _nth(self, line: bytes, entry: Entry, k: int) -> Message | None:
        with self._lock:
            if self._key != (entry.at, len(line)):
                found = decode_line(line_decoder, line, lossy=True)
                sets = found.set if found is not None else None
                self._messages = (sets.messages or []) if sets is not None else []
                self._key = (entry.at, len(line))
            raw = self._messages[k] if k < len(self._messages) else None
        return message_decoder.decode(raw) if raw is not None else None
