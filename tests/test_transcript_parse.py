"""Parsing transcript lines into typed entries."""

from __future__ import annotations

import json
import tracemalloc
from collections import Counter
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from memd.transcript.model import (
    AssistantEntry,
    AttachmentEntry,
    Entry,
    ProgressEntry,
    SystemEntry,
    UserEntry,
)
from memd.transcript.parse import BadLine, line_content, parse_line
from tests.conftest import all_transcripts, sweep

KINDS: dict[str, type[Entry]] = {
    "user": UserEntry,
    "assistant": AssistantEntry,
    "system": SystemEntry,
    "progress": ProgressEntry,
    "attachment": AttachmentEntry,
}


def _line(value: dict[str, Any]) -> bytes:
    return json.dumps(value).encode()


@pytest.mark.parametrize("path", sweep(all_transcripts()))
def test_every_corpus_line_parses_to_what_the_json_says(path: Path) -> None:
    kinds: Counter[str] = Counter()
    for raw in path.read_bytes().splitlines():
        expected = json.loads(raw)
        entry = parse_line(raw)
        kind = expected.get("type")
        if kind not in KINDS or "uuid" not in expected:
            assert entry is None
            continue
        kinds[kind] += 1
        assert isinstance(entry, KINDS[kind])
        assert entry.uuid == expected["uuid"]
        assert entry.parent_uuid == expected.get("parentUuid")
        assert entry.is_sidechain == bool(expected.get("isSidechain"))
        if isinstance(entry, UserEntry | AssistantEntry):
            _check_message(entry, expected["message"], raw)
        if isinstance(entry, SystemEntry) and entry.is_compact_boundary:
            assert entry.pre_tokens == expected["compactMetadata"]["preTokens"]
            assert entry.logical_parent_uuid == expected["logicalParentUuid"]
    assert kinds["user"] and kinds["assistant"]


def _check_message(entry: UserEntry | AssistantEntry, message: dict[str, Any], raw: bytes) -> None:
    content = message["content"]
    blocks = content if isinstance(content, list) else []
    uuid, read_back = line_content(raw)
    assert uuid == entry.uuid
    if isinstance(content, str):
        assert read_back == (({"type": "text", "text": content},) if content else ())
    else:
        assert list(read_back) == [b for b in blocks if isinstance(b, dict)]
    for index, kind, _, _ in entry.blocks:  # the outline points at the blocks read back
        assert read_back[index]["type"] == kind
    if isinstance(entry, UserEntry):
        ids = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
        assert list(entry.tool_result_ids) == ids
        return
    assert list(entry.tool_use_ids) == [b["id"] for b in blocks if b.get("type") == "tool_use"]
    assert entry.message_id == message["id"]
    assert entry.synthetic == (message["model"] == "<synthetic>")
    assert entry.usage is not None
    usage = message["usage"]
    assert entry.usage.prompt_tokens == (
        usage["input_tokens"]
        + usage.get("cache_creation_input_tokens", 0)
        + usage.get("cache_read_input_tokens", 0)
    )
    assert entry.usage.output_tokens == usage["output_tokens"]


def test_the_entry_keeps_only_the_content_not_the_tool_use_result() -> None:
    huge = "x" * 100_000
    line = _line(
        {
            "type": "user",
            "uuid": "u",
            "message": {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t", "content": huge}],
            },
            "toolUseResult": {"originalFile": huge},
        }
    )
    entry = parse_line(line)
    assert isinstance(entry, UserEntry)
    assert entry.blocks == ((0, "tool_result", "t", True),)
    assert (entry.at, entry.size) == (-1, len(line))
    assert len(json.dumps(line_content(line)[1])) < 100_100
    assert entry.tool_result_ids == ("t",)
    assert not any(huge in str(value) for value in msgspec.structs.asdict(entry).values())


@pytest.mark.parametrize(
    "value",
    [
        {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}},
        {"type": "summary", "summary": "A title", "leafUuid": "x"},
        {"type": "some-future-type", "uuid": "u", "parentUuid": None},
        {"type": "user", "message": {"role": "user", "content": "no uuid"}},
        {"uuid": "u"},
    ],
)
def test_lines_memd_does_not_use_parse_to_none(value: dict[str, Any]) -> None:
    assert parse_line(_line(value)) is None


@pytest.mark.parametrize("line", [b"", b"   ", b"\r"])
def test_blank_lines_parse_to_none(line: bytes) -> None:
    assert parse_line(line) is None


@pytest.mark.parametrize("line", [b"[1, 2]", b'"text"', b"42", b"null", b'{"type": "user"', b"{x}"])
def test_a_line_that_is_not_a_json_object_is_a_bad_line(line: bytes) -> None:
    with pytest.raises(BadLine):
        parse_line(line)


def test_unknown_fields_are_ignored() -> None:
    line = _line(
        {
            "type": "progress",
            "uuid": "p",
            "parentUuid": "a",
            "future": {"x": [1]},
            "data": {"type": "hook_progress"},
        }
    )
    assert parse_line(line, 7) == ProgressEntry(uuid="p", parent_uuid="a", at=7, size=len(line))


def test_a_known_field_of_an_unexpected_type_is_dropped_not_the_entry() -> None:
    entry = parse_line(
        _line(
            {
                "type": "assistant",
                "uuid": "a",
                "parentUuid": 7,
                "isSidechain": "no",
                "message": {
                    "id": "msg_1",
                    "model": "claude",
                    "content": [{"type": "tool_use", "id": "t1", "name": "Read", "input": {}}],
                    "usage": {
                        "input_tokens": "many",
                        "output_tokens": 5,
                        "cache_read_input_tokens": 10,
                    },
                },
            }
        )
    )
    assert isinstance(entry, AssistantEntry)
    assert entry.parent_uuid is None and not entry.is_sidechain
    assert entry.usage is not None
    assert (entry.usage.prompt_tokens, entry.usage.output_tokens) == (10, 5)
    assert entry.tool_use_ids == ("t1",)


def test_null_and_missing_values_take_defaults() -> None:
    entry = parse_line(
        _line(
            {
                "type": "assistant",
                "uuid": "a",
                "message": {"content": None, "usage": {"input_tokens": None}},
            }
        )
    )
    assert isinstance(entry, AssistantEntry)
    assert entry.message_id == "a"  # no message.id: the line is its own response
    assert entry.usage is not None and entry.usage.prompt_tokens == 0
    assert entry.blocks == ()


def test_system_entries_carry_boundary_and_turn_end_facts() -> None:
    boundary = parse_line(
        _line(
            {
                "type": "system",
                "subtype": "compact_boundary",
                "uuid": "b",
                "parentUuid": None,
                "logicalParentUuid": "x",
                "compactMetadata": {"trigger": "auto", "preTokens": 167094},
            }
        )
    )
    assert isinstance(boundary, SystemEntry)
    assert boundary.is_compact_boundary and not boundary.is_turn_end
    assert (boundary.compact_trigger, boundary.pre_tokens) == ("auto", 167094)
    turn = parse_line(_line({"type": "system", "subtype": "turn_duration", "uuid": "t"}))
    assert isinstance(turn, SystemEntry) and turn.is_turn_end


def test_a_plain_string_content_becomes_one_text_block() -> None:
    line = _line({"type": "user", "uuid": "u", "message": {"content": "hello"}})
    entry = parse_line(line)
    assert isinstance(entry, UserEntry)
    assert entry.blocks == ((0, "text", None, True),)
    assert line_content(line) == ("u", ({"type": "text", "text": "hello"},))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
_field_names = st.sampled_from(
    [
        "uuid",
        "parentUuid",
        "isSidechain",
        "isMeta",
        "message",
        "usage",
        "content",
        "id",
        "model",
        "subtype",
        "compactMetadata",
        "preTokens",
        "timestamp",
        "type",
        "input_tokens",
    ]
)


@settings(deadline=None, max_examples=60)
@given(
    kind=st.sampled_from([*KINDS, "summary", "other"]),
    fields=st.dictionaries(_field_names | st.text(max_size=8), _json, max_size=8),
    message=st.dictionaries(_field_names, _json, max_size=6),
)
def test_any_json_object_parses_without_error(
    kind: str, fields: dict[str, Any], message: dict[str, Any]
) -> None:
    value = {**fields, "type": kind, "message": message}
    entry = parse_line(_line(value))
    if entry is not None:
        assert isinstance(entry, KINDS[kind])
        assert isinstance(entry.uuid, str)


@settings(deadline=None)
@given(data=st.binary(max_size=200))
def test_arbitrary_bytes_are_an_entry_none_or_a_bad_line(data: bytes) -> None:
    try:
        parse_line(data)
    except BadLine:
        pass


_ENTRY_LINES = [
    _line({"type": "user", "uuid": "u", "cwd": "/w", "message": {"content": "hello"}}),
    _line(
        {
            "type": "assistant",
            "uuid": "a",
            "message": {
                "id": "m",
                "usage": {"input_tokens": 5, "output_tokens": 1},
                "content": [{"type": "tool_use", "id": "t", "name": "Bash", "input": {"c": "ls"}}],
            },
        }
    ),
    _line(
        {
            "type": "user",
            "uuid": "r",
            "parentUuid": "a",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]},
            "toolUseResult": {"stdout": "x", "interrupted": False},
        }
    ),
    _line({"type": "system", "uuid": "s", "subtype": "compact_boundary", "slug": "x"}),
    _line({"type": "progress", "uuid": "p", "data": {"hookName": "PostToolUse"}}),
    _line({"type": "attachment", "uuid": "t", "attachment": {"type": "skill_listing"}}),
]
# A bad start, a cut sequence before ASCII, a surrogate, past U+10FFFF, a lone continuation,
# a sequence cut short, an overlong form.
_NOT_UTF8 = [
    b"\xff",
    b"\xc3(",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\x80",
    b"\xe2\x82",
    b"\xc0\xaf",
]


def _as_node_reads(line: bytes) -> bytes:
    """What Claude Code (Node: ``readFile(path, "utf8")``) reads: U+FFFD for each invalid
    sequence."""
    return line.decode("utf-8", "replace").encode("utf-8")


@given(
    line=st.sampled_from(_ENTRY_LINES),
    where=st.integers(min_value=0),
    bad=st.lists(st.sampled_from(_NOT_UTF8), min_size=1, max_size=3).map(b"".join),
)
def test_bytes_that_are_not_utf8_are_read_as_claude_code_reads_them(
    line: bytes, where: int, bad: bytes
) -> None:
    """Wherever they sit (a string memd reads, one it skips, a key, between tokens), invalid
    bytes make the line what Claude Code reads: the entry of the line with U+FFFD in their
    place (its size the line's on disk), its content read back alike; a bad line only if that
    is one (U+FFFD outside a string is no JSON). They made every such line bad, and Claude
    Code kept it."""
    at = where % (len(line) + 1)
    spoiled = line[:at] + bad + line[at:]
    read = _as_node_reads(spoiled)
    try:
        expected = parse_line(read, 7)
    except BadLine:
        with pytest.raises(BadLine):
            parse_line(spoiled, 7)
        return
    entry = parse_line(spoiled, 7)
    if expected is None:
        assert entry is None
        return
    assert entry == msgspec.structs.replace(expected, size=len(spoiled))
    assert line_content(spoiled) == line_content(read)


def test_invalid_utf8_in_a_string_memd_reads_is_a_replacement_character() -> None:
    line = _line({"type": "user", "uuid": "u", "cwd": "/w", "message": {"content": "hi"}})
    spoiled = line.replace(b"/w", b"/\xffw").replace(b"hi", b"h\xc3(i")
    entry = parse_line(spoiled)
    assert isinstance(entry, UserEntry) and entry.cwd == "/\ufffdw"
    assert line_content(spoiled) == ("u", ({"type": "text", "text": "h\ufffd(i"},))


@pytest.mark.parametrize("depth", [10, 100, 101, 1_000, 10_000, 100_000, 1_000_000])
def test_any_nesting_is_an_entry_or_a_bad_line(depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    in_content = b'{"type":"user","uuid":"u","message":{"content":%s}}' % nested
    elsewhere = b'{"type":"user","uuid":"u","extra":%s}' % nested
    if depth <= 100:
        entry = parse_line(in_content)
        assert isinstance(entry, UserEntry) and entry.blocks == ()
    else:
        with pytest.raises(BadLine, match="nested"):
            parse_line(in_content)
    if depth < 500:
        assert isinstance(parse_line(elsewhere), UserEntry)
    elif depth >= 10_000:
        with pytest.raises(BadLine, match="nested"):
            parse_line(elsewhere)


@pytest.mark.parametrize(
    ("content", "around"),
    [
        (b'{"a":%s}', 1),  # content an object, not a list: no blocks, still judged
        (b'[{"type":"text","text":"x","extra":%s}]', 2),  # in a block's field memd skips
        (b'[1,{"type":"tool_use","id":"t","name":"n","input":%s}]', 2),  # beside a non-object
        (b'"%s"', 0),  # in a string: no nesting at all
    ],
)
@pytest.mark.parametrize("depth", [100, 101])
def test_content_of_any_shape_is_judged_for_depth(content: bytes, around: int, depth: int) -> None:
    """Content nested past the limit is refused whatever its shape, by both readers."""
    levels = depth - around
    nested = b'{"k":' * levels + b"0" + b"}" * levels
    if content.startswith(b'"'):
        nested = nested.replace(b'"', b'\\"')
    line = b'{"type":"assistant","uuid":"u","message":{"content":%s}}' % (content % nested)
    if depth <= 100 or content.startswith(b'"'):
        assert isinstance(parse_line(line), AssistantEntry)
        line_content(line)
    else:
        with pytest.raises(BadLine, match="nested"):
            parse_line(line)
        with pytest.raises(BadLine, match="nested"):
            line_content(line)


# Siblings beside each level: brackets and escapes inside strings (a byte count is fooled),
# a number past a float's range and a lone surrogate (msgspec refuses to decode them).
_SIBLINGS = ["", r'"[{\\\"]"', r'"\\"', "[]", '{"k":"]]"}', "1e999", r'"\ud83d"']


@st.composite
def _nested_json(draw: st.DrawFn) -> str:
    text: str = draw(st.sampled_from(["0", '"x"', "[]", "{}"]))
    for _ in range(draw(st.integers(min_value=96, max_value=100))):
        sibling = draw(st.sampled_from(_SIBLINGS))
        if draw(st.booleans()):
            text = '{"k":' + text + (',"s":' + sibling if sibling else "") + "}"
        else:
            text = "[" + text + ("," + sibling if sibling else "") + "]"
    return text


def _nesting(value: Any) -> int:
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return 1 + max(map(_nesting, value), default=0)
    return 0


_BLOCKS = [  # where the nested value sits: a field the decode skips, or one it takes raw
    '{"type":"text","text":"x","extra":%s}',
    '{"type":"tool_use","id":"t","name":"n","input":%s}',
    '{"type":"tool_result","tool_use_id":"t","content":%s}',
    '{"type":"thinking","thinking":%s,"signature":"s"}',
    '{"type":"text","text":%s}',
]


@settings(deadline=None, max_examples=300)
@given(nested=_nested_json(), block=st.sampled_from(_BLOCKS), before=st.sampled_from([0, 6, 6000]))
def test_content_depth_is_judged_as_the_json_nests_whatever_surrounds_it(
    nested: str, block: str, before: int
) -> None:
    """The depth limit counts nesting as the JSON has it (json.loads, recursively), wherever
    it sits in a block, also when strings hold brackets and escapes and when msgspec cannot
    decode the content."""
    assume(not ("1e999" in nested and '"text":%s' in block))  # a text memd cannot decode
    other = '{"type":"text","text":"' + "x" * before + '"},' if before else ""  # 6000: KiBs
    content = "[" + other + block.replace("%s", nested) + "]"
    line = b'{"type":"assistant","uuid":"u","message":{"content":%s}}' % content.encode()
    if _nesting(json.loads(content)) > 100:
        with pytest.raises(BadLine, match="nested"):
            parse_line(line)
    else:
        assert isinstance(parse_line(line), AssistantEntry)


@pytest.mark.parametrize("depth", [100, 101])
def test_content_of_many_containers_is_judged_for_depth_within_a_few_times_its_bytes(
    depth: int,
) -> None:
    """Three bytes (``[],``) decode to an object of ~70: the depth check of a line of many
    small containers held ~28 times the line (a 14 MiB line, ~450 MiB for 3 s). It is judged
    on its bytes, as nested as the JSON is."""
    extra = "[" + "[" * (depth - 3) + "]" * (depth - 3) + "," + ",".join(["[]"] * 200_000) + "]"
    content = '[{"type":"text","text":"x","extra":' + extra + "}]"
    assert _nesting(json.loads(content)) == depth
    line = b'{"type":"assistant","uuid":"u","message":{"id":"m","content":%s}}' % content.encode()
    tracemalloc.start()
    try:
        if depth > 100:
            with pytest.raises(BadLine, match="nested"):
                parse_line(line)
        else:
            assert isinstance(parse_line(line), AssistantEntry)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(line)


def test_a_number_past_a_floats_range_in_the_content_is_a_bad_line() -> None:
    """Not an exception out of the parser (it was msgspec's ValidationError)."""
    line = b'{"type":"user","uuid":"u","message":{"content":[1e999,{"type":"text","text":"x"}]}}'
    with pytest.raises(BadLine, match="content"):
        parse_line(line)


@pytest.mark.parametrize("literal", [b"1e400", b"1e999", b"-1e400"])
@pytest.mark.parametrize("elsewhere", [b'"/w"', b"5"], ids=["typed", "lenient"])
def test_a_token_count_past_a_floats_range_is_a_bad_line(literal: bytes, elsewhere: bytes) -> None:
    """Not read as no count (the context was then the rest of the usage), whether the line is
    otherwise well typed or another field sends it down the lenient path (``cwd: 5``); the
    same number in a tool's input is what Claude Code reads (null)."""
    line = (
        b'{"type":"assistant","uuid":"u","cwd":%s,"message":{"id":"m","role":"assistant",'
        b'"content":[{"type":"tool_use","id":"t","name":"X","input":{"n":%s}}],'
        b'"usage":{"input_tokens":%s,"cache_read_input_tokens":10}}}'
    )
    with pytest.raises(BadLine, match="past a float's range"):
        parse_line(line % (elsewhere, b"1", literal))
    entry = parse_line(line % (elsewhere, literal, b"3"))
    assert isinstance(entry, AssistantEntry) and entry.usage is not None
    assert entry.usage.prompt_tokens == 13
    _, content = line_content(line % (elsewhere, literal, b"3"))
    assert content[0]["input"] == {"n": None}


def test_a_lone_surrogate_escape_becomes_a_replacement_character() -> None:
    text = rb'"cut \ud83d in half \\ud83d \ud83d\ude00"'  # lone, escaped backslash, a pair
    line = b'{"type":"user","uuid":"u","message":{"content":%s}}' % text
    entry = parse_line(line)
    assert isinstance(entry, UserEntry) and entry.blocks == ((0, "text", None, True),)
    _, content = line_content(line)
    assert content == ({"type": "text", "text": "cut \ufffd in half \\ud83d \U0001f600"},)
    json.dumps(content, ensure_ascii=False).encode("utf-8")  # encodable: no surrogate left


# -- numbers (issue 23): a figure out of range makes the line bad, never a figure -------------

MAX = 10**12


def _with_number(path: str, value: int) -> bytes:
    """An entry with ``value`` at ``path``, one of the integer fields the parser reads."""
    if path == "preTokens":
        return _line(
            {
                "type": "system",
                "uuid": "s",
                "subtype": "compact_boundary",
                "compactMetadata": {"trigger": "auto", "preTokens": value},
            }
        )
    return _line(
        {
            "type": "assistant",
            "uuid": "a",
            "message": {"id": "m", "content": "x", "usage": {"output_tokens": 1, path: value}},
        }
    )


INTEGER_FIELDS = [
    "input_tokens",
    "output_tokens",
    "cache_creation_input_tokens",
    "cache_read_input_tokens",
    "preTokens",
]


@pytest.mark.parametrize("path", INTEGER_FIELDS)
@pytest.mark.parametrize("value", [-1, -(2**63), -(2**70), MAX + 1, 2**64, 2**70, 10**4000])
def test_a_number_out_of_range_makes_the_line_bad(path: str, value: int) -> None:
    """Regression: input_tokens 2^64 was taken, and no status could be encoded after it."""
    with pytest.raises(BadLine, match=f"{path} is out of range|Integer value out of range"):
        parse_line(_with_number(path, value))


@pytest.mark.parametrize("path", INTEGER_FIELDS)
@pytest.mark.parametrize("value", [0, 7, MAX])
def test_a_number_in_range_is_the_figure(path: str, value: int) -> None:
    entry = parse_line(_with_number(path, value))
    if isinstance(entry, SystemEntry):
        assert entry.pre_tokens == value
    else:
        assert isinstance(entry, AssistantEntry) and entry.usage is not None
        usage = entry.usage
        assert (usage.output_tokens if path == "output_tokens" else usage.prompt_tokens) == value


@settings(deadline=None, max_examples=200)
@given(
    path=st.sampled_from(INTEGER_FIELDS),
    value=st.integers(min_value=-(2**70), max_value=2**70),
    wrong_elsewhere=st.booleans(),
)
def test_any_integer_is_a_figure_in_range_or_a_bad_line(
    path: str, value: int, wrong_elsewhere: bool
) -> None:
    line = _with_number(path, value)
    if wrong_elsewhere:  # a field of the wrong type sends the line down the lenient path
        line = line.replace(b'"type": ', b'"isSidechain": "no", "type": ', 1)
    try:
        entry = parse_line(line)
    except BadLine:
        assert not 0 <= value <= MAX
        return
    assert 0 <= value <= MAX
    assert entry is not None


# JSON text whose values include what msgspec cannot hold but JSON allows (numbers past a
# float's range, integers past 64 bits) and escapes Python cannot encode (lone surrogates).
_json_numbers = st.sampled_from(
    [b"1e999", b"-2E+400", b"1e-999", b"0", b"-0.5", b"1" + b"0" * 30, b"18446744073709551616"]
)
_json_strings = st.sampled_from([b'"x"', b'"\\ud800"', b'"\\udc00\\ud83d"', b'""', b'"{[\\""'])
_json_values = st.recursive(
    _json_numbers | _json_strings | st.sampled_from([b"null", b"true", b"[]", b"{}"]),
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda items: b"[" + b",".join(items) + b"]")
        | st.lists(st.tuples(st.sampled_from([b"a", b"n", b"text"]), inner), max_size=3).map(
            lambda pairs: b"{" + b",".join(b'"%s":%s' % pair for pair in pairs) + b"}"
        )
    ),
    max_leaves=8,
)
_blocks = st.sampled_from(
    [
        b'{"type":"text","text":"t","extra":%s}',
        b'{"type":"tool_use","id":"t1","name":"Bash","input":{"cmd":%s}}',
        b'{"type":"tool_result","tool_use_id":"t1","content":%s}',
        b'{"type":"thinking","thinking":"th","signature":"s","more":%s}',
        b"%s",
    ]
)


@given(
    st.lists(st.tuples(_blocks, _json_values), max_size=4),
    _json_values,
    st.sampled_from([b"user", b"assistant"]),
)
def test_a_line_the_parser_accepts_is_never_refused_when_read_back(
    blocks: list[tuple[bytes, bytes]], elsewhere: bytes, kind: bytes
) -> None:
    """Whatever the values in a content block's fields (a number past a float's range in a
    tool's input, as JSON allows), a line parse_line accepts reads back with line_content,
    its blocks where the outline says: else every read of the session (a compaction, notes)
    rebuilt it from the start and failed again. Nothing read back holds an Infinity."""
    content = b"[" + b",".join(block % value for block, value in blocks) + b"]"
    line = b'{"type":"%s","uuid":"u","extra":%s,"message":{"role":"%s","content":%s}}' % (
        kind,
        elsewhere,
        kind,
        content,
    )
    try:
        entry = parse_line(line)
    except BadLine:
        return
    assert isinstance(entry, UserEntry | AssistantEntry)
    uuid, read_back = line_content(line)
    assert uuid == "u"
    for index, block_kind, _, _ in entry.blocks:
        assert read_back[index]["type"] == block_kind
    assert "Infinity" not in json.dumps(read_back)
