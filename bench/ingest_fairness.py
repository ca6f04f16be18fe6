"""Head-of-line blocking: how long a live session's append takes to show in ``session`` while
a huge transcript with no newline is being written beside it (issue 23).

Starts the real ``memd`` on a fake ~/.claude/projects with one live session, then measures
append → visible (the ``session`` reply's offset reaches the file's size), polled every 5 ms:

1. baseline: nothing else in the tree;
2. beside a sparse file of ``--sparse-gb`` GiB (``truncate``: no disk used) holding one line
   with no newline, to which a writer appends 100 bytes every 100 ms (each a change to read);
3. the same beside a dense file of ``--dense-mb`` MiB (real bytes, no holes to skip).

Before issue 23 the one ingest worker read such a line from its start on every change: the
append waited 29-45 s beside 20 GB. Target: at most 1 s.

    python3 bench/ingest_fairness.py [--sparse-gb 20] [--dense-mb 256] [--appends 10]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memd_client.client import Client
from memd_client.errors import MemdClientError

PROJECT = "-home-u-bench"
TIMEOUT_S = 120.0


def line(n: int) -> bytes:
    entry = {
        "type": "user",
        "uuid": f"u{n}",
        "parentUuid": f"u{n - 1}" if n else None,
        "sessionId": "live",
        "message": {"role": "user", "content": f"message {n}"},
    }
    return json.dumps(entry).encode() + b"\n"


class Daemon:
    def __init__(self, home: Path, runtime: Path) -> None:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "MEMD_"))}
        env.update(HOME=str(home), XDG_RUNTIME_DIR=str(runtime), XDG_STATE_HOME="")
        self.socket = runtime / "memd" / "memd.sock"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memd.daemon.main"],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=open(home / "memd.log", "wb"),  # noqa: SIM115 - owned by the process
        )
        deadline = time.monotonic() + 60
        while not self.answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit("memd did not start; see " + str(home / "memd.log"))
            time.sleep(0.05)

    def answers(self) -> bool:
        try:
            with Client(self.socket, timeout=2.0) as c:
                c.call("hello")
            return True
        except MemdClientError:
            return False

    def offset(self, session: str) -> int:
        with Client(self.socket, timeout=TIMEOUT_S) as c:
            return int(c.call("session", {"session": session})["offset"])

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def visible_after(daemon: Daemon, live: Path, n: int) -> float:
    """Append line ``n`` to the live session; seconds until ``session`` shows it."""
    with live.open("ab") as file:
        file.write(line(n))
    size = live.stat().st_size
    start = time.perf_counter()
    while daemon.offset("live") != size:
        if time.perf_counter() - start > TIMEOUT_S:
            return float("inf")
        time.sleep(0.005)
    return time.perf_counter() - start


@contextmanager
def growing(path: Path) -> Iterator[None]:
    """A writer appending to the huge line (never a newline) every 100 ms."""
    stop = threading.Event()

    def grow() -> None:
        while not stop.wait(0.1):
            with path.open("ab") as file:
                file.write(b"x" * 100)

    thread = threading.Thread(target=grow, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


def measure(daemon: Daemon, live: Path, start: int, appends: int) -> list[float]:
    times = []
    for n in range(start, start + appends):
        times.append(visible_after(daemon, live, n))
        time.sleep(0.2)
    return times


def huge_line(path: Path, size: int, *, sparse: bool) -> None:
    with path.open("wb") as file:
        file.write(b'{"type": "user", "uuid": "huge", "message": {"content": "')
        if sparse:
            file.truncate(size)
            return
        block = b"x" * (1 << 20)
        while file.tell() < size:
            file.write(block)


def report(name: str, times: list[float], base: float) -> None:
    median = statistics.median(times)
    print(
        f"{name:<34} median {median * 1000:8.1f} ms   max {max(times) * 1000:8.1f} ms"
        f"   median / baseline {median / base:6.1f}x"
    )


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--sparse-gb", type=float, default=20.0)
    ap.add_argument("--dense-mb", type=int, default=256)
    ap.add_argument("--appends", type=int, default=10)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="memd-bench-"))
    runtime = Path(tempfile.mkdtemp(prefix="mb-", dir="/tmp"))
    folder = home / ".claude" / "projects" / PROJECT
    folder.mkdir(parents=True)
    live = folder / "live.jsonl"
    live.write_bytes(line(0))
    daemon = Daemon(home, runtime)
    try:
        while daemon.offset("live") != live.stat().st_size:
            time.sleep(0.05)
        print(f"load average {os.getloadavg()[0]:.1f}, {args.appends} appends each")
        base = measure(daemon, live, 1, args.appends)
        report("baseline (nothing else)", base, statistics.median(base))
        n = 1 + args.appends
        for label, size, sparse in (
            (f"beside {args.sparse_gb:g} GiB sparse, no newline", args.sparse_gb * 1024**3, True),
            (f"beside {args.dense_mb} MiB dense, no newline", args.dense_mb * 1024**2, False),
        ):
            huge = folder / ("sparse.jsonl" if sparse else "dense.jsonl")
            huge_line(huge, int(size), sparse=sparse)
            with growing(huge):
                time.sleep(1.0)  # the watcher has reported it; its ingest is under way
                times = measure(daemon, live, n, args.appends)
            n += args.appends
            report(label, times, statistics.median(base))
            huge.unlink()
    finally:
        daemon.stop()
        shutil.rmtree(home, ignore_errors=True)
        shutil.rmtree(runtime, ignore_errors=True)


if __name__ == "__main__":
    main()
