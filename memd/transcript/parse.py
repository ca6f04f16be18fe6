"""One transcript line (bytes) to one typed entry (R-T2, FORMAT.md §3).

The decoder is msgspec with typed structs that name only the fields memd reads: everything
else, ``toolUseResult`` included, is skipped without building Python objects. Of
``message.content`` only the outline is decoded (each block's type, tool ids, whether its text
is blank, whether a tool call's input is an object): the content itself is read back from the
line when a job needs it (:func:`line_content`), so the checks here are what make that read
safe: the parser is the one place where the bytes of a line can fail, and every entry it
returns is safe to use anywhere (R-T7).

Transcripts change between Claude Code versions, so the parser is tolerant: unknown types and
fields are ignored, and a known field with an unexpected type is dropped (slow path, rare)
rather than losing the whole entry. A line is bad (:class:`BadLine`) when it is not a JSON
object (invalid JSON, or content nested deeper than :data:`MAX_CONTENT_DEPTH`) and when a
number memd reads (a token count) is out of 0 … :data:`~memd.config.MAX_NUMBER` or past a
float's range (``1e400``: :mod:`~memd.transcript.agent_bytes`' rule for every agent): such a
figure is never taken (2^64 made every ``status`` unencodable), nor is the rest of a line that
carries it. A line is read as Claude Code (JavaScript) reads it: bytes that are not UTF-8 are
U+FFFD, each invalid sequence (Node decodes a file so), and so is a lone UTF-16 surrogate escape
(``"\\ud83d"``, what JavaScript writes for an emoji cut in half). msgspec checks UTF-8 in the
strings it decodes and nowhere else, so the replacing costs nothing on a line that needs none;
invalid bytes in a field memd skips change nothing memd reads.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Annotated, Any, Final, TypeAlias, TypeVar

import msgspec

from memd.config import MAX_NUMBER
from memd.transcript import outline
from memd.transcript.agent_bytes import (
    OUT_OF_RANGE,
    BadLine,
    as_node_reads,
    loads_as_the_agent,
    past_range,
    replace_lone_surrogates,
)
from memd.transcript.messages import Role
from memd.transcript.model import (
    AssistantEntry,
    AttachmentEntry,
    Content,
    Entry,
    Outline,
    ProgressEntry,
    SystemEntry,
    Usage,
    UserEntry,
)
from memd.transcript.outline import MAX_CONTENT_DEPTH, NO_CONTENT, WireBlock

__all__ = [
    "MAX_CONTENT_DEPTH",
    "BadLine",
    "line_content",
    "parse_kind",
    "parse_line",
]


# Wire structs: the JSON shape, optional everywhere (any key may be absent or null). Fields in
# the order Claude Code writes the keys: msgspec looks a key up from the field after the last
# one it found.


# A token count: out of 0 … MAX_NUMBER, the line is bad (a figure no reply could encode).
_Tokens: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=MAX_NUMBER)]


class _WireUsage(msgspec.Struct, gc=False):
    input_tokens: _Tokens | None = None
    output_tokens: _Tokens | None = None
    cache_creation_input_tokens: _Tokens | None = None
    cache_read_input_tokens: _Tokens | None = None


class _WireMessage(msgspec.Struct, gc=False):
    model: str | None = None
    id: str | None = None
    content: msgspec.Raw = NO_CONTENT  # its bytes: decoded (_blocks) and judged for depth
    usage: _WireUsage | None = None


class _WireCompact(msgspec.Struct, gc=False):
    trigger: str | None = None
    preTokens: _Tokens | None = None
    postTokens: _Tokens | None = None  # the context it left (Claude Code 2.1.332)


class _WireLine(msgspec.Struct, gc=False):
    parentUuid: str | None = None
    isSidechain: bool | None = None
    cwd: str | None = None
    sessionId: str | None = None
    slug: str | None = None
    type: str | None = None
    subtype: str | None = None
    message: _WireMessage | None = None
    requestedModel: str | None = None  # the model asked for, its [1m] form kept (2.1.331+)
    isMeta: bool | None = None
    isCompactSummary: bool | None = None
    logicalParentUuid: str | None = None
    compactMetadata: _WireCompact | None = None
    uuid: str | None = None
    timestamp: str | None = None


# What reading a line back for its content decodes (line_content), and the depth check.


class _ContentMessage(msgspec.Struct, gc=False):
    content: Any = None


class _ContentLine(msgspec.Struct, gc=False):
    uuid: Any = None
    message: _ContentMessage | None = None


_NO_MESSAGE: Final = _WireMessage()
_NO_COMPACT: Final = _WireCompact()
_line_decoder: Final = msgspec.json.Decoder(_WireLine)
_Blocks: TypeAlias = list[WireBlock] | str | None
_blocks_decoder: Final[msgspec.json.Decoder[_Blocks]] = msgspec.json.Decoder(_Blocks)
_content_decoder: Final = msgspec.json.Decoder(_ContentLine)
_any_decoder: Final = msgspec.json.Decoder()
_encoder: Final = msgspec.json.Encoder()
_TOO_DEEP: Final = "nested deeper than the decoder can follow"
_W = TypeVar("_W")


def parse_line(line: bytes, at: int = -1) -> Entry | None:
    """Parse one JSONL line, found at byte offset ``at`` of its file (-1: not from a file).

    Returns ``None`` for lines memd does not use: bookkeeping types (``summary``,
    ``file-history-snapshot``, …), unknown types, conversation lines without a ``uuid``, and
    blank lines. Raises :class:`BadLine` for anything that cannot become an entry; no other
    exception comes out of it, whatever the bytes.
    """
    try:
        try:
            wire: _WireLine | None = _line_decoder.decode(line)  # a call less per line
        except (msgspec.ValidationError, msgspec.DecodeError):
            wire = _repaired_wire(line)
        return None if wire is None else _to_entry(wire, at, len(line))
    except RecursionError:
        raise BadLine(_TOO_DEEP) from None
    except UnicodeDecodeError:  # in a string memd reads
        return _replaced_entry(line, at)[0]


def parse_kind(line: bytes, at: int = -1) -> Entry | str | None:
    """:func:`parse_line`, but a line that is no entry answers its ``type`` (``""`` when it
    has no string one), so a reader can tell bookkeeping it knows from a type it does not;
    ``None`` only for a blank line. (Not shared with :func:`parse_line`: a call more per line
    is measurable in ingest.)"""
    try:
        try:
            wire: _WireLine | None = _line_decoder.decode(line)
        except (msgspec.ValidationError, msgspec.DecodeError):
            wire = _repaired_wire(line)
        if wire is None:
            return None
        entry = _to_entry(wire, at, len(line))
        return (wire.type or "") if entry is None else entry
    except RecursionError:
        raise BadLine(_TOO_DEEP) from None
    except UnicodeDecodeError:  # in a string memd reads
        entry, kind = _replaced_entry(line, at)
        return kind if entry is None else entry


def _repaired_wire(line: bytes) -> _WireLine | None:
    """A line the typed decoder refused, repaired (see :func:`_decode`); None when blank."""
    found = _decode(_line_decoder, line, _lenient)
    return None if found is None else found[0]


def _replaced_entry(line: bytes, at: int) -> tuple[Entry | None, str]:
    """The entry and ``type`` of ``line`` read with its invalid UTF-8 replaced (what Claude
    Code reads); its size stays the line's on disk."""
    try:
        found = _decode(_line_decoder, as_node_reads(line), _lenient)
        if found is None:
            return None, ""
        return _to_entry(found[0], at, len(line)), found[0].type or ""
    except RecursionError:
        raise BadLine(_TOO_DEEP) from None


def line_content(line: bytes) -> tuple[str | None, Content]:
    """The ``uuid`` and ``message.content`` blocks of a line :func:`parse_line` accepted.

    The blocks are those the entry's outline counts (objects only, a string content as one
    text block), so ``BlockRef`` indexes point into them. Raises :class:`BadLine` when the
    line is no longer one the parser accepts.
    """
    try:
        try:
            found = _decode(_content_decoder, line, _lenient_content)
        except UnicodeDecodeError:  # read as parse_line reads it
            found = _decode(_content_decoder, as_node_reads(line), _lenient_content)
    except RecursionError:
        raise BadLine(_TOO_DEEP) from None
    if found is None:
        raise BadLine("blank line")
    decoded, checked = found
    if outline.too_deep(checked):  # as parse_line judges it
        raise BadLine(f"message.content is nested deeper than {MAX_CONTENT_DEPTH} levels")
    uuid = decoded.uuid if isinstance(decoded.uuid, str) else None
    value = None if decoded.message is None else decoded.message.content
    if isinstance(value, str):
        return uuid, (({"type": "text", "text": value},) if value else ())
    if not isinstance(value, list):
        return uuid, ()
    return uuid, tuple(block for block in value if isinstance(block, dict))


def _decode(
    decoder: msgspec.json.Decoder[_W], line: bytes, lenient: Callable[[bytes], _W]
) -> tuple[_W, bytes] | None:
    while True:
        try:
            return decoder.decode(line), line
        except msgspec.ValidationError:  # a value of another type, or past a float's range
            line = replace_lone_surrogates(line) or line
            return lenient(line), line
        except msgspec.DecodeError as exc:
            if not line.strip():
                return None
            if OUT_OF_RANGE in str(exc):  # valid JSON a JavaScript agent reads: so do we
                line = replace_lone_surrogates(line) or line
                return lenient(line), line
            repaired = replace_lone_surrogates(line)
            if repaired is None:
                raise BadLine(f"not valid JSON: {exc}") from None
            line = repaired


# Each constructor below spells out the envelope fields (uuid … session_id) rather than
# sharing a dict of them: building that dict per line measured ~6% of ingest throughput.
def _to_entry(wire: _WireLine, at: int, size: int) -> Entry | None:
    uuid = wire.uuid
    if not uuid:
        return None
    match wire.type:  # progress first: most lines are
        case "progress":
            return ProgressEntry(
                uuid=uuid,
                parent_uuid=wire.parentUuid,
                at=at,
                size=size,
                is_sidechain=wire.isSidechain is True,
                timestamp=wire.timestamp,
                cwd=wire.cwd,
                slug=wire.slug,
                session_id=wire.sessionId,
            )
        case "assistant":
            return _assistant(wire, uuid, _outline(wire.message, "assistant"), at, size)
        case "user":
            return _user(wire, uuid, _outline(wire.message, "user"), at, size)
        case "system":
            return _system(wire, uuid, at, size)
        case "attachment":
            return AttachmentEntry(
                uuid=uuid,
                parent_uuid=wire.parentUuid,
                at=at,
                size=size,
                is_sidechain=wire.isSidechain is True,
                timestamp=wire.timestamp,
                cwd=wire.cwd,
                slug=wire.slug,
                session_id=wire.sessionId,
            )
        case _:
            return None


def _shared(value: str | None) -> str | None:
    """One copy of a string many lines repeat (a model's name, a system line's subtype)."""
    return None if value is None else sys.intern(value)


def _outline(message: _WireMessage | None, role: Role) -> Outline:
    """The outline of ``message.content`` (see :mod:`memd.transcript.outline`), judged for
    depth on its own bytes (not the whole line's: most of a long line is elsewhere)."""
    if message is None or not message.content:
        return ()
    try:
        value = _blocks_decoder.decode(message.content)
    except msgspec.ValidationError:
        return _other_outline(message.content, role)
    if isinstance(value, str):
        return outline.of_text(value)
    if not value:
        return ()
    if outline.blocks_too_deep(message.content, value):
        raise BadLine(f"message.content is nested deeper than {MAX_CONTENT_DEPTH} levels")
    return outline.of_blocks(value, role)


def _other_outline(raw: msgspec.Raw, role: Role) -> Outline:
    """Content that is neither a string nor a list of objects: a list keeps its object items
    (as :func:`line_content` does), any other type is no content."""
    try:
        value = _any_decoder.decode(raw)
    except msgspec.ValidationError as exc:  # a number past a float's range
        raise BadLine(f"message.content cannot be decoded: {exc}") from None
    if outline.content_too_deep(raw):
        raise BadLine(f"message.content is nested deeper than {MAX_CONTENT_DEPTH} levels")
    if not isinstance(value, list):
        return ()
    blocks = _blocks_decoder.decode(
        _encoder.encode([item for item in value if isinstance(item, dict)])
    )
    return outline.of_blocks(blocks, role) if isinstance(blocks, list) else ()


def _user(wire: _WireLine, uuid: str, blocks: Outline, at: int, size: int) -> UserEntry:
    return UserEntry(
        uuid=uuid,
        parent_uuid=wire.parentUuid,
        at=at,
        size=size,
        is_sidechain=wire.isSidechain is True,
        timestamp=wire.timestamp,
        cwd=wire.cwd,
        slug=wire.slug,
        session_id=wire.sessionId,
        blocks=blocks,
        is_meta=wire.isMeta is True,
        is_compact_summary=wire.isCompactSummary is True,
    )


def _assistant(wire: _WireLine, uuid: str, blocks: Outline, at: int, size: int) -> AssistantEntry:
    message = wire.message or _NO_MESSAGE
    usage = message.usage
    return AssistantEntry(
        uuid=uuid,
        parent_uuid=wire.parentUuid,
        at=at,
        size=size,
        is_sidechain=wire.isSidechain is True,
        timestamp=wire.timestamp,
        cwd=wire.cwd,
        slug=wire.slug,
        session_id=wire.sessionId,
        message_id=message.id or uuid,
        model=_shared(message.model),
        requested_model=_shared(wire.requestedModel),
        blocks=blocks,
        usage=_usage(usage) if usage is not None else None,
    )


def _usage(wire: _WireUsage) -> Usage:
    prompt = (
        (wire.input_tokens or 0)
        + (wire.cache_creation_input_tokens or 0)
        + (wire.cache_read_input_tokens or 0)
    )
    return Usage(prompt_tokens=prompt, output_tokens=wire.output_tokens or 0)


def _system(wire: _WireLine, uuid: str, at: int, size: int) -> SystemEntry:
    compact = wire.compactMetadata or _NO_COMPACT
    return SystemEntry(
        uuid=uuid,
        parent_uuid=wire.parentUuid,
        at=at,
        size=size,
        is_sidechain=wire.isSidechain is True,
        timestamp=wire.timestamp,
        cwd=wire.cwd,
        slug=wire.slug,
        session_id=wire.sessionId,
        subtype=_shared(wire.subtype),
        logical_parent_uuid=wire.logicalParentUuid,
        compact_trigger=compact.trigger,
        pre_tokens=compact.preTokens,
        post_tokens=compact.postTokens,
    )


# Slow path: a JSON object whose known fields have unexpected types.


def _lenient(line: bytes) -> _WireLine:
    return _line_decoder.decode(_encoder.encode(_repaired(line, _WireLine)))


def _lenient_content(line: bytes) -> _ContentLine:
    return _content_decoder.decode(_encoder.encode(_repaired(line, _ContentLine)))


def _repaired(line: bytes, struct: type[msgspec.Struct]) -> dict[str, Any]:
    try:
        value = _any_decoder.decode(line)
    except msgspec.DecodeError as exc:
        if OUT_OF_RANGE not in str(exc):
            raise BadLine(f"not valid JSON: {exc}") from None
        value = loads_as_the_agent(line, infinite=True)
    if not isinstance(value, dict):
        raise BadLine(f"not a JSON object but {type(value).__name__}")
    return _repair(value, struct)


def _repair(value: dict[str, Any], struct: type[msgspec.Struct]) -> dict[str, Any]:
    """Keep the fields of ``struct`` whose values fit its types, recursing into sub-structs.
    A content list keeps its object items (both decoders count only those)."""
    kept: dict[str, Any] = {}
    for field in msgspec.structs.fields(struct):
        if field.encode_name not in value:
            continue
        item = value[field.encode_name]
        nested = _struct_in(field.type)
        if past_range(item) and field.type is not Any:
            raise BadLine(f"a number past a float's range in {field.encode_name}")
        if field.encode_name == "content" and isinstance(item, list):
            kept["content"] = [block for block in item if isinstance(block, dict)]
        elif nested is not None and isinstance(item, dict):
            kept[field.encode_name] = _repair(item, nested)
        elif _fits(item, field.type):
            kept[field.encode_name] = item
        elif _out_of_range(item, field.type):
            raise BadLine(f"{field.encode_name} is out of range (0 to {MAX_NUMBER:,})")
    return kept


def _out_of_range(item: Any, annotation: Any) -> bool:
    """A whole number where one is expected, but not one this field may hold."""
    return isinstance(item, int) and not isinstance(item, bool) and _fits(0, annotation)


def _struct_in(annotation: Any) -> type[msgspec.Struct] | None:
    for arm in getattr(annotation, "__args__", (annotation,)):
        if isinstance(arm, type) and issubclass(arm, msgspec.Struct):
            return arm
    return None


def _fits(item: Any, annotation: Any) -> bool:
    if annotation is Any or annotation is msgspec.Raw:
        return True
    try:
        msgspec.convert(item, annotation)
    except msgspec.ValidationError:
        return False
    return True
