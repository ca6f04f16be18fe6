"""What the readers of agents other than Claude Code share: one line decoded as hostile
bytes, and content blocks in the common (Messages API) shape with their outline.

A reader of another agent's format turns each of its items into content blocks of the shape
Claude Code writes (``text``, ``tool_use`` with an object input, ``tool_result`` with text
content), flat by construction (a tool's arguments and results stay text): the outline is
taken from those blocks when the line is read, and the same function builds them again when
a job reads the line back, so both agree.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final, TypeAlias, TypeVar

import msgspec

from memd import regular_file
from memd.config import MAX_NUMBER
from memd.transcript.agent_bytes import (
    BadLine,
    as_node_reads,
    loads_as_the_agent,
    refused,
    replace_lone_surrogates,
)
from memd.transcript.content import FileLines, TranscriptChanged
from memd.transcript.conversation import Conversation
from memd.transcript.messages import OutlineMessage, accepted
from memd.transcript.model import Block, BlockRef, Content, Entry, Outline

Tokens: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=MAX_NUMBER)]
"""A token count as read: out of 0 … MAX_NUMBER the line is bad (never a figure)."""

_T = TypeVar("_T")
_encode: Final = msgspec.json.Encoder().encode


def decode_line(
    decoder: msgspec.json.Decoder[_T], line: bytes, *, lossy: bool = False
) -> _T | None:
    """``line`` decoded, or None for a blank line; :class:`BadLine` for anything else that
    is not the decoder's shape (invalid JSON, a field of another type, a number out of
    range, nesting past the decoder). Lone surrogate escapes become U+FFFD, as in Claude
    Code's lines. Bytes that are not UTF-8 are read as the agent reads its own file:
    ``lossy`` (a Node agent, Gemini CLI: each invalid sequence becomes U+FFFD and the line is
    kept) or not (Codex, in Rust, holds its lines as ``String``, which only valid UTF-8 can
    be: the line is bad)."""
    if not line.isascii():
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as exc:
            if not lossy:
                raise BadLine(f"invalid UTF-8 at byte {exc.start}") from None
            line = as_node_reads(line)
    try:
        while True:
            try:
                return decoder.decode(line)
            except msgspec.ValidationError as exc:
                raise refused(exc, "not a line of this format") from None
            except msgspec.DecodeError as exc:
                if not line.strip():
                    return None
                repaired = replace_lone_surrogates(line)
                if repaired is None:
                    raise BadLine(f"not valid JSON: {exc}") from None
                line = repaired
    except RecursionError:
        raise BadLine("nested deeper than the decoder can follow") from None


def raw_text(raw: msgspec.Raw) -> str:
    """A JSON value kept raw, as text (a string as itself): tool arguments and results
    stay flat whatever they nest."""
    data = bytes(memoryview(raw))
    if data[:1] == b'"':
        try:
            value = msgspec.json.decode(data)
        except msgspec.DecodeError:
            return ""
        return value if isinstance(value, str) else ""
    return data.decode("utf-8", "replace")


def text_block(text: str) -> Block:
    return {"type": "text", "text": text}


def tool_use(ident: str, name: str, arguments: str) -> Block:
    return {"type": "tool_use", "id": ident, "name": name, "input": {"arguments": arguments}}


def tool_result(ident: str, text: str) -> Block:
    return {"type": "tool_result", "tool_use_id": ident, "content": text}


def outline_of(blocks: Sequence[Block], role: str) -> Outline:
    """The outline of blocks built by a reader (see the module docstring)."""
    refs: list[BlockRef] = []
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "tool_use":
            ident = block["id"]
            ok = accepted(role, kind, None, ident, block["name"], True)
        elif kind == "tool_result":
            ident = block["tool_use_id"]
            ok = accepted(role, kind, None, ident, None, False)
        else:
            ident = None
            ok = accepted(role, kind, block.get("text"), None, None, False)
        refs.append((index, kind, ident, ok))
    return tuple(refs)


def checked(blocks: Sequence[Block], line: bytes, entry: Entry) -> Content:
    """``blocks`` read back for ``entry``, when they are still the ones it was built from."""
    outline = getattr(entry, "blocks", ())
    if len(line) != entry.size or len(blocks) != len(outline):
        raise TranscriptChanged(f"the line at byte {entry.at} is no longer {entry.uuid}")
    for block, ref in zip(blocks, outline, strict=True):
        if block["type"] != ref[1]:
            raise TranscriptChanged(f"the line at byte {entry.at} is no longer {entry.uuid}")
    return tuple(blocks)


def as_json(value: Any) -> str:
    """A value as compact JSON text (never fails on what a decoder produced)."""
    return _encode(value).decode("utf-8", "replace")


def json_line(value: Any) -> bytes:
    """One JSONL line as the agents write theirs (compact, UTF-8, no newline); text holding a
    lone surrogate, which UTF-8 cannot carry, is written with ASCII escapes instead."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def kept_items(
    conv: Conversation,
    kept: Sequence[OutlineMessage],
    item_of: Callable[[bytes, Entry], dict[str, Any]],
) -> tuple[FileLines, list[tuple[str, dict[str, Any]]]]:
    """What a fork writer of an agent whose items are JSON objects reads back: the file's
    lines (``conv``'s) and each kept entry's item as the agent wrote it (``item_of`` its
    line), with its id, in file order. Blocking, under the session's lock; raises
    ``TranscriptChanged`` when the conversation has no file or a line no longer holds the
    blocks memd read from it."""
    lines = conv.lines
    if not isinstance(lines, FileLines):
        raise TranscriptChanged("the conversation has no session file to read back")
    entries = kept_entries(kept)
    by_offset = lines.read(entries)
    items: list[tuple[str, dict[str, Any]]] = []
    for entry in entries:
        lines.decode(by_offset[entry.at], entry)  # it still holds what memd read
        items.append((entry.uuid, item_of(by_offset[entry.at], entry)))
    return lines, items


def now_z() -> str:
    """Now, as the agents stamp their lines (UTC, milliseconds, ``Z``)."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def kept_entries(kept: Sequence[OutlineMessage]) -> list[Entry]:
    """The entries of ``kept`` (the messages after a fork's cut), once each, in file order:
    a message may list its lines in another order (a user message its tool results first),
    and a fork writes the items as the agent wrote them. An entry of an item inside a line
    (``<offset>.<k>``, ``<offset>/<k>``) sorts by ``k`` within that line."""
    found: dict[str, Entry] = {}
    for message in kept:
        for line in message.lines():
            found.setdefault(line.uuid, line)
    return sorted(found.values(), key=_position)


def _position(entry: Entry) -> tuple[int, int]:
    k = entry.uuid.replace("/", ".").partition(".")[2]
    return entry.at, int(k) if k.isdigit() else -1


def first_line(path: str, inode: int, max_bytes: int) -> Any:
    """The first line of the session file ``path`` read as its agent reads it (blocking,
    at most ``max_bytes``); raises ``TranscriptChanged`` when the file is another (``inode``)
    or cannot be read, or the line is not complete JSON."""
    try:
        with regular_file.open_regular(path) as file:
            if inode and os.fstat(file.fileno()).st_ino != inode:
                raise TranscriptChanged(f"{path} was replaced")
            head = file.read(max_bytes)
    except OSError as exc:
        raise TranscriptChanged(f"cannot read {path} back: {regular_file.reason(exc)}") from exc
    line, newline, _ = head.partition(b"\n")
    try:
        return loads_as_the_agent(line) if newline else None
    except (BadLine, RecursionError):
        return None
