"""The frame codec and the envelope: pure, no event loop."""

from __future__ import annotations

import itertools
import struct
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memd_client import protocol as p

LIMIT = 4096

scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=20),
    st.binary(max_size=20),
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=8,
)
maps = st.dictionaries(st.text(max_size=10), values, max_size=5)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    bounds = [0, *points, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def header(size: int) -> bytes:
    return struct.pack(">I", size)


def framed(body: bytes) -> bytes:
    return header(len(body)) + body


# Mostly well-delimited frames with random bodies, so the msgpack decoder sees the garbage.
garbage = st.lists(
    st.binary(max_size=40).map(framed) | st.binary(max_size=6) | maps.map(p.encode_frame),
    max_size=6,
).map(b"".join)


# -- frames ---------------------------------------------------------------------------------


@settings(max_examples=60)
@given(st.lists(maps, max_size=4), st.lists(st.integers(min_value=0), max_size=12))
def test_any_chunking_yields_the_same_frames(frames: list[dict[str, Any]], cuts: list[int]) -> None:
    stream = b"".join(p.encode_frame(f) for f in frames)
    decoder = p.FrameDecoder(1 << 20)
    out: list[dict[str, Any]] = []
    for chunk in split(stream, cuts):
        out.extend(decoder.feed(chunk))
    assert out == frames
    assert decoder.buffered == 0


@settings(max_examples=60)
@given(garbage, st.lists(st.integers(min_value=0), max_size=8))
def test_garbage_raises_only_frame_errors(garbage: bytes, cuts: list[int]) -> None:
    decoder = p.FrameDecoder(64)
    try:
        for chunk in split(garbage, cuts):
            for frame in decoder.feed(chunk):
                assert isinstance(frame, dict)
    except p.FrameError as exc:
        assert exc.code in p.ERROR_CODES


@settings(max_examples=60)
@given(garbage, st.lists(st.integers(min_value=0), max_size=8))
def test_garbage_outcome_does_not_depend_on_chunking(garbage: bytes, cuts: list[int]) -> None:
    def run(chunks: list[bytes]) -> tuple[list[dict[str, Any]], str | None]:
        decoder = p.FrameDecoder(64)
        frames: list[dict[str, Any]] = []
        decoder.receive_data(b"")
        try:
            for chunk in chunks:
                decoder.receive_data(chunk)
                while (frame := decoder.next_frame()) is not None:
                    frames.append(frame)
        except p.FrameError as exc:
            return frames, type(exc).__name__
        return frames, None

    assert run(split(garbage, cuts)) == run([garbage])


def test_oversize_prefix_is_refused_before_the_body_arrives() -> None:
    decoder = p.FrameDecoder(LIMIT)
    assert decoder.feed(header(LIMIT + 1)[:3]) == []
    with pytest.raises(p.FrameTooLarge) as caught:
        decoder.feed(header(LIMIT + 1)[3:])
    assert caught.value.size == LIMIT + 1
    assert caught.value.code == p.FRAME_TOO_LARGE
    assert decoder.buffered == 0


def test_frame_of_exactly_the_limit_is_accepted() -> None:
    frame = {"k": "x" * 100}
    body_size = len(p.encode_frame(frame)) - 4
    assert p.FrameDecoder(body_size).feed(p.encode_frame(frame)) == [frame]
    with pytest.raises(p.FrameTooLarge):
        p.FrameDecoder(body_size - 1).feed(p.encode_frame(frame))


def test_decoder_stays_failed_after_an_error() -> None:
    decoder = p.FrameDecoder(LIMIT)
    with pytest.raises(p.BadFrame):
        decoder.feed(header(1) + b"\xc1")  # 0xc1 is never used in msgpack
    with pytest.raises(p.BadFrame):
        decoder.feed(p.encode_frame({"fine": True}))


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (msgpack.packb([1, 2]), "array"),
        (msgpack.packb(7), "int"),
        (b"", "empty"),
        (msgpack.packb({"a": 1}) + b"\x00", "trailing bytes"),
        (msgpack.packb({1: "int key"}), "int key"),
        (msgpack.packb({"t": msgpack.ExtType(5, b"x")}), "extension type"),
        (b"\x81\xa1", "truncated map"),
    ],
)
def test_bodies_that_are_not_one_plain_map_are_bad_frames(body: bytes, why: str) -> None:
    with pytest.raises(p.BadFrame):
        p.FrameDecoder(LIMIT).feed(header(len(body)) + body)


def test_frames_before_a_bad_one_are_delivered_by_next_frame() -> None:
    decoder = p.FrameDecoder(LIMIT)
    decoder.receive_data(p.encode_frame({"n": 1}) + header(1) + b"\xc1")
    assert decoder.next_frame() == {"n": 1}
    with pytest.raises(p.BadFrame):
        decoder.next_frame()


def test_encode_frame_enforces_the_limit_when_asked() -> None:
    with pytest.raises(p.FrameTooLarge):
        p.encode_frame({"x": "y" * 100}, max_frame_bytes=50)
    with pytest.raises(TypeError):
        p.encode_frame({"x": object()})


def test_strings_and_bytes_keep_their_types() -> None:
    frame = {"text": "é", "blob": b"\xff\x00"}
    assert p.FrameDecoder().feed(p.encode_frame(frame)) == [frame]


# -- envelopes ------------------------------------------------------------------------------


def test_request_round_trip_with_default_params() -> None:
    assert p.parse_request({"id": 3, "method": "status"}) == p.Request(3, "status", {})
    assert p.parse_request({"id": 3, "method": "status", "params": None}) == p.Request(
        3, "status", {}
    )
    built = p.request("a-1", "recall", {"query": "tests"})
    assert p.parse_request(built) == p.Request("a-1", "recall", {"query": "tests"})


@pytest.mark.parametrize(
    ("obj", "kept_id"),
    [
        ({"method": "status"}, None),
        ({"id": True, "method": "status"}, None),
        ({"id": 1.5, "method": "status"}, None),
        ({"id": [1], "method": "status"}, None),
        ({"id": 1}, 1),
        ({"id": 1, "method": 5}, 1),
        ({"id": "x", "method": "status", "params": [1]}, "x"),
        ({"id": 2, "method": "status", "params": "a"}, 2),
    ],
)
def test_malformed_requests_are_problems_that_keep_a_readable_id(
    obj: dict[str, Any], kept_id: p.RequestId | None
) -> None:
    problem = p.parse_request(obj)
    assert isinstance(problem, p.ProtocolProblem)
    assert problem.code == p.BAD_REQUEST
    assert problem.id == kept_id


@settings(max_examples=60)
@given(maps)
def test_parse_request_never_raises(obj: dict[str, Any]) -> None:
    assert isinstance(p.parse_request(obj), p.Request | p.ProtocolProblem)
    assert isinstance(p.parse_response(obj), p.Success | p.Failure | p.ProtocolProblem)


def test_responses_parse_back() -> None:
    ok = p.parse_response(p.success(4, {"a": 1}))
    assert isinstance(ok, p.Success) and ok.result == {"a": 1}
    err = p.parse_response(p.failure(4, p.NOT_FOUND, "no such session"))
    assert isinstance(err, p.Failure)
    assert (err.id, err.code, err.message) == (4, p.NOT_FOUND, "no such session")
    conn = p.parse_response(p.failure(None, p.BAD_FRAME, "garbage"))
    assert isinstance(conn, p.Failure) and conn.id is None
    assert isinstance(p.parse_response({"id": 1}), p.ProtocolProblem)
    assert isinstance(p.parse_response({"id": 1, "error": "x"}), p.ProtocolProblem)
    assert isinstance(p.parse_response({"id": None, "result": 1}), p.ProtocolProblem)


def test_hello_result_carries_the_version_and_cannot_be_overridden() -> None:
    result = p.hello_result({"version": "0.1.0", "protocol": 99})
    assert result == {"version": "0.1.0", "protocol": p.PROTOCOL_VERSION}


def test_error_codes_are_distinct_and_include_the_contract() -> None:
    contract = {
        "bad_frame",
        "frame_too_large",
        "bad_request",
        "unknown_method",
        "invalid_params",
        "not_found",
        "disabled",
        "unavailable",
        "internal",
    }
    assert contract <= p.ERROR_CODES


# -- what a body may decode to ----------------------------------------------------------------

CONTAINER_BOMBS = {
    "empty maps": b"\x80",
    "empty arrays": b"\x90",
    "arrays of one empty map": b"\x91\x80",
    "maps of one empty key": b"\x81\xa0\xc0",
}


@pytest.mark.parametrize("unit", CONTAINER_BOMBS.values(), ids=list(CONTAINER_BOMBS))
def test_a_body_made_of_maps_and_arrays_is_refused_in_bounded_memory(unit: bytes) -> None:
    """A byte of msgpack can be ~64 of Python (an empty map): a big body of them is refused
    while it is decoded, holding a few times its size, not ~75x."""
    import tracemalloc

    count = (1 << 20) // len(unit)
    body = b"\x81\xa6params\xdd" + struct.pack(">I", count) + unit * count
    tracemalloc.start()
    try:
        with pytest.raises(p.BadFrame, match="maps and arrays"):
            p.decode_body(body, count_containers=True)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * len(body), f"decoding held {peak / len(body):.1f}x the body"


@settings(max_examples=30)
@given(maps, st.integers(p.COUNTED_BYTES, 4 * p.COUNTED_BYTES))
def test_big_bodies_of_real_shape_decode_whole(frame: dict[str, Any], padding: int) -> None:
    """Past the size where maps and arrays are counted, what clients send still decodes."""
    big = {**frame, "text": "x" * padding, "items": [{"type": "text", "text": "hi"}] * 100}
    assert p.decode_body(p.pack(big), count_containers=True) == big


def test_a_compact_request_with_a_real_conversation_decodes() -> None:
    """The densest messages in the corpus, as a compact request carries them."""
    import json

    from tests.conftest import all_transcripts

    messages = []
    for path in all_transcripts():
        for line in path.read_bytes().splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and isinstance(entry.get("message"), dict):
                messages.append(entry["message"])
    request = p.request(1, "compact", {"messages": messages})
    body = p.pack(request)
    assert len(body) > p.COUNTED_BYTES
    assert p.decode_body(body, count_containers=True) == request


def test_clients_read_a_dense_reply_the_daemon_would_refuse_as_a_request() -> None:
    """Replies are built from transcripts, as dense as those are: a client reads them whole."""
    reply = p.success(1, [{"type": "text", "text": ""}] * 20_000)
    frame = p.encode_frame(reply)
    assert len(frame) > p.COUNTED_BYTES
    assert p.FrameDecoder(1 << 24).feed(frame) == [reply]
    with pytest.raises(p.BadFrame, match="maps and arrays"):
        p.decode_body(frame[4:], count_containers=True)
