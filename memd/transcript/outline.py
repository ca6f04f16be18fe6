"""The outline of a line's ``message.content``: what memd keeps of it (R-T6, R-T7).

One :data:`~memd.transcript.model.BlockRef` per content block of a type memd knows: its
index, type, tool id, and whether the Messages API takes it in the line's role
(:func:`memd.transcript.messages.accepted`, the rule the messages are built with). Refs and
outlines without a tool id repeat across lines and sessions, so one copy of each is shared.

And the depth check: content nested deeper than :data:`MAX_CONTENT_DEPTH` makes a line bad,
judged on its bytes (strings taken out, then the running depth of the brackets left), so that
nothing downstream (JSON and msgpack encoders, the tokenizer's JSON form) meets it.
"""

from __future__ import annotations

from typing import Any, Final, TypeVar

import msgspec

from memd.transcript.messages import Role, accepted, nonblank
from memd.transcript.model import BlockRef, Outline
from memd_client.foreign_file import json_bracket_depth, nesting_over

__all__ = [
    "MAX_CONTENT_DEPTH",
    "NO_CONTENT",
    "WireBlock",
    "blocks_too_deep",
    "content_too_deep",
    "of_blocks",
    "of_text",
    "too_deep",
]

# Nesting allowed in message.content (list > block > tool input > …). Deeper content could make
# later consumers (JSON and msgpack encoders, the tokenizer's JSON form) hit recursion limits.
MAX_CONTENT_DEPTH: Final = 100
_NOTHING: Final = msgspec.Raw()
NO_CONTENT: Final = _NOTHING  # a content field that is absent
_T = TypeVar("_T")


class WireBlock(msgspec.Struct, gc=False):
    """What the outline of a content block needs; big fields (thinking, tool results, images)
    are skipped, a tool call's input is kept as raw bytes only to see that it is an object.
    Fields in the order Claude Code writes the keys (see :mod:`memd.transcript.parse`)."""

    tool_use_id: Any = None
    type: Any = None
    id: Any = None
    name: Any = None
    input: msgspec.Raw = _NOTHING
    text: Any = None
    # Taken as raw bytes only to judge nesting without scanning them (a string nests nothing).
    thinking: msgspec.Raw = _NOTHING
    signature: msgspec.Raw = _NOTHING
    content: msgspec.Raw = _NOTHING


class _RawMessage(msgspec.Struct, gc=False):
    content: msgspec.Raw = _NOTHING


class _RawLine(msgspec.Struct, gc=False):
    message: _RawMessage | None = None


_raw_decoder: Final = msgspec.json.Decoder(_RawLine)
_any_decoder: Final = msgspec.json.Decoder()


def of_text(text: str) -> Outline:
    """A string content: one text block, or none when empty."""
    return (_ref(0, "text", None, nonblank(text)),) if text else ()


def of_blocks(blocks: list[WireBlock], role: Role) -> Outline:
    """One ref per block of a type memd knows, in order, judged for ``role``."""
    refs: list[BlockRef] = []
    shared = True  # no tool id: outlines of a few blocks repeat, one copy is kept
    for index, block in enumerate(blocks):
        kind = _KINDS.get(block.type) if block.type.__class__ is str else None
        if kind is None:
            continue
        ident = None
        is_object = False
        if kind == "tool_use":
            ident = block.id if block.id.__class__ is str else None
            is_object = bytes(memoryview(block.input)[:1]) == b"{"
        elif kind == "tool_result":
            ident = block.tool_use_id if block.tool_use_id.__class__ is str else None
        ok = accepted(role, kind, block.text, ident, block.name, is_object)
        if ident is None:
            refs.append(_one_copy(_refs, (index, kind, None, ok)))
        else:
            refs.append((index, kind, ident, ok))
            shared = False
    outline = tuple(refs)
    return _one_copy(_outlines, outline) if shared and len(outline) <= 4 else outline


def too_deep(line: bytes) -> bool:
    """Whether the line's ``message.content`` nests deeper than :data:`MAX_CONTENT_DEPTH`
    (a line of valid JSON)."""
    found = _raw_decoder.decode(line).message
    return found is not None and content_too_deep(found.content)


def content_too_deep(content: msgspec.Raw) -> bool:
    """Whether ``message.content``, as its bytes (valid JSON), nests deeper than
    :data:`MAX_CONTENT_DEPTH` (see :func:`_too_deep`)."""
    return _too_deep(content, MAX_CONTENT_DEPTH)


def blocks_too_deep(content: msgspec.Raw, blocks: list[WireBlock]) -> bool:
    """:func:`content_too_deep` for content that decoded as ``blocks``, judged on what the
    decode gave where it can: a block's raw fields are judged on their own bytes (two levels
    in: the list, the block; a string nests nothing), and when the bytes left over (skipped
    fields, keys, syntax) are too few to nest past the limit, that is all. Otherwise the
    whole content is judged, as is content of a few KiB (one pass in C costs less than a
    look at each block)."""
    if len(content) < _SCAN_BELOW:
        return _too_deep(content, MAX_CONTENT_DEPTH)
    limit = MAX_CONTENT_DEPTH - 2
    rest = len(content)
    raws = False  # a raw field long enough to nest past the limit
    for block in blocks:
        sizes = len(block.input), len(block.content), len(block.thinking), len(block.signature)
        rest -= sum(sizes)
        raws = raws or max(sizes) > 2 * limit
        if block.text.__class__ is str:
            rest -= len(block.text)  # no more characters than its bytes
    if rest > 2 * limit:
        return _too_deep(content, MAX_CONTENT_DEPTH)
    return raws and any(
        _too_deep(raw, limit)
        for block in blocks
        for raw in (block.input, block.content, block.thinking, block.signature)
    )


def _too_deep(value: msgspec.Raw, limit: int) -> bool:
    """Whether JSON ``value`` nests deeper than ``limit``. A string cannot, nor can a value
    with fewer opening brackets than the limit (most stops at that count, one pass); the rest
    is decoded and its containers counted level by level, or, when msgspec refuses it (a lone
    surrogate escape, a number past a float's range, nesting past its own limit) or it may
    hold more containers than :data:`_DECODED_UP_TO`, judged on its bytes
    (:func:`~memd_client.foreign_file.json_bracket_depth`)."""
    if len(value) <= 2 * limit or memoryview(value)[0] == _QUOTE:
        return False
    raw = bytes(memoryview(value))
    opening = len(raw.translate(None, _NOT_OPENING))
    if opening <= limit:
        return False
    if opening > _DECODED_UP_TO:
        return json_bracket_depth(raw) > limit
    try:
        decoded = _any_decoder.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return json_bracket_depth(raw) > limit
    return nesting_over(decoded, limit)


_KINDS: Final = {
    kind: kind
    for kind in (
        "text",
        "image",
        "document",
        "tool_use",
        "tool_result",
        "thinking",
        "redacted_thinking",
    )
}


_refs: dict[BlockRef, BlockRef] = {}
_outlines: dict[Outline, Outline] = {}
_SHARED_MAX: Final = 4096


def _ref(index: int, kind: str, ident: str | None, ok: bool) -> BlockRef:
    """A block ref; those without an id are shared (a few hundred distinct values)."""
    ref = (index, kind, ident, ok)
    return ref if ident is not None else _one_copy(_refs, ref)


def _one_copy(table: dict[_T, _T], value: _T) -> _T:
    """The copy of ``value`` kept in ``table`` (bounded: past its size, ``value`` itself)."""
    shared = table.get(value)
    if shared is None and len(table) < _SHARED_MAX:
        shared = table[value] = value
    return value if shared is None else shared


_NOT_OPENING: Final = bytes(b for b in range(256) if b not in b"[{")
_QUOTE: Final = ord('"')
_SCAN_BELOW: Final = 4096
# Decoded, each container is an object of its own (~70 bytes for the 2 of ``[]``): a 14 MiB
# line of empty lists held ~450 MiB and took 3 s to walk; the bytes' judgement holds a few
# copies of them. Content with more opening brackets (most of them inside strings, in what
# an agent writes) is judged on its bytes.
_DECODED_UP_TO: Final = 10_000
