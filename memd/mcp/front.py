"""``memd-mcp``'s first answers, before the MCP SDK is loaded (issue 38).

An agent offers an MCP server's tools from the first request on that finds them listed, and
does not wait long for them: Claude Code 2.1.332 gives up its ``server/discover`` probe after
about 3 s, and a ``claude -p`` sends its first model request meanwhile. Importing the SDK
(pydantic and its protocol types) takes 26 times the start of a bare Python, 0.6 s on a quiet
machine and 2 s or more on a loaded one: a ``claude -p`` went out with no memd tool. The SDK
still serves memd's tools; what an agent asks first is static, and this module answers it
with the SDK's own answers, kept in ``listing.json`` beside it (``python -m
memd.mcp.listing`` writes them; ``tests/test_mcp_front.py`` checks them against the SDK):

* the handshake era (the client's first request is ``initialize``): ``initialize`` (the
  version negotiated as the SDK does), ``notifications/initialized``, ``tools/list`` and
  ``ping``, until the first line it does not answer; from then on every line goes to the SDK
  server, which first gets the ``initialize`` and ``initialized`` seen (its answer to that
  ``initialize``, given already, is dropped);
* the 2026 era (the first request carries the ``_meta`` envelope, as Claude Code 2.1.332
  sends it): each request stands alone, so ``server/discover``, ``tools/list``,
  ``prompts/list`` and ``resources/templates/list`` with a plain, complete envelope are
  answered here all along, and so is ``subscriptions/listen`` (Claude Code waits for its
  acknowledgement before it lists anything): acknowledged as the SDK does (every kind asked
  for is honoured), then left open with nothing to say, since memd's tools, prompts and
  resource templates never change; ``resources/list`` is answered from the daemon in a
  thread (:mod:`memd.mcp.resources`, the msgpack client), as the SDK server answers it in
  this era; every other line (a tool call, a resource read) goes to the SDK server.

The SDK server runs in a thread of its own (:func:`memd.mcp.server.serve_lines`), started
once the first request is answered, so it is loaded by the time a tool is called; it and
this module write whole lines under one lock. A line neither era's rules take (not JSON-RPC,
a request before the era is known that is not one of the above) goes to the SDK, which
answers it as it always did.

Imports only what the interpreter's start has, ``json``, ``queue`` and ``threading``.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
from dataclasses import dataclass
from typing import Any, BinaryIO, Literal

LISTING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "listing.json")
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
MODERN_VERSIONS = ("2026-07-28",)
META = "io.modelcontextprotocol/"
VERSION_KEY = META + "protocolVersion"
ENVELOPE_KEYS = frozenset({VERSION_KEY, META + "clientInfo", META + "clientCapabilities"})
MAX_LISTING_BYTES = 1 << 20
# The 2026 era's static requests: the listing's answer to each (no cursor, no other params).
MODERN_ANSWERS = ("server/discover", "tools/list", "prompts/list", "resources/templates/list")
LISTEN = "subscriptions/listen"
SUBSCRIPTION_ID_KEY = META + "subscriptionId"
LISTEN_FLAGS = ("toolsListChanged", "promptsListChanged", "resourcesListChanged")

RESOURCES = "resources/list"

Era = Literal["handshake", "modern"]
SDK = False  # the line goes to the SDK server


@dataclass(frozen=True)
class Later:
    """Answer ``resources/list`` (request ``ident``) once the daemon has said which."""

    ident: object
    template: dict[str, Any]


class Front:
    """What the front answers; :meth:`answer` is pure given the listing."""

    def __init__(self, listing: dict[str, Any]) -> None:
        self.listing = listing
        self.era: Era | None = None
        self.handed_over = False  # handshake era: the SDK server took the connection
        self.initialize_id: object = None  # the initialize answered here (dropped from the SDK)
        self.replay: list[bytes] = []  # handshake era: the lines the SDK must see first

    def answer(self, line: bytes) -> bytes | Later | bool | None:
        """The reply line for ``line``; :class:`Later` for ``resources/list``; None when
        nothing is to be replied (a notification taken); :data:`SDK` (False) when the line
        goes to the SDK server."""
        if self.handed_over:
            return SDK
        message = _message(line)
        if message is None:
            return self._to_sdk()
        method, ident, params = message
        if self.era is None and ident is not None:
            self.era = "modern" if _enveloped(params) else "handshake"
        if self.era == "modern":
            return self._modern(method, ident, params)
        if self.era == "handshake":
            return self._handshake(line, method, ident, params)
        return self._to_sdk()

    def _to_sdk(self) -> bool:
        if self.era != "modern":
            self.handed_over = True
        return SDK

    def _modern(self, method: str, ident: object, params: Any) -> bytes | Later | bool:
        if ident is None or not _enveloped(params):
            return SDK
        if method == LISTEN and set(params) == {"_meta", "notifications"}:
            ack = _acknowledged(ident, params["notifications"])
            return ack if ack is not None and self._plain(params["_meta"]) else SDK
        if method not in (*MODERN_ANSWERS, RESOURCES) or set(params) != {"_meta"}:
            return SDK
        if not self._plain(params["_meta"]):
            return SDK
        if method == RESOURCES:
            return Later(ident, self.listing["modern"][method])
        return _reply(ident, self.listing["modern"][method])

    @staticmethod
    def _plain(meta: Any) -> bool:
        """Whether ``meta`` is a complete 2026 envelope and nothing else."""
        if not isinstance(meta, dict) or set(meta) - ENVELOPE_KEYS:
            return False
        info, capabilities = meta.get(META + "clientInfo"), meta.get(META + "clientCapabilities")
        if meta.get(VERSION_KEY) not in MODERN_VERSIONS or not _capabilities(capabilities):
            return False
        return info is None or _implementation(info)

    def _handshake(
        self, line: bytes, method: str, ident: object, params: Any
    ) -> bytes | bool | None:
        if method == "initialize" and ident is not None and self.initialize_id is None:
            result = self._initialized(params)
            if result is None:
                return self._to_sdk()
            self.initialize_id = ident
            self.replay.append(line)
            return _reply(ident, result)
        if self.initialize_id is None or _enveloped(params):
            return self._to_sdk()
        if method == "notifications/initialized" and ident is None:
            self.replay.append(line)
            return None
        if ident is not None and method == "ping" and not params:
            return _reply(ident, {})
        if ident is not None and method == "tools/list" and not params:
            return _reply(ident, self.listing["handshake"]["tools/list"])
        return self._to_sdk()

    def _initialized(self, params: Any) -> dict[str, Any] | None:
        """The initialize result for ``params``, or None when they are not plainly valid
        (the SDK then answers, with its own error)."""
        if not isinstance(params, dict) or set(params) - {
            "protocolVersion",
            "capabilities",
            "clientInfo",
        }:
            return None
        version = params.get("protocolVersion")
        if not isinstance(version, str) or not _capabilities(params.get("capabilities")):
            return None
        if not _implementation(params.get("clientInfo")):
            return None
        negotiated = version if version in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]
        return {**self.listing["handshake"]["initialize"], "protocolVersion": negotiated}


def _message(line: bytes) -> tuple[str, object, Any] | None:
    """(method, id or None, params or {}) of a JSON-RPC request or notification line."""
    try:
        data = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("jsonrpc") != "2.0":
        return None
    method, ident, params = data.get("method"), data.get("id"), data.get("params")
    if not isinstance(method, str) or isinstance(ident, bool) or "result" in data:
        return None
    if ident is not None and not isinstance(ident, int | str):
        return None
    if "id" in data and ident is None:
        return None  # a null id is neither a request nor a notification
    if params is not None and not isinstance(params, dict):
        return None
    return method, ident, params or {}


def _acknowledged(ident: object, asked: object) -> bytes | None:
    """The SDK's acknowledgement of a ``subscriptions/listen`` asking for ``asked`` (every
    kind honoured, false flags and an empty list left out), or None when ``asked`` is not
    plainly valid."""
    if not isinstance(asked, dict) or set(asked) - {*LISTEN_FLAGS, "resourceSubscriptions"}:
        return None
    if not all(isinstance(asked.get(k), bool | None) for k in LISTEN_FLAGS):
        return None
    uris = asked.get("resourceSubscriptions")
    if uris is not None and not (isinstance(uris, list) and all(isinstance(u, str) for u in uris)):
        return None
    honoured: dict[str, object] = {k: True for k in LISTEN_FLAGS if asked.get(k)}
    if uris:
        honoured["resourceSubscriptions"] = uris
    params = {"_meta": {SUBSCRIPTION_ID_KEY: ident}, "notifications": honoured}
    body = {
        "jsonrpc": "2.0",
        "method": "notifications/subscriptions/acknowledged",
        "params": params,
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def _enveloped(params: Any) -> bool:
    meta = params.get("_meta") if isinstance(params, dict) else None
    return isinstance(meta, dict) and VERSION_KEY in meta


def _capabilities(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())


def _implementation(value: object) -> bool:
    return isinstance(value, dict) and all(
        isinstance(value.get(k), str) for k in ("name", "version")
    )


def _reply(ident: object, result: dict[str, Any]) -> bytes:
    body = {"jsonrpc": "2.0", "id": ident, "result": result}
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


def load_listing() -> dict[str, Any] | None:
    """The SDK's answers kept beside this module, or None when they cannot be read (the SDK
    then answers everything)."""
    try:
        with open(LISTING, "rb") as f:
            data = json.loads(f.read(MAX_LISTING_BYTES))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    if not all(isinstance(data.get(k), dict) for k in ("handshake", "modern")):
        return None
    return data


class Wire:
    """stdout, written a whole line at a time by the front and the SDK server's thread."""

    def __init__(self, stdout: BinaryIO) -> None:
        self._out = stdout
        self._lock = threading.Lock()

    def write(self, line: bytes) -> None:
        with self._lock:
            self._out.write(line)
            self._out.flush()


class Backend:
    """The SDK server in its thread, fed line by line; started when first needed."""

    def __init__(self, wire: Wire) -> None:
        self._wire = wire
        self._lines: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self.fed = False

    def start(self, drop_id: object) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=_run_sdk, args=(self._lines, self._wire.write, drop_id), daemon=True
            )
            self._thread.start()

    def feed(self, line: bytes) -> None:
        self.fed = True
        self._lines.put(line)

    def close(self) -> None:
        """The client closed stdin: the SDK server ends once it has answered what it was
        fed (it was never fed: the process ends without waiting for it to load)."""
        self._lines.put(None)
        if self._thread is not None and self.fed:
            self._thread.join()


def _list_resources(later: Later, wire: Wire) -> None:
    resources: list[Any] = []
    try:
        from memd.mcp.resources import memory_resources_nowait_roots

        resources = memory_resources_nowait_roots()
    finally:  # answered whatever happens: the agent waits for it before offering the tools
        wire.write(_reply(later.ident, {**later.template, "resources": resources}))


def _run_sdk(lines: queue.SimpleQueue[bytes | None], write: Any, drop_id: object) -> None:
    try:
        from memd.mcp.server import serve_lines
    except Exception as exc:  # noqa: BLE001 - a broken install: each request passed on says why
        reason = f"memd-mcp cannot load the MCP SDK ({exc!r}); reinstall memd"
        _refuse(lines, write, drop_id, reason)
        return
    serve_lines(lines, write, drop_id)


def _refuse(
    lines: queue.SimpleQueue[bytes | None], write: Any, drop_id: object, reason: str
) -> None:
    while (line := lines.get()) is not None:
        message = _message(line)
        if message is not None and message[1] is not None and message[1] != drop_id:
            error = {"code": -32603, "message": reason}
            body = {"jsonrpc": "2.0", "id": message[1], "error": error}
            write(json.dumps(body).encode() + b"\n")


def serve(stdin: BinaryIO, backend: Backend, wire: Wire, listing: dict[str, Any] | None) -> None:
    """Read ``stdin`` to its end, answering what the front answers and feeding the rest
    to the SDK server. Blocking."""
    front = Front(listing) if listing is not None else None
    while line := stdin.readline():  # unbounded, as the SDK's own stdio reader
        if not line.strip():
            continue
        answered = front.answer(line) if front is not None else SDK
        if isinstance(answered, bytes):
            wire.write(answered)
        elif isinstance(answered, Later):
            threading.Thread(target=_list_resources, args=(answered, wire), daemon=True).start()
        if answered is not SDK:
            if front is not None and front.era is not None:
                backend.start(front.initialize_id)  # loaded by the first tool call
            continue
        backend.start(front.initialize_id if front is not None else None)
        if front is not None and front.replay:
            for replayed in front.replay:
                backend.feed(replayed)
            front.replay = []
        backend.feed(line)


def main() -> None:
    """``memd-mcp``: the front's answers, the SDK server for the rest."""
    wire = Wire(sys.stdout.buffer)
    backend = Backend(wire)
    try:
        serve(sys.stdin.buffer, backend, wire, load_listing())
    finally:
        backend.close()
