"""The real daemon under 64 connections each holding a frame just under the frame limit: its
RSS stays within the buffer cap plus the idle figure, and a well-formed client is answered
throughout (issue 9, bounded serving). Figures: bench/ipc.py --flood (BENCHMARKS.md)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from memd.config import IPCConfig
from memd.ipc.connection import CONNECTION_BYTES, body_budget
from memd_client.protocol import DEFAULT_MAX_FRAME_BYTES
from tests.daemon_harness import fake_home, read_log, start_memd, stop_memd, wait_for
from tests.flood_support import Flood, rss_kib, send_flood

pytestmark = pytest.mark.slow

CONNECTIONS = 64
SIZE = DEFAULT_MAX_FRAME_BYTES - 16
DEFAULTS = IPCConfig()
# "tight": the flood's connections and the client's are all the daemon may hold, and the cap
# is four bodies plus their CONNECTION_BYTES each: the flood fills it exactly, where the
# default cap leaves room the 16 MiB bodies cannot use.
LIMITS = {
    "default": (DEFAULTS.max_connections, DEFAULTS.max_buffered_bytes),
    "tight": (CONNECTIONS + 1, 4 * SIZE + (CONNECTIONS + 1) * CONNECTION_BYTES),
}
# No margin over idle + cap. The bound holds by construction on what memd holds (bodies
# within their budget; each connection within the CONNECTION_BYTES set aside for it, above the
# ~27 KiB tracemalloc measures for a connection holding a read: tests/test_ipc_limits.py,
# which the code before the set-aside failed at ~43 KiB); RSS adds the allocator's behaviour,
# which here reuses heap the idle daemon had already freed. Measured, tight: 0.9-1.4 MiB under
# idle + cap in 9 runs, 3 of them beside two busy loops (load 7); default: ~15 MiB under. The
# code before went 1.8-2.1 MiB over with the default limits (and between 0.2 MiB under and a
# few KiB over the tight cap, which is sized with today's set-aside).
MARGIN_KIB = 0


def stable_rss(pid: int, client_call: Callable[[], object]) -> int:
    """VmRSS once two samples a second apart agree within 64 KiB, the client busy meanwhile."""
    last = rss_kib(pid)[0]
    while True:
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            client_call()
        now = rss_kib(pid)[0]
        if abs(now - last) <= 64:
            return now
        last = now


@pytest.mark.parametrize("limits", ["default", "tight"])
@pytest.mark.timeout(300)
def test_a_flood_of_unfinished_big_frames_stays_within_the_cap(tmp_path: Path, limits: str) -> None:
    connections, cap = LIMITS[limits]
    bodies = body_budget(cap, connections) // SIZE  # what the flood can make memd hold
    settings = (
        ("ipc.max_connections", connections),
        ("ipc.max_buffered_bytes", cap),
        ("ipc.frame_timeout_s", 120),  # held for the whole measurement
    )
    args = [x for key, value in settings for x in ("--set", f"{key}={value}")]
    with fake_home(tmp_path) as home:
        proc = start_memd(home, *args)
        try:
            with home.client(timeout=10) as client:
                wait_for(lambda: client.call("status"), timeout=60, what="the features")
                idle = stable_rss(proc.pid, lambda: client.call("hello"))
                flood = Flood(CONNECTIONS, SIZE)
                stop = threading.Event()
                senders = threading.Thread(target=send_flood, args=(home.socket, flood, stop))
                senders.start()
                try:
                    hello = lambda: client.call("hello")  # noqa: E731
                    peak = _peak_while_flooded(proc.pid, flood, bodies, hello)
                    assert client.call("hello")["pid"] == proc.pid  # answered throughout
                finally:
                    stop.set()
                    senders.join(60)
                assert not flood.dropped_s, flood.dropped_s
        finally:
            assert stop_memd(proc, timeout=60) == 0, read_log(home)
    held_kib = peak - idle
    assert held_kib <= cap // 1024 + MARGIN_KIB, (idle, peak, cap // 1024)
    # the flood did what it is for: the bodies held at once
    assert held_kib >= 0.98 * bodies * SIZE / 1024, (idle, peak, bodies)


def _peak_while_flooded(
    pid: int, flood: Flood, bodies: int, client_call: Callable[[], object]
) -> int:
    """The highest VmRSS until ``bodies`` bodies have been taken whole, and for 2 s after."""
    peak = 0
    settled: float | None = None
    limit = time.monotonic() + 120
    while settled is None or time.monotonic() < settled + 2.0:
        assert time.monotonic() < limit, f"bodies taken: {flood.whole_bodies_sent()}"
        client_call()
        peak = max(peak, rss_kib(pid)[0])
        if settled is None and flood.whole_bodies_sent() >= bodies:
            settled = time.monotonic()
    assert flood.whole_bodies_sent() == bodies  # the others wait for budget
    return peak
