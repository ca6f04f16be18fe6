"""Watching the projects root for transcripts that appear or grow (watchfiles, inotify).

The watcher holds no decisions: it turns file events into keys on the ingest queue.
"""

from __future__ import annotations

import logging
from pathlib import Path

import anyio
import watchfiles
from anyio.abc import TaskStatus

from memd.config import TranscriptsConfig
from memd.daemon.queues import CoalescingQueue

log = logging.getLogger(__name__)


def wants(change: watchfiles.Change, path: str) -> bool:
    """Only transcript files matter; deletions are handled by the periodic rescan."""
    return path.endswith(".jsonl") and change != watchfiles.Change.deleted


async def run_watcher(
    projects_root: Path,
    config: TranscriptsConfig,
    queue: CoalescingQueue[Path],
    *,
    stop: anyio.Event,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Mark every changed transcript on ``queue`` until ``stop`` is set or cancelled."""
    await anyio.Path(projects_root).mkdir(parents=True, exist_ok=True)
    watcher = watchfiles.awatch(
        projects_root,
        watch_filter=wants,
        step=config.watch_step_ms,
        debounce=config.watch_debounce_ms,
        stop_event=stop,
        recursive=True,
        yield_on_timeout=False,
    )
    task_status.started()
    async for changes in watcher:
        for _change, path in changes:
            queue.mark_nowait(Path(path))
    log.debug("watcher for %s stopped", projects_root)
