"""Turning an active chain of transcript entries into Messages-API messages (FORMAT.md §6).

Pure functions over entries. Grouping (:func:`group_lines`) looks at roles, ``message.id`` and
the tool ids the parser already extracted; :func:`build_messages` turns the groups into a list
the Messages API accepts, by construction, at every prefix of every transcript. It works on
the entries' outlines (:data:`~memd.transcript.model.BlockRef`), not on their content: the
result names the blocks each message is made of, and :func:`fill` turns that into content once
the lines have been read back:

* the lines of one response (one ``message.id``) are one assistant message, also when tool
  results were written between them (parallel tool calls stream as tool_use, tool_result,
  tool_use, … all under one id);
* consecutive user lines are one user message, its ``tool_result`` blocks first;
* progress, system, attachment and synthetic (``<synthetic>`` model) entries are left out;
  responses with different ids stay separate messages;
* blocks the API refuses are left out: blank text, malformed tool calls, blocks of the other
  role, unknown block types; a message left with nothing is left out, and so are the lines
  of a group (one response, a run of user lines) whose blocks all went, even when that
  happens after it was merged into a message (:attr:`ApiMessage.uuids`);
* the list starts with a user message and roles alternate;
* every tool call is answered by the next message and every tool result answers a call of the
  message before it. A call the conversation moved on from without an answer (an interrupt,
  a lost line) is left out, and so is a result that answers nothing;
* a response still in progress at the end (tool calls whose results have not all arrived) is
  held back, with the results that did arrive, and reported in :attr:`Built.pending_uuids`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec

from memd.transcript.model import AssistantEntry, Block, BlockRef, Content, Entry, UserEntry

Role = Literal["user", "assistant"]
_MEDIA = frozenset({"image", "document"})
Line = UserEntry | AssistantEntry
Part = tuple[Line, BlockRef]
"""One block of a message: the line it comes from and its ref in that line's outline."""


class ContentMismatch(ValueError):
    """A line read back does not hold the block its outline names: the file changed."""


@dataclass(frozen=True)
class ApiMessage:
    """One Messages-API message and the transcript lines it was built from (file order)."""

    role: Role
    content: list[dict[str, Any]]
    uuids: tuple[str, ...]

    @property
    def last_uuid(self) -> str:
        """The uuid of the message's last transcript line (``lastSummarizedMessageId``)."""
        return self.uuids[-1]

    def to_api(self) -> dict[str, Any]:
        return {"role": self.role, "content": list(self.content)}


class OutlineMessage(msgspec.Struct, frozen=True):
    """One API message before its content is read: its role, blocks and lines (a struct: a
    build makes one per message, and a frozen dataclass's init costs a call per field)."""

    role: Role
    parts: tuple[Part, ...]
    uuids: tuple[str, ...]

    def lines(self) -> Iterable[Line]:
        return (line for line, _ in self.parts)


@dataclass
class MessageLines:
    """The transcript lines that make up one API message, in file order."""

    role: Role
    message_id: str | None  # the response id, for assistant messages
    lines: list[UserEntry | AssistantEntry]
    only_tool_results: bool  # a user message holding nothing but tool results

    @property
    def uuids(self) -> tuple[str, ...]:
        return tuple(line.uuid for line in self.lines)


def group_lines(chain: Iterable[Entry]) -> list[MessageLines]:
    """Group the entries of an active chain (oldest first) into API messages."""
    groups: list[MessageLines] = []
    for entry in chain:  # type() is, not isinstance: a struct's costs a metaclass call
        if type(entry) is UserEntry:
            tool_results = bool(entry.tool_result_ids)
            if groups and groups[-1].role == "user":
                groups[-1].lines.append(entry)
                groups[-1].only_tool_results &= tool_results
            else:
                groups.append(MessageLines("user", None, [entry], tool_results))
        elif type(entry) is AssistantEntry and not entry.synthetic:
            owner = _open_response(groups, entry.message_id)
            if owner is not None:
                owner.lines.append(entry)
            else:
                groups.append(MessageLines("assistant", entry.message_id, [entry], False))
    return groups


def _open_response(groups: list[MessageLines], message_id: str) -> MessageLines | None:
    """The assistant message of ``message_id`` if only tool results were written since."""
    for group in reversed(groups):
        if group.role == "assistant":
            return group if group.message_id == message_id else None
        if not group.only_tool_results:
            return None
    return None


@dataclass(frozen=True)
class Built:
    """The API messages of a chain, and the response held back because it is in progress."""

    messages: tuple[OutlineMessage, ...]
    pending_uuids: tuple[str, ...] = ()  # lines held back: the response and results so far
    pending_tool_use_ids: frozenset[str] = frozenset()  # its calls still waiting for a result


def _kind(part: Part) -> str:
    return part[1][1]


def _ident(part: Part) -> str | None:
    return part[1][2]


@dataclass(slots=True)
class _Draft:
    role: Role
    blocks: list[Part]
    uuids: list[str] = field(default_factory=list)
    # Once drafts are merged, each one's (uuids, blocks): a draft whose blocks all go later
    # (its calls abandoned) takes its lines out of the message with it.
    parts: list[tuple[list[str], list[Part]]] = field(default_factory=list)

    def calls(self) -> list[str]:
        return [p[1][2] or "" for p in self.blocks if p[1][1] == "tool_use"]

    def results(self) -> list[str]:
        return [p[1][2] or "" for p in self.blocks if p[1][1] == "tool_result"]

    def drop_calls(self, ids: set[str]) -> None:
        parts = self.parts or [(self.uuids, self.blocks)]
        kept = [
            (uuids, [p for p in blocks if not (_kind(p) == "tool_use" and _ident(p) in ids)])
            for uuids, blocks in parts
        ]
        self.parts = [(uuids, blocks) for uuids, blocks in kept if blocks]
        self.blocks = [p for _, blocks in self.parts for p in blocks]
        self.uuids = [u for uuids, _ in self.parts for u in uuids]

    def absorb(self, other: _Draft) -> None:
        """Merge the next draft of the same role into this message."""
        if not self.parts:
            self.parts = [(list(self.uuids), list(self.blocks))]
        self.parts.append((other.uuids, other.blocks))
        self.blocks += other.blocks  # linear: the parts keep their own lists
        self.uuids += other.uuids

    def to_message(self) -> OutlineMessage:
        return OutlineMessage(self.role, tuple(self.blocks), tuple(self.uuids))


def build_messages(groups: Iterable[MessageLines]) -> Built:
    """The API messages of ``groups`` (see the module docstring for the rules)."""
    drafts = [_draft(group) for group in groups]
    _drop_repeated_calls(drafts)
    split = len(drafts) - _in_progress(drafts)
    out: list[_Draft] = []
    for draft in drafts[:split]:
        if draft.role == "assistant":
            _append_response(out, draft)
        else:
            _append_user(out, draft)
    if out and out[-1].calls():
        _abandon_calls(out, set(out[-1].calls()))  # a later response exists: never answered
    kept = tuple(d.to_message() for d in out)
    held = drafts[split:]
    if not held:
        return Built(kept)
    waiting = frozenset(held[0].calls()) - {r for d in held[1:] for r in d.results()}
    return Built(kept, tuple(u for d in held for u in d.uuids), waiting)


def _in_progress(drafts: list[_Draft]) -> int:
    """How many trailing drafts are a response still in progress: the last response if it
    called tools (1), with the message of its results so far if some are missing (2)."""
    if drafts and drafts[-1].role == "assistant":
        return 1 if drafts[-1].calls() else 0
    if len(drafts) < 2 or drafts[-2].role != "assistant" or not drafts[-2].calls():
        return 0
    results = drafts[-1].results()
    only_results = bool(results) and len(results) == len(drafts[-1].blocks)
    return 2 if only_results and set(drafts[-2].calls()) - set(results) else 0


def _draft(group: MessageLines) -> _Draft:
    """The blocks of a group the API accepts in its role (the parser judged each one)."""
    blocks: list[Part] = [(line, ref) for line in group.lines for ref in line.blocks if ref[3]]
    if group.role == "user":
        results = [p for p in blocks if p[1][1] == "tool_result"]
        if results and len(results) < len(blocks):
            blocks = results + [p for p in blocks if p[1][1] != "tool_result"]
    return _Draft(group.role, blocks, [line.uuid for line in group.lines])


def _drop_repeated_calls(drafts: list[_Draft]) -> None:
    """A tool_use id is called once: later blocks with an id already seen are left out."""
    seen: set[str] = set()
    for draft in drafts:
        calls = draft.calls()
        if not calls:
            continue
        if seen.isdisjoint(calls) and len(set(calls)) == len(calls):
            seen.update(calls)
            continue
        kept: list[Part] = []
        for part in draft.blocks:
            if _kind(part) == "tool_use":
                ident = _ident(part) or ""
                if ident in seen:
                    continue
                seen.add(ident)
            kept.append(part)
        draft.blocks = kept


def _append_response(out: list[_Draft], draft: _Draft) -> None:
    if not out:
        return  # a conversation starts with the user: a leading response has no prompt
    if out[-1].role == "assistant":
        _abandon_calls(out, set(out[-1].calls()))  # nothing answered them
    if not draft.blocks:
        return
    if out[-1].role == "assistant":
        out[-1].absorb(draft)
    else:
        out.append(draft)


def _append_user(out: list[_Draft], draft: _Draft) -> None:
    asked = out[-1].calls() if out and out[-1].role == "assistant" else []
    answered: set[str] = set()
    blocks: list[Part] = []
    for part in draft.blocks:
        if _kind(part) == "tool_result":
            ident = _ident(part) or ""
            if ident not in asked or ident in answered:
                continue
            answered.add(ident)
        blocks.append(part)
    draft.blocks = blocks
    missing = set(asked) - answered
    if missing:
        _abandon_calls(out, missing)  # the conversation moved on without these results
    if not draft.blocks:
        return
    if out and out[-1].role == "user":
        out[-1].absorb(draft)
    else:
        out.append(draft)


def _abandon_calls(out: list[_Draft], ids: set[str]) -> None:
    """Leave the unanswered calls ``ids`` out of the last (assistant) message."""
    response = out[-1]
    response.drop_calls(ids)
    if not response.blocks:
        out.pop()


# -- content: the blocks themselves, once their lines are read back ---------------------------


def fill(message: OutlineMessage, contents: Mapping[str, Content]) -> ApiMessage:
    """``message`` with its blocks' content, from ``contents`` (line uuid -> its blocks).

    Raises :class:`ContentMismatch` when a block is not what the outline says (the file was
    changed under us: another type, another tool id, no longer accepted): the caller rebuilds
    the session.
    """
    blocks: list[Block] = []
    for line, (index, kind, ident, _) in message.parts:
        content = contents[line.uuid]
        block = content[index] if index < len(content) else {}
        if block.get("type") != kind or _ident_of(kind, block) != ident:
            raise ContentMismatch(f"line {line.uuid} no longer holds block {index} ({kind})")
        if not accepted(
            message.role,
            kind,
            block.get("text"),
            ident,
            block.get("name"),
            isinstance(block.get("input"), dict),
        ):
            raise ContentMismatch(f"block {index} of line {line.uuid} changed")
        blocks.append(_api_form(block))
    return ApiMessage(message.role, blocks, message.uuids)


def accepted(
    role: str, kind: str, text: object, ident: object, name: object, input_is_object: bool
) -> bool:
    """Whether the Messages API takes a block of ``kind`` in a ``role`` message: text that is
    not blank, media from the user, a result naming its call, a call with an id, a name and
    an object for input, thinking from the assistant. ``ident``: a call's ``id`` or a
    result's ``tool_use_id``. The parser judges each block with it, and :func:`fill` again."""
    match kind:
        case "text":
            return nonblank(text)
        case "image" | "document":
            return role == "user"
        case "tool_result":
            return role == "user" and nonblank(ident)
        case "thinking" | "redacted_thinking":
            return role == "assistant"
        case "tool_use":
            return role == "assistant" and nonblank(ident) and nonblank(name) and input_is_object
        case _:
            return False


def _ident_of(kind: str, block: Block) -> str | None:
    value = block.get("id") if kind == "tool_use" else block.get("tool_use_id")
    return value if isinstance(value, str) and kind in ("tool_use", "tool_result") else None


def _api_form(block: Block) -> Block:
    """An accepted block as the API takes it: no prompt-caching marks (a transcript's
    breakpoints are not ours), a tool result's content parts the API refuses left out."""
    return _tool_result(block) if block.get("type") == "tool_result" else _clean(block)


def _tool_result(block: Block) -> Block:
    content = block.get("content")
    if content is None or isinstance(content, str):
        return _clean(block)
    parts = content if isinstance(content, list) else []
    kept = [p for p in parts if isinstance(p, dict) and _result_part(p)]
    if len(kept) == len(parts) and parts is content:
        return _clean(block)
    fixed = {k: v for k, v in block.items() if k not in ("content", "cache_control")}
    if kept:
        fixed["content"] = kept
    return fixed


def _result_part(part: dict[str, Any]) -> bool:
    kind = part.get("type")
    if kind == "text":
        return nonblank(part.get("text"))
    return kind in _MEDIA


def _clean(block: Block) -> Block:
    if "cache_control" not in block:
        return block
    return {k: v for k, v in block.items() if k != "cache_control"}


def nonblank(text: object) -> bool:
    """Not empty nor all whitespace (as ``text.strip() != ""``, without copying the text)."""
    return isinstance(text, str) and text != "" and not text.isspace()
