"""Watching the projects root for transcripts that appear or grow (watchfiles, inotify).

The watcher holds no decisions: it turns file events into keys on the ingest queue.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import anyio
import watchfiles
from anyio.abc import TaskStatus

from memd.config import TranscriptsConfig
from memd.daemon.queues import CoalescingQueue

log = logging.getLogger(__name__)


# How deep below a newly created directory transcripts can sit: a project folder holds
# ``<session>.jsonl`` and ``<session>/subagents/*.jsonl``.
NEW_DIR_DEPTH = 3


def wants(change: watchfiles.Change, path: str) -> bool:
    """Transcript files that appear, grow or go, and anything added (it may be a directory).

    A deletion is passed on: ingesting a vanished transcript forgets its session, so the
    periodic sweep for missing files can be rare (it stats every known transcript).
    """
    return path.endswith(".jsonl") or change == watchfiles.Change.added


def transcripts_below(directory: str, depth: int = NEW_DIR_DEPTH) -> list[Path]:
    """The ``*.jsonl`` names below a directory that just appeared, without following links.

    inotify watches a new directory only once it has been seen, so files created in it
    before that produce no event of their own: without this look, a transcript written
    right after its project folder was made would be missed until it changed again.
    """
    found: list[Path] = []
    pending = [(directory, depth)]
    while pending:
        folder, left = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if entry.name.endswith(".jsonl"):
                        found.append(Path(entry.path))
                    elif left > 1 and entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, left - 1))
        except OSError:  # not a directory (a plain file was added), gone again, no access
            continue
    return found


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
        for change, path in changes:
            if path.endswith(".jsonl"):
                queue.mark_nowait(Path(path))
            elif change == watchfiles.Change.added:
                for found in await anyio.to_thread.run_sync(transcripts_below, path):
                    queue.mark_nowait(found)
    log.debug("watcher for %s stopped", projects_root)
