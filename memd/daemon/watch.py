"""Watching the sources' roots for session files that appear or grow (inotify; watchfiles
elsewhere than Linux). One watcher per root (:class:`WatchedRoot`); which agent a root
belongs to is no concern of theirs: a root that is not made when missing (another agent's
folder, which memd never creates) is waited for, and watched once it exists.

The watcher holds no decisions: it turns file events into keys on the ingest queue.

On Linux it uses inotify itself (:mod:`memd.daemon.inotify`, :mod:`memd.daemon.watch_tree`):
watchfiles stopped for good at a name that is not UTF-8 and followed symbolic links through
the whole tree they point to. Names are bytes here, links are not followed, and only the
folders transcripts sit in are watched. It never stops while the daemon runs. A project
folder that gets no watch (out of ``fs.inotify.max_user_watches``) is scanned every
``transcripts.poll_interval_ms`` instead (:mod:`memd.daemon.watch_gaps`); when inotify
cannot be used at all, every project folder is ("polling"). Either way
:class:`WatcherStatus` (``memdctl status``) and the log say so with the fix, and the watches
are tried again every :data:`LIMIT_CHECK_S`, so a raised limit ends the scan by itself.
Folders it may not read and links are skipped, named in ``status``, never fatal.
"""

from __future__ import annotations

import logging
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import TaskStatus

from memd.changes import Counted
from memd.config import TranscriptsConfig
from memd.daemon.inotify import Inotify
from memd.daemon.watch_gaps import FIX, Gaps, project_folders, watch_limit
from memd.daemon.watch_tree import Found, Tree
from memd.queues import CoalescingQueue
from memd.sources.base import Layout

log = logging.getLogger(__name__)


RESTART_DELAY_S = 5.0  # after the root's watch ended (the root was removed or moved)
LIMIT_CHECK_S = 10.0  # while degraded: try the missing watches again this often
SKIPPED_SHOWN = 20  # skipped paths listed in status (all are counted)
INLINE_EVENTS = 64  # at most this many events of names only are handled on the event loop
# Reads of inotify events made at once within one ``watch_step_ms``; past them (a storm),
# what comes is gathered until the step ends: at most this many wake-ups per step.
READS_PER_STEP = 8


def transcripts_below(directory: str, layout: Layout | None = None) -> list[Path]:
    """The transcripts (as ``layout`` names them, down to its depth) below a directory that
    just appeared, without following links.

    inotify watches a new directory only once it has been seen, so files created in it
    before that produce no event of their own: without this look, a transcript written
    right after its project folder was made would be missed until it changed again.
    """
    layout = layout or Layout()
    found: list[Path] = []
    pending = [(directory, layout.depth)]
    while pending:
        folder, left = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    if layout.names(entry.name):
                        found.append(Path(entry.path))
                    elif left > 1 and entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, left - 1))
        except OSError:  # not a directory (a plain file was added), gone again, no access
            continue
    return found


@dataclass
class WatcherStatus(Counted):
    """How transcripts are being watched, for ``status``."""

    mode: str = "starting"  # "inotify"; "inotify+scan" with unwatched folders; "polling";
    # "absent": a root memd does not make, waited for
    reason: str | None = None  # why it is not plain inotify
    unwatched: int = 0  # folders inotify could not watch, scanned instead
    fix: str | None = None  # what the user can do about it
    skipped: dict[str, str] = field(default_factory=dict)  # not watched, not read: why

    def as_dict(self) -> dict[str, Any]:
        shown = sorted(self.skipped.items())[:SKIPPED_SHOWN]
        return {
            "mode": self.mode,
            "reason": self.reason,
            "unwatched": self.unwatched,
            "fix": self.fix,
            "skipped_count": len(self.skipped),
            "skipped": [{"path": path, "reason": why} for path, why in shown],
        }


@dataclass(frozen=True)
class WatchedRoot:
    """A folder to watch, whether memd makes it when it is missing, how its agent lays out
    its files below it, and its status."""

    path: Path
    create: bool = True
    status: WatcherStatus = field(default_factory=WatcherStatus)
    layout: Layout = field(default_factory=Layout)


async def run_watcher(
    roots: Sequence[WatchedRoot],
    config: TranscriptsConfig,
    queue: CoalescingQueue[Path],
    *,
    stop: anyio.Event,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Mark every changed session file under ``roots`` on ``queue`` until ``stop`` is set or
    cancelled. Started once the roots that exist are watched."""
    async with anyio.create_task_group() as tg:
        for root in roots:
            if root.create:
                await anyio.Path(root.path).mkdir(parents=True, exist_ok=True)
            elif not await anyio.Path(root.path).is_dir():
                tg.start_soon(_when_present, root, config, queue)
                continue
            await tg.start(_follow_root, root, config, queue, False)
        task_status.started()
        await stop.wait()
        tg.cancel_scope.cancel()
    log.debug("watcher for %s stopped", ", ".join(str(r.path) for r in roots))


async def _when_present(
    root: WatchedRoot, config: TranscriptsConfig, queue: CoalescingQueue[Path]
) -> None:
    """Wait for a root memd does not make; what it holds when it appears is news."""
    root.status.mode = "absent"
    root.status.reason = f"{root.path} does not exist (yet)"
    await _folder_appears(root.path)
    root.status.reason = None
    log.info("%s appeared; watching it", root.path)
    await _follow_root(root, config, queue, True)


async def _folder_appears(path: Path) -> None:
    """Until ``path`` is a folder (looked at every :data:`LIMIT_CHECK_S`)."""
    while True:
        if await anyio.Path(path).is_dir():
            return
        await anyio.sleep(LIMIT_CHECK_S)


async def _follow_root(
    root: WatchedRoot,
    config: TranscriptsConfig,
    queue: CoalescingQueue[Path],
    news: bool,
    *,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    if sys.platform == "linux":
        await Watcher(
            root.path, config, queue, root.status, create=root.create, layout=root.layout
        ).run(news=news, task_status=task_status)
    else:
        task_status.started()
        await follow_with_watchfiles(
            root.path, config, queue, root.status, create=root.create, layout=root.layout
        )


class Watcher:
    """inotify on the folders transcripts sit in; beside it, the scan of the project folders
    it has no watch for. One task: the tree is only touched by it."""

    def __init__(
        self,
        root: Path,
        config: TranscriptsConfig,
        queue: CoalescingQueue[Path],
        status: WatcherStatus,
        *,
        create: bool = True,
        layout: Layout | None = None,
    ) -> None:
        self.root = root
        self.create = create
        self.config = config
        self.queue = queue
        self.status = status
        self.layout = layout or Layout()
        self.gaps = Gaps(root=str(root), layout=self.layout)
        self._warned = False
        self._checked = 0.0  # when the missing watches were last tried
        self._step = (-math.inf, 0)  # when the current step began, reads made in it

    async def run(
        self, *, news: bool = False, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Follow the tree; open it again when its root's watch ended or inotify came back.
        Started once the root is watched: a project folder made from then on is seen.
        ``news``: the files already there are news (else the startup scan reads them)."""
        tree = await self._open(first=not news)
        task_status.started()
        while True:
            try:
                await self._follow(tree)
            finally:
                if tree is not None:
                    tree.close()
            if self.create:
                await anyio.Path(self.root).mkdir(parents=True, exist_ok=True)
            else:
                await _folder_appears(self.root)
            tree = await self._open(first=False)

    async def _open(self, *, first: bool) -> Tree | None:
        """A tree with its watches added, or None (polling) when inotify cannot watch the
        root. Transcripts met are news, except at the first start (the startup scan reads
        them)."""
        try:
            tree = Tree(Inotify(), str(self.root), self.layout)
            tree.watch_root()  # two system calls: at once, not in a thread
        except OSError as exc:
            self._checked = anyio.current_time()
            await self._poll_instead(exc)
            return None
        found = await anyio.to_thread.run_sync(partial(tree.fill, report=not first))
        self._checked = anyio.current_time()
        if self.status.mode == "polling" or self.gaps.unwatched:
            log.warning("watching %s with inotify again", self.root)
        self.gaps.forget()
        self.status.reason = self.status.fix = None
        await self._take(tree, found, quiet=first)
        return tree

    async def _poll_instead(self, exc: OSError | None) -> None:
        if self.status.mode != "polling":
            log.warning(
                "cannot watch %s with inotify (%s); polling it every %d ms instead. Fix: %s",
                self.root,
                exc,
                self.config.poll_interval_ms,
                FIX,
            )
        self.status.reason = f"inotify unavailable: {exc}"
        self.status.fix = FIX
        self.status.skipped = {}
        folders = await anyio.to_thread.run_sync(project_folders, str(self.root))
        await anyio.to_thread.run_sync(
            lambda: self.gaps.add(folders, quiet=self.status.mode == "starting")
        )
        self.status.mode = "polling"

    async def _follow(self, tree: Tree | None) -> None:
        """Until the root's watch ends (or, while polling, inotify can be had again)."""
        while True:
            wait = self.config.poll_interval_ms / 1000 if self._degraded(tree) else math.inf
            if tree is None:
                await anyio.sleep(wait)
                await self._new_folders_while_polling()
            else:
                with anyio.move_on_after(wait):
                    await anyio.wait_readable(tree.fd)
                events = tree.inotify.read()
                if events:
                    if len(events) > INLINE_EVENTS or tree.needs_io(events):
                        found = await anyio.to_thread.run_sync(tree.handle, events)
                    else:  # names only: a thread's hop would cost more than the work
                        found = tree.handle(events)
                    await self._take(tree, found, quiet=False)
                    if found.root_gone:
                        log.warning("the watch of %s ended; watching it again", self.root)
                        await anyio.sleep(RESTART_DELAY_S)
                        return
                    await self._pace()
            if self.gaps.unwatched:
                for path in await anyio.to_thread.run_sync(self.gaps.scan):
                    self.queue.mark_nowait(path)
            if self._degraded(tree) and anyio.current_time() - self._checked > LIMIT_CHECK_S:
                self._checked = anyio.current_time()
                if tree is None:
                    return  # try inotify again
                await self._retry_unwatched(tree)
            self._show_mode(tree)

    async def _pace(self) -> None:
        """After a read: the events of a few files growing are marked as they come (follow
        latency: an append waits for no other file's step); past :data:`READS_PER_STEP`
        reads in one ``watch_step_ms`` (a storm), the rest of the step is gathered into
        one read."""
        step = self.config.watch_step_ms / 1000
        began, reads = self._step
        now = anyio.current_time()
        if now - began >= step:
            began, reads = now, 0
        self._step = (began, reads + 1)
        if reads + 1 >= READS_PER_STEP:
            await anyio.sleep(began + step - now)

    def _degraded(self, tree: Tree | None) -> bool:
        return tree is None or bool(self.gaps.unwatched)

    async def _new_folders_while_polling(self) -> None:
        folders = await anyio.to_thread.run_sync(project_folders, str(self.root))
        self.gaps.add([f for f in folders if f not in self.gaps.unwatched], quiet=False)

    async def _take(self, tree: Tree, found: Found, *, quiet: bool) -> None:
        """Mark what ``found`` names; scan the project folders it could not watch."""
        for path in found.transcripts:
            self.queue.mark_nowait(path)
        if found.unwatched:
            await anyio.to_thread.run_sync(lambda: self.gaps.add(found.unwatched, quiet=quiet))
            await self._found_unwatched(sorted(found.unwatched))
        self._show_mode(tree)

    async def _retry_unwatched(self, tree: Tree) -> None:
        """Watch the scanned folders again: a raised limit ends the scan by itself."""
        for path in await anyio.to_thread.run_sync(self._rewatch, tree):
            self.queue.mark_nowait(path)
        if not self.gaps.unwatched:
            log.warning("watching %s with inotify again (the watch limit was raised)", self.root)
            self.status.reason = self.status.fix = None

    def _rewatch(self, tree: Tree) -> list[Path]:
        """The folders that get their watch now leave the scan; their transcripts are news
        (the scan may not have seen their last change). Blocking."""
        news: list[Path] = []
        for folder in sorted(self.gaps.unwatched):
            found = tree.add(folder, 1, report=True)
            if folder not in found.unwatched:
                self.gaps.drop(folder)
                news += found.transcripts
        return news

    def _show_mode(self, tree: Tree | None) -> None:
        self.status.unwatched = len(self.gaps.unwatched)
        if tree is None:
            self.status.mode = "polling"
            return
        self.status.skipped = tree.skipped  # the tree counts its own changes of it
        self.status.mode = "inotify+scan" if self.gaps.unwatched else "inotify"

    async def _found_unwatched(self, folders: list[str]) -> None:
        limit = await anyio.to_thread.run_sync(watch_limit)
        limit_text = f"fs.inotify.max_user_watches is {limit}" if limit else "no limit read"
        self.status.reason = f"out of inotify watches ({limit_text})"
        self.status.fix = FIX
        if self._warned:
            log.debug("not watched by inotify, scanned instead: %s", ", ".join(folders))
            return
        self._warned = True
        log.warning(
            "%s: %d project folder(s) under %s are not watched; memd scans such folders"
            " every %d ms instead (%s). Fix: %s",
            self.status.reason,
            len(folders),
            self.root,
            self.config.poll_interval_ms,
            ", ".join(folders[:3]) + (" ..." if len(folders) > 3 else ""),
            self.status.fix,
        )


async def follow_with_watchfiles(
    root: Path,
    config: TranscriptsConfig,
    queue: CoalescingQueue[Path],
    status: WatcherStatus,
    *,
    create: bool = True,
    layout: Layout | None = None,
) -> None:
    """Elsewhere than Linux: watchfiles (FSEvents on macOS, whose file systems keep names
    UTF-8 and whose events do not follow links), polling after an error."""
    import watchfiles

    layout = layout or Layout()

    def wants(change: watchfiles.Change, path: str) -> bool:
        return layout.names(path) or change == watchfiles.Change.added

    polling = False
    while True:
        status.mode = "polling" if polling else "native"
        try:
            async for changes in watchfiles.awatch(
                root,
                watch_filter=wants,
                step=config.watch_step_ms,
                debounce=config.watch_debounce_ms,
                force_polling=polling,
                poll_delay_ms=config.poll_interval_ms,
                ignore_permission_denied=True,
            ):
                for change, path in changes:
                    if layout.names(path):
                        queue.mark_nowait(Path(path))
                    elif change == watchfiles.Change.added:
                        below = partial(transcripts_below, path, layout)
                        for found in await anyio.to_thread.run_sync(below):
                            queue.mark_nowait(found)
        except Exception as exc:  # noqa: BLE001 - the watcher never stops: say so, go on
            log.warning("watching %s failed (%s); polling it instead", root, exc)
            status.reason = f"watcher failed: {exc}"
            polling = True
            await anyio.sleep(RESTART_DELAY_S)
            if create:
                await anyio.Path(root).mkdir(parents=True, exist_ok=True)
            else:
                await _folder_appears(root)
