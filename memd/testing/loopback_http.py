"""HTTP plumbing of the loopback server: a threading HTTP/1.1 server that hands every request
to a :class:`Backend` and sends back what it decides. No decisions are made here."""

from __future__ import annotations

import itertools
import json
import socket
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from memd.testing.loopback_replies import ApiError, Drop, Message, Reply


class Backend(Protocol):
    def serve(
        self, method: str, path: str, headers: Mapping[str, str], raw: bytes
    ) -> tuple[Reply, Any]:
        """The reply to one request; for a :class:`Message`, the JSON body to send with 200."""
        ...


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


def _shutdown(conn: socket.socket) -> None:
    try:
        conn.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed by the peer


def json_reply(payload: Any) -> tuple[Reply, Any]:
    """A 200 answer with ``payload`` (for the control endpoints)."""
    return Message(()), payload
