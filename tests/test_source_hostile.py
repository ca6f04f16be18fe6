"""Hostile Codex rollouts and Gemini chats through the real session registry: bytes that are
not UTF-8, numbers up to 2^70, huge lines, deep nesting, values of every wrong type, state
replacement storms and rewinds past the start, files rewritten in place. Nothing raises,
every figure stays one memd can save and show, every reply is encodable, and the lines that can be
read are (the isolation boundary is one line)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

import anyio
import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memd.config import MAX_NUMBER, TranscriptsConfig
from memd.daemon.sessions import SessionRegistry
from memd.sources.base import Source
from memd.sources.claude_code import ClaudeCode
from memd.sources.codex import Codex
from memd.sources.gemini import Gemini
from memd.transcript.conversation import Conversation
from tests.conftest import AGENTS, CORPUS

CODEX = (
    AGENTS
    / "codex-0.169.0"
    / "rollout-2026-11-26T06-42-43-01a21697-9962-7c23-a4c4-7f3c3e5b70ce.jsonl"
)
NAME = "rollout-2026-11-26T06-42-43-01a21697-9962-7c23-a4c4-7f3c3e5b70ce.jsonl"
MAX_LINE = 256 * 1024  # above every line the CLI wrote (session_meta: ~15 KiB)
GOOD_LINES = [line for line in CODEX.read_bytes().split(b"\n") if line]

HOSTILE_VALUES: list[Any] = [
    2**70,
    -1,
    1.5e308,
    None,
    "",
    "\ud800",
    [],
    {},
    [[[[]]]],
    True,
    "x" * 50,
]


def _spoil(line: bytes, data: st.DataObject) -> bytes:
    """``line`` with one value in it replaced by a hostile one, or its bytes damaged."""
    how = data.draw(st.sampled_from(["value", "bytes", "huge", "deep", "cut"]))
    if how == "bytes":
        at = data.draw(st.integers(0, len(line)))
        return line[:at] + b"\xff\xfe" + line[at:]
    if how == "huge":
        return line[:-1] + b',"pad":"' + b"x" * (MAX_LINE * 2) + b'"}'
    if how == "deep":
        return b'{"type":"response_item","payload":' + b"[" * 5000 + b"]" * 5000 + b"}"
    if how == "cut":
        return line[: data.draw(st.integers(0, len(line)))]
    try:
        value = json.loads(line)
    except (ValueError, RecursionError):
        return line + b"\xff"  # spoiled before
    node = value
    for _ in range(3):
        if not isinstance(node, dict) or not node:
            break
        key = data.draw(st.sampled_from(sorted(node)))
        if data.draw(st.booleans()) or not isinstance(node[key], dict | list):
            node[key] = data.draw(st.sampled_from(HOSTILE_VALUES))
            break
        node = node[key] if isinstance(node[key], dict) else node
    return json.dumps(value).encode()


async def _settle(registry: SessionRegistry, path: Path) -> None:
    with anyio.fail_after(60):
        while await registry.ingest_turn(path, seconds=0.0):
            pass


async def _check(registry: SessionRegistry, path: Path) -> None:
    state = registry.get_by_path(path)
    assert state is not None
    figures = [state.context_tokens, state.context_from_usage, state.context_estimated_tail]
    assert all(0 <= f < 2**53 for f in figures)  # sums of bounded counts: saved and shown
    assert state.unreadable is None
    if not state.ignored:
        messages = await registry.read(state, Conversation.api_messages)
        msgpack.packb(messages)  # every reply is encodable
    msgpack.packb(registry.statistics().__dict__)


async def _rewritten_in_place(registry: SessionRegistry, path: Path, lines: list[bytes]) -> None:
    """The file rewritten in place (same inode, other bytes: ``lines``, cut to its size)
    leaves the registry settled and consistent."""
    fd = os.open(path, os.O_WRONLY)
    os.pwrite(fd, b"\n".join(lines)[: os.fstat(fd).st_size] + b"\n", 0)
    os.close(fd)
    await _settle(registry, path)
    await _check(registry, path)


def _registry(source: Source) -> SessionRegistry:
    config = TranscriptsConfig(max_line_bytes=MAX_LINE)
    return SessionRegistry([source], config, {}, started_at=0.0)


@given(data=st.data())
def test_hostile_codex_rollouts_never_stop_the_registry(data: st.DataObject) -> None:
    anyio.run(_hostile_codex, data)


async def _hostile_codex(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = Codex(Path(tmp))
        day = source.root / "2026" / "11" / "26"
        day.mkdir(parents=True)
        path = day / NAME
        registry = _registry(source)
        lines = list(GOOD_LINES)
        for _ in range(data.draw(st.integers(1, 6))):
            at = data.draw(st.integers(0, len(lines) - 1))
            lines[at] = _spoil(lines[at], data)
        cut = data.draw(st.integers(0, len(lines)))
        path.write_bytes(b"\n".join(lines[:cut]) + b"\n")
        await _settle(registry, path)
        await _check(registry, path)
        with path.open("ab") as f:  # the rest appended, the partial line finished
            f.write(b"\n".join(lines[cut:]) + b"\n")
        await _settle(registry, path)
        await _check(registry, path)
        state = registry.get_by_path(path)
        assert state is not None and state.lines > 0
        if lines[0] == GOOD_LINES[0]:  # the session_meta line is intact: the session is followed
            assert not state.ignored and state.message_count > 0
        if data.draw(st.booleans()):
            await _rewritten_in_place(registry, path, GOOD_LINES[:5])


@pytest.mark.anyio
async def test_a_spoiled_token_count_is_a_bad_line_not_a_figure(tmp_path: Path) -> None:
    source = Codex(tmp_path)
    day = source.root / "2026" / "11" / "26"
    day.mkdir(parents=True)
    path = day / NAME
    lines = [json.loads(line) for line in GOOD_LINES]
    for line in lines:
        if line["type"] == "event_msg" and line["payload"]["type"] == "token_count":
            line["payload"]["info"]["last_token_usage"]["input_tokens"] = 2**70
    path.write_bytes(b"".join(json.dumps(line).encode() + b"\n" for line in lines))
    registry = _registry(source)
    await _settle(registry, path)
    state = registry.get_by_path(path)
    assert state is not None
    counts = sum(
        1 for x in lines if x["type"] == "event_msg" and x["payload"]["type"] == "token_count"
    )
    assert state.bad_lines == counts
    assert state.context_from_usage == 0 and state.message_count > 0


GEMINI = AGENTS / "gemini-cli-0.61.0" / "session-2026-11-26T06-48-a795b61b.jsonl"
GEMINI_LINES = [line for line in GEMINI.read_bytes().split(b"\n") if line]
GEMINI_IDS = [json.loads(x)["id"] for x in GEMINI_LINES if b'"type"' in x and b'"id"' in x[:8]]


def _gemini_line(data: st.DataObject) -> bytes:
    """A line of the chat, a state replacement or rewind aimed anywhere, or an upsert storm."""
    kind = data.draw(st.sampled_from(["sample", "upsert", "set", "rewind", "spoiled", "header"]))
    ident = data.draw(st.sampled_from([*GEMINI_IDS, "nowhere", ""]))
    if kind == "upsert":
        tokens = {"input": data.draw(st.sampled_from([0, 10, MAX_NUMBER, 2**70])), "output": 1}
        kind_of = data.draw(st.sampled_from(["user", "gemini", "other"]))
        return json.dumps({"id": ident, "type": kind_of, "content": "x", "tokens": tokens}).encode()
    if kind == "set":
        picks = data.draw(st.lists(st.sampled_from(GEMINI_IDS), max_size=6))
        messages: list[Any] = [{"id": i, "type": "user", "content": [{"text": i}]} for i in picks]
        messages.append(data.draw(st.sampled_from(HOSTILE_VALUES)))
        return json.dumps({"$set": {"messages": messages}}).encode()
    if kind == "rewind":
        return json.dumps({"$rewindTo": ident}).encode()
    if kind == "header":
        return GEMINI_LINES[0]
    line = data.draw(st.sampled_from(GEMINI_LINES))
    return _spoil(line, data) if kind == "spoiled" else line


@given(data=st.data())
def test_hostile_gemini_chats_never_stop_the_registry(data: st.DataObject) -> None:
    anyio.run(_hostile_gemini, data)


async def _hostile_gemini(data: st.DataObject) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        source = Gemini(Path(tmp))
        chats = source.root / "proj" / "chats"
        chats.mkdir(parents=True)
        (source.root / "proj" / ".project_root").write_text(tmp)
        path = chats / GEMINI.name
        registry = _registry(source)
        lines = [_gemini_line(data) for _ in range(data.draw(st.integers(1, 40)))]
        if data.draw(st.booleans()):  # a storm: the same message upserted over and over
            storm = json.dumps({"id": "s", "type": "gemini", "content": "y"}).encode()
            lines += [storm] * 2000
        half = len(lines) // 2
        path.write_bytes(b"\n".join(GEMINI_LINES + lines[:half]) + b"\n")
        await _settle(registry, path)
        await _check(registry, path)
        with path.open("ab") as f:
            f.write(b"\n".join(lines[half:]) + b"\n")
        await _settle(registry, path)
        await _check(registry, path)
        reader = registry._readers[str(path)]
        conv = reader.conversation
        assert conv.entry_count <= 2 * len(GEMINI_LINES + lines) + 200  # bounded by the lines
        if data.draw(st.booleans()):
            await _rewritten_in_place(registry, path, GEMINI_LINES[:3])


@pytest.mark.anyio
async def test_an_upsert_storm_keeps_one_message_and_bounded_entries(tmp_path: Path) -> None:
    source = Gemini(tmp_path)
    chats = source.root / "proj" / "chats"
    chats.mkdir(parents=True)
    (source.root / "proj" / ".project_root").write_text(str(tmp_path))
    path = chats / GEMINI.name
    storm = [
        json.dumps({"id": "s", "type": "gemini", "content": f"v{i}", "tokens": {"input": i}})
        for i in range(20_000)
    ]
    prompt = json.dumps({"id": "p", "type": "user", "content": [{"text": "go"}]})
    path.write_text("\n".join([GEMINI_LINES[0].decode(), prompt, *storm]) + "\n")
    registry = _registry(source)
    await _settle(registry, path)
    state = registry.get_by_path(path)
    assert state is not None and state.context_from_usage == 19_999  # the last one won
    conv = registry._readers[str(path)].conversation
    assert conv.entry_count < 200  # rebuilt as replaced entries outgrew the history
    messages = await registry.read(state, Conversation.api_messages)
    assert messages == [
        {"role": "user", "content": [{"type": "text", "text": "go"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "v19999"}]},
    ]


CLAUDE = next((CORPUS / "claude-code-2.1.331").glob("*.jsonl"))
PAST = "__past_a_floats_range__"


def _usage_of(agent: str, value: dict[str, Any]) -> dict[str, Any] | None:
    """The token counts a line of ``agent`` carries (the dict memd reads them from)."""
    if agent == "claude":
        message = value.get("message")
        return message.get("usage") if isinstance(message, dict) else None
    if agent == "codex":
        payload = value.get("payload") or {}
        info = payload.get("info") if payload.get("type") == "token_count" else None
        return info.get("last_token_usage") if isinstance(info, dict) else None
    tokens = value.get("tokens")
    return tokens if isinstance(tokens, dict) else None


def _agent_session(agent: str, root: Path) -> tuple[Source, Path, list[bytes], str]:
    """A real session of ``agent`` placed under ``root``: its source, path, lines and the
    name of the input-token count in its usage."""
    if agent == "claude":
        source: Source = ClaudeCode(root)
        path = root / "-proj" / CLAUDE.name
        lines = [x for x in CLAUDE.read_bytes().split(b"\n") if x]
        field = "input_tokens"
    elif agent == "codex":
        source = Codex(root)
        path = source.root / "2026" / "11" / "26" / NAME
        lines, field = GOOD_LINES, "input_tokens"
    else:
        source = Gemini(root)
        path = source.root / "proj" / "chats" / GEMINI.name
        (source.root / "proj").mkdir(parents=True)
        (source.root / "proj" / ".project_root").write_text(str(root))
        lines, field = GEMINI_LINES, "input"
    path.parent.mkdir(parents=True, exist_ok=True)
    return source, path, lines, field


@pytest.mark.anyio
@pytest.mark.parametrize("literal", [b"1e400", b"1e999", b"-1e400", b"-2E+999"])
@pytest.mark.parametrize("agent", ["claude", "codex", "gemini"])
async def test_a_token_count_past_a_floats_range_is_a_bad_line_in_every_agent(
    tmp_path: Path, agent: str, literal: bytes
) -> None:
    """One rule for every agent's reader (``memd.transcript.agent_bytes``): a number past a
    float's range in a figure memd reads is no figure; its line is bad, as if it were not
    there (Claude Code's line was read as having no input tokens: its context became the
    rest of its usage)."""
    source, path, lines, field = _agent_session(agent, tmp_path / "spoiled")
    spoiled: list[bytes] = []
    kept: list[bytes] = []
    for line in lines:
        value = json.loads(line)
        usage = _usage_of(agent, value)
        if usage is None or field not in usage:
            spoiled.append(line)
            kept.append(line)
            continue
        usage[field] = PAST
        spoiled.append(json.dumps(value).encode().replace(b'"%s"' % PAST.encode(), literal))
    count = len(spoiled) - len(kept)
    assert count > 0
    path.write_bytes(b"\n".join(spoiled) + b"\n")
    registry = _registry(source)
    await _settle(registry, path)
    state = registry.get_by_path(path)
    assert state is not None and state.bad_lines == count
    reference_source, without, _, _ = _agent_session(agent, tmp_path / "without")
    without.write_bytes(b"\n".join(kept) + b"\n")
    reference = _registry(reference_source)
    await _settle(reference, without)
    expected = reference.get_by_path(without)
    assert expected is not None
    assert (state.context_tokens, state.context_from_usage) == (
        expected.context_tokens,
        expected.context_from_usage,
    )
