"""One client connection of the IPC server: a single reader loop, bounded and deadlined.

The reader takes frames out of the byte stream itself (it needs to know a frame's length
before its body is buffered). Each frame is answered in one of two ways:

- inline, for methods whose handlers do not wait on I/O (``Server.inline``): the handler runs
  in the reader loop and the reply is sent at once. No task, no cancel scope, no lock when the
  socket takes the reply whole: this is the path ``hello`` and ``status`` take;
- in a task of the connection's task group, under the method's timeout, for everything else.
  Up to ``max_in_flight`` of them run at once; a full pipeline stops the reading.

Limits (``ServeLimits``): the body of a frame that does not arrive in one read is buffered
(in a buffer of its exact size, filled in place) only once the bytes it will take are
reserved from a budget shared by every connection (a frame that does not fit waits, and is
refused with ``busy`` if it still does not fit when its deadline passes), and they stay
reserved until its request is answered, since what the body decodes to lives as long as the
handler (``protocol.decode_body`` bounds that to a few times the body); a frame must be
complete within ``frame_timeout_s`` of its first byte, else the connection gets a ``timeout``
error frame and is closed. Between frames, a connection with no request in flight is idle:
once it has been idle for ``idle_timeout_s`` it is closed (:meth:`Connection.close_now`, with
a ``timeout`` error frame when the socket takes it). To make room for a new client the server
may close sooner a connection with no request in flight, idle or with a frame under way, the
one longest without a whole frame first (``memd.ipc.server``). A connection waiting for a
reply, however long (``wait_extraction``, a stream), is never closed so.

Outside that budget a connection holds one read (at most ``RECEIVE_BYTES``, kept while its
frames are answered or while the frame it starts waits for budget) plus its own objects:
:data:`CONNECTION_BYTES` in all. The server sets that much aside for each connection it may
have (:func:`body_budget`), so everything incoming frames hold stays within
``ipc.max_buffered_bytes`` by construction, whatever the peers send.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import socket
import time
from typing import Any

import anyio
from anyio.abc import TaskGroup

from memd.ipc.host import Host
from memd.ipc.reader import SocketReader
from memd_client import protocol as p

log = logging.getLogger(__name__)

# A read between frames is small: a connection waiting for budget holds at most this much
# outside the budget. A body being filled is read in bigger steps, into its own buffer.
RECEIVE_BYTES = 16 * 1024
BODY_READ_BYTES = 256 * 1024
# Bodies this big get anonymous memory of their own: its pages count only once written and go
# back to the system when the frame is done (a freed heap block may stay in the RSS).
MMAP_BODY_BYTES = 1024 * 1024
_LINGER_SECONDS = 1.0
_LINGER_BYTES = 1024 * 1024
HEADER_SIZE = p.HEADER.size
# A connection's own objects (the Connection, its task group, scopes, lock, semaphore, the
# stream and its task): ~10 KiB measured with tracemalloc on CPython 3.11 with anyio 4, ~27 KiB
# with a read held (tests/test_ipc_limits.py measures both); room left for other versions.
CONNECTION_STATE_BYTES = 16 * 1024
# What one connection may hold outside the shared budget: one read, a partial header, itself.
CONNECTION_BYTES = RECEIVE_BYTES + HEADER_SIZE + CONNECTION_STATE_BYTES
# Discarded input (a closing connection's) is read here; nothing reads it back, so every
# connection may share it.
_DISCARD = bytearray(RECEIVE_BYTES)


def body_budget(max_buffered_bytes: int, max_connections: int) -> int:
    """The part of ``max_buffered_bytes`` left for frame bodies once every connection the
    server may hold has its :data:`CONNECTION_BYTES` set aside."""
    return max(max_buffered_bytes - max_connections * CONNECTION_BYTES, 0)


class FrameTimeout(p.FrameError):
    code = p.TIMEOUT


class Busy(p.FrameError):
    code = p.BUSY


class Connection:
    """One accepted connection; :meth:`run` serves it until the client leaves or misbehaves."""

    def __init__(self, server: Host[Connection], sock: socket.socket) -> None:
        self._server = server
        self._sock = sock
        # fast_acquire: no extra trip through the event loop when nobody else is sending
        self._send_lock = anyio.Lock(fast_acquire=True)
        self._read_scope = anyio.CancelScope()
        self._slots = anyio.Semaphore(server.max_in_flight, fast_acquire=True)
        self._pending = b""  # bytes read past the last whole frame: a partial header
        self._body: bytearray | mmap.mmap | None = None  # a pending body, its exact size
        self._filled = 0  # bytes of ``_body`` received so far
        self._reserved = 0  # bytes of the read budget this connection holds
        self._started = 0.0  # monotonic time of the pending frame's first byte
        self._waiting_budget = False  # a frame's header is in, its body waits for budget
        self._reader = SocketReader(sock)
        # monotonic time of its last whole frame or reply (a frame under way does not move
        # it): the connection longest without one is closed first to make room
        self.idle_since = time.monotonic()
        self._idle_timer: asyncio.TimerHandle | None = None
        self._closed = False
        self.peer: int | None = None  # the client's pid, for its share of the connections

    def stop_reading(self) -> None:
        self._read_scope.cancel()

    async def run(self) -> None:
        self._watch_idle(self._server.limits.idle_timeout_s)
        try:
            await self._serve()
        finally:
            self._closed = True
            if self._idle_timer is not None:
                self._idle_timer.cancel()
            self._reader.close()

    # -- idle connections ------------------------------------------------------------------------

    def quiet(self) -> bool:
        """Idle: waiting between frames, with no request in flight and no byte arriving.
        Closing it loses nothing; its client reconnects for its next request."""
        return not self._under_way() and self.between_requests()

    def between_requests(self) -> bool:
        """No request in flight or being answered: the reader waits for a frame's first
        byte (with none unread in the socket), for the rest of a frame under way, or for room
        in the read budget. Closing it loses at most that frame, which its client sends again
        (a client that writes its request at once is never found with one under way, so one
        is a slow sender's): the server closes such a connection to make room for a new one,
        the longest without a whole frame first (:attr:`idle_since`)."""
        if self._slots.value != self._server.max_in_flight:
            return False
        if self._waiting_budget:
            return True
        if not self._reader.waiting:
            return False  # decoding, or answering inline
        if self._under_way():
            return True
        try:
            return not self._sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT)  # b"": gone
        except BlockingIOError:
            return True
        except OSError:
            return True  # reset: nothing to lose either

    def _under_way(self) -> bool:
        return bool(self._pending) or self._body is not None or self._waiting_budget

    def close_now(self, notice: bytes) -> None:
        """Close a connection :meth:`between_requests` at once: ``notice`` (an error frame)
        if the socket takes it without waiting, then its descriptor goes; the reader loop
        ends as at end of stream (a wait for budget is cancelled), giving back what its
        frame under way held."""
        if self._closed:
            return
        self._closed = True
        if self._idle_timer is not None:
            self._idle_timer.cancel()
        self._read_scope.cancel()
        self._reader.close()
        try:
            self._sock.send(notice, socket.MSG_DONTWAIT)
        except OSError:
            pass  # the client's buffer is full or it left: it sees the end of the stream
        self._sock.close()

    def _watch_idle(self, delay: float) -> None:
        """Check for idleness after ``delay`` seconds (one timer per connection, re-armed
        when it fires: nothing is done per request)."""
        if delay < float("inf"):
            loop = asyncio.get_running_loop()
            self._idle_timer = loop.call_later(delay, self._check_idle)

    def _check_idle(self) -> None:
        self._idle_timer = None
        if self._closed:
            return
        limit = self._server.limits.idle_timeout_s
        left = self.idle_since + limit - time.monotonic()
        if left > 0:
            self._watch_idle(left)
        elif self.quiet():
            self._server.close_idle(self)
        else:
            self._watch_idle(min(limit, 1.0))  # busy now: idle again soon after its reply

    async def _serve(self) -> None:
        problem: p.FrameError | None = None  # stays None when stop_reading() ends the loop
        try:
            async with anyio.create_task_group() as tg:
                with self._read_scope:
                    problem = await self._read_loop(tg)
                if problem is not None:
                    log.info("closing a connection: %s", problem)
                    await self.send(self._server.error_frame(None, problem.code, str(problem)))
        finally:
            self._release(self._reserved)
            self._pending = b""
            _free(self._body)
            self._body = None
        if problem is not None:
            await self.close_gently()

    async def refuse(self, frame: bytes) -> None:
        """Send a last error reply and close without reading any request."""
        try:
            await self.send(frame)
            await self.close_gently()
        finally:
            self._reader.close()

    async def close_gently(self) -> None:
        """Half-close, then discard what the client still sends, for a moment.

        Closing a Unix socket with unread input makes the kernel reset the connection, and
        the client would read ECONNRESET instead of a clean end after our last reply.
        """
        try:
            self._sock.shutdown(socket.SHUT_WR)
        except OSError:
            return
        discarded = 0
        with anyio.move_on_after(_LINGER_SECONDS), memoryview(_DISCARD) as scratch:
            while discarded <= _LINGER_BYTES and (got := await self._receive_into(scratch)):
                discarded += got

    # -- reading -------------------------------------------------------------------------------

    async def _read_loop(self, tg: TaskGroup) -> p.FrameError | None:
        try:
            while True:
                if self._body is not None:
                    if not await self._fill_body():
                        return None
                    body, self._body = self._body, None
                    # The body's reservation goes with its request and comes back when the
                    # request is answered: what it decodes to lives as long as the handler.
                    held, self._reserved = self._reserved, 0
                    self._started = time.monotonic()
                    try:
                        frame = p.decode_body(body, count_containers=True)  # type: ignore[arg-type]
                    except BaseException:
                        self._server.budget.give(held)
                        raise
                    finally:
                        _free(body)
                    await self._dispatch(frame, tg, held)
                    continue
                if not await self._read_frames(tg):
                    return None
        except p.FrameError as exc:
            return exc

    async def _read_frames(self, tg: TaskGroup) -> bool:
        """One read between frames; answer the whole frames in it. False at EOF.

        The read is the only copy of its bytes this connection holds (a partial header
        excepted): whole frames are decoded from it in place, the start of a body is copied
        into the body's own buffer, and it goes when this returns.
        """
        pending = self._pending
        if pending:
            data = await self._receive_partial()
        else:
            data = await self._receive(RECEIVE_BYTES)
            self._started = time.monotonic()
        if not data:
            return False
        if pending:
            self._pending = b""
            data = pending + data
        await self._take_frames(data, tg)
        return True

    async def _receive_partial(self) -> bytes:
        """More bytes of a pending header, by the frame's deadline."""
        data = b""
        with anyio.move_on_after(self._time_left()):
            data = await self._receive(RECEIVE_BYTES)
            return data
        raise self._timed_out()

    async def _fill_body(self) -> bool:
        """Read the pending body into its buffer, by the frame's deadline; False at EOF."""
        assert self._body is not None
        size = len(self._body)
        with anyio.move_on_after(self._time_left()):
            while self._filled < size:
                # Views are released even when the read is cancelled: an mmap with a view
                # alive cannot be closed.
                view = memoryview(self._body)
                step = view[self._filled : self._filled + BODY_READ_BYTES]
                try:
                    got = await self._receive_into(step)
                finally:
                    step.release()
                    view.release()
                if not got:
                    return False
                self._filled += got
            return True
        raise self._timed_out()

    def _time_left(self) -> float:
        return max(self._started + self._server.limits.frame_timeout_s - time.monotonic(), 0.0)

    def _timed_out(self) -> FrameTimeout:
        limit = self._server.limits.frame_timeout_s
        return FrameTimeout(f"a frame was not complete within {limit:g}s of its first byte")

    async def _take_frames(self, data: bytes, tg: TaskGroup) -> None:
        """Answer every complete frame in ``data`` (inline or in a task); a frame whose body
        is not all here gets its budget reserved and a buffer of its exact size; fewer bytes
        than a header wait in ``_pending``."""
        max_frame = self._server.max_frame_bytes
        view = memoryview(data)
        at = 0
        while len(data) - at >= HEADER_SIZE:
            (size,) = p.HEADER.unpack_from(data, at)
            if size > max_frame:
                raise p.FrameTooLarge(size, max_frame)
            start = at + HEADER_SIZE
            at = start + size
            if len(data) < at:
                await self._reserve(size)
                if not self._time_left():  # woken at its deadline: do not allocate for nothing
                    raise self._timed_out()
                self._body = mmap.mmap(-1, size) if size >= MMAP_BODY_BYTES else bytearray(size)
                self._filled = len(data) - start
                self._body[: self._filled] = view[start:]
                return
            frame = p.decode_body(view[start:at], count_containers=True)  # type: ignore[arg-type]
            self._started = time.monotonic()
            await self._dispatch(frame, tg)
        self._pending = bytes(view[at:])

    async def _reserve(self, size: int) -> None:
        """Hold ``size`` bytes of the shared read budget, waiting by the frame's deadline."""
        budget = self._server.budget
        if size > budget.limit:
            raise Busy(f"a frame of {size} bytes exceeds the read buffer limit")
        self._waiting_budget = True
        try:
            while not budget.try_take(size):
                with anyio.move_on_after(self._time_left()):
                    await budget.wait_freed()
                    continue
                raise Busy("memd's read buffers are full; try again shortly")
        finally:
            self._waiting_budget = False
        self._reserved = size

    def _release(self, size: int) -> None:
        if size:
            self._reserved -= size
            self._server.budget.give(size)

    async def _receive_into(self, view: memoryview) -> int:
        """Like :meth:`_receive`, into ``view``; 0 at end of stream or a reset."""
        return await self._reader.receive_into(view)

    async def _receive(self, size: int) -> bytes:
        """Up to ``size`` bytes; ``b""`` at end of stream or a reset. Every read waits for the
        event loop's turn (:class:`SocketReader`), so a client that keeps its socket full
        cannot starve the others."""
        return await self._reader.receive(size)

    # -- answering -----------------------------------------------------------------------------

    async def _dispatch(self, frame: dict[str, Any], tg: TaskGroup, held: int = 0) -> None:
        """Answer one request inline or start its task; ``held`` bytes of the read budget (a
        body that was buffered) are given back once it is answered."""
        server = self._server
        try:
            match p.parse_request(frame):
                case p.ProtocolProblem(id=rid, code=code, message=message):
                    await self.send(server.error_frame(rid, code, message))
                case p.Request() as request if request.method in server.inline:
                    server.begin_request()
                    try:
                        await self.send(await server.answer_inline(request))
                    finally:
                        server.end_request()
                case p.Request() as request:
                    first = self._slots.value == server.max_in_flight
                    if first and not server.shares.may_start(self.peer):
                        await self.send(server.peer_busy(request.id))
                        return
                    await self._slots.acquire()  # a full pipeline stops the reading
                    if first:
                        server.shares.started(self.peer)
                    server.begin_request()
                    tg.start_soon(self._handle, request, held)
                    held = 0  # the task gives it back
        finally:
            self.idle_since = time.monotonic()
            server.budget.give(held)

    async def _handle(self, request: p.Request, held: int) -> None:
        try:
            await self.send(await self._server.answer(request))
        finally:
            self.idle_since = time.monotonic()
            self._server.budget.give(held)
            self._server.end_request()
            self._slots.release()
            if self._slots.value == self._server.max_in_flight:
                self._server.shares.ended(self.peer)

    async def send(self, frame: bytes) -> None:
        """Send one whole frame; frames never interleave. A departed client is not an error;
        one that takes none of a frame within ``frame_timeout_s`` is closed."""
        if not self._send_lock.locked():
            try:
                sent = self._sock.send(frame)
            except BlockingIOError:
                sent = 0
            except OSError as exc:
                log.debug("a client left before its reply was sent: %s", exc)
                return
            if sent == len(frame):
                return
            frame = frame[sent:]
        async with self._send_lock:
            limit = self._server.limits.frame_timeout_s
            with anyio.move_on_after(limit):
                try:
                    await _send_all(self._sock, frame)
                except OSError as exc:
                    log.debug("a client left before its reply was sent: %s", exc)
                return
            # A client that takes no reply would hold its place with a request in flight
            # for ever: the connection ends (the reader sees the end, later sends fail).
            log.info("closing a connection that took no reply for %gs", limit)
            self._server.note_stalled()
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


async def _send_all(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view) :]
        except BlockingIOError:
            await anyio.wait_writable(sock)


def _free(body: bytearray | mmap.mmap | None) -> None:
    if isinstance(body, mmap.mmap):
        body.close()
