"""The daemon's handle on its IPC server (issue 35 item 2).

The server serves the daemon's method table, so it cannot exist before the daemon; the daemon
reads the server (its statistics for ``status``, its packer once the features are loaded, its
method limits on a reload, its drain at a stop). So the daemon is built with a
:class:`Serving`, empty until :func:`run_serving` starts the server in the daemon's task
group and binds it there, once. Nothing else is handed to the daemon after it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
from anyio.abc import TaskStatus

from memd.ipc.server import Server


class Serving:
    """A late-bound handle on the one server that serves the daemon: :attr:`server` is
    ``None`` until the server listens, then that server for good."""

    def __init__(self) -> None:
        self._server: Server | None = None

    @property
    def server(self) -> Server | None:
        return self._server

    def bind(self, server: Server) -> None:
        """Put the server that has started listening here (:func:`run_serving`)."""
        if self._server is not None:
            raise RuntimeError("this daemon is served already")
        self._server = server


async def run_serving(
    serving: Serving,
    serve: Callable[..., Coroutine[Any, Any, None]],
    *,
    task_status: TaskStatus[Server] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run ``serve`` (:func:`~memd.ipc.server.run_server` with its arguments), its server put
    in ``serving`` once it listens, until cancelled."""
    async with anyio.create_task_group() as tg:
        server: Server = await tg.start(serve)
        serving.bind(server)
        task_status.started(server)
