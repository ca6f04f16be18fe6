"""kill -9 a process the moment a file whose name matches a pattern is created in some folders.

    python -m tests.inotify_killer PID PATTERN SECONDS DIR [DIR ...]

Used by the kill loop (tests/kill_loop_support.py) to make kills land inside memd's atomic
writes: memd creates ``.<name>.memd-XXXXXXXX.tmp``, writes, fsyncs and renames it, so a
SIGKILL sent when the temp file appears lands before the rename unless the write finishes
first (the loop tells which: the temp file is still there after the kill, or not).

Watches each DIR and every folder below it (and folders made later) with inotify, runs at a
real-time priority when allowed (as root) so that it is woken ahead of the writer, prints
``armed``, then ``killed <path>`` or ``timeout`` after SECONDS, and exits.
"""

from __future__ import annotations

import ctypes
import os
import re
import select
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

IN_CREATE = 0x00000100
IN_MOVED_TO = 0x00000080
IN_ISDIR = 0x40000000
IN_CLOEXEC = 0o2000000
EVENT = struct.Struct("iIII")  # wd, mask, cookie, len (then the name)


class Inotify:
    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self.fd = self._libc.inotify_init1(IN_CLOEXEC)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self.folders: dict[int, str] = {}

    def watch_tree(self, top: str) -> None:
        for folder, _, _ in os.walk(top):
            self.watch(folder)

    def watch(self, folder: str) -> None:
        wd = self._libc.inotify_add_watch(self.fd, folder.encode(), IN_CREATE | IN_MOVED_TO)
        if wd >= 0:
            self.folders[wd] = folder

    def events(self, timeout: float) -> list[tuple[str, int]]:
        """(path, mask) of the events that arrive within ``timeout`` (blocking)."""
        ready, _, _ = select.select([self.fd], [], [], timeout)
        if not ready:
            return []
        data = os.read(self.fd, 64 * 1024)
        out, at = [], 0
        while at < len(data):
            wd, mask, _, size = EVENT.unpack_from(data, at)
            name = data[at + EVENT.size : at + EVENT.size + size].rstrip(b"\0").decode()
            at += EVENT.size + size
            out.append((os.path.join(self.folders.get(wd, "?"), name), mask))
        return out


def arm_killer(
    pid: int, folders: list[Path], pattern: str, seconds: float
) -> subprocess.Popen[str]:
    """Start the killer for ``pid`` on ``folders`` and wait until it is armed; its next line
    of output is ``killed <path>`` or ``timeout``."""
    repo = Path(__file__).resolve().parents[1]
    killer = subprocess.Popen(
        [sys.executable, "-m", "tests.inotify_killer", str(pid), pattern, str(seconds)]
        + [str(f) for f in folders],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": f"{repo}:{repo / 'client'}"},
        stdout=subprocess.PIPE,
        text=True,
    )
    assert killer.stdout is not None
    assert killer.stdout.readline().strip() == "armed"
    return killer


def run(pid: int, pattern: re.Pattern[str], seconds: float, tops: list[str]) -> str:
    with_priority()
    inotify = Inotify()
    for top in tops:
        os.makedirs(top, exist_ok=True)
        inotify.watch_tree(top)
    print("armed", flush=True)
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        for path, mask in inotify.events(left):
            if mask & IN_ISDIR:
                inotify.watch_tree(path)  # files made in it before its watch: missed, rare
            elif pattern.fullmatch(os.path.basename(path)):
                os.kill(pid, signal.SIGKILL)
                return f"killed {path}"
    return "timeout"


def with_priority() -> None:
    """SCHED_FIFO when allowed: woken at once when the file appears, ahead of the writer."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(10))
    except (OSError, AttributeError):
        pass


if __name__ == "__main__":
    pid, pattern, seconds, *tops = sys.argv[1:]
    print(run(int(pid), re.compile(pattern), float(seconds), tops), flush=True)
