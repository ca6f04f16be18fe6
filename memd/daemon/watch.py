"""Watching the projects root for transcripts that appear or grow (watchfiles, inotify).

The watcher holds no decisions: it turns file events into keys on the ingest queue.

It never stops while the daemon runs. When inotify cannot be used at all (out of watches or
instances: ``fs.inotify.max_user_watches``), it degrades to polling the tree every
``transcripts.poll_interval_ms``; when it runs out of watches later, the folders that appear
unwatched are scanned at that interval instead (:mod:`memd.daemon.watch_gaps`). Either way
:class:`WatcherStatus` (``memdctl status``) and the log say so with the fix, and when the
limit is raised the watcher starts again on inotify. Directories it may not read are
skipped, not fatal.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path

import anyio
import watchfiles
from anyio.abc import TaskStatus
from watchfiles._rust_notify import WatchfilesRustInternalError

from memd.config import TranscriptsConfig
from memd.daemon.queues import CoalescingQueue
from memd.daemon.watch_gaps import (
    FIX,
    RECHECK_S,
    Gaps,
    folder_inode,
    missing_watches,
    root_and_projects,
    watch_limit,
)

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
LIMIT_CHECK_S = 10.0  # while degraded: has the watch limit been raised?


@dataclass
class WatcherStatus:
    """How transcripts are being watched, for ``status``."""

    mode: str = "starting"  # "inotify"; "inotify+scan" with unwatched folders; "polling"
    reason: str | None = None  # why it is not plain inotify
    unwatched: int = 0  # folders inotify could not watch, scanned instead
    fix: str | None = None  # what the user can do about it

    def as_dict(self) -> dict[str, str | int | None]:
        return {
            "mode": self.mode,
            "reason": self.reason,
            "unwatched": self.unwatched,
            "fix": self.fix,
        }


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
    watcher = Watcher(projects_root, config, queue, status or WatcherStatus())
    task_status.started()
    async with anyio.create_task_group() as tg:
        tg.start_soon(watcher.run_gaps)
        tg.start_soon(watcher.forward_stop, stop)
        await watcher.run(stop)
        tg.cancel_scope.cancel()
    log.debug("watcher for %s stopped", projects_root)


class Watcher:
    """The watchfiles loop and, beside it, the scan of the folders it could not watch."""

    def __init__(
        self,
        root: Path,
        config: TranscriptsConfig,
        queue: CoalescingQueue[Path],
        status: WatcherStatus,
    ) -> None:
        self.root = root
        self.config = config
        self.queue = queue
        self.status = status
        self.gaps = Gaps()
        self.polling = False
        # watchfiles' ignore_permission_denied ignores every error of its first walk, "out of
        # watches" too: inotify starts strict, and turns lenient only after a directory it may
        # not read; then the whole tree is looked up among the watches once it runs.
        self.lenient = False
        self._check_tree = False
        self._follow_stop = anyio.Event()  # ends the current watchfiles loop
        self._suspects: dict[int, str] = {}  # new folders to look up among the watches
        self._wake = anyio.Event()
        self._warned = False
        self._limit: int | None = None  # the watch limit when inotify fell short

    async def forward_stop(self, stop: anyio.Event) -> None:
        await stop.wait()
        self._follow_stop.set()

    async def run(self, stop: anyio.Event) -> None:
        """Follow the tree until ``stop``; start again after a failure or a restart."""
        while True:
            self._follow_stop = anyio.Event()  # forward_stop sets the one current when stopping
            if stop.is_set():
                break
            self._show_mode()
            if self.lenient and not self.polling:
                self._check_tree = True  # errors were ignored: are all folders watched?
                self._wake.set()
            try:
                await self._follow()
            except PermissionError as exc:
                if not self.lenient:
                    log.warning(
                        "skipping what the watcher may not read under %s: %s", self.root, exc
                    )
                    self.lenient = True
                    continue
                await _fail(self.root, exc, stop)
            # A newer notify reports running out of watches while running as an error of the
            # watcher (watchfiles raises it on its next step): polling from then on.
            except (OSError, WatchfilesRustInternalError) as exc:
                if not self.polling:
                    await self._fall_back_to_polling(exc)
                    continue
                await _fail(self.root, exc, stop)

    def _show_mode(self) -> None:
        if self.polling:
            self.status.mode = "polling"
        elif self.gaps.unwatched:
            self.status.mode = "inotify+scan"
        else:
            self.status.mode, self.status.reason, self.status.fix = "inotify", None, None
        self.status.unwatched = len(self.gaps.unwatched)

    async def _fall_back_to_polling(self, exc: Exception) -> None:
        log.warning(
            "cannot watch %s with inotify (%s); polling it every %d ms instead. Fix: %s",
            self.root,
            exc,
            self.config.poll_interval_ms,
            FIX,
        )
        self.status.reason = f"inotify unavailable: {exc}"
        self.status.fix = FIX
        self.polling = self.lenient = True
        self._limit = await anyio.to_thread.run_sync(watch_limit)
        self.gaps.forget()  # polling covers them
        self._wake.set()  # the gap task watches the limit from now on

    async def _follow(self) -> None:
        failure: Exception | None = None  # raised as itself, not in a group: run() sorts them
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._stop_when_cancelled)
            try:
                await self._follow_changes()
            except Exception as exc:  # noqa: BLE001 - re-raised below
                failure = exc
            tg.cancel_scope.cancel()
        if failure is not None:
            raise failure

    async def _stop_when_cancelled(self) -> None:
        """Set the loop's stop event the moment the follow is cancelled or done.

        The watchfiles thread waits for changes with no timeout (``rust_timeout=0``): with
        its default, 5 s, it came back to the event loop every 5 s for nothing, and those
        returns were every system call the idle loop made (strace). The thread checks the
        stop event every ``step``; the task awaiting it cannot be cancelled while it runs,
        so this sibling sets the event when the follow is cancelled."""
        try:
            await anyio.sleep_forever()
        finally:
            self._follow_stop.set()

    async def _follow_changes(self) -> None:
        watcher = watchfiles.awatch(
            self.root,
            watch_filter=wants,
            step=self.config.watch_step_ms,
            debounce=self.config.watch_debounce_ms,
            stop_event=self._follow_stop,
            recursive=True,
            rust_timeout=0,
            yield_on_timeout=False,
            force_polling=self.polling,
            poll_delay_ms=self.config.poll_interval_ms,
            ignore_permission_denied=self.lenient,
        )
        async for changes in watcher:
            for change, path in changes:
                if path.endswith(".jsonl"):
                    self.queue.mark_nowait(Path(path))
                elif change == watchfiles.Change.added:
                    await self._look_inside(path)

    async def _look_inside(self, path: str) -> None:
        """A folder appeared: its transcripts are marked (files made before its watch send
        no event); a project folder goes to the gap task to be looked up among the watches."""
        for found in await anyio.to_thread.run_sync(transcripts_below, path):
            self.queue.mark_nowait(found)
        if self.polling or Path(path).parent != self.root:
            return
        ino = await anyio.to_thread.run_sync(folder_inode, path)
        if ino is not None:
            self._suspects[ino] = path
            self._wake.set()

    # -- the folders inotify could not watch ---------------------------------------------------

    async def run_gaps(self) -> None:
        """Look new folders up among the watches; scan those missing every poll interval;
        while degraded, start the watcher again once the limit is raised. Idle otherwise."""
        checked = anyio.current_time()
        while True:
            with anyio.move_on_after(self._next_wake()):
                await self._wake.wait()
            self._wake = anyio.Event()
            if self._check_tree:
                self._check_tree = False
                tree = await anyio.to_thread.run_sync(root_and_projects, str(self.root))
                self._suspects.update(tree)
            if self._suspects and not self.polling:
                await self._verify()
            if self.gaps.unwatched:
                await self._scan()
            degraded = self.gaps.unwatched or self.polling
            if degraded and anyio.current_time() - checked > LIMIT_CHECK_S:
                checked = anyio.current_time()
                await self._restart_if_limit_raised()

    def _next_wake(self) -> float:
        """Every poll interval while folders are scanned; while polling, often enough to
        see the limit raised; otherwise only when woken."""
        if self.gaps.unwatched:
            return self.config.poll_interval_ms / 1000
        return LIMIT_CHECK_S if self.polling else math.inf

    async def _verify(self) -> None:
        suspects, self._suspects = self._suspects, {}
        missing = await anyio.to_thread.run_sync(missing_watches, set(suspects))
        if missing:  # notify may not have added them yet: look again a moment later
            await anyio.sleep(RECHECK_S)
            missing = await anyio.to_thread.run_sync(missing_watches, missing)
        if not missing or self.polling:
            return
        folders = {suspects[ino]: ino for ino in missing}
        if str(self.root) in folders:  # no project folder that appears would be seen
            await self._fall_back_to_polling(OSError("the projects root itself is not watched"))
            self._follow_stop.set()
            return
        self.gaps.unwatched.update(folders)  # one that is gone goes at the next scan
        await self._found_unwatched(sorted(folders))

    async def _found_unwatched(self, folders: list[str]) -> None:
        if self._limit is None:
            self._limit = await anyio.to_thread.run_sync(watch_limit)
        limit = f"fs.inotify.max_user_watches is {self._limit}" if self._limit else "no limit read"
        self.status.reason = f"out of inotify watches ({limit})"
        self.status.fix = FIX
        if self.lenient:  # watchfiles stops adding watches at the first folder it may not read
            self.status.reason += " or past a folder memd may not read"
            self.status.fix += f"; let memd's user read every folder under {self.root}"
        self._show_mode()
        if self._warned:
            log.debug("not watched by inotify, scanned instead: %s", ", ".join(folders))
            return
        self._warned = True
        log.warning(
            "%s: %d project folder(s) under %s are not watched (%s); memd scans such folders"
            " every %d ms instead. Fix: %s",
            self.status.reason,
            len(folders),
            self.root,
            ", ".join(folders[:3]) + (" ..." if len(folders) > 3 else ""),
            self.config.poll_interval_ms,
            self.status.fix,
        )

    async def _scan(self) -> None:
        for path in await anyio.to_thread.run_sync(self.gaps.scan):
            self.queue.mark_nowait(path)
        self._show_mode()

    async def _restart_if_limit_raised(self) -> None:
        limit = await anyio.to_thread.run_sync(watch_limit)
        if limit is None or self._limit is None or limit <= self._limit:
            return
        log.warning(
            "the inotify watch limit was raised (%d -> %d): watching %s with inotify again",
            self._limit,
            limit,
            self.root,
        )
        self._limit = None
        self.polling = self.lenient = False
        self.status.reason = self.status.fix = None
        for folder, ino in self.gaps.forget().items():  # looked up again once it runs
            self._suspects[ino] = folder
        self._wake.set()
        self._follow_stop.set()


async def _fail(projects_root: Path, exc: Exception, stop: anyio.Event) -> None:
    log.error("watching %s failed (%s); trying again in %.0fs", projects_root, exc, RESTART_DELAY_S)
    with anyio.move_on_after(RESTART_DELAY_S):
        await stop.wait()
    await anyio.Path(projects_root).mkdir(parents=True, exist_ok=True)
