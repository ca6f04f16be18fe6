"""The active conversation of one transcript, rebuilt the way Claude Code does (R-T4, R-T5).

:class:`Conversation` is fed one parsed entry at a time (:meth:`Conversation.add` is cheap:
a few dict inserts) and answers, at any moment, what the model currently sees:

* :meth:`~Conversation.active_chain` (the walk is :mod:`memd.transcript.chain`'s): from the
  newest entry, follow ``parentUuid`` back to a root; a ``compact_boundary`` is a root (what
  came before is no longer in context). A parent that names no earlier entry of the file
  (Claude Code writes such progress entries) links to the previous entry in file order
  (R-T7); only the first entry of a file keeps it as a root.
  Parallel tool calls make the transcript a little tree — each tool_use line gets its own
  tool_result child, and the walk passes through only one of them — so the other lines of
  each response on the chain, and the tool results answering them, are taken back in
  (FORMAT.md §6).
* :meth:`~Conversation.messages` / :meth:`~Conversation.api_messages`: that chain as
  Messages-API messages, valid for the API at every prefix of the file; a response still in
  progress is held back (:meth:`~Conversation.pending_tool_use_ids`).
* :meth:`~Conversation.context`: the context size (R-T5, :mod:`memd.transcript.context_size`).

Derived values are computed on demand in O(chain length) and cached until the next
:meth:`~Conversation.add` (:meth:`~Conversation.release` drops the larger ones early). Entries
hold structure, not content; :meth:`~Conversation.messages` and the token estimate read the
content back from the lines (:mod:`memd.transcript.content`), and raise
:class:`~memd.transcript.content.TranscriptChanged` when the file no longer holds them.
Sidechain (sub-agent) entries never enter a main conversation; a sub-agent's own transcript is
read with ``Conversation(sidechain=True)``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import msgspec

from memd.tokens import estimate_content
from memd.transcript.chain import Uuids, active_chain, append, first_of
from memd.transcript.content import (
    ContentCache,
    LineStore,
    MemoryLines,
    TranscriptChanged,
    read_contents,
)
from memd.transcript.context_size import last_response, measure
from memd.transcript.messages import (
    ApiMessage,
    Built,
    ContentMismatch,
    MessageLines,
    OutlineMessage,
    build_messages,
    fill,
    group_lines,
)
from memd.transcript.model import (
    AssistantEntry,
    AttachmentEntry,
    Content,
    Entry,
    Outline,
    ProgressEntry,
    SystemEntry,
    UserEntry,
)
from memd.transcript.parse import BadLine, parse_line
from memd.transcript.view import Boundary, ContextFigure, ConversationView

MAX_UNKNOWN_NAMES = 16
MAX_UNKNOWN_CHARS = 64
OTHER_TYPES = "(others)"
NO_TYPE = "(no type)"


@dataclass(frozen=True)
class _Derived:
    chain: tuple[Entry, ...]
    groups: tuple[MessageLines, ...]
    built: Built


class Conversation:
    """The incrementally built conversation of one transcript file.

    Not thread-safe: one owner at a time (the daemon holds the session's lock). After a
    :class:`~memd.transcript.tail.TailRead` with ``reset``, start a new one.
    """

    def __init__(
        self,
        *,
        sidechain: bool = False,
        lines: LineStore | None = None,
        cache: ContentCache | None = None,
    ) -> None:
        """``lines``: where the entries' lines are read back from (a
        :class:`~memd.transcript.content.FileLines` for a transcript); by default
        :meth:`add_lines` keeps them in memory."""
        self.sidechain = sidechain
        self.lines: LineStore = MemoryLines() if lines is None else lines
        self.cache = cache
        self.bad_lines = 0
        self.duplicates = 0
        self.relinked = 0  # entries whose parent named no earlier entry
        self.turn_ends = 0
        self.unknown_types: dict[str, int] = {}  # lines of types the reader does not know
        self.last_timestamp: str | None = None
        self.cwd: str | None = None
        self.slug: str | None = None
        self.session_id: str | None = None
        # The model of the newest response, as asked for (a switch shows in the next one).
        self.model: str | None = None
        self._entries: dict[str, Entry] = {}  # user, assistant and system entries
        # progress/attachment lines: hash(uuid) -> the entry it leads to. Their uuids are
        # 60% of a session's lines and only ever looked up, so they are kept as their hash
        # (str hashes are keyed per process: a transcript cannot aim for a collision).
        self._links: dict[int, str | None] = {}
        self._leaf: str | None = None
        # message.id -> its line uuids; tool-result lines by the line they name as parent.
        # One uuid is kept as itself, more as a list (most responses have one line).
        self._response_lines: dict[str, Uuids] = {}
        self._results_by_parent: dict[str, Uuids] = {}
        self._boundaries: list[Boundary] = []
        self._estimates: dict[str, int] = {}
        self._derived: _Derived | None = None
        self._chain_only: tuple[Entry, ...] | None = None  # the chain alone, until _derived
        self._context: ContextFigure | None = None

    # -- feeding ---------------------------------------------------------------------------

    def add(self, entry: Entry) -> None:
        """Take in the next entry of the file (in file order), parsed with its offset.

        Progress and attachment entries are links, never context: only where they lead is
        kept (:attr:`_links`), and an entry whose parent is a link gets the entry the link
        leads to as its parent, so the chain is walked the same without keeping them.
        (Classes are told apart by ``type() is``: ``isinstance`` of a struct that is not one
        costs a call of its metaclass, measurable per line.)
        """
        if entry.is_sidechain and not self.sidechain:
            return
        uuid, kind = entry.uuid, type(entry)
        key = hash(uuid)
        if key in self._links or uuid in self._entries:
            self.duplicates += 1
            return
        if type(entry) is SystemEntry:
            self._note_system(entry)
        parent, resolved = self._parent_of(entry.parent_uuid)
        timestamp = entry.timestamp  # the envelope, noted here: a call less per line
        if timestamp is not None and (
            self.last_timestamp is None or timestamp > self.last_timestamp
        ):
            self.last_timestamp = timestamp
        if entry.cwd is not None:
            self.cwd = entry.cwd
        if entry.slug is not None:
            self.slug = entry.slug
        if entry.session_id is not None:
            self.session_id = entry.session_id
        if kind is ProgressEntry or kind is AttachmentEntry:
            self._links[key] = resolved
            self._leaf = uuid
        else:
            if type(entry) is AssistantEntry:
                self._note_model(entry)
            self._keep(entry, parent, resolved)
        self._derived = self._chain_only = self._context = None

    def _note_model(self, entry: AssistantEntry) -> None:
        if not entry.synthetic and (named := entry.requested_model or entry.model):
            self.model = named

    def _parent_of(self, named: str | None) -> tuple[str | None, str | None]:
        """The parent as kept and the entry it leads to. As kept: the very string of the
        entry it names (one copy of each uuid), a link's uuid, or, when it names nothing seen
        yet, the previous entry; it leads to itself, or a link to where the link leads."""
        if named is None:
            return None, None
        known = self._entries.get(named)
        if known is not None:
            return known.uuid, known.uuid
        key = hash(named)
        if key in self._links:
            return named, self._links[key]
        if self._leaf is None:
            return named, named  # the file's first entry: a root
        self.relinked += 1
        return self._leaf, self._resolve(self._leaf)

    def _resolve(self, uuid: str | None) -> str | None:
        """The entry a link leads to (links lead to entries: one step), else ``uuid``."""
        if uuid is None:
            return None
        return self._links.get(hash(uuid), uuid)

    def _keep(self, entry: Entry, parent: str | None, resolved: str | None) -> None:
        """Keep and index a user, assistant or system entry. As kept: its resolved parent; no
        timestamp, cwd, slug or session id (the conversation notes them, entries need not
        repeat them); one copy of a response's id and usage for all its lines, and of a tool
        id for its call and its result. A tool result is indexed by the parent it named (a
        link's uuid stays: the results recovered for a response are those naming one of its
        lines)."""
        uuid = entry.uuid
        replace = msgspec.structs.replace
        if type(entry) is AssistantEntry:
            lines = self._response_lines.get(entry.message_id)
            first = self._entries[first_of(lines)] if lines else entry
            assert type(first) is AssistantEntry
            kept: Entry = replace(
                entry,
                message_id=first.message_id,
                usage=first.usage if first.usage == entry.usage else entry.usage,
                parent_uuid=resolved,
                timestamp=None,
                cwd=None,
                slug=None,
                session_id=None,
            )
            append(self._response_lines, first.message_id, uuid)
        elif type(entry) is UserEntry and entry.blocks:
            kept = replace(
                entry,
                blocks=self._shared_ids(entry.blocks, resolved),
                parent_uuid=resolved,
                timestamp=None,
                cwd=None,
                slug=None,
                session_id=None,
            )
        else:
            kept = replace(
                entry, parent_uuid=resolved, timestamp=None, cwd=None, slug=None, session_id=None
            )
        self._entries[uuid] = kept
        self._leaf = uuid
        if (
            type(kept) is UserEntry
            and parent in self._entries  # results are looked up by response lines
            and kept.tool_result_ids
        ):
            append(self._results_by_parent, parent or "", uuid)

    def _shared_ids(self, blocks: Outline, parent: str | None) -> Outline:
        """A result's tool id as the very string of the call it answers (in the line it
        names as its parent, where Claude Code writes it), else as it is."""
        called = self._entries.get(parent) if parent is not None else None
        if type(called) is not AssistantEntry or not called.blocks:
            return blocks
        ids = {ref[2]: ref[2] for ref in called.blocks if ref[1] == "tool_use" and ref[2]}
        if not ids:
            return blocks
        return tuple(
            ref if ref[2] not in ids else (ref[0], ref[1], ids[ref[2]], ref[3]) for ref in blocks
        )

    def add_lines(self, lines: Iterable[bytes]) -> None:
        """Parse and add raw JSONL lines, kept in memory to be read back (the conversation
        must have been made without a ``lines`` store); lines that are not JSON objects count
        as bad."""
        store = self.lines
        if not isinstance(store, MemoryLines):
            raise TypeError("add_lines keeps lines in memory; this conversation reads a file")
        for line in lines:
            at = store.place(line)
            try:
                entry = parse_line(line, at)
            except BadLine:
                self.bad_lines += 1
                continue
            if entry is not None:
                if isinstance(entry, UserEntry | AssistantEntry):
                    store.keep(at, line)
                self.add(entry)

    def carry_from(self, other: Conversation) -> None:
        """Take over what ``other`` counted (turn ends, compactions, bad lines, the newest
        timestamp): for a reader that builds a conversation anew from the state it keeps."""
        self.turn_ends = other.turn_ends
        self._boundaries = list(other._boundaries)
        self.bad_lines = other.bad_lines
        self.unknown_types = other.unknown_types
        self.last_timestamp = other.last_timestamp
        self.model = other.model

    def count_bad_lines(self, count: int) -> None:
        """Record lines dropped before parsing (e.g. longer than the tailer's limit)."""
        self.bad_lines += count

    def count_unknown(self, kind: str) -> None:
        """Record a line of a type its reader does not know (``""``: no type at all). Bounded
        whatever the file holds: :data:`MAX_UNKNOWN_NAMES` names of
        :data:`MAX_UNKNOWN_CHARS` characters, any further name counted as :data:`OTHER_TYPES`."""
        name = kind[:MAX_UNKNOWN_CHARS] if kind else NO_TYPE
        counts = self.unknown_types
        if name not in counts and len(counts) >= MAX_UNKNOWN_NAMES:
            name = OTHER_TYPES
        counts[name] = counts.get(name, 0) + 1

    def _note_system(self, entry: SystemEntry) -> None:
        if entry.is_turn_end:
            self.turn_ends += 1
        if entry.is_compact_boundary:
            boundary = Boundary(
                uuid=entry.uuid,
                trigger=entry.compact_trigger,
                pre_tokens=entry.pre_tokens,
                timestamp=entry.timestamp,
                logical_parent_uuid=entry.logical_parent_uuid,
                context_before=self.context(),
            )
            self._boundaries.append(boundary)

    # -- the active chain --------------------------------------------------------------------

    @property
    def last_uuid(self) -> str | None:
        """The newest conversation entry (the leaf the active chain starts from)."""
        return self._leaf

    @property
    def entry_count(self) -> int:
        return len(self._entries) + len(self._links)

    def active_chain(self) -> tuple[Entry, ...]:
        """The entries in the model's context, oldest first: user and assistant lines, and
        the system lines on the way (progress and attachment lines are walked through, not
        kept)."""
        if self._derived is not None:
            return self._derived.chain
        if self._chain_only is None:
            self._chain_only = active_chain(
                self._resolve(self._leaf),
                self._entries,
                self._response_lines,
                self._results_by_parent,
            )
        return self._chain_only

    def _derive(self) -> _Derived:
        """The chain with its messages (the context size needs only the chain: a compact
        boundary's, taken in :meth:`add`, builds no messages)."""
        if self._derived is None:
            chain = self.active_chain()
            groups = tuple(group_lines(chain))
            self._derived = _Derived(chain, groups, build_messages(groups))
            self._chain_only = None
        return self._derived

    # -- messages ------------------------------------------------------------------------------

    def view(self) -> ConversationView:
        """A snapshot for readers on other threads (take it under the session's lock)."""
        return ConversationView(
            tuple(self.messages()), self.cwd, self.last_uuid, self.last_assistant_has_tool_calls
        )

    @property
    def message_count(self) -> int:
        """The number of API messages in :meth:`api_messages`."""
        return len(self._derive().built.messages)

    def messages(self) -> list[ApiMessage]:
        """The active chain as API messages, each with the uuids of its transcript lines.

        Lines of one response (one ``message.id``) form one assistant message even when tool
        results were written between them; consecutive user lines form one user message with
        its tool results first. Progress, system and synthetic entries are left out; the
        compaction summary is kept (it is in context). The list is valid for the Messages API
        as it is (see :mod:`memd.transcript.messages`); a response whose tool results have not
        all arrived is held back until they have.
        """
        return self.fill(self.outline())

    def outline(self) -> tuple[OutlineMessage, ...]:
        """:meth:`messages` before their content is read: roles, blocks and lines."""
        return self._derive().built.messages

    def fill(self, outline: Iterable[OutlineMessage]) -> list[ApiMessage]:
        """Messages of :meth:`outline` with their content, read back from their lines;
        raises :class:`~memd.transcript.content.TranscriptChanged` when the file changed."""
        wanted = list(outline)
        contents = self._contents(line for message in wanted for line in message.lines())
        try:
            return [fill(message, contents) for message in wanted]
        except ContentMismatch as exc:
            raise TranscriptChanged(str(exc)) from None

    def _contents(self, entries: Iterable[Entry]) -> dict[str, Content]:
        return read_contents(self.lines, entries, self.cache)

    def release(self) -> None:
        """Drop the derived chain and messages kept for the next reader (an idle resident
        conversation then holds only its entries); they are rebuilt on demand."""
        self._derived = self._chain_only = None

    def api_messages(self) -> list[dict[str, Any]]:
        """:meth:`messages` as plain ``{"role", "content"}`` dicts for the Messages API."""
        return [message.to_api() for message in self.messages()]

    # -- context size --------------------------------------------------------------------------

    def context(self) -> ContextFigure:
        """The session's context size now (R-T5); cached until the next :meth:`add`."""
        if self._context is None:
            self._context = measure(self.active_chain(), self._estimate_all)
        return self._context

    def _estimate_all(self, entries: Iterable[Entry]) -> int:
        """Tokens of the entries' content that reaches the model (user lines, real responses),
        cached per entry; the lines not estimated yet are read back in one go."""
        counted = [
            e
            for e in entries
            if type(e) is UserEntry or (type(e) is AssistantEntry and not e.synthetic)
        ]
        new = [e for e in counted if e.uuid not in self._estimates]
        if new:
            contents = self._contents(new)
            for entry in new:
                self._estimates[entry.uuid] = estimate_content(contents[entry.uuid])
        return sum(self._estimates[e.uuid] for e in counted)

    # -- counters for triggers -------------------------------------------------------------------

    @property
    def boundaries(self) -> tuple[Boundary, ...]:
        """Every compact boundary seen, oldest first."""
        return tuple(self._boundaries)

    @property
    def tool_use_count(self) -> int:
        """Tool calls made by the model on the active chain."""
        return sum(len(e.tool_use_ids) for e in self._responses())

    def tool_calls_since(self, uuid: str | None) -> int:
        """Tool calls on the active chain after the entry ``uuid``.

        When ``uuid`` is None or no longer on the chain (e.g. compacted away), every tool call
        on the chain counts.
        """
        chain = self.active_chain()
        start = next((i for i, e in enumerate(chain) if e.uuid == uuid), -1) + 1
        return sum(
            len(e.tool_use_ids)
            for e in chain[start:]
            if isinstance(e, AssistantEntry) and not e.synthetic
        )

    @property
    def last_assistant_has_tool_calls(self) -> bool:
        """Whether the latest real response on the chain called a tool (no natural pause)."""
        last = last_response(self.active_chain())
        return any(e.tool_use_ids for e in self._responses() if e.message_id == last)

    def pending_tool_use_ids(self) -> frozenset[str]:
        """Tool calls of the response held back from :meth:`messages` that wait for a result."""
        return self._derive().built.pending_tool_use_ids

    @property
    def pending_uuids(self) -> tuple[str, ...]:
        """Lines held back from :meth:`messages`: a response in progress and its results so far."""
        return self._derive().built.pending_uuids

    def _responses(self) -> list[AssistantEntry]:
        return [e for e in self.active_chain() if isinstance(e, AssistantEntry) and not e.synthetic]
