"""Thin client for the memd daemon. Imports only msgpack and the standard library.

The names below are loaded on first use, so ``memd_client.hook`` (run on every prompt)
does not pay for the full client's imports (nor for ``__future__``: the annotations below
are plain names).
"""

TYPE_CHECKING = False  # not typing's: importing typing would slow down every hook
if TYPE_CHECKING:
    from memd_client.client import AsyncClient, Client
    from memd_client.errors import (
        ClientTimeout,
        ConnectionLost,
        DaemonBusy,
        DaemonNotRunning,
        MemdClientError,
        ProtocolMismatch,
        RemoteError,
    )

__all__ = [
    "AsyncClient",
    "Client",
    "ClientTimeout",
    "ConnectionLost",
    "DaemonBusy",
    "DaemonNotRunning",
    "MemdClientError",
    "ProtocolMismatch",
    "RemoteError",
]


def __getattr__(name: str) -> object:
    if name in ("AsyncClient", "Client"):
        from memd_client import client

        return getattr(client, name)
    if name in __all__:
        from memd_client import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'memd_client' has no attribute {name!r}")
