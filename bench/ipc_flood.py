"""The real daemon under a flood of big, never-finished frames (run through bench/ipc.py).

64 connections each send a header announcing a frame just under the 16 MiB limit and all of
its body but the last byte, as fast as the daemon takes it; a well-formed client calls
``status`` throughout. Prints RSS (idle, peak under the flood), the client's latency, and when
the senders are dropped (frame deadline). Two configurations:

- ``default``: the limits at their defaults (64 MiB cap, 256 connections): each of the 256
  possible connections has ``CONNECTION_BYTES`` of the cap set aside, bodies share the rest;
- ``tight``: a cap that the flood fills exactly: 65 connections (``ipc.max_connections``:
  the flood and the client) and ``ipc.max_buffered_bytes`` = 4 bodies + 65 x
  ``CONNECTION_BYTES``.

The idle figure is read after the client has called ``status`` for a few seconds: the first
thousand calls grow the heap by ~2 MiB on their own (200 sessions), with no flood.

``--trace`` runs the daemon under tracemalloc (``bench/traced_daemon.py``) and prints where
the Python heap grew between idle and the flood, by line.
"""

from __future__ import annotations

import os
import signal
import statistics
import threading
import time
import tracemalloc
from pathlib import Path

from memd.ipc.connection import CONNECTION_BYTES
from memd_client.client import Client
from memd_client.protocol import DEFAULT_MAX_FRAME_BYTES
from tests.flood_support import Flood, rss_kib, send_flood

CONNECTIONS = 64
SIZE = DEFAULT_MAX_FRAME_BYTES - 16
DEFAULT_CAP = 64 * 1024 * 1024
# The flood's connections and the well-formed client's.
TIGHT_CONNECTIONS = CONNECTIONS + 1
TIGHT_CAP = 4 * SIZE + TIGHT_CONNECTIONS * CONNECTION_BYTES
CONFIGS: dict[str, tuple[str, ...]] = {
    "default": (),
    "tight": (
        "--set",
        f"ipc.max_connections={TIGHT_CONNECTIONS}",
        "--set",
        f"ipc.max_buffered_bytes={TIGHT_CAP}",
    ),
}
CAPS = {"default": DEFAULT_CAP, "tight": TIGHT_CAP}


def flood(path: Path, pid: int, config: str, *, seconds: float = 14.0, trace: str = "") -> None:
    with Client(path, timeout=10) as client:
        _latencies(client, 3.0)  # the status path warm, its heap grown, before the idle figure
        quiet = _latencies(client, 2.0)
        idle_rss, _ = rss_kib(pid)
        idle_snapshot = _snapshot(pid, trace, 1)
        stop = threading.Event()
        sent = Flood(CONNECTIONS, SIZE)
        thread = threading.Thread(target=send_flood, args=(path, sent, stop))
        thread.start()
        loaded: list[float] = []
        peak = 0
        shape = []
        while time.monotonic() - sent.begin < seconds:
            loaded += _latencies(client, 0.5)
            now = rss_kib(pid)[0]
            shape.append(f"{time.monotonic() - sent.begin:.1f}s:{now / 1024:.0f}")
            peak = max(peak, now)
            if trace and len(shape) == 8:
                _print_growth(idle_snapshot, _snapshot(pid, trace, 2))
        stop.set()
        thread.join()
        after_rss, hwm = rss_kib(pid)
    cap = CAPS[config] / 1024
    print(f"[{config}] flood: {CONNECTIONS} connections x {SIZE / 2**20:.1f} MiB, never finished")
    print(f"  cap {cap / 1024:.2f} MiB; per connection set aside {CONNECTION_BYTES / 1024:.0f} KiB")
    print(f"  RSS idle {idle_rss / 1024:.1f} MiB; peak under flood {peak / 1024:.1f} MiB")
    print(
        f"  (+{peak - idle_rss} KiB, {idle_rss + cap - peak:.0f} KiB under idle + cap);"
        f" VmHWM {hwm / 1024:.1f} MiB"
    )
    print(f"  bodies taken whole at the end: {sent.whole_bodies_sent()}")
    print(f"  RSS after {after_rss / 1024:.1f} MiB; over time (MiB): {' '.join(shape)}")
    print(f"  status p50 quiet {_p(quiet, 50)} µs, p99 {_p(quiet, 99)} µs")
    print(f"  status p50 under flood {_p(loaded, 50)} µs, p99 {_p(loaded, 99)} µs, n={len(loaded)}")
    if sent.dropped_s:
        print(
            f"  senders dropped: {len(sent.dropped_s)} of {CONNECTIONS}, first at"
            f" {min(sent.dropped_s):.1f}s, last at {max(sent.dropped_s):.1f}s"
        )


def _snapshot(pid: int, trace: str, n: int) -> tracemalloc.Snapshot | None:
    """Ask the traced daemon for a tracemalloc snapshot (SIGUSR1) and load it."""
    if not trace:
        return None
    os.kill(pid, signal.SIGUSR1)
    done = Path(f"{trace}.{n}.done")
    while not done.exists():
        time.sleep(0.05)
    return tracemalloc.Snapshot.load(f"{trace}.{n}")


def _print_growth(idle: tracemalloc.Snapshot | None, flood: tracemalloc.Snapshot | None) -> None:
    assert idle is not None and flood is not None
    grown = sum(s.size_diff for s in flood.compare_to(idle, "filename"))
    print(f"  tracemalloc: the Python heap grew {grown / 1024:.0f} KiB idle -> flood; top lines:")
    for stat in flood.compare_to(idle, "lineno")[:12]:
        print(f"    {stat}")


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
