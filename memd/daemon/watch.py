"""Watching the projects root for transcripts that appear or grow (watchfiles, inotify).

The watcher holds no decisions: it turns file events into keys on the ingest queue.

It never stops while the daemon runs. When inotify cannot be used (out of watches or
instances: ``fs.inotify.max_user_watches``), it degrades to polling the tree every
``transcripts.poll_interval_ms`` and says so in :class:`WatcherStatus` (``memdctl status``);
directories it may not read are skipped, not fatal.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
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
    if path.endswith(".jsonl"):
        return True
    # Folders under the root (project slugs, session ids, subagents, memory) never have a dot
    # in their names; files do (notes, memories, memd's own temp files): no look inside those.
    return change == watchfiles.Change.added and "." not in os.path.basename(path)


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


RESTART_DELAY_S = 5.0  # after the polling watcher itself failed (e.g. the root vanished)


@dataclass
class WatcherStatus:
    """How transcripts are being watched, for ``status``."""

    mode: str = "starting"  # "inotify", or "polling" when inotify is unavailable
    reason: str | None = None  # why it is polling

    def as_dict(self) -> dict[str, str | None]:
        return {"mode": self.mode, "reason": self.reason}


async def run_watcher(
    projects_root: Path,
    config: TranscriptsConfig,
    queue: CoalescingQueue[Path],
    *,
    stop: anyio.Event,
    status: WatcherStatus | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Mark every changed transcript on ``queue`` until ``stop`` is set or cancelled."""
    await anyio.Path(projects_root).mkdir(parents=True, exist_ok=True)
    status = status if status is not None else WatcherStatus()
    task_status.started()
    polling = False
    # watchfiles' ignore_permission_denied also swallows "out of watches": inotify starts strict,
    # and turns lenient only after a directory it may not read, so a full table is still seen.
    lenient = False
    while not stop.is_set():
        status.mode = "polling" if polling else "inotify"
        try:
            await _follow(projects_root, config, queue, stop, polling=polling, lenient=lenient)
        except PermissionError as exc:
            if not lenient:
                log.warning(
                    "skipping what the watcher may not read under %s: %s", projects_root, exc
                )
                lenient = True
                continue
            await _fail(projects_root, exc, stop)
        except OSError as exc:
            if not polling:
                log.warning(
                    "cannot watch %s with inotify (%s); polling it every %d ms instead",
                    projects_root,
                    exc,
                    config.poll_interval_ms,
                )
                status.reason = f"inotify unavailable: {exc}"
                polling = lenient = True
                continue
            await _fail(projects_root, exc, stop)
    log.debug("watcher for %s stopped", projects_root)


async def _fail(projects_root: Path, exc: OSError, stop: anyio.Event) -> None:
    log.error("watching %s failed (%s); trying again in %.0fs", projects_root, exc, RESTART_DELAY_S)
    with anyio.move_on_after(RESTART_DELAY_S):
        await stop.wait()
    await anyio.Path(projects_root).mkdir(parents=True, exist_ok=True)


async def _follow(
    projects_root: Path,
    config: TranscriptsConfig,
    queue: CoalescingQueue[Path],
    stop: anyio.Event,
    *,
    polling: bool,
    lenient: bool,
) -> None:
    watcher = watchfiles.awatch(
        projects_root,
        watch_filter=wants,
        step=config.watch_step_ms,
        debounce=config.watch_debounce_ms,
        stop_event=stop,
        recursive=True,
        yield_on_timeout=False,
        force_polling=polling,
        poll_delay_ms=config.poll_interval_ms,
        ignore_permission_denied=lenient,
    )
    async for changes in watcher:
        for change, path in changes:
            if path.endswith(".jsonl"):
                queue.mark_nowait(Path(path))
            elif change == watchfiles.Change.added:
                for found in await anyio.to_thread.run_sync(transcripts_below, path):
                    queue.mark_nowait(found)
