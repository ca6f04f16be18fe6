"""The real daemon under a flood of big, never-finished frames (run through bench/ipc.py).

64 connections each send a header announcing a frame just under the 16 MiB limit and all of
its body but the last byte, as fast as the daemon takes it; a well-formed client calls
``status`` throughout. Prints RSS (idle, peak under the flood), the buffered-bytes figure the
server holds, the client's latency, and when the senders are dropped (frame deadline).
"""

from __future__ import annotations

import select
import socket
import statistics
import struct
import threading
import time
from pathlib import Path

from memd_client.client import Client
from memd_client.protocol import DEFAULT_MAX_FRAME_BYTES

CONNECTIONS = 64
SIZE = DEFAULT_MAX_FRAME_BYTES - 16


def rss_kib(pid: int) -> tuple[int, int]:
    """(VmRSS, VmHWM) of ``pid`` in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields["VmRSS"], fields["VmHWM"]


def _senders(path: Path, stop: threading.Event, dropped: list[float], begin: float) -> None:
    body = memoryview(b"\x00" * (SIZE - 1))
    socks = []
    for _ in range(CONNECTIONS):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(str(path))
        sock.setblocking(False)
        sock.send(struct.pack(">I", SIZE))
        socks.append(sock)
    sent = dict.fromkeys(range(CONNECTIONS), 0)
    open_ = set(range(CONNECTIONS))
    while open_ and not stop.is_set():
        _, writable, _ = select.select([], [socks[i] for i in open_], [], 0.2)
        readable, _, _ = select.select([socks[i] for i in open_], [], [], 0)
        for sock in readable:  # an error frame or the close: this sender was dropped
            i = socks.index(sock)
            open_.discard(i)
            dropped.append(time.monotonic() - begin)
        for sock in writable:
            i = socks.index(sock)
            if i not in open_ or sent[i] >= len(body):
                continue
            try:
                sent[i] += sock.send(body[sent[i] : sent[i] + (1 << 20)])
            except (BlockingIOError, BrokenPipeError, ConnectionResetError):
                continue
    for sock in socks:
        sock.close()


def flood(path: Path, pid: int, seconds: float = 14.0) -> None:
    with Client(path, timeout=10) as client:
        client.call("status")
        idle_rss, _ = rss_kib(pid)
        quiet = _latencies(client, 2.0)
        stop = threading.Event()
        dropped: list[float] = []
        begin = time.monotonic()
        thread = threading.Thread(target=_senders, args=(path, stop, dropped, begin))
        thread.start()
        loaded: list[float] = []
        peak = 0
        shape = []
        while time.monotonic() - begin < seconds:
            loaded += _latencies(client, 0.5)
            now = rss_kib(pid)[0]
            shape.append(f"{time.monotonic() - begin:.1f}s:{now / 1024:.0f}")
            peak = max(peak, now)
        stop.set()
        thread.join()
        after_rss, hwm = rss_kib(pid)
    cap = 64 * 1024
    print(f"flood: {CONNECTIONS} connections x {SIZE / 2**20:.1f} MiB frames, never finished")
    print(f"RSS idle {idle_rss / 1024:.1f} MiB; peak under flood {peak / 1024:.1f} MiB")
    print(
        f"  (+{(peak - idle_rss) / 1024:.1f} MiB; cap {cap / 1024:.0f} MiB); VmHWM {hwm / 1024:.1f}"
    )
    print(f"RSS after {after_rss / 1024:.1f} MiB; over time (MiB): {' '.join(shape)}")
    print(f"status p50 quiet {_p(quiet, 50)} µs, p99 {_p(quiet, 99)} µs")
    print(f"status p50 under flood {_p(loaded, 50)} µs, p99 {_p(loaded, 99)} µs, n={len(loaded)}")
    if dropped:
        print(
            f"senders dropped: {len(dropped)} of {CONNECTIONS}, first at {min(dropped):.1f}s,"
            f" last at {max(dropped):.1f}s"
        )


def _latencies(client: Client, seconds: float) -> list[float]:
    out = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        start = time.perf_counter()
        client.call("status")
        out.append(time.perf_counter() - start)
    return out


def _p(values: list[float], pct: int) -> str:
    if not values:
        return "-"
    if pct == 50:
        return f"{statistics.median(values) * 1e6:.0f}"
    values = sorted(values)
    return f"{values[min(len(values) - 1, len(values) * pct // 100)] * 1e6:.0f}"
