"""A deleted transcript is forgotten on the watcher's word, not by a per-minute sweep.

The real watcher (inotify) on a real tree, the real registry: the deletion
is marked on the ingest queue, and ingesting the vanished path drops the session, its
conversation and its figures from the totals. The hourly sweep still catches what no event
reported.
"""

from __future__ import annotations

import functools
from pathlib import Path

import anyio
import pytest

from memd.config import TranscriptsConfig
from memd.daemon.sessions import SessionRegistry
from memd.daemon.watch import WatchedRoot, run_watcher
from memd.queues import CoalescingQueue
from memd.sources.claude_code import ClaudeCode
from tests.conftest import CORPUS

pytestmark = pytest.mark.anyio

SOURCE = CORPUS / "spotter" / "short.jsonl"


def registry_with(root: Path, *names: str) -> tuple[SessionRegistry, list[Path]]:
    paths = []
    for name in names:
        path = root / "-work-project" / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(SOURCE.read_bytes())
        paths.append(path)
    return SessionRegistry([ClaudeCode(root)], TranscriptsConfig(), {}, started_at=0.0), paths


async def test_a_deleted_transcript_is_forgotten_when_the_watcher_reports_it(
    tmp_path: Path,
) -> None:
    registry, (gone, kept) = registry_with(tmp_path, "gone", "kept")
    for path in (gone, kept):
        await registry.ingest(path)
    assert registry.statistics().in_memory == 2
    queue: CoalescingQueue[Path] = CoalescingQueue()
    stop = anyio.Event()
    async with anyio.create_task_group() as tg:
        await tg.start(
            functools.partial(run_watcher, stop=stop),
            [WatchedRoot(tmp_path)],
            TranscriptsConfig(),
            queue,
        )
        gone.unlink()
        with anyio.fail_after(20):
            while (marked := await queue.get()) != gone:
                queue.done(marked)
        assert await registry.ingest(marked) is None
        stop.set()
        tg.cancel_scope.cancel()
    assert registry.get("gone") is None
    assert [s.session_id for s in registry.newest()] == ["kept"]
    stats = registry.statistics()
    assert (stats.sessions, stats.parsed, stats.in_memory) == (1, 1, 1)
    kept_state = registry.get("kept")
    assert kept_state is not None and stats.lines == kept_state.lines


async def test_the_sweep_forgets_what_no_event_reported(tmp_path: Path) -> None:
    registry, (gone, _) = registry_with(tmp_path, "gone", "kept")
    assert len(await registry.discover()) == 2
    gone.unlink()
    assert await registry.forget_missing() == 1
    assert [s.session_id for s in registry.newest()] == ["kept"]
    assert registry.find("g") == []
