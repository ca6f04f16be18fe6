"""Content read back by offset: a resident conversation holds structure, and what a job reads
is what the file says, or the session is rebuilt from the file (scale issue, item 1)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.config import TranscriptsConfig
from memd.daemon.sessions import SessionRegistry
from memd.errors import MemdError, NotFound
from memd.sources.claude_code import ClaudeCode
from memd.transcript.content import (
    ContentCache,
    FileLines,
    MemoryLines,
    TranscriptChanged,
    read_contents,
)
from memd.transcript.conversation import Conversation
from memd.transcript.model import AssistantEntry, UserEntry
from memd.transcript.parse import parse_line
from memd.transcript.tail import LineSplitter
from tests.conftest import CORPUS, main_transcripts, sweep

MAIN = main_transcripts()
SHORT = CORPUS / "spotter" / "short.jsonl"


def _in_memory(data: bytes) -> Conversation:
    conv = Conversation()
    conv.add_lines(data.splitlines())
    return conv


# -- offsets ------------------------------------------------------------------------------------


@given(
    lines=st.lists(st.binary(max_size=12).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    cuts=st.lists(st.integers(min_value=1, max_value=9), max_size=40),
    limit=st.integers(min_value=1, max_value=10),
    ending=st.sampled_from([b"", b"\n", b"tail"]),
)
def test_every_line_comes_with_the_offset_it_has_in_the_input(
    lines: list[bytes], cuts: list[int], limit: int, ending: bytes
) -> None:
    data = b"\n".join(lines) + ending
    splitter = LineSplitter(max_line_bytes=limit)
    found: list[tuple[int, bytes]] = []
    start = 0
    for cut in [*cuts, len(data)]:
        found += splitter.feed_at(data[start : start + cut])
        start += cut
    found += splitter.feed_at(data[start:])
    expected = []
    at = 0
    for line in data.split(b"\n")[:-1]:
        if line and len(line) <= limit:
            expected.append((at, line))
        at += len(line) + 1
    assert found == expected


# -- a file-backed conversation is the conversation -----------------------------------------------


@pytest.mark.parametrize("path", sweep(MAIN))
def test_read_back_from_the_file_the_messages_are_those_of_the_bytes(path: Path) -> None:
    data = path.read_bytes()
    conv = Conversation(lines=FileLines(path, path.stat().st_ino), cache=ContentCache(64 * 1024))
    for at, line in LineSplitter().feed_at(data):
        try:
            entry = parse_line(line, at)
        except ValueError:
            continue
        if entry is not None:
            conv.add(entry)
    expected = _in_memory(data)
    assert conv.api_messages() == expected.api_messages()
    assert [m.uuids for m in conv.messages()] == [m.uuids for m in expected.messages()]
    assert conv.context() == expected.context()


def test_entries_hold_no_content() -> None:
    data = SHORT.read_bytes()
    conv = _in_memory(data)
    texts = [
        b["text"]
        for m in conv.messages()
        for b in m.content
        if b.get("type") == "text" and len(b["text"]) > 40
    ]
    assert texts
    kept = repr([conv._entries[u] for u in conv._entries])
    assert not any(text in kept for text in texts)


def test_the_cache_is_bounded_by_the_size_of_its_lines() -> None:
    conv = _in_memory(SHORT.read_bytes())
    cache = ContentCache(max_bytes=4096)
    entries = [e for e in conv._entries.values() if isinstance(e, UserEntry | AssistantEntry)]
    read_contents(conv.lines, entries, cache)
    assert 0 < cache.size <= 4096
    assert all(e.size <= 1024 for e in entries if cache.get(conv.lines.key, e) is not None)


def test_a_line_missing_from_memory_is_a_changed_transcript() -> None:
    conv = _in_memory(SHORT.read_bytes())
    conv.lines = MemoryLines()
    with pytest.raises(TranscriptChanged):
        conv.messages()


# -- the file changes under a resident conversation ---------------------------------------------


async def _registry_with(tmp_path: Path, data: bytes) -> tuple[SessionRegistry, Path]:
    path = tmp_path / "-work-project" / "s.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    registry = SessionRegistry([ClaudeCode(tmp_path)], TranscriptsConfig(), {}, started_at=0.0)
    state = await registry.ingest(path)
    assert state is not None and state.message_count > 0
    return registry, path


def _complete_lines(data: bytes) -> bytes:
    return data[: data.rfind(b"\n") + 1]


def _rewrite_in_place(path: Path, data: bytes) -> None:
    with path.open("r+b") as f:  # same inode: only the lines themselves tell
        f.write(data)
        f.truncate(len(data))


def _other_transcript(size: int) -> bytes:
    for candidate in MAIN:
        data = candidate.read_bytes()
        if len(data) >= size and candidate.name != SHORT.name:
            return data[:size]
    raise AssertionError("no corpus transcript is large enough")


@pytest.mark.anyio
@pytest.mark.parametrize(
    "change", ["same size", "same size, same last newline", "shorter", "replaced", "one byte"]
)
async def test_a_rewritten_transcript_is_read_again_not_served_stale(
    tmp_path: Path, change: str
) -> None:
    original = SHORT.read_bytes()
    registry, path = await _registry_with(tmp_path, original)
    state = registry.get("s")
    assert state is not None
    match change:
        case "same size":
            now = _other_transcript(len(original))
            _rewrite_in_place(path, now)
        case "same size, same last newline":  # the tail reader sees nothing new
            now = _other_transcript(len(original) - 1) + b"\n"
            _rewrite_in_place(path, now)
        case "shorter":
            now = _other_transcript(len(original) // 2)
            _rewrite_in_place(path, now)
        case "replaced":
            now = _other_transcript(len(original) + 5000)
            spare = path.with_suffix(".new")
            spare.write_bytes(now)
            os.replace(spare, path)
        case _:  # a text byte changed in place: same lines, same uuids
            at = original.index(b'"text":"') + len(b'"text":"')
            now = (
                original[:at]
                + (b"Y" if original[at : at + 1] != b"Y" else b"Z")
                + original[at + 1 :]
            )
            _rewrite_in_place(path, now)
    with anyio.fail_after(30):
        got = await registry.read(state, Conversation.api_messages)
    expected = _in_memory(_complete_lines(now)).api_messages()
    if change != "one byte":
        assert got == expected
        return
    # Same lines, same uuids: each message is as memd read it or as the file says now.
    before = _in_memory(original).api_messages()
    assert len(got) == len(expected) == len(before)
    assert all(g in (e, b) for g, e, b in zip(got, expected, before, strict=True))


@pytest.mark.anyio
@pytest.mark.parametrize("what", ["deleted", "fifo", "directory", "symlink loop"])
async def test_a_transcript_gone_or_hostile_after_ingest_is_an_error_not_a_hang(
    tmp_path: Path, what: str
) -> None:
    registry, path = await _registry_with(tmp_path, SHORT.read_bytes())
    state = registry.get("s")
    assert state is not None
    path.unlink()
    match what:
        case "fifo":
            os.mkfifo(path)
        case "directory":
            path.mkdir()
        case "symlink loop":
            path.symlink_to(path)
        case _:
            pass
    with anyio.fail_after(30), pytest.raises(MemdError) as raised:
        await registry.read(state, Conversation.api_messages)
    assert isinstance(raised.value, NotFound | TranscriptChanged)
    if what == "directory":
        shutil.rmtree(path)


def test_a_line_rewritten_deeper_than_the_limit_is_a_changed_transcript(tmp_path: Path) -> None:
    """Same uuid, same length, content now nested past what the parser accepts."""
    good = b'{"type":"user","uuid":"u","message":{"content":[{"type":"text","text":"%s"}]}}'
    shallow = good % (b"x" * 420)
    nested = b"[" * 101 + b"]" * 101
    deep = b'{"type":"user","uuid":"u","message":{"content":[%s,{"type":"text","text":"%s"}]}}'
    deep = deep % (nested, b"x" * (len(shallow) - len(deep % (nested, b""))))
    assert len(deep) == len(shallow)
    path = tmp_path / "s.jsonl"
    path.write_bytes(shallow + b"\n")
    conv = Conversation(lines=FileLines(path, path.stat().st_ino), cache=ContentCache())
    entry = parse_line(shallow, 0)
    assert entry is not None
    conv.add(entry)
    _rewrite_in_place(path, deep + b"\n")
    with pytest.raises(TranscriptChanged, match="nested deeper"):
        conv.messages()
