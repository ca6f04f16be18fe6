"""Shared pieces for the IPC tests: a method table, short socket paths, raw connections."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import AsyncIterator, Iterator, Mapping
from concurrent.futures import wait
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketStream, TaskGroup
from anyio.from_thread import start_blocking_portal

from memd.errors import BudgetExhausted, LLMDisabled, NotFound, Unavailable
from memd.ipc.server import Handler, InvalidParams, Server, run_server
from memd_client import protocol as p

FRAME_LIMIT = 4096
# A realistic `status` answer: about 1 KB of nested figures.
STATUS = {
    "daemon": {"version": "0.1.0", "pid": 4242, "uptime_s": 5123.4, "rss_bytes": 48_000_000},
    "sessions": [
        {
            "id": f"0f9c2a7e-51b8-4d33-9a6e-7d1b2c3d4e{i:02d}",
            "project": "/home/ada/src/memd",
            "tokens": 91_234 + i,
            "threshold": 150_000,
            "queue": {"queued": i % 3, "running": i % 2},
            "last_extraction": "2025-11-20T10:21:33Z",
        }
        for i in range(5)
    ],
    "llm": {"enabled": True, "input_tokens": 1_234_567, "output_tokens": 45_678},
}


@dataclass
class Gate:
    """Lets a test hold a handler until it says so (create inside the event loop)."""

    entered: anyio.Event = field(default_factory=anyio.Event)
    release: anyio.Event = field(default_factory=anyio.Event)

    async def __call__(self, params: dict[str, Any]) -> Any:
        self.entered.set()
        await self.release.wait()
        return {"released": True}


async def echo(params: dict[str, Any]) -> Any:
    return params


async def status(params: dict[str, Any]) -> Any:
    return STATUS


def _raiser(exc: Exception) -> Handler:
    async def handler(params: dict[str, Any]) -> Any:
        raise exc

    return handler


async def hang(params: dict[str, Any]) -> Any:
    await anyio.sleep_forever()


async def unencodable(params: dict[str, Any]) -> Any:
    return {"obj": object()}


async def huge(params: dict[str, Any]) -> Any:
    return "x" * (FRAME_LIMIT * 2)


async def hello(params: dict[str, Any]) -> Any:
    return p.hello_result({"server": "test"})


# method -> the error code its handler's failure must map to
FAILING: dict[str, str] = {
    "invalid": p.INVALID_PARAMS,
    "missing": p.NOT_FOUND,
    "disabled": p.DISABLED,
    "llm_down": p.UNAVAILABLE,
    "broke": p.UNAVAILABLE,
    "boom": p.INTERNAL,
    "unencodable": p.INTERNAL,
    "huge": p.INTERNAL,
}


def methods(**extra: Handler) -> dict[str, Handler]:
    table: dict[str, Handler] = {
        "hello": hello,
        "echo": echo,
        "status": status,
        "hang": hang,
        "invalid": _raiser(InvalidParams("session_id must be a string")),
        "missing": _raiser(NotFound("no session named abc")),
        "disabled": _raiser(LLMDisabled("disabled: no API key")),
        "llm_down": _raiser(Unavailable("the API answered 503")),
        "broke": _raiser(BudgetExhausted("daily budget spent", resume_at=0.0)),
        "boom": _raiser(RuntimeError("kaboom")),
        "unencodable": unencodable,
        "huge": huge,
    }
    table.update(extra)
    return table


@contextmanager
def short_dir() -> Iterator[Path]:
    """A fresh directory under /tmp: AF_UNIX paths must stay under ~107 bytes."""
    path = Path(tempfile.mkdtemp(dir="/tmp", prefix="memd-t"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@asynccontextmanager
async def serving(
    path: Path, table: Mapping[str, Handler] | None = None, **options: Any
) -> AsyncIterator[tuple[Server, TaskGroup]]:
    """Run a server on ``path`` for the body of the block, then cancel it. ``options`` go to
    :func:`run_server` (``max_frame_bytes`` FRAME_LIMIT and ``request_timeout`` 10 s unless
    given: ``limits``, ``inline``, ``own_uid``, ``method_timeouts``…)."""
    options = {"max_frame_bytes": FRAME_LIMIT, "request_timeout": 10.0, **options}
    async with anyio.create_task_group() as tg:
        server: Server = await tg.start(
            partial(run_server, path, methods() if table is None else table, **options)
        )
        yield server, tg
        tg.cancel_scope.cancel()


@contextmanager
def serving_in_thread(path: Path, table: Mapping[str, Handler] | None = None) -> Iterator[Server]:
    """The same server on an event loop in another thread, for blocking clients."""
    with start_blocking_portal("asyncio") as portal:
        future, server = portal.start_task(
            partial(
                run_server,
                path,
                methods() if table is None else table,
                max_frame_bytes=FRAME_LIMIT,
                request_timeout=10.0,
            )
        )
        try:
            yield server
        finally:
            future.cancel()
            wait([future])


class RawConnection:
    """A client that sends whatever bytes a test wants and reads frames back."""

    def __init__(self, stream: SocketStream) -> None:
        self.stream = stream
        self.decoder = p.FrameDecoder(1 << 20)

    @classmethod
    async def open(cls, path: Path) -> RawConnection:
        return cls(await anyio.connect_unix(path))

    async def send(self, data: bytes) -> None:
        await self.stream.send(data)

    async def request(self, rid: p.RequestId, method: str, params: Any = None) -> None:
        body: dict[str, Any] = {"id": rid, "method": method}
        if params is not None:
            body["params"] = params
        await self.send(p.encode_frame(body))

    async def frame(self) -> dict[str, Any] | None:
        """The next frame, or ``None`` at a clean end of stream."""
        while (frame := self.decoder.next_frame()) is None:
            try:
                data = await self.stream.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                assert self.decoder.buffered == 0, "connection closed mid-frame"
                return None
            self.decoder.receive_data(data)
        return frame

    async def reply(self) -> p.Success | p.Failure:
        frame = await self.frame()
        assert frame is not None, "connection closed instead of answering"
        reply = p.parse_response(frame)
        assert isinstance(reply, p.Success | p.Failure), reply
        return reply

    async def aclose(self) -> None:
        await self.stream.aclose()
