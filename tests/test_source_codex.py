"""Codex CLI's rollouts (memd/sources/codex/) against the independent oracle, at every line
of every sample the real CLI wrote (tests/corpus/agents/, and the shared data when present)."""

from __future__ import annotations

from pathlib import Path

import pytest

from memd.sources.codex import Codex
from memd.sources.codex.reader import CodexReader
from memd.transcript.model import Block
from memd.transcript.tail import TailPosition, read_appended
from tests.agents_oracle import read_codex
from tests.conftest import AGENTS

# Every rollout the shared data holds (tests/corpus/agents/ is a copy of all of them).
SAMPLES = sorted((AGENTS / "codex-0.169.0").rglob("*.jsonl"))


def _flat(messages: list[dict[str, object]]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for message in messages:
        role = str(message["role"])
        content = message["content"]
        assert isinstance(content, list)
        for block in content:
            assert isinstance(block, dict)
            out.append((role, block["type"], _key(block)))
    return out


def _key(block: Block) -> str:
    if block["type"] == "tool_use":
        return str(block["id"])
    if block["type"] == "tool_result":
        return str(block["tool_use_id"])
    return str(block["text"])


def _reader(path: Path) -> tuple[CodexReader, list[tuple[int, bytes]]]:
    read = read_appended(path, TailPosition(0, 0, 0), max_bytes=1 << 30)
    assert not read.more
    lines = list(zip(read.offsets, read.lines, strict=True))
    return CodexReader(str(path), read.position.inode), lines


@pytest.mark.parametrize("path", SAMPLES, ids=lambda p: p.name[-24:])
def test_every_prefix_of_every_rollout_reads_as_the_oracle_does(path: Path) -> None:
    reader, lines = _reader(path)
    for n, (at, line) in enumerate(lines, 1):
        assert reader.feed([(at, line)]) == 0  # the CLI writes no bad lines
        want = read_codex([raw for _, raw in lines[:n]])
        conv = reader.conversation
        assert (reader.ignored is not None) == want.ignored
        assert reader.cwd == want.cwd
        if want.ignored:
            continue
        assert conv.turn_ends == want.turn_ends
        assert len(conv.boundaries) == want.compactions
        figure = conv.context()
        assert figure.from_usage == want.from_usage, n
        if not conv.pending_tool_use_ids():  # a call waiting for its output is held back
            assert _flat(conv.api_messages()) == want.blocks, n


def test_the_samples_cover_resume_compaction_and_a_sub_agent() -> None:
    readings = [read_codex([raw for _, raw in _reader(p)[1]]) for p in SAMPLES]
    assert sum(r.compactions for r in readings) == 2
    assert sum(r.ignored for r in readings) == 1  # the sub-agent's own thread
    assert max(r.turn_ends for r in readings) == 3  # three runs in one file


def test_rollouts_are_found_where_codex_writes_them(tmp_path: Path) -> None:
    source = Codex(tmp_path / ".codex")
    day = source.root / "2026" / "11" / "26"
    day.mkdir(parents=True)
    name = SAMPLES[-1].name
    (day / name).write_bytes(SAMPLES[-1].read_bytes())
    (day / "notes.jsonl").write_bytes(b"{}\n")
    (source.root / "2026" / "stray.jsonl").write_bytes(b"{}\n")
    key = source.session_key(day / name)
    assert key is not None and key.agent == "codex"
    assert name.endswith(f"{key.session_id}.jsonl")
    assert source.session_key(day / "notes.jsonl") is None
    assert source.session_key(source.root / "2026" / "stray.jsonl") is None
    assert sorted(p for p, _ in source.walk()) == sorted(day.glob("*.jsonl"))
    assert source.locate(key.session_id) == day / name
    assert source.locate("../x") is None


def test_a_session_id_names_only_the_rollout_of_that_thread(tmp_path: Path) -> None:
    """A hook's session id finds the rollout whose thread id it is, never another whose name
    merely ends with it (a short or partial id from a peer must not adopt someone's session)."""
    source = Codex(tmp_path / ".codex")
    day = source.root / "2026" / "11" / "26"
    day.mkdir(parents=True)
    thread = "019a0000-1111-2222-3333-444455556666"
    (day / f"rollout-2026-11-26T10-00-00-{thread}.jsonl").write_bytes(b"{}\n")
    assert source.locate(thread) is not None
    for partial in ("6", "6666", "444455556666", "3333-444455556666", "00-" + thread):
        assert source.locate(partial) is None, partial


def test_codex_s_own_memories_are_read_from_its_config(tmp_path: Path) -> None:
    source = Codex(tmp_path)
    assert source.own_memory("/") is None
    (tmp_path / "config.toml").write_text("[features]\nmemories = true\n")
    assert "memories" in (source.own_memory("/") or "")
    (tmp_path / "config.toml").write_text("[features\nbroken")
    assert source.own_memory("/") is None  # an unreadable config says nothing


def test_a_source_turned_off_forgets_its_saved_sessions(tmp_path: Path) -> None:
    from memd.config import TranscriptsConfig
    from memd.daemon.sessions import SessionRegistry
    from memd.sources.claude_code import ClaudeCode
    from memd.state import SessionState

    saved = {
        "/c.jsonl": SessionState("c", "-p", "/c.jsonl", agent="codex"),
        "/a.jsonl": SessionState("a", "-p", "/a.jsonl"),
    }
    registry = SessionRegistry([ClaudeCode(tmp_path)], TranscriptsConfig(), saved)
    assert [s.session_id for s in registry.states()] == ["a"]
    both = SessionRegistry([ClaudeCode(tmp_path), Codex(tmp_path)], TranscriptsConfig(), saved)
    assert sorted(s.session_id for s in both.states()) == ["a", "c"]


@pytest.mark.anyio
async def test_a_cd_mid_session_moves_the_cwd_not_the_project(tmp_path: Path) -> None:
    import json

    from memd.config import TranscriptsConfig
    from memd.daemon.sessions import SessionRegistry
    from memd.memory.paths import project_slug

    source = Codex(tmp_path)
    day = source.root / "2026" / "11" / "26"
    day.mkdir(parents=True)
    path = day / SAMPLES[-1].name.replace("b5c2", "b5c3")  # a main thread of its own
    meta = {"type": "session_meta", "payload": {"id": "x", "cwd": "/w/a", "source": "exec"}}
    moved = {"type": "turn_context", "payload": {"cwd": "/w/b"}}
    registry = SessionRegistry([source], TranscriptsConfig(), {}, started_at=0.0)
    path.write_text(json.dumps(meta) + "\n")
    first = await registry.ingest(path)
    assert first is not None and first.project == project_slug("/w/a")
    with path.open("a") as f:
        f.write(json.dumps(moved) + "\n")
    after = await registry.ingest(path)
    assert after is not None and after.cwd == "/w/b"
    assert after.project == project_slug("/w/a")  # its notes stay where they were
