"""The wire protocol shared by the daemon and its clients. Pure: no I/O, stdlib + msgpack only.

A frame is a 4-byte big-endian body length followed by a body that is one msgpack map.

    request   {"id": int | str, "method": str, "params": map}      (params optional, default {})
    success   {"id": <request id>, "result": <any msgpack value>}
    failure   {"id": <request id> | nil, "error": {"code": str, "message": str}}

A failure with a nil id answers something that could not be read as a request (a bad frame,
an oversize length prefix, a refused peer); after such a reply the daemon closes the
connection. Replies on one connection may come in any order: match them by id.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Mapping
from typing import Any, Final, NamedTuple

import msgpack

PROTOCOL_VERSION: Final = 1
DEFAULT_MAX_FRAME_BYTES: Final = 16 * 1024 * 1024
HEADER: Final = struct.Struct(">I")

# Error codes. The first nine are the contract in docs/ARCHITECTURE.md; then a refused peer,
# a request (or a frame) that ran past its deadline, and a daemon at its connection or read
# buffer limit (``busy``: clients treat it like a daemon that is down).
BAD_FRAME: Final = "bad_frame"
FRAME_TOO_LARGE: Final = "frame_too_large"
BAD_REQUEST: Final = "bad_request"
UNKNOWN_METHOD: Final = "unknown_method"
INVALID_PARAMS: Final = "invalid_params"
NOT_FOUND: Final = "not_found"
DISABLED: Final = "disabled"
UNAVAILABLE: Final = "unavailable"
INTERNAL: Final = "internal"
FORBIDDEN: Final = "forbidden"
TIMEOUT: Final = "timeout"
BUSY: Final = "busy"
ERROR_CODES: Final = frozenset(
    {
        BAD_FRAME,
        FRAME_TOO_LARGE,
        BAD_REQUEST,
        UNKNOWN_METHOD,
        INVALID_PARAMS,
        NOT_FOUND,
        DISABLED,
        UNAVAILABLE,
        INTERNAL,
        FORBIDDEN,
        TIMEOUT,
        BUSY,
    }
)

RequestId = int | str


class FrameError(Exception):
    """The byte stream cannot be read as frames; the connection cannot be resynchronised."""

    code: str = BAD_FRAME


class FrameTooLarge(FrameError):
    """A length prefix announced more than the frame size limit."""

    code = FRAME_TOO_LARGE

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"frame of {size} bytes exceeds the limit of {limit} bytes")
        self.size = size
        self.limit = limit


class BadFrame(FrameError):
    """A frame body that is not a single msgpack map."""


def _reject_ext(code: int, data: bytes) -> Any:
    raise BadFrame(f"msgpack extension type {code} is not allowed")


def pack(obj: Any) -> bytes:
    """``obj`` as msgpack: str as str, bytes as bin, no extension types."""
    return msgpack.packb(obj, use_bin_type=True, datetime=False)


def encode_frame(
    obj: Mapping[str, Any],
    *,
    max_frame_bytes: int | None = None,
    packer: Callable[[Any], bytes] = pack,
) -> bytes:
    """Length-prefixed msgpack of ``obj`` (written by ``packer``: the daemon's is msgspec's).

    Raises ``TypeError`` for values msgpack cannot encode and :class:`FrameTooLarge` when the
    body exceeds ``max_frame_bytes`` (if given).
    """
    body = packer(obj)
    if max_frame_bytes is not None and len(body) > max_frame_bytes:
        raise FrameTooLarge(len(body), max_frame_bytes)
    return HEADER.pack(len(body)) + body


# An empty map is one byte of msgpack and ~64 of Python: a 16 MiB frame of them decodes to
# 1.2 GiB in a second of the reader's time. Past COUNTED_BYTES, a body's maps and arrays are
# counted as they are built, and one with more than one per BYTES_PER_CONTAINER bytes is
# refused: the corpus' conversations, as a compact request carries them, have one every 173
# bytes or more, a `sessions` reply one every 250; that bounds what the maps and arrays of a
# refused body held to ~6x its size (tests/test_protocol.py measures it). Below
# COUNTED_BYTES, what a body grows to is small whatever it holds.
COUNTED_BYTES: Final = 64 * 1024
BYTES_PER_CONTAINER: Final = 32


class _ContainerCount:
    __slots__ = ("left",)

    def __init__(self, limit: int) -> None:
        self.left = limit

    def __call__(self, obj: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise BadFrame(
                f"frame body holds more maps and arrays than its size allows"
                f" (one per {BYTES_PER_CONTAINER} bytes)"
            )
        return obj


def decode_body(body: bytes, *, count_containers: bool = False) -> dict[str, Any]:
    """One frame body → its map. Raises :class:`BadFrame` for anything but one msgpack map.

    ``count_containers`` (the daemon, reading requests from any peer): a body past
    :data:`COUNTED_BYTES` made mostly of maps and arrays is refused too. Clients read the
    daemon's replies without it: a reply is built from transcripts, as dense as they are."""
    try:
        if not count_containers or len(body) <= COUNTED_BYTES:
            obj = msgpack.unpackb(body, raw=False, ext_hook=_reject_ext, strict_map_key=True)
        else:
            count = _ContainerCount(len(body) // BYTES_PER_CONTAINER)
            obj = msgpack.unpackb(
                body,
                raw=False,
                ext_hook=_reject_ext,
                strict_map_key=True,
                object_hook=count,
                list_hook=count,
            )
    except BadFrame:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        # ExtraData, FormatError, StackError and OutOfData are ValueError subclasses;
        # TypeError covers an unhashable (array) map key.
        raise BadFrame(f"frame body is not valid msgpack: {type(exc).__name__}") from None
    if not isinstance(obj, dict):
        raise BadFrame(f"frame body is a msgpack {type(obj).__name__}, not a map")
    return obj


class FrameDecoder:
    """Incremental frame reader: bytes in, maps out, in order, whatever the chunking.

    An oversize length prefix raises :class:`FrameTooLarge` as soon as the 4 header bytes are
    in, before any of the body is buffered. After a :class:`FrameError` the stream has no
    recoverable boundary, so the decoder stays failed and raises the same error again.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < 1:
            raise ValueError("max_frame_bytes must be positive")
        self._limit = max_frame_bytes
        self._buffer = bytearray()
        self._need: int | None = None  # body length once the header is read
        self._failed: FrameError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for a frame that is not complete yet."""
        return len(self._buffer)

    def receive_data(self, data: bytes) -> None:
        """Append bytes from the stream; call :meth:`next_frame` to take frames out."""
        if self._failed is None:
            self._buffer += data

    def next_frame(self) -> dict[str, Any] | None:
        """The next complete frame, or ``None`` until more bytes arrive."""
        if self._failed is not None:
            raise self._failed
        try:
            return self._next_frame()
        except FrameError as exc:
            self._failed = exc
            self._buffer.clear()
            raise

    def _next_frame(self) -> dict[str, Any] | None:
        if self._need is None:
            if len(self._buffer) < HEADER.size:
                return None
            (size,) = HEADER.unpack_from(self._buffer)
            if size > self._limit:
                raise FrameTooLarge(size, self._limit)
            del self._buffer[: HEADER.size]
            self._need = size
        if len(self._buffer) < self._need:
            return None
        body = bytes(self._buffer[: self._need])
        del self._buffer[: self._need]
        self._need = None
        return decode_body(body)

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        """Append ``data`` and return every frame it completed.

        On a :class:`FrameError` the frames completed before the bad one are lost to the
        caller; use :meth:`receive_data` and :meth:`next_frame` to act on them first.
        """
        self.receive_data(data)
        frames: list[dict[str, Any]] = []
        while (frame := self.next_frame()) is not None:
            frames.append(frame)
        return frames


# -- envelopes ------------------------------------------------------------------------------
# Immutable records as NamedTuples rather than frozen dataclasses: `dataclasses` pulls in
# `inspect` and would double the import time of a hook process.


class Request(NamedTuple):
    id: RequestId
    method: str
    params: dict[str, Any]


class Success(NamedTuple):
    id: RequestId
    result: Any


class Failure(NamedTuple):
    id: RequestId | None
    code: str
    message: str


class ProtocolProblem(NamedTuple):
    """A map that is not a well-formed envelope. ``id`` is kept when it was readable."""

    id: RequestId | None
    code: str
    message: str


def _is_id(value: object) -> bool:
    # bool is an int subclass; msgpack true/false is no id.
    return isinstance(value, int | str) and not isinstance(value, bool)


def request(id: RequestId, method: str, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return {"id": id, "method": method, "params": dict(params or {})}


def success(id: RequestId, result: Any) -> dict[str, Any]:
    return {"id": id, "result": result}


def failure(id: RequestId | None, code: str, message: str) -> dict[str, Any]:
    return {"id": id, "error": {"code": code, "message": message}}


def parse_request(obj: Mapping[str, Any]) -> Request | ProtocolProblem:
    """Check a decoded frame against the request envelope."""
    raw_id = obj.get("id")
    if not _is_id(raw_id):
        return ProtocolProblem(None, BAD_REQUEST, "request id must be an integer or a string")
    rid: RequestId = raw_id  # type: ignore[assignment]
    method = obj.get("method")
    if not isinstance(method, str):
        return ProtocolProblem(rid, BAD_REQUEST, "request method must be a string")
    params = obj.get("params", {})
    if params is None:
        params = {}
    if not isinstance(params, dict):
        return ProtocolProblem(rid, BAD_REQUEST, "request params must be a map")
    return Request(rid, method, params)


def parse_response(obj: Mapping[str, Any]) -> Success | Failure | ProtocolProblem:
    """Check a decoded frame against the response envelope."""
    raw_id = obj.get("id")
    if raw_id is not None and not _is_id(raw_id):
        return ProtocolProblem(None, BAD_REQUEST, "response id must be nil, an integer or a string")
    rid: RequestId | None = raw_id
    if "error" in obj:
        error = obj["error"]
        if not isinstance(error, dict):
            return ProtocolProblem(rid, BAD_REQUEST, "response error must be a map")
        code, message = error.get("code"), error.get("message")
        if not isinstance(code, str) or not isinstance(message, str):
            return ProtocolProblem(rid, BAD_REQUEST, "response error needs a code and a message")
        return Failure(rid, code, message)
    if "result" in obj and rid is not None:
        return Success(rid, obj["result"])
    return ProtocolProblem(rid, BAD_REQUEST, "response has neither a result nor an error")


def hello_result(extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The result of ``hello``: the protocol version plus whatever the daemon adds."""
    return {**(extra or {}), "protocol": PROTOCOL_VERSION}


# ``status`` says why the model is off once, in ``llm.reason``; a section off for that same
# reason points to it with this code instead of repeating the sentence (with no API key it
# was 170 bytes four times). ``memd_client.status_form.expanded`` writes it out again.
SAME_AS_LLM = "see llm.reason"
# Where in ``status`` such a pointer may stand.
LLM_REASON_AT: tuple[tuple[str, ...], ...] = (
    ("notes", "reason"),
    ("memory", "disabled_reason"),
    ("memory", "recall_stages", "model", "off_reason"),
)
