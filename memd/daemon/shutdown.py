"""The signal receiver and the daemon's stop: phased, bounded, and over within
:data:`STOP_DEADLINE_S` of the signal.

:func:`run_signals` is the first task of the daemon's group: SIGHUP reloads (the path
``memdctl reload`` takes), the first SIGTERM or SIGINT starts :func:`shutdown`:

1. Intake stops (the watcher, new connections) and the work that calls the model is cancelled
   at once: the background jobs (``model_work``: a notes run stays pending for the
   next start, a memory extraction or a dream is undone under its own rules) and every call in
   flight, from requests too (a compaction summary, a recall answers ``unavailable``). A slow
   or silent API holds nothing up.
2. In-flight requests and queued reading finish within the grace period
   (``daemon.shutdown_grace_s``, at most :data:`MAX_GRACE_S`), then the rest is cancelled and
   waited for while the deadline leaves time.
3. The state is saved (shielded) and one line says how the stop went.

Whatever is stuck past that (a read of a failing disk never returns), the backstop of
:mod:`memd.daemon.signals` ends the process at the deadline.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import anyio
from anyio.abc import TaskGroup, TaskStatus

from memd.daemon.signals import HANDLED, STOP_DEADLINE_S

if TYPE_CHECKING:
    from memd.config import LoadedConfig
    from memd.daemon.notify import Notifier
    from memd.daemon.signals import Signals
    from memd.ipc.serving import Serving
    from memd.llm.models import Models
    from memd.queues import CoalescingQueue

log = logging.getLogger(__name__)

MAX_GRACE_S = STOP_DEADLINE_S / 2  # the rest of the deadline: cancelling, undoing, saving
SAVE_RESERVE_S = 2.0  # kept for the save when cancelled work is slow to end
STOPPING = "memd is stopping"


class Stoppable(Protocol):
    """What a stop uses of the daemon (:class:`memd.daemon.service.Daemon`, which imports
    this module: nothing here imports it back)."""

    @property
    def loaded(self) -> LoadedConfig: ...
    @property
    def signals(self) -> Signals: ...
    @property
    def notifier(self) -> Notifier: ...
    @property
    def serving(self) -> Serving: ...
    @property
    def llm(self) -> Models | None: ...
    @property
    def features_ready(self) -> anyio.Event: ...
    @property
    def ingest_queue(self) -> CoalescingQueue[Path]: ...
    @property
    def stop_watching(self) -> anyio.Event: ...
    @property
    def stopping(self) -> anyio.Event: ...
    @property
    def background_done(self) -> anyio.Event: ...
    @property
    def state_file(self) -> Path: ...
    def save_state(self) -> bool: ...
    async def reload(self) -> str: ...


async def shutdown(
    daemon: Stoppable, tg: TaskGroup, work: anyio.CancelScope, model_work: anyio.CancelScope
) -> None:
    """Stop ``daemon`` (see the module docstring); cancel ``tg`` at the end. ``work``: the
    background work; ``model_work``: the part of it that calls the model."""
    began = daemon.signals.stop_at or time.monotonic()  # None: stopped by other means (tests)
    grace = min(daemon.loaded.config.daemon.shutdown_grace_s, MAX_GRACE_S)
    daemon.notifier.stopping()
    daemon.stop_watching.set()
    server = daemon.serving.server
    if server is not None:
        server.stop_accepting()
    model_work.cancel()
    if daemon.llm is not None:  # else the client module may not even be imported
        from memd.llm.client import stop_llm

        stop_llm(daemon.llm, STOPPING)
    with anyio.move_on_after(grace) as drained:
        if server is not None:
            await server.wait_idle()
        if daemon.features_ready.is_set():  # else no worker drains the queue: re-read at start
            await daemon.ingest_queue.wait_idle()
    work.cancel()
    left = STOP_DEADLINE_S - SAVE_RESERVE_S - (time.monotonic() - began)
    with anyio.move_on_after(max(left, 0.0)):
        await daemon.background_done.wait()
    with anyio.CancelScope(shield=True):
        saved = await _save(daemon)
        if daemon.llm is not None:
            from memd.llm.client import close_llm

            await close_llm(daemon.llm)
    how = f" on {name}" if (name := daemon.signals.stop_name) else ""
    cut = "; the grace period was over: unfinished work cancelled" if drained.cancel_called else ""
    log.info("stopped%s in %.1f s%s; %s", how, time.monotonic() - began, cut, saved)
    tg.cancel_scope.cancel()


async def _save(daemon: Stoppable) -> str:
    """Save the sessions' state; what happened, in words (a write the disk refuses is kept and
    tried once more before the process ends: ``memd.daemon.run.run_daemon``)."""
    if await anyio.to_thread.run_sync(daemon.save_state):
        return f"state saved to {daemon.state_file}"
    return f"the disk refuses {daemon.state_file}; one more try before memd exits"


async def run_signals(
    daemon: Stoppable, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    """The receiver, the first task of the daemon's group: SIGHUP reloads until the first
    SIGTERM or SIGINT, which starts the stop (then the handlers of :class:`Signals` take over
    again: later signals change nothing). What came before it took over is replayed first."""
    signals = daemon.signals
    try:
        with anyio.open_signal_receiver(*HANDLED) as received:
            task_status.started()
            if signals.stop_signal is None:
                await _until_stopped(daemon, received)
            daemon.stopping.set()
    finally:
        signals.leave_loop()


async def _until_stopped(daemon: Stoppable, received: AsyncIterator[int]) -> None:
    """Reload on SIGHUP, each in a task of its own (a slow reload never holds up a stop),
    until the first SIGTERM or SIGINT (which cancels a reload still running)."""
    async with anyio.create_task_group() as reloads:
        if daemon.signals.take_reload():
            reloads.start_soon(_reload, daemon)
        async for signum in received:
            if signum == signal.SIGHUP:
                reloads.start_soon(_reload, daemon)
            elif daemon.signals.stop_requested(signum):
                reloads.cancel_scope.cancel()
                return


async def _reload(daemon: Stoppable) -> None:
    """One SIGHUP's reload: its isolation boundary (``memdctl reload`` has its request's)."""
    try:
        await daemon.reload()
    except Exception:
        log.exception("reload on SIGHUP failed; the running configuration is kept")
