"""HTTP plumbing of the loopback server: a threading HTTP/1.1 server that hands every request
to a :class:`Backend` and sends back what it decides. No decisions are made here."""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol, Self

from memd.testing.loopback_replies import ApiError, Drop, Message, Reply


class Backend(Protocol):
    def serve(
        self, method: str, path: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[Reply, Any]:
        """The reply to one request; for a :class:`Message`, the JSON body to send with 200."""
        ...


@dataclass(frozen=True)
class Streamed:
    """A message answered as server-sent events (``"stream": true``, the real client's way)."""

    message: dict[str, Any]

    def events(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """The Messages API's event sequence for the whole message, one delta per block."""
        message, usage = self.message, self.message.get("usage") or {}
        start = {
            **message,
            "content": [],
            "stop_reason": None,
            "usage": {**usage, "output_tokens": 1},
        }
        yield "message_start", {"type": "message_start", "message": start}
        for index, block in enumerate(message.get("content") or []):
            yield from _block_events(index, block)
        delta = {"stop_reason": message.get("stop_reason"), "stop_sequence": None}
        tail = {"output_tokens": usage.get("output_tokens", 0)}
        yield "message_delta", {"type": "message_delta", "delta": delta, "usage": tail}
        yield "message_stop", {"type": "message_stop"}


@dataclass(frozen=True)
class Events:
    """Server-sent events of another wire (OpenAI's Responses API, Gemini's ``alt=sse``): each
    ``(name, data)`` is sent as ``event: name`` (left out when ``None``) and ``data: json``."""

    items: tuple[tuple[str | None, dict[str, Any]], ...]
    tail: str = ""  # a last ``data:`` line that is not JSON (Chat Completions' ``[DONE]``)

    def events(self) -> Iterator[tuple[str | None, dict[str, Any]]]:
        return iter(self.items)


def _block_events(index: int, block: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    kind = block.get("type")
    first: dict[str, Any]
    delta: dict[str, Any] | None
    if kind == "text":
        first, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": block["text"]}
    elif kind == "tool_use":
        first = {**block, "input": {}}
        delta = {"type": "input_json_delta", "partial_json": json.dumps(block.get("input", {}))}
    else:
        first, delta = block, None
    yield (
        "content_block_start",
        {"type": "content_block_start", "index": index, "content_block": first},
    )
    if delta is not None:
        yield "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
    yield "content_block_stop", {"type": "content_block_stop", "index": index}


class HTTPFrontend(ThreadingHTTPServer):
    """Serves ``backend`` on ``address``; :meth:`cut_connections` ends kept-alive ones."""

    daemon_threads = True

    def __init__(self, address: tuple[str, int], backend: Backend) -> None:
        super().__init__(address, _RequestHandler)
        self.backend = backend
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._request_ids = itertools.count(1)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host!s}:{port}"

    def track(self, conn: socket.socket, is_open: bool) -> None:
        with self._lock:
            if is_open:
                self._open.add(conn)
            else:
                self._open.discard(conn)

    def cut_connections(self) -> None:
        with self._lock:
            conns = list(self._open)
        for conn in conns:
            _shutdown(conn)

    def next_request_id(self) -> str:
        with self._lock:
            return f"req_loop{next(self._request_ids):012d}"


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    disable_nagle_algorithm = True  # small replies would otherwise wait ~40 ms for an ACK
    timeout = 30  # an idle kept-alive connection is closed after this
    server: HTTPFrontend

    def setup(self) -> None:
        super().setup()
        self.server.track(self.connection, True)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self.server.track(self.connection, False)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests assert on the records, not on stderr

    def do_GET(self) -> None:
        self._serve("GET", b"")

    def do_POST(self) -> None:
        self._serve("POST", self.rfile.read(int(self.headers.get("content-length") or 0)))

    def _serve(self, method: str, raw: bytes) -> None:
        headers = {name.lower(): value for name, value in self.headers.items()}
        reply, payload = self.server.backend.serve(method, self.path.split("?", 1)[0], headers, raw)
        match reply:
            case Message() if isinstance(payload, Streamed | Events):
                self._send_events(payload)
            case Message():
                self._send_json(200, payload)
            case ApiError():
                request_id = self.server.next_request_id()
                self._send_json(reply.status, reply.body(request_id), reply.headers, request_id)
            case Drop():
                self.close_connection = True
                _shutdown(self.connection)

    def _send_json(
        self,
        status: int,
        payload: Any,
        headers: tuple[tuple[str, str], ...] = (),
        request_id: str | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", request_id or self.server.next_request_id())
            for name, value in headers:
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True  # the client gave up (timeout) or we are closing

    def _send_events(self, stream: Streamed | Events) -> None:
        data = b"".join(
            (f"event: {name}\n" if name else "").encode()
            + f"data: {json.dumps(event)}\n\n".encode()
            for name, event in stream.events()
        )
        if isinstance(stream, Events) and stream.tail:
            data += f"data: {stream.tail}\n\n".encode()
        try:
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("cache-control", "no-cache")
            self.send_header("content-length", str(len(data)))
            self.send_header("request-id", self.server.next_request_id())
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            self.close_connection = True


class Served:
    """A :class:`Backend` served by an :class:`HTTPFrontend` on a thread of its own: the
    start, address and stop that :class:`~.loopback.LoopbackAPI` and
    :class:`~.loopback_agents.LoopbackAgentAPI` share (a ``with`` block serves and stops)."""

    def __init__(self, address: tuple[str, int]) -> None:
        self._address = address
        self._server: HTTPFrontend | None = None
        self._thread: threading.Thread | None = None

    def serve(
        self, method: str, path: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[Reply, Any]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        """``http://127.0.0.1:PORT`` (no trailing slash): the clients' base URL."""
        if self._server is None:
            raise RuntimeError("the loopback server is not started")
        return self._server.url

    def start(self) -> Self:
        self._server = HTTPFrontend(self._address, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving: no new connection, kept-alive ones cut, the thread joined."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.cut_connections()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the peer


def json_reply(payload: Any) -> tuple[Reply, Any]:
    """A 200 answer with ``payload`` (for the control endpoints)."""
    return Message(()), payload
