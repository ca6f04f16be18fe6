"""Reading a connection's socket with one event-loop registration for the connection's life.

``anyio.wait_readable`` registers the socket with the loop's selector for each wait and
removes it when it fires: two ``epoll_ctl`` calls, a future and a context-variable lookup per
request, measured as a third of the IPC server's CPU time under load. Here the reader stays
registered while the connection waits for requests, and the loop's callback performs the read
itself, so the socket is drained before the selector looks at it again: a request costs one
``recv`` and one wake-up of the connection's task. Every read goes through that callback, so
a client that keeps its socket full gets one read per turn of the loop, like the others.

The registration is dropped only when the socket becomes readable while nobody reads it (the
connection is answering, or its pipeline is full), and comes back with the next read; a level-
triggered selector would otherwise call back on every turn.
"""

from __future__ import annotations

import asyncio
import logging
import socket

log = logging.getLogger(__name__)


class SocketReader:
    """Reads for one task at a time; call :meth:`close` before the socket is closed."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self._fd = sock.fileno()
        self._loop = asyncio.get_running_loop()
        self._registered = False
        # The read in progress: its future, and either a size (recv) or a view (recv_into).
        self._waiter: asyncio.Future[bytes | int] | None = None
        self._size = 0
        self._into: memoryview | None = None
        # Bytes a cancelled receive() had already taken off the socket: the next one returns them.
        self._unread = b""

    async def receive(self, size: int) -> bytes:
        """Up to ``size`` bytes; ``b""`` at end of stream or a reset."""
        if self._unread:
            data, self._unread = self._unread, b""
            return data
        self._size = size
        result = await self._wait()
        assert isinstance(result, bytes)
        return result

    async def receive_into(self, view: memoryview) -> int:
        """Read into ``view``; the count, 0 at end of stream or a reset. A read cancelled
        after the bytes arrived may have filled part of ``view``: callers close the
        connection on cancellation."""
        if self._unread:
            got = min(len(view), len(self._unread))
            view[:got] = self._unread[:got]
            self._unread = self._unread[got:]
            return got
        self._into = view
        try:
            result = await self._wait()
        finally:
            self._into = None  # the view may be released the moment this returns
        assert isinstance(result, int)
        return result

    @property
    def waiting(self) -> bool:
        """A read is waiting for bytes (none has arrived for it yet)."""
        return self._waiter is not None and not self._waiter.done()

    def close(self) -> None:
        """Drop the registration; the socket may be closed afterwards."""
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(b"" if self._into is None else 0)
        self._pause()

    async def _wait(self) -> bytes | int:
        waiter: asyncio.Future[bytes | int] = self._loop.create_future()
        self._waiter = waiter
        if not self._registered:
            self._loop.add_reader(self._fd, self._on_readable)
            self._registered = True
        try:
            return await waiter
        except asyncio.CancelledError:
            # Cancelled after the callback had read: keep what it took off the socket.
            if waiter.done() and not waiter.cancelled():
                result = waiter.result()
                if isinstance(result, bytes):
                    self._unread = result
            raise
        finally:
            self._waiter = None

    def _on_readable(self) -> None:
        waiter = self._waiter
        if waiter is None or waiter.done():
            self._pause()  # readable, and nobody reading: the next read registers again
            return
        result: bytes | int
        try:
            if self._into is not None:
                result = self._sock.recv_into(self._into)
            else:
                result = self._sock.recv(self._size)
        except BlockingIOError:
            return  # a spurious wake-up: stay registered
        except OSError as exc:
            log.debug("a connection ended with %s", exc)
            result = b"" if self._into is None else 0
        self._waiter = None
        waiter.set_result(result)

    def _pause(self) -> None:
        if self._registered:
            self._registered = False
            self._loop.remove_reader(self._fd)
