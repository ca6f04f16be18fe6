"""A flood of big, never-finished frames against a real socket, and the RSS of a process.

Used by ``tests/test_ipc_flood_rss.py`` and ``bench/ipc_flood.py``: each connection sends a
header announcing ``size`` bytes and all of the body but its last byte, as fast as the server
takes it, until ``stop`` is set or the server drops it (an error frame or the close).
"""

from __future__ import annotations

import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


@dataclass
class Flood:
    """What the senders did: bytes sent per connection, when each was dropped."""

    connections: int
    size: int
    sent: list[int] = field(default_factory=list)
    dropped_s: list[float] = field(default_factory=list)
    begin: float = field(default_factory=time.monotonic)

    def whole_bodies_sent(self) -> int:
        """Connections that sent everything but the last byte (the server took their body)."""
        return sum(1 for n in self.sent if n >= self.size - 1)


def send_flood(path: Path, flood: Flood, stop: threading.Event) -> None:
    """Run the senders (blocking; start it in a thread). Sockets close when it returns."""
    body = memoryview(b"\x00" * (flood.size - 1))
    socks = []
    for _ in range(flood.connections):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(str(path))
        sock.setblocking(False)
        sock.send(struct.pack(">I", flood.size))
        socks.append(sock)
    flood.sent = [0] * flood.connections
    open_ = set(range(flood.connections))
    try:
        while open_ and not stop.is_set():
            _pump(socks, open_, flood, body)
    finally:
        for sock in socks:
            sock.close()


def _pump(socks: list[socket.socket], open_: set[int], flood: Flood, body: memoryview) -> None:
    _, writable, _ = select.select([], [socks[i] for i in open_], [], 0.2)
    readable, _, _ = select.select([socks[i] for i in open_], [], [], 0)
    for sock in readable:  # an error frame or the close: this sender was dropped
        open_.discard(socks.index(sock))
        flood.dropped_s.append(time.monotonic() - flood.begin)
    for sock in writable:
        i = socks.index(sock)
        if i not in open_ or flood.sent[i] >= len(body):
            continue
        try:
            flood.sent[i] += sock.send(body[flood.sent[i] : flood.sent[i] + (1 << 20)])
        except (BlockingIOError, BrokenPipeError, ConnectionResetError):
            continue
