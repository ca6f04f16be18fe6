"""Blocking and asyncio clients for the memd daemon.

Imports the standard library and msgpack only (asyncio lazily, on first use of
:class:`AsyncClient`), so a hook process that imports this module starts fast.

    with Client() as memd:                      # the socket from memd_client.paths
        memd.hello()
        status = memd.call("status")

    async with AsyncClient() as memd:
        notes = await memd.call("notes", {"session_id": sid})

Both connect on the first call and reconnect on the next call after a timeout or a lost
connection. ``timeout`` bounds a whole call: connecting, sending and waiting for the reply.
One client runs one call at a time; use one client per concurrent caller.
"""

from __future__ import annotations

import errno
import itertools
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from memd_client.errors import (
    ClientTimeout,
    ConnectionLost,
    DaemonBusy,
    DaemonNotRunning,
    MemdClientError,
    ProtocolMismatch,
    RemoteError,
)
from memd_client.names import encodable
from memd_client.paths import socket_path
from memd_client.protocol import (
    DEFAULT_MAX_FRAME_BYTES,
    PROTOCOL_VERSION,
    Failure,
    FrameDecoder,
    FrameError,
    ProtocolProblem,
    RequestId,
    Success,
    encode_frame,
    parse_response,
    request,
)

if TYPE_CHECKING:
    import asyncio

_NOT_RUNNING = frozenset({errno.ENOENT, errno.ECONNREFUSED, errno.ENOTDIR})
_CHUNK = 256 * 1024


def _connect_error(path: Path, exc: OSError) -> MemdClientError:
    if exc.errno in _NOT_RUNNING:
        return DaemonNotRunning(path)
    return MemdClientError(f"cannot connect to memd at {path}: {exc.strerror or exc}")


def _reply_for(frame: dict[str, Any], rid: RequestId) -> Success | Failure | None:
    """The reply to request ``rid`` (or a connection-level failure), ``None`` for another id."""
    reply = parse_response(frame)
    match reply:
        case ProtocolProblem(message=message):
            raise ProtocolMismatch(f"unreadable reply from memd: {message}")
        case Failure(id=None):
            return reply
        case Success(id=reply_id) | Failure(id=reply_id):
            return reply if reply_id == rid else None


def _outcome(reply: Success | Failure, path: Path) -> Any:
    match reply:
        case Success(result=result):
            return result
        case Failure(code="busy", message=message):
            raise DaemonBusy(path, message)
        case Failure(code=code, message=message):
            raise RemoteError(code, message)


def _hello_params() -> dict[str, Any]:
    return {"protocol": PROTOCOL_VERSION, "client": "memd_client"}


def _checked_hello(result: Any) -> dict[str, Any]:
    theirs = result.get("protocol") if isinstance(result, dict) else None
    if theirs != PROTOCOL_VERSION:
        raise ProtocolMismatch(
            f"memd speaks protocol {theirs!r}, this client speaks {PROTOCOL_VERSION}; "
            "upgrade the older of the two"
        )
    return result  # type: ignore[no-any-return]


def request_frame(rid: RequestId, method: str, params: dict[str, Any] | None) -> bytes:
    """The request's frame; a name in ``params`` that is not UTF-8 (a path or id given as
    raw bytes on the command line) goes as memd shows names: escaped (memd_client.names)."""
    try:
        return encode_frame(request(rid, method, params))
    except UnicodeEncodeError:
        return encode_frame(request(rid, method, encodable(params)))


class Client:
    """Blocking client over one Unix-socket connection."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        timeout: float = 2.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        self.path = socket_path() if path is None else path
        self.timeout = timeout
        self._max_frame_bytes = max_frame_bytes
        self._ids = itertools.count(1)
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder(max_frame_bytes)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def hello(self) -> dict[str, Any]:
        """Exchange protocol versions; raises :class:`ProtocolMismatch` when they differ."""
        return _checked_hello(self.call("hello", _hello_params()))

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call ``method``; its result, or :class:`RemoteError` carrying the daemon's code."""
        rid = next(self._ids)
        payload = request_frame(rid, method, params)
        deadline = time.monotonic() + self.timeout
        try:
            reply = self._exchange(payload, rid, deadline)
        except TimeoutError:
            self.close()
            raise ClientTimeout(f"memd did not answer {method!r} within {self.timeout}s") from None
        except BaseException:
            self.close()
            raise
        if reply.id is None:
            self.close()  # the daemon closes after a connection-level failure
        return _outcome(reply, self.path)

    def _exchange(self, payload: bytes, rid: RequestId, deadline: float) -> Success | Failure:
        sock = self._connected(deadline)
        try:
            sock.settimeout(_remaining(deadline))
            sock.sendall(payload)
            while True:
                frame = self._next_frame(sock, deadline)
                reply = _reply_for(frame, rid)
                if reply is not None:
                    return reply
        except FrameError as exc:
            raise ProtocolMismatch(f"unreadable frame from memd: {exc}") from None
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ConnectionLost(f"memd closed the connection: {exc.strerror}") from None

    def _connected(self, deadline: float) -> socket.socket:
        if self._sock is not None:
            if not _closed_by_daemon(self._sock):
                return self._sock
            self.close()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.settimeout(_remaining(deadline))
            sock.connect(str(self.path))
        except TimeoutError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            raise _connect_error(self.path, exc) from None
        self._sock = sock
        self._decoder = FrameDecoder(self._max_frame_bytes)
        return sock

    def _next_frame(self, sock: socket.socket, deadline: float) -> dict[str, Any]:
        while (frame := self._decoder.next_frame()) is None:
            sock.settimeout(_remaining(deadline))
            data = sock.recv(_CHUNK)
            if not data:
                raise ConnectionLost("memd closed the connection before answering")
            self._decoder.receive_data(data)
        return frame


def _closed_by_daemon(sock: socket.socket) -> bool:
    """Whether a connection kept between calls was closed by memd meanwhile (idle past
    ``ipc.idle_timeout_s``, or closed to make room): with no call outstanding, anything to
    read (its notice, the end of the stream) says so, and the next call reconnects rather
    than fail. A peek that does not wait."""
    timeout = sock.gettimeout()
    sock.setblocking(False)
    try:
        sock.recv(1, socket.MSG_PEEK)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        sock.settimeout(timeout)
    return True


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


class AsyncClient:
    """asyncio client over one Unix-socket connection; calls are serialised by a lock."""

    def __init__(
        self,
        path: Path | None = None,
        *,
        timeout: float = 2.0,
        max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES,
    ) -> None:
        import asyncio

        self.path = socket_path() if path is None else path
        self.timeout = timeout
        self._max_frame_bytes = max_frame_bytes
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._decoder = FrameDecoder(max_frame_bytes)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        writer = self._drop()
        if writer is not None:
            try:
                await writer.wait_closed()
            except OSError:
                pass  # the daemon went first; the connection is closed either way

    def _drop(self) -> asyncio.StreamWriter | None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
        return writer

    async def hello(self) -> dict[str, Any]:
        """Exchange protocol versions; raises :class:`ProtocolMismatch` when they differ."""
        return _checked_hello(await self.call("hello", _hello_params()))

    async def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """Call ``method``; its result, or :class:`RemoteError` carrying the daemon's code."""
        import asyncio

        rid = next(self._ids)
        payload = request_frame(rid, method, params)
        async with self._lock:
            try:
                async with asyncio.timeout(self.timeout):
                    reply = await self._exchange(payload, rid)
            except TimeoutError:
                self._drop()
                raise ClientTimeout(
                    f"memd did not answer {method!r} within {self.timeout}s"
                ) from None
            except BaseException:
                self._drop()
                raise
            if reply.id is None:
                self._drop()
        return _outcome(reply, self.path)

    async def _exchange(self, payload: bytes, rid: RequestId) -> Success | Failure:
        reader, writer = await self._connected()
        try:
            writer.write(payload)
            await writer.drain()
            while True:
                reply = _reply_for(await self._next_frame(reader), rid)
                if reply is not None:
                    return reply
        except FrameError as exc:
            raise ProtocolMismatch(f"unreadable frame from memd: {exc}") from None
        except (BrokenPipeError, ConnectionResetError) as exc:
            raise ConnectionLost(f"memd closed the connection: {exc.strerror}") from None

    async def _connected(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        import asyncio

        if self._reader is not None and self._writer is not None:
            return self._reader, self._writer
        try:
            reader, writer = await asyncio.open_unix_connection(str(self.path), limit=_CHUNK)
        except OSError as exc:
            raise _connect_error(self.path, exc) from None
        self._reader, self._writer = reader, writer
        self._decoder = FrameDecoder(self._max_frame_bytes)
        return reader, writer

    async def _next_frame(self, reader: asyncio.StreamReader) -> dict[str, Any]:
        while (frame := self._decoder.next_frame()) is None:
            data = await reader.read(_CHUNK)
            if not data:
                raise ConnectionLost("memd closed the connection before answering")
            self._decoder.receive_data(data)
        return frame
