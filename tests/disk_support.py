"""A disk that fails on demand under a folder memd writes to: full (ENOSPC) or read-only
(EROFS), then healthy again.

As root (the tests here run as root) it is a real tmpfs mounted on the folder: filled up with
a file of zeros, remounted read-only. Elsewhere it is a shim below memd's own write functions
(:mod:`tests.fs_shim.sitecustomize`): ``os.open`` refuses to create or write files there
while a control file names the error (``MEMDTEST_SHIM=1`` picks the shim as root too, to
check it). Either way memd's code runs unchanged.
"""

from __future__ import annotations

import errno
import functools
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

SHIM_DIR = Path(__file__).parent / "fs_shim"
FAULTS = {"ENOSPC": errno.ENOSPC, "EROFS": errno.EROFS}
TMPFS_SIZE = "2m"


class Disk(Protocol):
    real: bool  # a real filesystem (the log file, opened before the fault, fails too)
    env: dict[str, str]  # what the daemon's environment needs for this disk

    def fault(self, kind: str) -> None: ...

    def heal(self) -> None: ...


@functools.cache
def can_mount() -> bool:
    """Root, and a tmpfs mounts here (a container may forbid it)."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        return False
    probe = Path(tempfile.mkdtemp(prefix="memd-mount-"))
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True
        )
        if done.returncode != 0:
            return False
        subprocess.run(["umount", str(probe)], check=True)
        return True
    finally:
        probe.rmdir()


class TmpfsDisk:
    real = True

    def __init__(self, where: Path) -> None:
        self.where = where
        self.env: dict[str, str] = {}
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE},mode=0700", "tmpfs", str(where)],
            check=True,
        )

    @property
    def _filler(self) -> Path:
        return self.where / ".filler"

    def fault(self, kind: str) -> None:
        tmpfs_fault(self.where, kind)

    def heal(self) -> None:
        if os.statvfs(self.where).f_flag & os.ST_RDONLY:  # made so here, or by another process
            subprocess.run(["mount", "-o", "remount,rw", str(self.where)], check=True)
        self._filler.unlink(missing_ok=True)

    def close(self) -> None:
        subprocess.run(["umount", "-l", str(self.where)], check=False)


def tmpfs_fault(where: Path, kind: str) -> None:
    """Make the tmpfs mounted on ``where`` full (ENOSPC) or read-only (EROFS), from any
    process (a daemon's, at the instant a test chose: ``tests/archive_steps.py``)."""
    if kind == "EROFS":
        subprocess.run(["mount", "-o", "remount,ro", str(where)], check=True)
        return
    fd = os.open(where / ".filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 16, 1):  # whole blocks, then the last partial page
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)


def fault_here(where: Path, kind: str) -> None:
    """The fault of a :func:`faulty_disk` on ``where``, from the process memd runs in: the
    shim's control file when the shim is in (its environment names it), else the tmpfs."""
    control = os.environ.get("MEMDTEST_FAULT_FILE")
    if control:
        Path(control).write_text(kind)
    else:
        tmpfs_fault(where, kind)


class ShimDisk:
    real = False

    def __init__(self, where: Path) -> None:
        self.where = where
        self.control = where.parent / f".{where.name}.fault"
        path = os.environ.get("PYTHONPATH", "")
        root = str(Path(__file__).parent.parent)
        self.env = {
            "PYTHONPATH": os.pathsep.join(p for p in (str(SHIM_DIR), root, path) if p),
            "MEMDTEST_FAULT_DIR": str(where),
            "MEMDTEST_FAULT_FILE": str(self.control),
        }

    def fault(self, kind: str) -> None:
        self.control.write_text(kind)

    def heal(self) -> None:
        self.control.unlink(missing_ok=True)

    def close(self) -> None:
        self.heal()


@contextmanager
def faulty_disk(where: Path, *, in_process: bool = False) -> Iterator[Disk]:
    """A disk under ``where`` (created) that fails on demand; a tmpfs when it can be. For a
    daemon, its ``env`` goes into the daemon's environment; ``in_process``: for this process
    (the shim, when there is one, is installed here until the end)."""
    where.mkdir(parents=True, exist_ok=True)
    real_open = os.open
    disk: TmpfsDisk | ShimDisk
    if can_mount() and not os.environ.get("MEMDTEST_SHIM"):
        disk = TmpfsDisk(where)
    else:
        disk = ShimDisk(where)
        if in_process:
            install_shim(str(where), str(disk.control))
    try:
        yield disk
    finally:
        os.open = real_open
        disk.close()


def install_shim(directory: str, control: str) -> None:
    """Make ``os.open`` refuse files created or written under ``directory`` while ``control``
    names an error (the daemon side of :class:`ShimDisk`)."""
    real_open: Callable[..., int] = os.open
    writing = os.O_CREAT | os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_TRUNC
    under = os.path.join(os.path.abspath(directory), "")

    def shim_open(path: Any, flags: int, mode: int = 0o777, **kwargs: Any) -> int:
        if flags & writing and os.path.abspath(os.fsdecode(path)).startswith(under):
            try:
                with open(control) as f:
                    kind = f.read().strip()
            except FileNotFoundError:
                kind = ""
            if kind in FAULTS:
                code = FAULTS[kind]
                raise OSError(code, os.strerror(code), os.fsdecode(path))
        return real_open(path, flags, mode, **kwargs)

    os.open = shim_open
