"""One transcript line (bytes) to one typed entry (R-T2, FORMAT.md §3).

The decoder is msgspec with typed structs that name only the fields memd reads: everything
else, ``toolUseResult`` included, is skipped without building Python objects.
``message.content`` is decoded in the same pass, once: the parser is the one place where the
bytes of a line can fail, so every entry it returns is safe to use anywhere (R-T7).

Transcripts change between Claude Code versions, so the parser is tolerant: unknown types and
fields are ignored, and a known field with an unexpected type is dropped (slow path, rare)
rather than losing the whole entry. A line is bad (:class:`BadLine`) when it is not a JSON
object: invalid UTF-8 anywhere in it, invalid JSON, or content nested deeper than
:data:`MAX_CONTENT_DEPTH`. A lone UTF-16 surrogate escape (``"\\ud83d"``, what JavaScript
writes for an emoji cut in half) is not a reason to lose a line: it becomes U+FFFD.
"""

from __future__ import annotations

import re
from typing import Any, Final

import msgspec

from memd.transcript.model import (
    AssistantEntry,
    AttachmentEntry,
    Content,
    Entry,
    ProgressEntry,
    SystemEntry,
    Usage,
    UserEntry,
)

__all__ = ["MAX_CONTENT_DEPTH", "BadLine", "parse_line"]

# Nesting allowed in message.content (list > block > tool input > …). Deeper content could make
# later consumers (JSON and msgpack encoders, the tokenizer's JSON form) hit recursion limits.
MAX_CONTENT_DEPTH: Final = 100


class BadLine(ValueError):
    """A transcript line that cannot become an entry; the tailer counts it and moves on."""


# Wire structs: the JSON shape, optional everywhere (any key may be absent or null).


class _WireUsage(msgspec.Struct, gc=False):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_read_input_tokens: int | None = None


class _WireMessage(msgspec.Struct, gc=False):
    id: str | None = None
    role: str | None = None
    model: str | None = None
    content: Any = None
    usage: _WireUsage | None = None


class _WireCompact(msgspec.Struct, gc=False):
    trigger: str | None = None
    preTokens: int | None = None


class _WireLine(msgspec.Struct, gc=False):
    type: str | None = None
    uuid: str | None = None
    parentUuid: str | None = None
    logicalParentUuid: str | None = None
    isSidechain: bool | None = None
    isMeta: bool | None = None
    isCompactSummary: bool | None = None
    subtype: str | None = None
    timestamp: str | None = None
    cwd: str | None = None
    slug: str | None = None
    sessionId: str | None = None
    compactMetadata: _WireCompact | None = None
    message: _WireMessage | None = None


_NO_MESSAGE: Final = _WireMessage()
_NO_COMPACT: Final = _WireCompact()
_line_decoder: Final = msgspec.json.Decoder(_WireLine)
_any_decoder: Final = msgspec.json.Decoder()
_encoder: Final = msgspec.json.Encoder()


def parse_line(line: bytes) -> Entry | None:
    """Parse one JSONL line.

    Returns ``None`` for lines memd does not use: bookkeeping types (``summary``,
    ``file-history-snapshot``, …), unknown types, conversation lines without a ``uuid``, and
    blank lines. Raises :class:`BadLine` for anything that cannot become an entry; no other
    exception comes out of it, whatever the bytes.
    """
    try:
        wire = _wire(line)
        return None if wire is None else _to_entry(wire, line)
    except RecursionError:
        raise BadLine("nested deeper than the decoder can follow") from None


def _wire(line: bytes) -> _WireLine | None:
    if not line.isascii():
        try:
            line.decode("utf-8")  # also checks the fields the typed decoder skips
        except UnicodeDecodeError as exc:
            raise BadLine(f"invalid UTF-8 at byte {exc.start}") from None
    try:
        return _line_decoder.decode(line)
    except msgspec.ValidationError:
        return _lenient(line)
    except msgspec.DecodeError as exc:
        if not line.strip():
            return None
        repaired = replace_lone_surrogates(line)
        if repaired is None:
            raise BadLine(f"not valid JSON: {exc}") from None
    return _wire(repaired)


_ESCAPE: Final = re.compile(rb"(\\+)u([dD][89a-fA-F][0-9a-fA-F]{2})")
_REPLACEMENT: Final = rb"\ufffd"


def replace_lone_surrogates(line: bytes) -> bytes | None:
    """``line`` with each unpaired ``\\uD800``-``\\uDFFF`` escape made ``\\ufffd``; ``None``
    when it has none (then the line's JSON error is something else)."""
    escapes = [m for m in _ESCAPE.finditer(line) if len(m.group(1)) % 2 == 1]
    lone: list[tuple[int, int]] = []
    i = 0
    while i < len(escapes):
        unit = int(escapes[i].group(2), 16)
        after = escapes[i + 1] if i + 1 < len(escapes) else None
        if (
            unit < 0xDC00
            and after is not None
            and after.start() == escapes[i].end()
            and len(after.group(1)) == 1
            and int(after.group(2), 16) >= 0xDC00
        ):
            i += 2  # a valid high + low pair
            continue
        lone.append((escapes[i].end() - 6, escapes[i].end()))
        i += 1
    if not lone:
        return None
    parts: list[bytes] = []
    start = 0
    for begin, end in lone:
        parts += [line[start:begin], _REPLACEMENT]
        start = end
    parts.append(line[start:])
    return b"".join(parts)


# Each constructor below spells out the envelope fields (uuid … session_id) rather than
# sharing a dict of them: building that dict per line measured ~6% of ingest throughput.
def _to_entry(wire: _WireLine, line: bytes) -> Entry | None:
    uuid = wire.uuid
    if not uuid:
        return None
    match wire.type:
        case "user":
            return _user(wire, uuid, _content(wire.message, line))
        case "assistant":
            return _assistant(wire, uuid, _content(wire.message, line))
        case "system":
            return _system(wire, uuid)
        case "progress":
            return ProgressEntry(
                uuid=uuid,
                parent_uuid=wire.parentUuid,
                is_sidechain=wire.isSidechain is True,
                timestamp=wire.timestamp,
                cwd=wire.cwd,
                slug=wire.slug,
                session_id=wire.sessionId,
            )
        case "attachment":
            return AttachmentEntry(
                uuid=uuid,
                parent_uuid=wire.parentUuid,
                is_sidechain=wire.isSidechain is True,
                timestamp=wire.timestamp,
                cwd=wire.cwd,
                slug=wire.slug,
                session_id=wire.sessionId,
            )
        case _:
            return None


def _content(message: _WireMessage | None, line: bytes) -> Content:
    """``message.content`` as blocks: a string is one text block, non-object items drop."""
    value = None if message is None else message.content
    if isinstance(value, str):
        return ({"type": "text", "text": value},) if value else ()
    if not isinstance(value, list):
        return ()
    # A line with fewer brackets than the limit cannot nest deeper: most lines stop here.
    if line.count(b"[") + line.count(b"{") > MAX_CONTENT_DEPTH and _deeper_than(
        value, MAX_CONTENT_DEPTH
    ):
        raise BadLine(f"message.content is nested deeper than {MAX_CONTENT_DEPTH} levels")
    return tuple(block for block in value if isinstance(block, dict))


def _deeper_than(value: list[Any], limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        for child in item.values() if isinstance(item, dict) else item:
            if isinstance(child, list | dict):
                stack.append((child, depth + 1))
    return False


def _user(wire: _WireLine, uuid: str, content: Content) -> UserEntry:
    return UserEntry(
        uuid=uuid,
        parent_uuid=wire.parentUuid,
        is_sidechain=wire.isSidechain is True,
        timestamp=wire.timestamp,
        cwd=wire.cwd,
        slug=wire.slug,
        session_id=wire.sessionId,
        content=content,
        is_meta=wire.isMeta is True,
        is_compact_summary=wire.isCompactSummary is True,
        tool_result_ids=_block_ids(content, "tool_result", "tool_use_id"),
    )


def _assistant(wire: _WireLine, uuid: str, content: Content) -> AssistantEntry:
    message = wire.message or _NO_MESSAGE
    usage = message.usage
    return AssistantEntry(
        uuid=uuid,
        parent_uuid=wire.parentUuid,
        is_sidechain=wire.isSidechain is True,
        timestamp=wire.timestamp,
        cwd=wire.cwd,
        slug=wire.slug,
        session_id=wire.sessionId,
        message_id=message.id or uuid,
        model=message.model,
        content=content,
        usage=_usage(usage) if usage is not None else None,
        tool_use_ids=_block_ids(content, "tool_use", "id"),
    )


def _usage(wire: _WireUsage) -> Usage:
    return Usage(
        input_tokens=max(0, wire.input_tokens or 0),
        output_tokens=max(0, wire.output_tokens or 0),
        cache_creation_input_tokens=max(0, wire.cache_creation_input_tokens or 0),
        cache_read_input_tokens=max(0, wire.cache_read_input_tokens or 0),
    )


def _system(wire: _WireLine, uuid: str) -> SystemEntry:
    compact = wire.compactMetadata or _NO_COMPACT
    return SystemEntry(
        uuid=uuid,
        parent_uuid=wire.parentUuid,
        is_sidechain=wire.isSidechain is True,
        timestamp=wire.timestamp,
        cwd=wire.cwd,
        slug=wire.slug,
        session_id=wire.sessionId,
        subtype=wire.subtype,
        logical_parent_uuid=wire.logicalParentUuid,
        compact_trigger=compact.trigger,
        pre_tokens=compact.preTokens,
    )


def _block_ids(content: Content, block_type: str, key: str) -> tuple[str, ...]:
    """Ids of the ``block_type`` blocks in ``content``."""
    ids: list[str] = []
    for block in content:
        if block.get("type") == block_type:
            value = block.get(key)
            if isinstance(value, str):
                ids.append(value)
    return tuple(ids)


# Slow path: a JSON object whose known fields have unexpected types.


def _lenient(line: bytes) -> _WireLine:
    try:
        value = _any_decoder.decode(line)
    except msgspec.DecodeError as exc:
        raise BadLine(f"not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise BadLine(f"not a JSON object but {type(value).__name__}")
    repaired = _repair(value, _WireLine)
    return _line_decoder.decode(_encoder.encode(repaired))


def _repair(value: dict[str, Any], struct: type[msgspec.Struct]) -> dict[str, Any]:
    """Keep the fields of ``struct`` whose values fit its types, recursing into sub-structs."""
    kept: dict[str, Any] = {}
    for field in msgspec.structs.fields(struct):
        if field.encode_name not in value:
            continue
        item = value[field.encode_name]
        nested = _struct_in(field.type)
        if nested is not None and isinstance(item, dict):
            kept[field.encode_name] = _repair(item, nested)
        elif _fits(item, field.type):
            kept[field.encode_name] = item
    return kept


def _struct_in(annotation: Any) -> type[msgspec.Struct] | None:
    for arm in getattr(annotation, "__args__", (annotation,)):
        if isinstance(arm, type) and issubclass(arm, msgspec.Struct):
            return arm
    return None


def _fits(item: Any, annotation: Any) -> bool:
    if annotation is Any:
        return True
    try:
        msgspec.convert(item, annotation)
    except msgspec.ValidationError:
        return False
    return True
