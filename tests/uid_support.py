"""Running a piece of the test in a forked child under another uid (tests run as root here).

The child is forked rather than exec'd: the interpreter's own files may be unreadable to the
unprivileged uid (e.g. a Python under ``/root``), while a fork already has every module it
needs loaded. Whatever the child writes to stderr comes back, with its exit code.

What the child imports after the fork (memd imports much of itself lazily) must be readable
by that uid too, wherever the checkout is: a clone in a private folder (``mktemp -d`` makes
0700 ones, and so are many homes) is not. So the project's packages are copied once into a
world-readable folder (:func:`readable_code`), and the child imports them from there: each
loaded package's ``__path__`` points at the copy before it drops its privileges.
"""

from __future__ import annotations

import atexit
import os
import select
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

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


# The project's packages, as the child imports them (a data folder like tests/corpus is not).
PACKAGES = ("memd", "memd_client", "tests")
_copied: list[Path] = []


def readable_code() -> Path:
    """A world-readable copy of :data:`PACKAGES` (made once per process, removed at exit)."""
    if _copied:
        return _copied[0]
    root = Path(tempfile.mkdtemp(prefix="memd-code-", dir="/tmp"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    skip = shutil.ignore_patterns("__pycache__", "corpus", "*.jsonl")
    for name in PACKAGES:
        module = sys.modules.get(name) or __import__(name)
        source = Path(module.__file__ or "").parent
        shutil.copytree(source, root / name, ignore=skip, symlinks=True)
    for folder, _dirs, files in os.walk(root):
        os.chmod(folder, 0o755)
        for file in files:
            os.chmod(os.path.join(folder, file), 0o644)
    _copied.append(root)
    return root


def import_readable(root: Path) -> None:
    """In a forked child about to drop to another uid: point every loaded package of
    :data:`PACKAGES` at its copy under ``root`` (:func:`readable_code`, made before the fork),
    so what it imports from now on is read from there."""
    for name, module in list(sys.modules.items()):
        if name.split(".")[0] in PACKAGES and hasattr(module, "__path__"):
            module.__path__ = [str(root.joinpath(*name.split(".")))]
    sys.path_importer_cache.clear()


def run_forked(
    fn: Callable[[], int],
    *,
    uid: int | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 30.0,
) -> Exited:
    """Run ``fn`` in a child (as ``uid`` when given, with ``env`` as its environment)."""
    code = readable_code() if uid is not None else None
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        if code is not None:
            import_readable(code)
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
