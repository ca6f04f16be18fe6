"""What a connection uses of the server that accepted it: the read budget the server shares
among its connections (:class:`ReadBudget`), and the rest as protocols the server fits
(:class:`Host`). It imports neither :mod:`memd.ipc.connection` nor :mod:`memd.ipc.server`,
which both import it.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Protocol, TypeVar

import anyio

from memd_client import protocol as p

C = TypeVar("C", contravariant=True)  # the connection a host is given back


class ReadBudget:
    """Bytes that incoming frames may hold across all connections."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._freed: anyio.Event | None = None

    def try_take(self, size: int) -> bool:
        if self.used + size > self.limit:
            return False
        self.used += size
        return True

    def give(self, size: int) -> None:
        self.used -= size
        if size and self._freed is not None:
            self._freed.set()
            self._freed = None

    async def wait_freed(self) -> None:
        if self._freed is None:
            self._freed = anyio.Event()
        await self._freed.wait()


class Deadlines(Protocol):
    """The limits a connection keeps (:class:`memd.ipc.limits.ServeLimits` fits)."""

    @property
    def idle_timeout_s(self) -> float: ...
    @property
    def frame_timeout_s(self) -> float: ...


class Shares(Protocol):
    """Connections at work per client process (:class:`memd.ipc.limits.WorkShares` fits)."""

    def may_start(self, peer: int | None) -> bool: ...
    def started(self, peer: int | None) -> None: ...
    def ended(self, peer: int | None) -> None: ...


class Host(Protocol[C]):
    """What a connection (``C``: :class:`memd.ipc.connection.Connection`) uses of the server
    that accepted it (:class:`memd.ipc.server.Server` fits ``Host[Connection]``)."""

    @property
    def max_in_flight(self) -> int: ...
    @property
    def max_frame_bytes(self) -> int: ...
    @property
    def inline(self) -> Collection[str]: ...
    @property
    def limits(self) -> Deadlines: ...
    @property
    def budget(self) -> ReadBudget: ...
    @property
    def shares(self) -> Shares: ...
    def close_idle(self, connection: C) -> None: ...
    def error_frame(self, rid: p.RequestId | None, code: str, message: str) -> bytes: ...
    async def answer(self, request: p.Request) -> bytes: ...
    async def answer_inline(self, request: p.Request) -> bytes: ...
    def peer_busy(self, rid: p.RequestId) -> bytes: ...
    def begin_request(self) -> None: ...
    def end_request(self) -> None: ...
    def note_stalled(self) -> None: ...
