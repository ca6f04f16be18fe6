"""A Codex rollout into the common conversation model.

Each history item is one entry whose uuid is its line's offset (``"<at>"``; an item of a
``compacted`` line's ``replacement_history`` is ``"<at>.<k>"``), chained to the one before:

* ``response_item`` messages (user, assistant), tool calls (assistant) and their outputs
  (user). Developer messages and reasoning are not conversation; the compaction summary's
  own answer (``metadata.compaction_output``) is not history either: it comes back as a user
  message of the replacement history.
* The items the model wrote between two user-side items are one response (one
  ``message_id``); ``event_msg`` ``token_count`` gives the response before it its usage
  (``last_token_usage``), as an item-less line of that response: the context figure is the
  agent's own count.
* ``task_complete`` is a turn end; ``compacted`` is a compact boundary followed by its
  ``replacement_history``, the whole new history.
* ``session_meta`` (the first line) gives the cwd and says whether the session is one memd
  follows: a sub-agent's thread, or Codex's own memory consolidation, is not (no entries are
  built for them). ``turn_context`` moves the cwd.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

import msgspec

from memd.sources.codex.wire import (
    Item,
    Line,
    Payload,
    blocks_of,
    kind_decoder,
    line_decoder,
)
from memd.sources.common import checked, decode_line, outline_of
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

NO_META = "no session_meta line read yet"
_USED = frozenset({"session_meta", "turn_context", "response_item", "event_msg", "compacted"})
_META_PREFIXES = ("<environment_context>", "<user_instructions>", "<subagent_notification>")


class CodexReader:
    """One rollout file's lines, in order, into its conversation."""

    def __init__(self, path: str, inode: int) -> None:
        self.path = path
        self.conversation = Conversation(lines=FileLines(path, inode, decode=content_of))
        self.cwd: str | None = None
        self.ignored: str | None = NO_META
        self.session_id: str | None = None  # the rollout's name says it: its thread id
        self._meta_seen = False
        self._last: str | None = None  # the entry the next one follows
        self._response: str | None = None  # the open response's id (model-side items)
        self._answered: str | None = None  # the last response, for the usage that follows
        # The last usage read: a response's items carry it until their own comes (Codex
        # writes the count after the items), so the figure is never less than the last one.
        self._usage: Usage | None = None

    def feed(self, lines: Iterable[tuple[int, bytes]]) -> int:
        bad = 0
        for at, line in lines:
            try:
                found = _decode(line)
            except BadLine as exc:
                bad += 1
                log.debug("skipping a bad line in %s: %s", self.path, exc)
                continue
            if found is not None and found.payload is not None:
                self._take(found, found.payload, at, len(line))
        return bad

    def _take(self, line: Line, payload: Payload, at: int, size: int) -> None:
        kind = line.type
        if kind == "session_meta":
            self._meta(payload)
        elif self.ignored is not None:
            return
        elif kind == "turn_context":
            self._move(payload.cwd)
        elif kind == "response_item":
            compaction = line.metadata is not None and line.metadata.compaction_output is True
            if compaction:
                self._response = self._answered = None
            else:
                self._item(payload, f"{at}", at, size, line.timestamp)
        elif kind == "event_msg":
            self._event(payload, at, size, line.timestamp)
        elif kind == "compacted":
            self._compacted(payload, at, size, line.timestamp)

    def _meta(self, payload: Payload) -> None:
        if self._meta_seen:
            return  # only the first one names the session
        self._meta_seen = True
        self.ignored = ignored_reason(payload)
        self._move(payload.cwd)

    def _move(self, cwd: str | None) -> None:
        if cwd and cwd.startswith("/") and "\0" not in cwd:
            self.cwd = cwd
            self.conversation.cwd = cwd

    def _item(self, item: Item, uuid: str, at: int, size: int, when: str | None) -> None:
        made = blocks_of(item)
        if made is None:
            return
        role, blocks = made
        outline = outline_of(blocks, role)
        if role == "user":
            self._response = None
            meta = any(b.get("text", "").startswith(_META_PREFIXES) for b in blocks)
            self._add(
                UserEntry(uuid=uuid, at=at, size=size, timestamp=when, blocks=outline, is_meta=meta)
            )
            return
        if self._response is None:
            self._response = uuid
        self._answered = self._response
        self._add(
            AssistantEntry(
                uuid=uuid,
                at=at,
                size=size,
                timestamp=when,
                message_id=self._response,
                blocks=outline,
                usage=self._usage,
            )
        )

    def _event(self, payload: Payload, at: int, size: int, when: str | None) -> None:
        if payload.type == "task_complete":
            self._response = None
            self._add(SystemEntry(uuid=f"{at}", at=at, size=size, timestamp=when, subtype=TURN_END))
            return
        if payload.type != "token_count" or payload.info is None:
            return
        usage = payload.info.last_token_usage
        if usage is None or self._answered is None:
            return
        figure = self._usage = Usage(
            prompt_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0
        )
        self._add(
            AssistantEntry(
                uuid=f"{at}",
                at=at,
                size=size,
                timestamp=when,
                message_id=self._answered,
                usage=figure,
            )
        )

    def _compacted(self, payload: Payload, at: int, size: int, when: str | None) -> None:
        before = self.conversation.context().tokens
        self._response = self._answered = self._usage = None
        self._add(
            SystemEntry(
                uuid=f"{at}",
                at=at,
                size=size,
                timestamp=when,
                subtype=COMPACT_BOUNDARY,
                compact_trigger="auto",
                pre_tokens=before,
            ),
            root=True,
        )
        for k, item in enumerate(payload.replacement_history or ()):
            self._item(item, f"{at}.{k}", at, size, when)
            self._response = None  # each replayed item stands alone
        self._answered = None

    def _add(self, entry: Entry, *, root: bool = False) -> None:
        parent = None if root else self._last
        self.conversation.add(msgspec.structs.replace(entry, parent_uuid=parent))
        self._last = entry.uuid


def ignored_reason(meta: Payload) -> str | None:
    """Why memd does not follow a session, from its ``session_meta``: a sub-agent's thread
    (its parent's session holds what it did), or Codex's own memory job."""
    source = bytes(memoryview(meta.source)).lower()
    if b"memory" in source and b"consolidat" in source:
        return "Codex's own memory consolidation"
    if meta.parent_thread_id or b"subagent" in source or meta.thread_source == "subagent":
        return "a Codex sub-agent's thread"
    return None


def _decode(line: bytes) -> Line | None:
    try:
        return decode_line(line_decoder, line)
    except BadLine:
        kind = _kind(line)
        if kind is None or kind in _USED:
            raise
        return None  # a line of a kind memd does not use: not bad, whatever it holds


def _kind(line: bytes) -> str | None:
    try:
        found = kind_decoder.decode(line)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None
    return found.type if isinstance(found.type, str) else None


def content_of(line: bytes, entry: Entry) -> Content:
    """The content of a Codex entry, read back from its line."""
    try:
        found = decode_line(line_decoder, line)
    except BadLine as exc:
        raise TranscriptChanged(f"the line of {entry.uuid} no longer parses: {exc}") from None
    payload = found.payload if found is not None else None
    item: Item | None = payload
    _, dot, k = entry.uuid.partition(".")
    if dot and payload is not None:
        history = payload.replacement_history or []
        item = history[int(k)] if k.isdigit() and int(k) < len(history) else None
    made = blocks_of(item) if item is not None else None
    return checked(made[1] if made is not None else [], line, entry)
