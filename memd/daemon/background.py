"""The daemon's background work after READY: the feature load, then the ingest workers, the
startup scan, the warmer, the flushers, the maintenance and the jobs that call the model, all
in one task group that a stop cancels (:func:`memd.daemon.run.run_daemon` starts it).

Each task takes the daemon as :class:`Background`, the part of it the work uses
(:class:`memd.daemon.service.Daemon`, which imports this module: nothing here imports it
back).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio

from memd.errors import MemdError, StartupError
from memd.gc_pauses import freeze_loaded
from memd.tokens import load_soon

if TYPE_CHECKING:
    from memd.clock import Clock
    from memd.compaction.service import CompactionService
    from memd.config import LoadedConfig
    from memd.daemon.notify import Notifier
    from memd.daemon.sessions import SessionRegistry
    from memd.dream.service import DreamService
    from memd.health import Health
    from memd.llm.ledger import Ledger
    from memd.memory.service import MemoryService
    from memd.queues import CoalescingQueue
    from memd.session.scheduler import NotesScheduler
    from memd.team.service import TeamService

log = logging.getLogger(__name__)

LEDGER_FLUSH_S = 30.0
TOKEN_SAVE_S = 300.0  # token estimates kept for the next start (and at shutdown)
MISSING_SWEEP_MINUTES = 60
# Ingest turns are bounded, but rebuilding an evicted conversation is one step: with two
# workers, one file's rebuild (a 1 GB transcript after a restart) never stops the others.
# One more worker takes only the queue's ``now`` lane (a change the watcher reported to a
# file that needs no rebuild), so an append to a live session waits behind no bulk turn.
INGEST_WORKERS = 2


class Background(Protocol):
    """What the background work uses of the daemon."""

    loaded: LoadedConfig
    clock: Clock
    registry: SessionRegistry
    ingest_queue: CoalescingQueue[Path]
    warm_queue: CoalescingQueue[Path]
    health: Health
    notifier: Notifier
    state_changed: anyio.Event
    history_read: anyio.Event
    background_done: anyio.Event
    compaction: CompactionService
    notes: NotesScheduler
    memory: MemoryService
    dream: DreamService
    team: TeamService
    ledger: Ledger

    async def build_features(self) -> None: ...
    async def open_model(self) -> None: ...
    async def refresh_own_memory(self) -> None: ...
    def save_state(self) -> bool: ...


async def run_background(
    daemon: Background, scope: anyio.CancelScope, model_work: anyio.CancelScope
) -> None:
    """The background work under ``scope``; ``model_work``: the scope of the part of it that
    calls the model (a stop cancels that first)."""
    try:
        with scope:
            await _background(daemon, model_work)
    finally:
        daemon.background_done.set()


async def _background(daemon: Background, model_work: anyio.CancelScope) -> None:
    """Load the features, then run every background task until cancelled."""
    _load_tokenizer_soon(daemon)
    try:
        await daemon.build_features()
    except OSError as exc:  # as fatal as it was when this state was read before READY
        where = exc.filename or daemon.loaded.paths.state_dir
        raise StartupError(f"cannot read the state in {where}: {exc.strerror}") from exc
    # Loaded by build_features' worker thread: an import on the loop, right after READY,
    # kept the first requests waiting for it (~140 ms).
    from memd.llm.ledger import run_ledger_flusher

    freeze_loaded("features loaded")

    async with anyio.create_task_group() as tg:
        for _ in range(INGEST_WORKERS):
            tg.start_soon(_run_ingest, daemon)
        tg.start_soon(_run_ingest, daemon, True)
        # Live appends are read meanwhile: a restart with many big sessions to warm held
        # every session's new lines until the last one was warm.
        await _warm_at_start(daemon)
        tg.start_soon(_run_compaction_warmer, daemon)
        tg.start_soon(_run_token_saver, daemon)
        tg.start_soon(_run_state_flusher, daemon)
        tg.start_soon(_run_startup_scan, daemon)
        tg.start_soon(_run_maintenance, daemon)
        tg.start_soon(_open_model, daemon)  # the SDK import: after the daemon serves
        tg.start_soon(_run_model_jobs, daemon, model_work)
        await tg.start(daemon.team.run)  # syncs over git: no model, not model work
        await tg.start(
            run_ledger_flusher,
            daemon.ledger,
            daemon.clock,
            LEDGER_FLUSH_S,  # it flushes once more when cancelled at shutdown
        )
        if daemon.notifier.watchdog_interval:
            tg.start_soon(_run_watchdog, daemon)


async def _open_model(daemon: Background) -> None:
    await daemon.open_model()
    freeze_loaded("model client opened")  # the SDK's objects, loaded once for good


async def _run_model_jobs(daemon: Background, model_work: anyio.CancelScope) -> None:
    """The background work that calls the model (session notes, memory extraction, dream),
    under ``model_work`` (:func:`memd.daemon.run.run_daemon`'s): a stop cancels it first, at once
    (each job's own rules then apply: a notes run stays pending, an extraction or a dream is
    undone)."""
    from memd.session.scheduler import run_notes_scheduler  # imported by build_features

    with model_work:
        async with anyio.create_task_group() as tg:
            tg.start_soon(run_notes_scheduler, daemon.notes)
            await tg.start(daemon.memory.run)
            await tg.start(daemon.dream.run)
            # After the dream's start, which puts back what an interrupted dream changed: the
            # archive's sweep sees each memory dir as it is.
            await tg.start(daemon.memory.archive.run)


async def _run_startup_scan(daemon: Background) -> None:
    """Stat the whole history, queue the active sessions; once more shortly after, to close
    the gap between the scan and the watcher's first event."""
    queued = 0
    for delay in (0.0, 1.0):
        await anyio.sleep(delay)
        wanted = await daemon.registry.discover()
        for path in wanted:
            daemon.ingest_queue.mark_nowait(path, later=True)  # read whole: bulk work
        queued += len(wanted)
        daemon.state_changed.set()
        if not daemon.history_read.is_set():
            await daemon.ingest_queue.wait_runs(wanted)
            daemon.history_read.set()
    stats = daemon.registry.statistics()
    daemon.notifier.status(f"{stats.sessions} sessions known, {stats.parsed} parsed")
    log.info("startup scan: %d sessions known, %d queued for reading", stats.sessions, queued)


async def _run_ingest(daemon: Background, live: bool = False) -> None:
    """Ingest queued transcripts, a turn of one file at a time. One file is the isolation
    boundary: whatever goes wrong with it is logged and recorded, and the next file is read
    (R-T7). A file with more to read than a turn allows goes to the back of the queue's
    ``later`` lane, so no file, however big, holds up another session's append by more than
    a turn. The ``live`` worker takes the ``now`` lane only and hands a file whose
    conversation must be rebuilt (one step, however big) to the others."""
    queue = daemon.ingest_queue
    while True:
        path = await queue.get(now_only=live)
        if live and _needs_rebuild(daemon, path):
            queue.defer(path)
            continue
        more = False
        try:
            more = await daemon.registry.ingest_turn(path)
            daemon.health.progressed()
        except Exception as exc:  # the per-file boundary; unreadable files never get here
            daemon.health.record(f"ingest of {path} failed: {exc!r}")
            log.exception("ingest of %s failed; other transcripts go on", path)
        finally:
            queue.done(path)
        if more:
            queue.mark_nowait(path, later=True)


def _needs_rebuild(daemon: Background, path: Path) -> bool:
    """Whether the next ingest of ``path`` rebuilds its conversation from the file (read
    before, not in memory now: evicted, or known from the state of an earlier run)."""
    state = daemon.registry.get_by_path(path)
    return state is not None and state.parsed and not daemon.registry.resident(str(path))


async def _run_compaction_warmer(daemon: Background) -> None:
    """Tokenize large sessions' messages ahead of time, so a compaction request is fast."""
    while True:
        path = await daemon.warm_queue.get()
        try:
            await _warm(daemon, path)
        finally:
            daemon.warm_queue.done(path)


def _load_tokenizer_soon(daemon: Background) -> None:
    """Load the tokenizer (~200 ms) beside the features when sessions are parsed already
    (else the first session read starts it: ``Daemon._on_growth``): the first line a session
    appends after its last response is estimated in its ingest, and the first compaction
    needs it too; either arriving first would wait for the load."""
    if daemon.registry.statistics().parsed:
        load_soon()


async def _warm(daemon: Background, path: Path) -> int | None:
    """Rebuild the session's conversation if needed and compute the token estimates it
    lacks; how many, None when it could not be read."""
    state = daemon.registry.get_by_path(path)
    if state is None:
        return None
    try:
        return await daemon.registry.read(state, daemon.compaction.tokens.warm)
    except (OSError, MemdError) as exc:  # gone, unreadable, changing under us: not now
        log.debug("not warming %s: %s", path, exc)
        return None


async def _warm_at_start(daemon: Background) -> None:
    """After a restart, the sessions above half their compaction threshold are the ones whose
    next request may be a compaction: rebuild and tokenize them (most recent first) before any
    other background work but the reading of live appends, so that request finds them warm
    (issue 12, item 6)."""
    hot = [
        s
        for s in daemon.registry.newest()
        if s.parsed and daemon.compaction.wants_warming(s) and daemon.registry.serves_compaction(s)
    ]
    if not hot:
        return
    started = time.monotonic()
    warmed = estimated = 0
    for state in hot:
        count = await _warm(daemon, Path(state.path))
        if count is not None:
            warmed, estimated = warmed + 1, estimated + count
    log.info(
        "warmed %d sessions above half their compaction threshold in %.0f ms"
        " (%d messages estimated, the others' estimates were kept)",
        warmed,
        (time.monotonic() - started) * 1000,
        estimated,
    )


async def _run_state_flusher(daemon: Background) -> None:
    """Save state a moment after it changes; an idle daemon never wakes up for this."""
    while True:
        await daemon.state_changed.wait()
        await anyio.sleep(daemon.loaded.config.daemon.state_flush_s)
        daemon.state_changed = anyio.Event()
        await anyio.to_thread.run_sync(daemon.save_state)


async def _run_token_saver(daemon: Background) -> None:
    """Keep the token estimates for the next start: every few minutes when new ones were
    made, and once more when cancelled at shutdown (a kill loses the newest: they are a
    cache)."""
    from memd.compaction.tokencache import TOKENS_FILE

    cache, path = daemon.compaction.tokens, daemon.loaded.paths.state_dir / TOKENS_FILE

    async def save() -> None:  # a write the disk refuses is kept and retried (memd.writes)
        if cache.changed:
            await anyio.to_thread.run_sync(cache.save, path)

    try:
        while True:
            await anyio.sleep(TOKEN_SAVE_S)
            await save()
    finally:
        with anyio.CancelScope(shield=True):
            await save()


async def _run_maintenance(daemon: Background) -> None:
    """Each minute, drop idle conversations; each hour, sweep for transcripts deleted while
    no event said so (the watcher reports deletions; this covers an overflowed queue). The
    sweep stats every known transcript: not work for every minute of an idle daemon."""
    minutes = 0
    while True:
        await daemon.refresh_own_memory()
        await anyio.sleep(60.0)
        minutes += 1
        idle = daemon.loaded.config.transcripts.evict_idle_minutes * 60.0
        daemon.registry.evict_idle(idle, keep=daemon.compaction.wants_warming)
        if minutes % MISSING_SWEEP_MINUTES == 0:
            await daemon.registry.forget_missing()


async def _run_watchdog(daemon: Background) -> None:
    interval = daemon.notifier.watchdog_interval or 10.0
    while True:
        daemon.notifier.watchdog()
        await anyio.sleep(interval)
