"""The transcript pipeline against every real transcript in the shared corpus.

The expected figures are computed here a second time, plainly, from the raw JSON with the
stdlib ``json`` module, following FORMAT.md: walk ``parentUuid`` back from the newest
conversation entry, stop at a ``compact_boundary``, take back the other lines of each response
on the chain with the tool results that answer them, and so on.
"""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from memd.tokens import estimate_content
from memd.transcript.conversation import Conversation
from memd.transcript.tail import LineSplitter, TailPosition, read_appended
from tests.conftest import TRANSCRIPTS, all_transcripts, main_transcripts

CONVERSATION_TYPES = {"user", "assistant", "system", "progress", "attachment"}
FILES = all_transcripts()


def _id(path: Path) -> str:
    return str(path.relative_to(TRANSCRIPTS))


def _is_subagent(path: Path) -> bool:
    return "subagents" in path.parts


def _conversation(path: Path) -> Conversation:
    conversation = Conversation(sidechain=_is_subagent(path))
    read = read_appended(path)
    assert not read.more and read.skipped == 0
    conversation.add_lines(read.lines)
    return conversation


# ---------------------------------------------------------------------------------------------
# The independent computation


@dataclass
class Expected:
    chain: list[dict[str, Any]]
    message_count: int
    context_tokens: int
    stale: bool
    boundaries: list[str]
    sidechain_uuids: set[str]


def _is_boundary(entry: dict[str, Any]) -> bool:
    return bool(entry.get("type") == "system" and entry.get("subtype") == "compact_boundary")


def _is_real_assistant(entry: dict[str, Any]) -> bool:
    return bool(entry["type"] == "assistant" and entry["message"].get("model") != "<synthetic>")


def _blocks(entry: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    content = entry.get("message", {}).get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def expected_for(path: Path) -> Expected:
    keep_sidechain = _is_subagent(path)
    entries: list[dict[str, Any]] = []
    sidechain_uuids: set[str] = set()
    with path.open("rb") as file:
        for raw in file:
            entry = json.loads(raw)
            if entry.get("type") not in CONVERSATION_TYPES or not entry.get("uuid"):
                continue
            if entry.get("isSidechain") and not keep_sidechain:
                sidechain_uuids.add(entry["uuid"])
                continue
            entries.append(entry)
    chain = _expected_chain(entries)
    tokens, stale = _expected_context(chain)
    return Expected(
        chain=chain,
        message_count=_expected_message_count(chain),
        context_tokens=tokens,
        stale=stale,
        boundaries=[e["uuid"] for e in entries if _is_boundary(e)],
        sidechain_uuids=sidechain_uuids,
    )


def _expected_chain(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_uuid = {e["uuid"]: e for e in entries}
    position = {e["uuid"]: i for i, e in enumerate(entries)}
    walked: list[dict[str, Any]] = []
    current = entries[-1]["uuid"] if entries else None
    while current in by_uuid:
        entry = by_uuid[current]
        walked.append(entry)
        if _is_boundary(entry):
            break
        current = entry.get("parentUuid")
    on_chain = {e["uuid"] for e in walked}
    response_ids = {e["message"]["id"] for e in walked if e["type"] == "assistant"}
    response_lines = [
        e for e in entries if e["type"] == "assistant" and e["message"]["id"] in response_ids
    ]
    line_uuids = {e["uuid"] for e in response_lines}
    tool_ids = {b["id"] for e in response_lines for b in _blocks(e, "tool_use")}
    taken_back = [e for e in response_lines if e["uuid"] not in on_chain]
    taken_back += [
        e
        for e in entries
        if e["type"] == "user"
        and e["uuid"] not in on_chain
        and e.get("parentUuid") in line_uuids
        and any(b.get("tool_use_id") in tool_ids for b in _blocks(e, "tool_result"))
    ]
    return sorted(walked + taken_back, key=lambda e: position[e["uuid"]])


def _expected_message_count(chain: list[dict[str, Any]]) -> int:
    roles: list[str] = []
    message_ids: list[str | None] = []
    only_results: list[bool] = []
    for entry in chain:
        if entry["type"] == "user":
            results = bool(_blocks(entry, "tool_result"))
            if roles and roles[-1] == "user":
                only_results[-1] = only_results[-1] and results
            else:
                roles.append("user")
                message_ids.append(None)
                only_results.append(results)
        elif _is_real_assistant(entry):
            message_id = entry["message"]["id"]
            back = len(roles) - 1
            while back >= 0 and roles[back] == "user" and only_results[back]:
                back -= 1
            if back >= 0 and roles[back] == "assistant" and message_ids[back] == message_id:
                continue
            roles.append("assistant")
            message_ids.append(message_id)
            only_results.append(False)
    return len(roles)


def _expected_context(chain: list[dict[str, Any]]) -> tuple[int, bool]:
    real = [e for e in chain if _is_real_assistant(e)]
    if not real:
        estimate = sum(
            estimate_content(e["message"]["content"]) for e in chain if e["type"] == "user"
        )
        return estimate, bool(chain) and _is_boundary(chain[0])
    last_id = real[-1]["message"]["id"]
    lines = [e for e in real if e["message"]["id"] == last_id]
    usage = lines[-1]["message"]["usage"]
    prompt = (
        usage["input_tokens"]
        + usage.get("cache_creation_input_tokens", 0)
        + usage.get("cache_read_input_tokens", 0)
    )
    output = max(e["message"]["usage"]["output_tokens"] for e in lines)
    after = chain[chain.index(lines[0]) + 1 :]
    tail = sum(
        estimate_content(e["message"]["content"])
        for e in after
        if e["type"] == "user" or (_is_real_assistant(e) and e["message"]["id"] != last_id)
    )
    return prompt + output + tail, False


# ---------------------------------------------------------------------------------------------
# Tests


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_conversation_matches_independent_computation(path: Path) -> None:
    expected = expected_for(path)
    conversation = _conversation(path)
    assert [e.uuid for e in conversation.active_chain()] == [e["uuid"] for e in expected.chain]
    assert conversation.message_count == expected.message_count
    assert len(conversation.api_messages()) == expected.message_count
    figure = conversation.context()
    assert figure.tokens == expected.context_tokens
    assert figure.stale == expected.stale
    assert [b.uuid for b in conversation.boundaries] == expected.boundaries
    assert conversation.bad_lines == 0


@pytest.mark.parametrize("path", main_transcripts(), ids=_id)
def test_sidechain_entries_never_enter_the_main_conversation(path: Path) -> None:
    expected = expected_for(path)
    conversation = _conversation(path)
    in_chain = {e.uuid for e in conversation.active_chain()}
    in_messages = {uuid for m in conversation.messages() for uuid in m.uuids}
    assert not (in_chain | in_messages) & expected.sidechain_uuids


@pytest.mark.parametrize("path", FILES, ids=_id)
def test_messages_form_a_valid_api_history(path: Path) -> None:
    """Roles alternate and every tool call is answered in the very next message."""
    conversation = _conversation(path)
    messages = conversation.api_messages()
    pending = conversation.pending_tool_use_ids()
    assert messages and messages[0]["role"] == "user"
    for before, after in itertools.pairwise(messages):
        assert before["role"] != after["role"]
        calls = {b["id"] for b in before["content"] if b["type"] == "tool_use"}
        results = [b["tool_use_id"] for b in after["content"] if b["type"] == "tool_result"]
        assert set(results) == calls
        kinds = [b["type"] for b in after["content"]]
        assert kinds == sorted(kinds, key=lambda kind: kind != "tool_result")
    last_calls = {b["id"] for b in messages[-1]["content"] if b["type"] == "tool_use"}
    assert pending == last_calls


def test_every_compact_boundary_is_found_with_the_context_before_it() -> None:
    """Compare the context just before each boundary with Claude Code's own preTokens."""
    rows: list[tuple[str, int, int]] = []
    for path in FILES:
        for boundary in _conversation(path).boundaries:
            assert boundary.trigger in {"auto", "manual"}
            if boundary.pre_tokens:
                rows.append((_id(path), boundary.context_before.tokens, boundary.pre_tokens))
    assert len(rows) == sum(len(expected_for(p).boundaries) for p in FILES) >= 5
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


@pytest.mark.parametrize("path", FILES, ids=_id)
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


@pytest.mark.parametrize("path", FILES, ids=_id)
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
