"""The daemon's Unix-socket server: frames in, method calls, replies out.

    server = await tg.start(partial(run_server, path, methods,
                                    max_frame_bytes=cfg.ipc.max_frame_bytes,
                                    request_timeout=cfg.ipc.request_timeout_s))
    ...
    # phased shutdown
    server.stop_accepting()        # socket file gone, no new connections, no new requests
    with anyio.move_on_after(grace):
        await server.wait_idle()   # requests already running finish and are answered
    tg.cancel_scope.cancel()

``run_server`` hands its :class:`Server` to ``task_status.started``. It runs until
cancelled; after ``stop_accepting()`` it returns on its own once every connection is closed.

Each request is an isolation boundary: whatever its handler raises becomes an error reply
and the connection lives on. A frame that cannot be read (bad msgpack, not a map, an
oversize length prefix) gets an error reply with a nil id, then the connection is closed,
since the byte stream has no boundary left to resynchronise on. Requests on one connection
are served concurrently (up to ``max_in_flight`` each); replies may come out of order.
"""

from __future__ import annotations

import errno
import logging
import os
import socket
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketAttribute, SocketStream, TaskGroup

from memd.errors import BudgetExhausted, LLMDisabled, LLMError, MemdError, NotFound
from memd.ipc.peercred import Allow, Deny, check_peer, peer_uid
from memd.ipc.socketfile import (
    clear_stale_socket,
    prepare_runtime_dir,
    socket_inode,
    unlink_if_ours,
)
from memd_client import protocol as p

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[Any]]

MAX_IN_FLIGHT_PER_CONNECTION = 64
_RECEIVE_BYTES = 256 * 1024
_LINGER_SECONDS = 1.0
_LINGER_BYTES = 1024 * 1024
_ACCEPT_BACKOFF = 0.1
_EXHAUSTION = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


class InvalidParams(MemdError):
    """Raised by a handler whose params are missing or of the wrong type or value."""


@dataclass(frozen=True)
class ServerStats:
    accepting: bool
    connections_open: int
    connections_total: int
    connections_refused: int
    requests_total: int
    requests_in_flight: int
    errors: dict[str, int]  # error replies sent, by code


def error_code_for(exc: Exception) -> str:
    """The reply code for an exception a handler raised."""
    match exc:
        case InvalidParams():
            return p.INVALID_PARAMS
        case NotFound():
            return p.NOT_FOUND
        case LLMDisabled():
            return p.DISABLED
        case LLMError() | BudgetExhausted():
            return p.UNAVAILABLE
        case _:
            return p.INTERNAL


# -- the server -------------------------------------------------------------------------------


class Server:
    """Serves one method table on one socket path. Build it through :func:`run_server`."""

    def __init__(
        self,
        path: Path,
        methods: Mapping[str, Handler],
        *,
        max_frame_bytes: int,
        request_timeout: float,
        method_timeouts: Mapping[str, float] | None = None,
        max_in_flight: int = MAX_IN_FLIGHT_PER_CONNECTION,
    ) -> None:
        self.path = path
        self.methods = methods
        self.max_frame_bytes = max_frame_bytes
        self.request_timeout = request_timeout
        # Methods that legitimately run long (a summary call, waiting for an extraction)
        # name their own limit; everything else gets request_timeout.
        self.method_timeouts = dict(method_timeouts or {})
        self.max_in_flight = max_in_flight
        self._accepting = True
        self._accept_scope = anyio.CancelScope()
        self._inode: int | None = None
        self._connections: set[_Connection] = set()
        self._idle: anyio.Event | None = None  # made by wait_idle, set when in-flight hits 0
        self._in_flight = 0
        self._connections_total = 0
        self._refused = 0
        self._requests = 0
        self._errors: Counter[str] = Counter()

    async def run(self, *, task_status: anyio.abc.TaskStatus[Server]) -> None:
        await anyio.to_thread.run_sync(prepare_runtime_dir, self.path.parent)
        await clear_stale_socket(self.path)
        listener = await anyio.create_unix_listener(self.path, mode=0o600)
        self._inode = socket_inode(self.path)
        log.info("serving on %s", self.path)
        try:
            async with anyio.create_task_group() as tg:
                task_status.started(self)
                async with listener:
                    with self._accept_scope:
                        await self._accept_loop(listener, tg)
        finally:
            unlink_if_ours(self.path, self._inode)

    def stop_accepting(self) -> None:
        """Refuse new connections and new requests; requests already running go on."""
        if not self._accepting:
            return
        self._accepting = False
        self._accept_scope.cancel()
        unlink_if_ours(self.path, self._inode)
        for connection in self._connections:
            connection.stop_reading()

    async def wait_idle(self) -> None:
        """Return once no request is running (being handled or having its reply sent)."""
        while self._in_flight:
            if self._idle is None:
                self._idle = anyio.Event()
            await self._idle.wait()

    def statistics(self) -> ServerStats:
        return ServerStats(
            accepting=self._accepting,
            connections_open=len(self._connections),
            connections_total=self._connections_total,
            connections_refused=self._refused,
            requests_total=self._requests,
            requests_in_flight=self._in_flight,
            errors=dict(self._errors),
        )

    async def _accept_loop(self, listener: anyio.abc.SocketListener, tg: TaskGroup) -> None:
        while True:
            try:
                stream = await listener.accept()
            except anyio.BrokenResourceError as exc:
                cause = exc.__cause__
                if not isinstance(cause, OSError) or cause.errno not in _EXHAUSTION:
                    raise
                # Out of file descriptors or memory: keep the connections we have and try
                # again shortly rather than dying (the trio serve_listeners policy).
                log.error("accept failed (%s); retrying in %ss", cause, _ACCEPT_BACKOFF)
                await anyio.sleep(_ACCEPT_BACKOFF)
                continue
            tg.start_soon(self._serve, stream)

    async def _serve(self, stream: SocketStream) -> None:
        self._connections_total += 1
        connection = _Connection(self, stream)
        self._connections.add(connection)
        try:
            async with stream:
                match self._check_peer(stream):
                    case Deny(reason=reason):
                        self._refused += 1
                        log.warning("refused a connection: %s", reason)
                        await connection.refuse(self.error_frame(None, p.FORBIDDEN, reason))
                    case Allow():
                        if not self._accepting:
                            connection.stop_reading()
                        await connection.run()
        finally:
            self._connections.discard(connection)

    def _check_peer(self, stream: SocketStream) -> Allow | Deny:
        try:
            uid = peer_uid(stream.extra(SocketAttribute.raw_socket))
        except OSError as exc:
            return Deny(f"cannot read the peer's credentials: {exc}")
        return check_peer(uid, os.getuid())

    # -- requests ------------------------------------------------------------------------------

    def error_frame(self, rid: p.RequestId | None, code: str, message: str) -> bytes:
        self._errors[code] += 1
        return p.encode_frame(p.failure(rid, code, message))

    async def answer(self, request: p.Request) -> bytes:
        """The encoded reply to one request; never raises except on cancellation."""
        self._requests += 1
        handler = self.methods.get(request.method)
        if handler is None:
            return self.error_frame(
                request.id, p.UNKNOWN_METHOD, f"memd has no method {request.method!r}"
            )
        if not self._accepting:
            return self.error_frame(request.id, p.UNAVAILABLE, "memd is shutting down")
        limit = self.method_timeouts.get(request.method, self.request_timeout)
        try:
            with anyio.move_on_after(limit):
                return self._encode_result(request, await handler(request.params))
        except Exception as exc:  # noqa: BLE001 - the per-request isolation boundary
            return self._error_for(request, exc)
        return self.error_frame(
            request.id, p.TIMEOUT, f"{request.method} did not finish within {limit:g}s"
        )

    def _encode_result(self, request: p.Request, result: Any) -> bytes:
        try:
            return p.encode_frame(
                p.success(request.id, result), max_frame_bytes=self.max_frame_bytes
            )
        except p.FrameTooLarge as exc:
            message = f"the result of {request.method} is too large ({exc.size} bytes)"
        except (TypeError, ValueError, OverflowError) as exc:
            log.error("result of %s cannot be encoded: %s", request.method, exc)
            message = f"the result of {request.method} cannot be encoded"
        return self.error_frame(request.id, p.INTERNAL, message)

    def _error_for(self, request: p.Request, exc: Exception) -> bytes:
        code = error_code_for(exc)
        if code == p.INTERNAL:
            log.exception("%s failed", request.method)
            message = f"{request.method} failed ({type(exc).__name__}); see the memd log"
        else:
            message = str(exc) or type(exc).__name__
        return self.error_frame(request.id, code, message)

    def begin_request(self) -> None:
        self._in_flight += 1

    def end_request(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None


class _Connection:
    """One client connection: a read loop plus one task per request."""

    def __init__(self, server: Server, stream: SocketStream) -> None:
        self._server = server
        self._sock: socket.socket = stream.extra(SocketAttribute.raw_socket)
        # fast_acquire: no extra trip through the event loop when nobody else is sending
        self._send_lock = anyio.Lock(fast_acquire=True)
        self._read_scope = anyio.CancelScope()
        self._slots = anyio.Semaphore(server.max_in_flight, fast_acquire=True)

    def stop_reading(self) -> None:
        self._read_scope.cancel()

    async def run(self) -> None:
        decoder = p.FrameDecoder(self._server.max_frame_bytes)
        problem: p.FrameError | None = None  # stays None when stop_reading() ends the loop
        async with anyio.create_task_group() as tg:
            with self._read_scope:
                problem = await self._read_loop(decoder, tg)
            if problem is not None:
                log.info("closing a connection after an unreadable frame: %s", problem)
                await self.send(self._server.error_frame(None, problem.code, str(problem)))
        if problem is not None:
            await self.close_gently()

    async def refuse(self, frame: bytes) -> None:
        """Send a last error reply and close without reading any request."""
        await self.send(frame)
        await self.close_gently()

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
        with anyio.move_on_after(_LINGER_SECONDS):
            while discarded <= _LINGER_BYTES and (data := await _receive(self._sock)):
                discarded += len(data)

    async def _read_loop(self, decoder: p.FrameDecoder, tg: TaskGroup) -> p.FrameError | None:
        while True:
            data = await _receive(self._sock)
            if not data:
                return None
            decoder.receive_data(data)
            try:
                while (frame := decoder.next_frame()) is not None:
                    await self._start(frame, tg)
            except p.FrameError as exc:
                return exc

    async def _start(self, frame: dict[str, Any], tg: TaskGroup) -> None:
        match p.parse_request(frame):
            case p.ProtocolProblem(id=rid, code=code, message=message):
                await self.send(self._server.error_frame(rid, code, message))
            case p.Request() as request:
                await self._slots.acquire()  # a full pipeline stops the reading: backpressure
                self._server.begin_request()
                tg.start_soon(self._handle, request)

    async def _handle(self, request: p.Request) -> None:
        try:
            await self.send(await self._server.answer(request))
        finally:
            self._server.end_request()
            self._slots.release()

    async def send(self, frame: bytes) -> None:
        async with self._send_lock:
            try:
                await _send_all(self._sock, frame)
            except OSError as exc:
                log.debug("a client left before its reply was sent: %s", exc)


# anyio's asyncio UNIXSocketStream resolves its wait future from a raw reader callback; if the
# read is cancelled in the loop iteration in which data arrives, that callback fails on the
# cancelled future and the loop reports an error. wait_readable/wait_writable guard against
# exactly that, so the connection does its socket I/O through them.


async def _receive(sock: socket.socket) -> bytes:
    """Up to ``_RECEIVE_BYTES`` from ``sock``; ``b""`` at end of stream or a reset.

    Waits for readability first even when data may be there: the wait is the loop's one
    checkpoint per read, so a client that keeps the socket full cannot starve the others.
    """
    while True:
        await anyio.wait_readable(sock)
        try:
            return sock.recv(_RECEIVE_BYTES)
        except BlockingIOError:
            continue
        except OSError as exc:
            log.debug("a connection ended with %s", exc)
            return b""


async def _send_all(sock: socket.socket, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[sock.send(view) :]
        except BlockingIOError:
            await anyio.wait_writable(sock)


async def run_server(
    path: Path,
    methods: Mapping[str, Handler],
    *,
    max_frame_bytes: int,
    request_timeout: float,
    method_timeouts: Mapping[str, float] | None = None,
    task_status: anyio.abc.TaskStatus[Server] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``methods`` on the Unix socket ``path`` until cancelled (see the module doc).

    Creates the socket's directory 0700 if missing and refuses one that belongs to another
    user or is open to group or others (:class:`StartupError`); removes a stale socket file
    nobody answers on; binds 0600; passes the :class:`Server` to ``task_status.started``;
    unlinks the socket on the way out.
    """
    server = Server(
        path,
        methods,
        max_frame_bytes=max_frame_bytes,
        request_timeout=request_timeout,
        method_timeouts=method_timeouts,
    )
    await server.run(task_status=task_status)
