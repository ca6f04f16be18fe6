"""The transcript pipeline against every real transcript in the shared corpus.

The expected figures come from :mod:`tests.transcript_oracle`, an independent reading of the
raw JSON with the stdlib ``json`` module, and are checked at many prefixes of every file (the
daemon reads files as they grow), not only at their ends.
"""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path

import pytest

from memd.compaction.api_form import repair
from memd.compaction.service import messages_of
from memd.testing.api_rules import request_problems
from memd.transcript.conversation import Conversation
from memd.transcript.tail import LineSplitter, TailPosition, read_appended
from tests.conftest import FULL_CORPUS, all_transcripts, corpus_id, main_transcripts, sweep
from tests.transcript_oracle import Reading, load, read_lines, read_values

FILES = all_transcripts()
PREFIXES_PER_FILE = 60  # plus the first 30 and every line around a boundary or sidechain


def _id(path: Path) -> str:
    return corpus_id(path)


def _is_subagent(path: Path) -> bool:
    return "subagents" in path.parts


def _conversation(path: Path) -> Conversation:
    conversation = Conversation(sidechain=_is_subagent(path))
    position = None
    while True:  # the tailer reads a file in batches, as the daemon does
        read = read_appended(path, position)
        assert read.skipped == 0 and not read.reset
        conversation.add_lines(read.lines)
        position = read.position
        if not read.more:
            return conversation


def expected_for(path: Path) -> Reading:
    return read_lines(path.read_bytes().splitlines(), sidechain_file=_is_subagent(path))


def _assert_same(conversation: Conversation, expected: Reading, where: str) -> None:
    assert [e.uuid for e in conversation.active_chain()] == expected.chain, where
    messages = conversation.messages()
    assert [m.role for m in messages] == expected.roles, where
    assert [list(m.uuids) for m in messages] == expected.message_uuids, where
    assert conversation.message_count == expected.message_count, where
    assert list(conversation.pending_uuids) == expected.pending, where
    figure = conversation.context()
    assert (figure.tokens, figure.stale) == (expected.context_tokens, expected.stale), where
    assert [b.uuid for b in conversation.boundaries] == expected.boundaries, where


def prefix_ends(lines: list[bytes], count: int, seed: str) -> list[int]:
    """Line counts at which to check a file: the first 30, ``count`` spread over the rest
    (some at random), every line next to a compact boundary or a sidechain line, the end."""
    n = len(lines)
    ends = set(range(1, min(n, 30) + 1)) | {n}
    ends.update(1 + (i * n) // count for i in range(count) if (i * n) // count < n)
    rng = random.Random(seed)
    ends.update(rng.randrange(1, n + 1) for _ in range(count // 2))
    for i, line in enumerate(lines):
        if b'"compact_boundary"' in line or b'"isSidechain":true' in line:
            ends.update(j for j in (i, i + 1, i + 2) if 1 <= j <= n)
    return sorted(ends)


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("path", sweep(FILES))
def test_conversation_matches_independent_reading(path: Path) -> None:
    conversation = _conversation(path)
    _assert_same(conversation, expected_for(path), "whole file")
    assert len(conversation.api_messages()) == conversation.message_count
    assert conversation.bad_lines == 0


@pytest.mark.parametrize("path", sweep(FILES))
def test_every_sampled_prefix_matches_independent_reading(path: Path) -> None:
    """The figures the daemon publishes while a file grows, checked as it grows (issue 15)."""
    lines = path.read_bytes().splitlines()
    values = [load(line) for line in lines]
    conversation = Conversation(sidechain=_is_subagent(path))
    done = 0
    for end in prefix_ends(lines, PREFIXES_PER_FILE, path.name):
        conversation.add_lines(lines[done:end])
        done = end
        expected = read_values(values[:end], sidechain_file=_is_subagent(path))
        _assert_same(conversation, expected, f"prefix of {end} lines")


@pytest.mark.parametrize("path", sweep(FILES))
def test_api_messages_of_sampled_prefixes_pass_the_strict_validator(path: Path) -> None:
    """Valid by construction: no repair, roles strictly alternating, at every prefix."""
    lines = path.read_bytes().splitlines()
    conversation = Conversation(sidechain=_is_subagent(path))
    done = 0
    for end in prefix_ends(lines, 4 * PREFIXES_PER_FILE, path.name + "api"):
        conversation.add_lines(lines[done:end])
        done = end
        messages = conversation.api_messages()
        if not messages:
            continue
        body = {"model": "m", "max_tokens": 1, "messages": messages}
        assert request_problems(body, strict_alternation=True) == [], f"prefix of {end} lines"


@pytest.mark.parametrize("path", sweep(main_transcripts()))
def test_sidechain_entries_never_enter_the_main_conversation(path: Path) -> None:
    expected = expected_for(path)
    conversation = _conversation(path)
    in_chain = {e.uuid for e in conversation.active_chain()}
    in_messages = {uuid for m in conversation.messages() for uuid in m.uuids}
    assert not (in_chain | in_messages) & expected.sidechain_uuids


@pytest.mark.parametrize("path", sweep(FILES))
def test_messages_form_a_valid_api_history(path: Path) -> None:
    """Roles alternate and every tool call is answered in the very next message."""
    conversation = _conversation(path)
    messages = conversation.api_messages()
    assert messages and messages[0]["role"] == "user"
    for before, after in itertools.pairwise(messages):
        assert before["role"] != after["role"]
        calls = {b["id"] for b in before["content"] if b["type"] == "tool_use"}
        results = [b["tool_use_id"] for b in after["content"] if b["type"] == "tool_result"]
        assert set(results) == calls
        kinds = [b["type"] for b in after["content"]]
        assert kinds == sorted(kinds, key=lambda kind: kind != "tool_result")
    last_calls = {b["id"] for b in messages[-1]["content"] if b["type"] == "tool_use"}
    assert not last_calls  # a response waiting for its results is held back, not shown


def test_every_compact_boundary_is_found_with_the_context_before_it() -> None:
    """Compare the context just before each boundary with Claude Code's own preTokens."""
    rows: list[tuple[str, int, int]] = []
    for path in FILES:
        for boundary in _conversation(path).boundaries:
            assert boundary.trigger in {"auto", "manual"}
            if boundary.pre_tokens:
                rows.append((_id(path), boundary.context_before.tokens, boundary.pre_tokens))
    enough = 5 if FULL_CORPUS is not None else 1  # tests/corpus/ keeps one, to stay small
    assert len(rows) == sum(len(expected_for(p).boundaries) for p in FILES) >= enough
    close = 0
    for name, ours, theirs in rows:
        off = (ours - theirs) / theirs
        close += abs(off) <= 0.05
        print(f"{name}: context before boundary {ours} vs preTokens {theirs} ({off:+.1%})")
    assert close >= 0.75 * len(rows)


def _chunked(data: bytes, rng: random.Random) -> list[bytes]:
    """Random chunks that also cut inside multi-byte characters wherever there are some."""
    cuts = {0, len(data)}
    leads = [i for i in range(0, len(data), 97) if data[i] >= 0xC0]
    cuts.update(i + 1 for i in rng.sample(leads, min(50, len(leads))))
    position = 0
    while position < len(data):
        position += rng.choice((1, 2, 3, 7, 64, 1000, 4096, 65536))
        cuts.add(min(position, len(data)))
    ordered = sorted(cuts)
    return [data[a:b] for a, b in itertools.pairwise(ordered)]


@pytest.mark.parametrize("path", sweep(FILES))
def test_random_chunks_give_the_same_lines_as_a_whole_read(path: Path) -> None:
    data = path.read_bytes()
    whole = LineSplitter()
    expected = whole.feed(data)
    splitter = LineSplitter()
    lines: list[bytes] = []
    for chunk in _chunked(data, random.Random(path.name)):
        lines.extend(splitter.feed(chunk))
    assert lines == expected
    assert splitter.pending == whole.pending == 0
    conversation = Conversation(sidechain=_is_subagent(path))
    conversation.add_lines(lines)
    assert conversation.bad_lines == 0


@pytest.mark.parametrize("path", sweep(FILES))
def test_tailing_a_growing_file_equals_reading_it_whole(path: Path, tmp_path: Path) -> None:
    data = path.read_bytes()
    target = tmp_path / path.name
    target.write_bytes(b"")
    rng = random.Random(path.name)
    incremental = Conversation(sidechain=_is_subagent(path))
    position: TailPosition | None = None
    written = 0
    while written < len(data):
        size = rng.choice((1, 100, 5_000, 70_000, 400_000))
        with target.open("ab") as file:
            file.write(data[written : written + size])
        written += size
        read = read_appended(target, position, max_bytes=256 * 1024)
        assert not read.reset
        incremental.add_lines(read.lines)
        incremental.context()  # queried between appends, as the daemon does
        position = read.position
        while read.more:
            read = read_appended(target, position, max_bytes=256 * 1024)
            incremental.add_lines(read.lines)
            position = read.position
    assert position is not None and position.offset == len(data)
    whole = _conversation(path)
    assert incremental.active_chain() == whole.active_chain()
    assert incremental.context() == whole.context()
    assert incremental.api_messages() == whole.api_messages()
    assert incremental.boundaries == whole.boundaries


def with_dangling_progress(lines: list[bytes], every: int) -> list[bytes]:
    """``lines`` with a hook-progress entry whose parent is in no file after every ``every``-th
    conversation line (anthropics/claude-code#24304), and the next entry parented on it, as
    Claude Code does."""
    out: list[bytes] = []
    pending: str | None = None
    for i, raw in enumerate(lines):
        entry = json.loads(raw)
        if pending is not None and entry.get("uuid") and "parentUuid" in entry:
            entry["parentUuid"] = pending
            raw = json.dumps(entry).encode()
            pending = None
        out.append(raw)
        if i % every == every - 1 and entry.get("uuid") and not entry.get("isSidechain"):
            pending = f"dangling-progress-{i}"
            progress = {
                "type": "progress",
                "uuid": pending,
                "parentUuid": f"never-written-{i}",
                "data": {"type": "hook_progress", "hookEvent": "PostToolUse"},
            }
            out.append(json.dumps(progress).encode())
    return out


@pytest.mark.parametrize("path", sweep(main_transcripts()))
def test_dangling_parents_mid_file_change_nothing_that_matters(path: Path) -> None:
    """Message count and context within 1 % of the same transcript without them (issue 9)."""
    lines = path.read_bytes().splitlines()
    clean = Conversation()
    clean.add_lines(lines)
    dangling = Conversation()
    dangling.add_lines(with_dangling_progress(lines, every=3))
    assert dangling.relinked > 0
    assert abs(dangling.message_count - clean.message_count) <= 0.01 * clean.message_count
    ours, theirs = dangling.context().tokens, clean.context().tokens
    assert abs(ours - theirs) <= 0.01 * theirs


@pytest.mark.parametrize("path", sweep(FILES))
def test_repair_finds_nothing_to_fix(path: Path) -> None:
    """repair() is a check now, not a rescue: it returns the conversation's own messages."""
    lines = path.read_bytes().splitlines()
    conversation = Conversation(sidechain=_is_subagent(path))
    done = 0
    for end in prefix_ends(lines, PREFIXES_PER_FILE // 6, path.name + "repair"):
        conversation.add_lines(lines[done:end])
        done = end
        messages = messages_of(conversation)
        repaired = repair(messages)
        assert len(repaired) == len(messages), f"prefix of {end} lines"
        assert all(a is b for a, b in zip(repaired, messages, strict=True)), end
