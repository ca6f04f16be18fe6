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
oversize length prefix, a frame not finished by its deadline) gets an error reply with a nil
id, then the connection is closed, since the byte stream has no boundary left to
resynchronise on. Requests on one connection are served concurrently (up to
``max_in_flight`` each); replies may come out of order. Methods named in ``inline`` (their
handlers never wait on I/O) are answered in the connection's reader loop, without a task or
a timeout of their own (see :mod:`memd.ipc.connection`).

Serving is bounded (:class:`ServeLimits`), and no client can lock the others out:

- a connection with no request in flight is closed once idle for ``idle_timeout_s``;
- at ``max_connections`` a new connection is still served: of the connections with no
  request in flight (silent, or with a frame under way: a client that writes its request at
  once is never caught mid-frame, so such a frame is a slow sender's), the one longest
  without a whole frame or reply is closed to make room. Opening connections faster, or
  trickling bytes into them, only closes the attacker's own older ones, since a client that
  connects and sends its request at once is never the longest without one; descriptors and
  memory stay bounded by ``max_connections``. One client process has requests in flight on
  at most half the connections (:class:`~memd.ipc.limits.WorkShares`: a request past
  that is answered ``busy`` at once), so requests that wait long (``extract`` waits up to
  300 s for its run) sent over hundreds of connections hold no one else out either.
  Only when every connection has a request in flight does the new one get a ``busy`` error
  frame (at most :data:`MAX_TURNING_AWAY` at a time are told so; beyond that they are
  closed at once);
- bytes held for incoming frames across all connections stay under ``max_buffered_bytes``
  (each connection's own read and objects are set aside from it, the rest is the budget frame
  bodies share); a frame must be complete within ``frame_timeout_s``.

Accept failures from exhaustion (EMFILE…) are logged once per burst, with back-off; out of
descriptors (EMFILE), the longest-idle connection is closed first, as at the limit.
"""

from __future__ import annotations

import errno
import logging
import os
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
from anyio.abc import SocketAttribute, SocketStream, TaskGroup

from memd.changes import CHANGES
from memd.errors import BudgetExhausted, LLMDisabled, LLMError, MemdError, NotFound, WriteFailed
from memd.ipc.connection import Connection, body_budget
from memd.ipc.host import ReadBudget
from memd.ipc.limits import ServeLimits, WorkShares, limit_warnings
from memd.ipc.peercred import Allow, Deny, check_peer, peer_pid, peer_uid
from memd.ipc.socketfile import (
    clear_stale_socket,
    prepare_runtime_dir,
    socket_inode,
    unlink_if_ours,
)
from memd_client import protocol as p
from memd_client.names import encodable

log = logging.getLogger(__name__)

Handler = Callable[[dict[str, Any]], Awaitable[Any]]

MAX_IN_FLIGHT_PER_CONNECTION = 64
# Connections being told ``busy`` at once; more are closed without a word (each holds a
# descriptor for up to a second while it is told).
MAX_TURNING_AWAY = 32
_ACCEPT_BACKOFF_FIRST = 0.01
_ACCEPT_BACKOFF_MAX = 1.0
_EXHAUSTION = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.ENOBUFS})


class InvalidParams(MemdError):
    """Raised by a handler whose params are missing or of the wrong type or value."""


@dataclass(frozen=True)
class ServerStats:
    accepting: bool
    connections_open: int
    connections_total: int
    connections_refused: int  # peers of another uid
    connections_busy: int  # turned away: at the limit, and every connection had work
    connections_evicted: int  # the longest without a request, closed to make room
    connections_idle_closed: int  # closed after idle_timeout_s with no request
    connections_stalled: int  # closed: a reply not taken within frame_timeout_s
    accept_failures: int
    buffered_bytes: int  # read budget held by bodies being read or answered now
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
        case LLMError() | BudgetExhausted() | WriteFailed():
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
        inline: frozenset[str] = frozenset(),
        limits: ServeLimits | None = None,
        own_uid: int | None = None,
        peer_cap: int | None = None,
    ) -> None:
        self.path = path
        self.methods = methods
        self.max_frame_bytes = max_frame_bytes
        self.request_timeout = request_timeout
        # Methods that legitimately run long (a summary call, waiting for an extraction)
        # name their own limit; everything else gets request_timeout.
        self.method_timeouts = dict(method_timeouts or {})
        self.max_in_flight = max_in_flight
        self.inline = inline
        self.limits = limits or ServeLimits()
        self.budget = ReadBudget(
            body_budget(self.limits.max_buffered_bytes, self.limits.max_connections)
        )
        # The uid peers must have: the daemon's own (a test may name another one).
        self.own_uid = os.getuid() if own_uid is None else own_uid
        self.shares = WorkShares(
            max(1, self.limits.max_connections // 2) if peer_cap is None else peer_cap
        )
        self._accepting = True
        self._accept_scope = anyio.CancelScope()
        self._inode: int | None = None
        self._connections: set[Connection] = set()
        self._idle: anyio.Event | None = None  # made by wait_idle, set when in-flight hits 0
        self._in_flight = 0
        self._connections_total = 0
        self._refused = 0
        self._busy = 0
        self._turning_away = 0
        self._evicted = 0
        self._idle_closed = 0
        self._stalled = 0
        self._accept_failures = 0
        self._requests = 0
        self._errors: Counter[str] = Counter()
        self._pack: Callable[[Any], bytes] = p.pack

    def use_packer(self, pack: Callable[[Any], bytes]) -> None:
        """Encode replies with ``pack`` (an object to its msgpack bytes) from now on.

        The daemon hands over msgspec's encoder once the features have loaded it: ~3x faster
        than ``msgpack.packb`` on a status map, and not worth its 15 ms import before READY.
        Both write the same bytes for what handlers return (tests/test_ipc_server.py)."""
        self._pack = pack

    async def run(self, *, task_status: anyio.abc.TaskStatus[Server]) -> None:
        await anyio.to_thread.run_sync(prepare_runtime_dir, self.path.parent)
        await clear_stale_socket(self.path)
        listener = await anyio.create_unix_listener(self.path, mode=0o600)
        self._inode = socket_inode(self.path)
        log.info("serving on %s", self.path)
        for warning in limit_warnings(self.limits, self.max_frame_bytes):
            log.warning("%s", warning)
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
            connections_busy=self._busy,
            connections_evicted=self._evicted,
            connections_idle_closed=self._idle_closed,
            connections_stalled=self._stalled,
            accept_failures=self._accept_failures,
            buffered_bytes=self.budget.used,
            requests_total=self._requests,
            requests_in_flight=self._in_flight,
            errors=dict(self._errors),
        )

    async def _accept_loop(self, listener: anyio.abc.SocketListener, tg: TaskGroup) -> None:
        backoff = 0.0  # > 0 while a burst of accept failures lasts
        made_room = False  # a descriptor was freed for the accept that follows
        while True:
            try:
                stream = await listener.accept()
            except anyio.BrokenResourceError as exc:
                cause = exc.__cause__
                if not isinstance(cause, OSError) or cause.errno not in _EXHAUSTION:
                    raise
                # Out of descriptors: an idle connection gives its own up, once per accept.
                if cause.errno == errno.EMFILE and not made_room and self._make_room():
                    made_room = True
                    continue
                # Out of memory, or nothing idle to close: keep the connections we have and
                # try again later rather than dying (the trio serve_listeners policy); one
                # log line per burst, and a growing pause so the loop never spins.
                self._accept_failures += 1
                CHANGES.bump()
                if not backoff:
                    log.error("accept failed (%s); backing off until it recovers", cause)
                backoff = min(_ACCEPT_BACKOFF_MAX, max(_ACCEPT_BACKOFF_FIRST, backoff * 2))
                await anyio.sleep(backoff)
                continue
            made_room = False
            if backoff:
                log.warning("accepting again after %d failed attempts", self._accept_failures)
                backoff = 0.0
            if len(self._connections) < self.limits.max_connections or self._make_room():
                tg.start_soon(self._serve, stream)
            else:
                tg.start_soon(self._turn_away, stream)

    def _make_room(self) -> bool:
        """Close the connection longest without a whole frame, of those with no request in
        flight (silent, or sending a frame slowly), for a new one; False when every one has
        a request in flight."""
        oldest_first = sorted(self._connections, key=attrgetter("idle_since"))
        connection = next((c for c in oldest_first if c.between_requests()), None)
        if connection is None:
            return False
        self._evicted += 1  # counted as a change by the drop below
        if self._evicted == 1 or self._evicted % 1000 == 0:
            log.warning(
                "at the limit of %d connections (or of descriptors); closed %d idle ones to"
                " make room so far",
                self.limits.max_connections,
                self._evicted,
            )
        limit = self.limits.max_connections
        self._drop(
            connection,
            p.BUSY,
            f"memd is serving its limit of {limit} connections and closed this one, the"
            " longest without a request, to make room; reconnect to go on",
        )
        return True

    def close_idle(self, connection: Connection) -> None:
        """Close a connection idle for ``idle_timeout_s`` (its own timer calls this)."""
        self._idle_closed += 1  # counted as a change by the drop below
        limit = self.limits.idle_timeout_s
        self._drop(
            connection,
            p.TIMEOUT,
            f"no request for {limit:g}s (ipc.idle_timeout_s): memd closed this idle"
            " connection; reconnect to go on",
        )

    def note_stalled(self) -> None:
        self._stalled += 1
        CHANGES.bump()

    def _drop(self, connection: Connection, code: str, message: str) -> None:
        self._connections.discard(connection)
        CHANGES.bump()
        connection.close_now(p.encode_frame(p.failure(None, code, message)))

    async def _turn_away(self, stream: SocketStream) -> None:
        """At the connection limit with every connection at work: a ``busy`` error frame,
        then close (at once, with no frame, past :data:`MAX_TURNING_AWAY` of them)."""
        self._busy += 1
        CHANGES.bump()
        if self._busy == 1 or self._busy % 1000 == 0:
            log.warning(
                "at the limit of %d connections, each with a request in flight; turned %d"
                " away so far",
                self.limits.max_connections,
                self._busy,
            )
        async with stream:
            if self._turning_away >= MAX_TURNING_AWAY:
                return
            self._turning_away += 1
            try:
                message = (
                    f"memd is serving its limit of {self.limits.max_connections} connections,"
                    " each with a request in flight"
                )
                connection = Connection(self, stream.extra(SocketAttribute.raw_socket))
                with anyio.move_on_after(self.limits.frame_timeout_s):
                    await connection.refuse(self.error_frame(None, p.BUSY, message))
            finally:
                self._turning_away -= 1

    async def _serve(self, stream: SocketStream) -> None:
        self._connections_total += 1
        connection = Connection(self, stream.extra(SocketAttribute.raw_socket))
        self._connections.add(connection)
        CHANGES.bump()  # ``ipc.connections_open`` in ``status``, as each refusal and close
        try:
            async with stream:
                match self._check_peer(stream):
                    case Deny(reason=reason):
                        self._refused += 1
                        CHANGES.bump()
                        log.warning("refused a connection: %s", reason)
                        await connection.refuse(self.error_frame(None, p.FORBIDDEN, reason))
                    case Allow():
                        if not self._accepting:
                            connection.stop_reading()
                        connection.peer = peer_pid(stream.extra(SocketAttribute.raw_socket))
                        await connection.run()
        except Exception:
            log.exception("a connection failed; it is closed, the others go on")
        finally:
            self._connections.discard(connection)
            CHANGES.bump()

    def _check_peer(self, stream: SocketStream) -> Allow | Deny:
        try:
            uid = peer_uid(stream.extra(SocketAttribute.raw_socket))
        except OSError as exc:
            return Deny(f"cannot read the peer's credentials: {exc}")
        return check_peer(uid, self.own_uid)

    # -- requests ------------------------------------------------------------------------------

    def error_frame(self, rid: p.RequestId | None, code: str, message: str) -> bytes:
        self._errors[code] += 1
        return p.encode_frame(p.failure(rid, code, encodable(message)))

    async def answer(self, request: p.Request) -> bytes:
        """The encoded reply to one request, under its timeout; never raises except on
        cancellation."""
        self._requests += 1
        handler = self.methods.get(request.method)
        if handler is None:
            return self._unknown(request)
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

    async def answer_inline(self, request: p.Request) -> bytes:
        """Like :meth:`answer` for a handler that does not wait on I/O: no timeout scope."""
        self._requests += 1
        handler = self.methods.get(request.method)
        if handler is None:
            return self._unknown(request)
        if not self._accepting:
            return self.error_frame(request.id, p.UNAVAILABLE, "memd is shutting down")
        try:
            return self._encode_result(request, await handler(request.params))
        except Exception as exc:  # noqa: BLE001 - the per-request isolation boundary
            return self._error_for(request, exc)

    def _unknown(self, request: p.Request) -> bytes:
        return self.error_frame(
            request.id, p.UNKNOWN_METHOD, f"memd has no method {request.method!r}"
        )

    def _encode_result(self, request: p.Request, result: Any) -> bytes:
        try:
            try:
                return self._frame(request, result)
            except UnicodeEncodeError:  # a name no handler escaped: as the others are
                return self._frame(request, encodable(result))
        except p.FrameTooLarge as exc:
            message = f"the result of {request.method} is too large ({exc.size} bytes)"
        except (TypeError, ValueError, OverflowError, RecursionError) as exc:
            log.error("result of %s cannot be encoded: %s", request.method, exc)
            message = f"the result of {request.method} cannot be encoded"
        return self.error_frame(request.id, p.INTERNAL, message)

    def _frame(self, request: p.Request, result: Any) -> bytes:
        return p.encode_frame(
            p.success(request.id, result), max_frame_bytes=self.max_frame_bytes, packer=self._pack
        )

    def _error_for(self, request: p.Request, exc: Exception) -> bytes:
        code = error_code_for(exc)
        if code == p.INTERNAL:
            log.exception("%s failed", request.method)
            message = f"{request.method} failed ({type(exc).__name__}); see the memd log"
        else:
            message = str(exc) or type(exc).__name__
        return self.error_frame(request.id, code, message)

    def peer_busy(self, rid: p.RequestId) -> bytes:
        """The reply to a request past its process's share (:class:`WorkShares`)."""
        limit = self.limits.max_connections
        return self.error_frame(
            rid,
            p.BUSY,
            f"this process has requests in flight on {self.shares.cap} connections, as many as"
            f" one client may of memd's {limit} (ipc.max_connections): wait for their replies",
        )

    def begin_request(self) -> None:
        self._in_flight += 1

    def end_request(self) -> None:
        self._in_flight -= 1
        if self._in_flight == 0 and self._idle is not None:
            self._idle.set()
            self._idle = None


async def run_server(
    path: Path,
    methods: Mapping[str, Handler],
    *,
    max_frame_bytes: int,
    request_timeout: float,
    method_timeouts: Mapping[str, float] | None = None,
    inline: frozenset[str] = frozenset(),
    limits: ServeLimits | None = None,
    own_uid: int | None = None,
    peer_cap: int | None = None,
    task_status: anyio.abc.TaskStatus[Server] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``methods`` on the Unix socket ``path`` until cancelled (see the module doc).

    Creates the socket's directory 0700 if missing and refuses a symlink or one that belongs
    to another user or is open to group or others (:class:`StartupError`); removes a stale
    socket file nobody answers on; binds 0600; passes the :class:`Server` to
    ``task_status.started``; unlinks the socket on the way out.
    """
    server = Server(
        path,
        methods,
        max_frame_bytes=max_frame_bytes,
        request_timeout=request_timeout,
        method_timeouts=method_timeouts,
        inline=inline,
        limits=limits,
        own_uid=own_uid,
        peer_cap=peer_cap,
    )
    await server.run(task_status=task_status)
