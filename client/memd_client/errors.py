"""What a memd client call can raise.

MemdClientError
├── DaemonNotRunning   nothing listens on the socket (missing file, ECONNREFUSED)
│   └── DaemonBusy     the daemon turned the connection away (``busy``): treat it as down
├── ConnectionLost     the daemon closed the connection before answering
├── ClientTimeout      no answer within the client's timeout
├── ProtocolMismatch   the daemon speaks another protocol version or sent unreadable frames
└── RemoteError        the daemon answered with an error reply (``code``, ``message``)
"""

from __future__ import annotations

from pathlib import Path


class MemdClientError(Exception):
    """Base of every error the memd client raises."""


class DaemonNotRunning(MemdClientError):
    def __init__(self, path: Path) -> None:
        super().__init__(
            f"memd is not running (nothing listens at {path}); "
            "start it with `memd` or `systemctl --user start memd`"
        )
        self.path = path


class DaemonBusy(DaemonNotRunning):
    """The daemon is at its connection or buffer limit; callers fail open as when it is down."""

    def __init__(self, path: Path, message: str) -> None:
        MemdClientError.__init__(self, f"memd is busy at {path} ({message}); try again shortly")
        self.path = path


class ConnectionLost(MemdClientError):
    pass


class ClientTimeout(MemdClientError):
    pass


class ProtocolMismatch(MemdClientError):
    pass


class RemoteError(MemdClientError):
    """The daemon refused or failed the request; ``code`` is one of ``protocol.ERROR_CODES``."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message
