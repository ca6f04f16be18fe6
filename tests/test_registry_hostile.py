"""The registry with paths that are not readable transcripts (R-T7): recorded with the reason,
retried only when they change, and every per-path map pruned with the session."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from memd.config import TranscriptsConfig
from memd.daemon.sessions import SessionRegistry
from memd.sources.claude_code import ClaudeCode
from tests.conftest import CORPUS

pytestmark = pytest.mark.anyio

SOURCE = CORPUS / "spotter" / "short.jsonl"


async def test_an_unreadable_path_is_retried_only_when_it_changes(tmp_path: Path) -> None:
    path = tmp_path / "-work-project" / "s.jsonl"
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    registry = SessionRegistry([ClaudeCode(tmp_path)], TranscriptsConfig(), {}, started_at=0.0)
    with anyio.fail_after(30):
        first = await registry.ingest(path)
        assert first is not None and first.unreadable is not None
        assert first.unreadable["reason"] == "a FIFO, not a regular file"
        assert registry.unreadable() == (1, [first])
        assert await registry.ingest(path) is first  # unchanged: not tried again
        path.unlink()
        path.write_bytes(SOURCE.read_bytes())
        fixed = await registry.ingest(path)
        assert fixed is not None and fixed.unreadable is None and fixed.message_count > 0
        assert registry.unreadable() == (0, [])


async def test_a_forgotten_session_leaves_nothing_behind(tmp_path: Path) -> None:
    paths = []
    for name in ("a", "b"):
        path = tmp_path / "-work-project" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(SOURCE.read_bytes())
        paths.append(path)
    os.mkfifo(tmp_path / "-work-project" / "c.jsonl")
    paths.append(tmp_path / "-work-project" / "c.jsonl")
    registry = SessionRegistry([ClaudeCode(tmp_path)], TranscriptsConfig(), {}, started_at=0.0)
    with anyio.fail_after(30):
        for path in paths:
            await registry.ingest(path)
        for path in paths:
            path.unlink()
            assert await registry.ingest(path) is None
    assert registry.statistics().sessions == 0
    per_path = (registry._locks, registry._last_used, registry._readers, registry._unreadable)
    assert [len(m) for m in per_path] == [0, 0, 0, 0]


async def test_an_ingest_turn_is_bounded_and_the_next_turns_finish_the_file(
    tmp_path: Path,
) -> None:
    """The queue's worker reads a turn at a time: a file bigger than a turn says there is
    more, is published as far as it was read, and later turns read the rest exactly once."""
    path = tmp_path / "-work-project" / "big.jsonl"
    path.parent.mkdir(parents=True)
    lines = [
        b'{"type": "user", "uuid": "u%d", "message": {"content": "%s"}}\n' % (i, b"w" * 900)
        for i in range(4_000)
    ]
    path.write_bytes(b"".join(lines))
    registry = SessionRegistry([ClaudeCode(tmp_path)], TranscriptsConfig(), {}, started_at=0.0)
    turns = 0
    with anyio.fail_after(60):
        while await registry.ingest_turn(path, seconds=0.0):  # one bounded read per turn
            turns += 1
            state = registry.get_by_path(path)
            assert state is not None and 0 < state.offset < path.stat().st_size
    state = registry.get_by_path(path)
    assert turns > 5
    assert state is not None and state.offset == path.stat().st_size
    assert (state.lines, state.bad_lines) == (4_000, 0)
