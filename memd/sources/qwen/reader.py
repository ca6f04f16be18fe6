"""A Qwen Code session file into the common conversation model.

Qwen's records form a tree as Claude Code's lines do: each names the record before it
(``parentUuid``), a rewind re-roots the chain (the records after the turn it goes back to
are left on a dead branch), and the conversation is the chain from the newest record back.
So each record keeps its own uuid and parent:

* ``user`` and ``tool_result`` records are user entries, ``assistant`` records one response
  each (usage from ``usageMetadata``); an answer with words and no tool call is followed by
  a turn end (``<uuid>:end``);
* ``system`` records (telemetry, attribution, a rewind, a title...) are links: not context,
  but the chain passes through them; so is a sub-agent's record (``isSidechain``), should one
  be in a session's file (Qwen writes them to files of their own);
* a ``chat_compression`` record is a compact boundary followed by its ``compressedHistory``,
  the whole new history (entries ``<uuid>/<k>``); the record's own uuid then leads to the
  last of them, so the records after it, which name it, continue the compressed history.

A line that is not a record is counted bad and skipped (one line is the isolation boundary);
a system record memd cannot read whole is still a link when its place can be read.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Final

from memd.sources.common import checked, decode_line, outline_of
from memd.sources.qwen.wire import (
    COMPRESSION,
    Envelope,
    Message,
    Record,
    blocks_of,
    envelope_decoder,
    is_answer,
    record_decoder,
    role_of,
)
from memd.transcript.content import FileLines, TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.model import (
    COMPACT_BOUNDARY,
    TURN_END,
    AssistantEntry,
    Block,
    Content,
    Entry,
    ProgressEntry,
    SystemEntry,
    Usage,
    UserEntry,
)
from memd.transcript.parse import BadLine

log = logging.getLogger(__name__)

NO_CWD: Final = "no record with the session's working dir read yet"
_MAX_ID: Final = 128


def plain_id(value: str | None) -> bool:
    """A record id memd keeps as it is: short, and free of the ``/`` and ``:`` that name the
    entries memd adds (``<uuid>/<k>``, ``<uuid>:end``)."""
    return value is not None and 0 < len(value) <= _MAX_ID and not any(c in value for c in "/:")


class QwenReader:
    """One session file's lines, in order, into its conversation."""

    def __init__(self, path: str, inode: int) -> None:
        self.path = path
        self.conversation = Conversation(lines=FileLines(path, inode, decode=content_of))
        self.cwd: str | None = None
        self.ignored: str | None = NO_CWD
        self.session_id: str | None = None  # the file's name says it: Qwen's session id

    def feed(self, lines: Iterable[tuple[int, bytes]]) -> int:
        bad = 0
        for at, line in lines:
            try:
                record: Envelope | None = decode_line(record_decoder, line, lossy=True)
            except BadLine as exc:
                record = _link_only(line)
                if record is None:
                    bad += 1
                    log.debug("skipping a bad line in %s: %s", self.path, exc)
                    continue
            if record is not None:
                self._take(record, at, len(line))
        return bad

    def _take(self, record: Envelope, at: int, size: int) -> None:
        uuid = record.uuid if plain_id(record.uuid) else f"@{at}"
        assert uuid is not None
        parent = record.parentUuid
        full = record if isinstance(record, Record) else None
        when = full.timestamp if full is not None else None
        if full is not None:
            self._move(full.cwd)
        kind = record.type
        payload = full.systemPayload if full is not None else None
        history = payload.compressedHistory if payload is not None else None
        if kind == "system" and record.subtype == COMPRESSION and history is not None:
            info = payload.info if payload is not None else None
            trigger = "manual" if info is not None and info.triggerReason == "manual" else "auto"
            self._compressed(uuid, history, (at, size), when, trigger)
            return
        role = role_of(kind, None) if full is not None and not full.isSidechain else None
        if role is None or full is None:
            if kind != "system":
                self.conversation.count_unknown(kind or "")
            link = ProgressEntry(uuid=uuid, parent_uuid=parent, at=at, size=size, timestamp=when)
            self.conversation.add(link)
            return
        self._message(full, role, uuid, parent, at, size)

    def _move(self, cwd: str | None) -> None:
        if cwd and cwd.startswith("/") and "\0" not in cwd:
            self.cwd = self.conversation.cwd = cwd
            self.ignored = None

    def _message(
        self, record: Record, role: str, uuid: str, parent: str | None, at: int, size: int
    ) -> None:
        blocks = blocks_of(record.message, role)
        self.conversation.add(_entry(blocks, role, uuid, parent, at, size, record))
        if role == "assistant" and is_answer(blocks):
            end = SystemEntry(uuid=f"{uuid}:end", parent_uuid=uuid, subtype=TURN_END, at=at)
            self.conversation.add(end)

    def _compressed(
        self,
        uuid: str,
        history: list[Message],
        place: tuple[int, int],
        when: str | None,
        trigger: str,
    ) -> None:
        at, size = place
        before = self.conversation.context().tokens
        boundary = SystemEntry(
            uuid=f"{uuid}:compressed",
            at=at,
            size=size,
            timestamp=when,
            subtype=COMPACT_BOUNDARY,
            compact_trigger=trigger,
            pre_tokens=before,
        )
        self.conversation.add(boundary)
        last = boundary.uuid
        for k, message in enumerate(history):
            role = role_of(None, message)
            if role is None:
                continue
            item = f"{uuid}/{k}"
            blocks = blocks_of(message, role)
            self.conversation.add(_entry(blocks, role, item, last, at, size, None))
            last = item
        # the record itself leads to the compressed history's end: what follows names it
        self.conversation.add(ProgressEntry(uuid=uuid, parent_uuid=last, at=at, size=size))


def _entry(
    blocks: list[Block],
    role: str,
    uuid: str,
    parent: str | None,
    at: int,
    size: int,
    record: Record | None,
) -> Entry:
    outline = outline_of(blocks, role)
    when = record.timestamp if record is not None else None
    if role == "user":
        return UserEntry(
            uuid=uuid, parent_uuid=parent, at=at, size=size, timestamp=when, blocks=outline
        )
    figures = record.usageMetadata if record is not None else None
    usage = None
    if figures is not None and (figures.promptTokenCount or figures.candidatesTokenCount):
        usage = Usage(
            prompt_tokens=figures.promptTokenCount or 0,
            output_tokens=figures.candidatesTokenCount or 0,
        )
    return AssistantEntry(
        uuid=uuid,
        parent_uuid=parent,
        at=at,
        size=size,
        timestamp=when,
        message_id=uuid,  # one record per response
        model=record.model if record is not None else None,
        blocks=outline,
        usage=usage,
    )


def _link_only(line: bytes) -> Envelope | None:
    """A system record whose payload memd cannot read, as the link it is; None for any other
    line (a message or a compression that does not read is bad)."""
    try:
        found = decode_line(envelope_decoder, line, lossy=True)
    except BadLine:
        return None
    if found is None or found.type != "system" or found.subtype == COMPRESSION:
        return None
    return found


def content_of(line: bytes, entry: Entry) -> Content:
    """The content of a Qwen entry, read back from its line."""
    try:
        record = decode_line(record_decoder, line, lossy=True)
    except BadLine as exc:
        raise TranscriptChanged(f"the line of {entry.uuid} no longer parses: {exc}") from None
    _, slash, k = entry.uuid.partition("/")
    message: Message | None = None
    role: str | None = None
    if record is not None and slash:
        payload = record.systemPayload
        history = (payload.compressedHistory or []) if payload is not None else []
        if k.isdigit() and int(k) < len(history):
            message = history[int(k)]
            role = role_of(None, message)
    elif record is not None:
        message, role = record.message, role_of(record.type, None)
    blocks = blocks_of(message, role) if role is not None else []
    return checked(blocks, line, entry)
