"""The bounds of serving (config ``ipc.*``), and what is wrong with a set of them.

:class:`ServeLimits` is what :func:`memd.ipc.server.run_server` takes; :func:`limit_warnings`
says, at start, which of them cannot hold as configured (each sentence names the fix).
"""

from __future__ import annotations

import resource
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
