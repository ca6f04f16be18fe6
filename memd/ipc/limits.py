"""The bounds of serving (config ``ipc.*``), and what is wrong with a set of them.

:class:`ServeLimits` is what :func:`memd.ipc.server.run_server` takes; :func:`limit_warnings`
says, at start, which of them cannot hold as configured (each sentence names the fix).
"""

from __future__ import annotations

import resource
from collections import Counter
from dataclasses import dataclass

from memd.ipc.connection import CONNECTION_BYTES, body_budget

# Descriptors the daemon needs besides its connections (logs, state, transcripts, threads).
SPARE_DESCRIPTORS = 64


@dataclass(frozen=True)
class ServeLimits:
    """The bounds of serving (config ``ipc.*``)."""

    max_buffered_bytes: int = 64 * 1024 * 1024
    frame_timeout_s: float = 5.0
    max_connections: int = 256
    idle_timeout_s: float = 60.0


def limit_warnings(limits: ServeLimits, max_frame_bytes: int) -> list[str]:
    """What cannot hold as configured: frames that can never fit the read budget, and
    connections past the process's open-file limit."""
    warnings = []
    bodies = body_budget(limits.max_buffered_bytes, limits.max_connections)
    if bodies < max_frame_bytes:
        warnings.append(
            f"ipc.max_buffered_bytes ({limits.max_buffered_bytes}) leaves {bodies} bytes for"
            f" frame bodies once {limits.max_connections} connections (ipc.max_connections)"
            f" have {CONNECTION_BYTES} each set aside: frames larger than that are refused as"
            " busy; raise ipc.max_buffered_bytes or lower ipc.max_connections"
        )
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = limits.max_connections + SPARE_DESCRIPTORS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        warnings.append(
            f"ipc.max_connections ({limits.max_connections}) and memd's other files need"
            f" about {wanted} descriptors, and the open-file limit is {soft}: past it, idle"
            " connections are closed to make room and other files may fail to open; raise"
            " the limit (LimitNOFILE= in the service unit, `ulimit -n`) or lower"
            " ipc.max_connections"
        )
    return warnings


class WorkShares:
    """Connections at work (a request in flight) per client process, at most ``cap`` each:
    whatever one client sends, and however long its requests wait, the other connections stay
    for the others. A peer whose pid the kernel does not give (None) is not counted."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self._at_work: Counter[int] = Counter()

    def may_start(self, peer: int | None) -> bool:
        """Whether a connection of ``peer`` may start work (its first request in flight)."""
        return peer is None or self._at_work[peer] < self.cap

    def started(self, peer: int | None) -> None:
        if peer is not None:
            self._at_work[peer] += 1

    def ended(self, peer: int | None) -> None:
        if peer is not None:
            self._at_work[peer] -= 1
            if not self._at_work[peer]:
                del self._at_work[peer]
