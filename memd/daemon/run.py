"""Running a built :class:`~memd.daemon.service.Daemon`: one task group that holds signal
handling, the write retries, the watcher, the server and the background work, in that order,
until a stop; then the shutdown, and one more try of what the disk refused."""

from __future__ import annotations

import logging
import os
from functools import partial

import anyio
from anyio.abc import TaskStatus

from memd import __version__
from memd.atomic import retry_kept
from memd.daemon.background import run_background
from memd.daemon.service import Daemon
from memd.daemon.shutdown import run_signals, shutdown
from memd.daemon.watch import run_watcher
from memd.ipc.limits import ServeLimits
from memd.ipc.server import run_server
from memd.ipc.serving import run_serving
from memd.writes import run_write_retries

log = logging.getLogger("memd.daemon.service")  # its lines read as before the move


async def run_daemon(
    daemon: Daemon, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
) -> None:
    from memd.ipc.handlers import INLINE_METHODS, method_table, method_timeouts

    paths = daemon.loaded.paths
    cfg = daemon.loaded.config
    model_work = anyio.CancelScope()  # what calls the model: cancelled first at a stop
    async with anyio.create_task_group() as tg:
        await tg.start(run_signals, daemon)
        await tg.start(run_write_retries, retry_kept)
        await tg.start(
            partial(
                run_watcher,
                daemon.watched,
                cfg.transcripts,
                daemon.ingest_queue,
                stop=daemon.stop_watching,
            )
        )
        work = anyio.CancelScope()
        serve = partial(
            run_server,
            paths.socket_path,
            method_table(daemon),
            max_frame_bytes=cfg.ipc.max_frame_bytes,
            request_timeout=cfg.ipc.request_timeout_s,
            method_timeouts=method_timeouts(daemon),
            inline=INLINE_METHODS,
            limits=ServeLimits(
                max_buffered_bytes=cfg.ipc.max_buffered_bytes,
                frame_timeout_s=cfg.ipc.frame_timeout_s,
                max_connections=cfg.ipc.max_connections,
                idle_timeout_s=cfg.ipc.idle_timeout_s,
            ),
        )
        await tg.start(run_serving, daemon.serving, serve)
        daemon.notifier.ready(f"serving on {paths.socket_path}")
        log.info("memd %s ready on %s (pid %d)", __version__, paths.socket_path, os.getpid())
        tg.start_soon(run_background, daemon, work, model_work)
        task_status.started()
        await daemon.stopping.wait()
        await shutdown(daemon, tg, work, model_work)
    # After every flusher's last write: what the disk refused until now gets one more try.
    await anyio.to_thread.run_sync(retry_kept, True)
