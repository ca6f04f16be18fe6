"""systemd's notification protocol (sd_notify): READY, STATUS, STOPPING, WATCHDOG.

Without ``$NOTIFY_SOCKET`` (not under systemd, or launchd) every call is a no-op.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Mapping

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, env: Mapping[str, str]) -> None:
        address = env.get("NOTIFY_SOCKET", "")
        self._address: str | None = None
        if address:
            # A leading "@" names an abstract socket.
            self._address = "\0" + address[1:] if address.startswith("@") else address
        usec = env.get("WATCHDOG_USEC", "")
        self.watchdog_interval: float | None = int(usec) / 1e6 / 2 if usec.isdigit() else None

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def send(self, **fields: str) -> None:
        if self._address is None:
            return
        payload = "\n".join(f"{key.upper()}={value}" for key, value in fields.items())
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
                sock.sendto(payload.encode("utf-8"), self._address)
        except OSError as exc:
            log.warning("sd_notify to %s failed: %s", self._address, exc)

    def ready(self, status: str) -> None:
        self.send(ready="1", status=status)

    def status(self, status: str) -> None:
        self.send(status=status)

    def stopping(self) -> None:
        self.send(stopping="1", status="shutting down")

    def watchdog(self) -> None:
        self.send(watchdog="1")
