"""Thin client for the memd daemon. Imports only msgpack and the standard library."""

from memd_client.client import AsyncClient, Client
from memd_client.errors import (
    ClientTimeout,
    ConnectionLost,
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
    "DaemonNotRunning",
    "MemdClientError",
    "ProtocolMismatch",
    "RemoteError",
]
