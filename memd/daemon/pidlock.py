"""The single-instance lock: ``fcntl.flock`` on a file held for the life of the process.

The kernel drops the lock when the process dies, however it dies, so there is never a stale
lock to clean up. The file's body names the holder's pid, for the message a second instance
prints; the body is never used to decide anything.

The file is opened with ``O_NOFOLLOW`` and must be a regular file of ours with one link: a
symlink or hard link planted at the lock path would otherwise make memd truncate and write
the file it points to. The runtime directory itself is checked before this is called
(:func:`memd.ipc.socketfile.prepare_runtime_dir`).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from memd.errors import StartupError

_FLAGS = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


@contextmanager
def hold_instance_lock(lock_path: Path, socket_path: Path) -> Iterator[None]:
    """Hold the per-user instance lock, or raise StartupError naming the running pid."""
    fd = _open_lock(lock_path)
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


def _open_lock(lock_path: Path) -> int:
    try:
        fd = os.open(lock_path, _FLAGS, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise StartupError(
                f"refusing lock file {lock_path}: it is a symlink; remove it and start again"
            ) from None
        raise StartupError(
            f"cannot open the lock file {lock_path}: {exc.strerror}; "
            "remove it or set MEMD_RUNTIME_DIR to a private directory"
        ) from None
    st = os.fstat(fd)
    problem = lock_file_problem(st.st_mode, st.st_uid, st.st_nlink, os.getuid())
    if problem is not None:
        os.close(fd)
        raise StartupError(
            f"refusing lock file {lock_path}: it {problem}; remove it and start again"
        )
    return fd


def lock_file_problem(mode: int, owner_uid: int, links: int, own_uid: int) -> str | None:
    """Why an opened lock file is not safe to write, or None."""
    if not stat.S_ISREG(mode):
        return "is not a regular file"
    if owner_uid != own_uid:
        return f"is owned by uid {owner_uid}, not by the daemon's uid {own_uid}"
    if links != 1:
        return f"has {links} hard links (another name points at the same file)"
    return None
