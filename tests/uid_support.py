"""Running a piece of the test in a forked child under another uid (tests run as root here).

The child is forked rather than exec'd: the interpreter's own files may be unreadable to the
unprivileged uid (e.g. a Python under ``/root``), while a fork already has every module it
needs loaded. Whatever the child writes to stderr comes back, with its exit code.
"""

from __future__ import annotations

import os
import select
import signal
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

NOBODY = 65534
IS_ROOT = os.getuid() == 0


@dataclass(frozen=True)
class Exited:
    code: int
    stderr: str


def drop_to(uid: int) -> None:
    """Become ``uid`` for good (group too, no supplementary groups)."""
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)


def run_forked(
    fn: Callable[[], int],
    *,
    uid: int | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> Exited:
    """Run ``fn`` in a child (as ``uid`` when given, with ``env`` as its environment)."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        _child(fn, uid, env, read_fd, write_fd)
    os.close(write_fd)
    try:
        data = _read_until_eof(read_fd, pid, timeout)
    finally:
        os.close(read_fd)
    _, status = os.waitpid(pid, 0)
    return Exited(os.waitstatus_to_exitcode(status), data.decode(errors="replace"))


def _child(
    fn: Callable[[], int], uid: int | None, env: dict[str, str] | None, read_fd: int, write_fd: int
) -> None:  # pragma: no cover - runs in the child
    code = 70
    try:
        os.close(read_fd)
        os.dup2(write_fd, 2)
        sys.stderr = open(write_fd, "w", buffering=1, closefd=False)  # noqa: SIM115
        if env is not None:
            os.environ.clear()
            os.environ.update(env)
        if uid is not None:
            drop_to(uid)
        code = fn()
    except BaseException:  # report whatever happened, then exit
        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(code)


def _read_until_eof(fd: int, pid: int, timeout: float) -> bytes:
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            os.kill(pid, signal.SIGKILL)
            raise AssertionError(f"the forked child did not finish within {timeout}s: {data!r}")
        ready, _, _ = select.select([fd], [], [], left)
        if ready:
            chunk = os.read(fd, 65536)
            if not chunk:
                return data
            data += chunk
