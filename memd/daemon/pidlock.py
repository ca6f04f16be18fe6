"""The single-instance lock: ``fcntl.flock`` on a file held for the life of the process.

The kernel drops the lock when the process dies, however it dies, so there is never a stale
lock to clean up. The file's body names the holder's pid, for the message a second instance
prints; the body is never used to decide anything.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memd.errors import StartupError


@contextmanager
def hold_instance_lock(lock_path: Path, socket_path: Path) -> Iterator[None]:
    """Hold the per-user instance lock, or raise StartupError naming the running pid."""
    lock_path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            raise StartupError(
                f"memd is already running (pid {holder}, socket {socket_path}); "
                f"stop it first (kill {holder} or `systemctl --user stop memd`)"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        yield
    finally:
        os.close(fd)
