"""Atomic file replacement for the client's writes (settings.json, unit files, …).

A reader sees the old file or the new one, never a mix: a unique temp file in the same
directory, written and fsynced, given the mode the old file had (a 0644 ``settings.json``
stays 0644), renamed over the target, then the directory fsynced so the rename survives a
crash. The daemon has its own copy in ``memd.atomic``: the client never imports memd.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

NEW_FILE_MODE = 0o644


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data``. The mode is ``mode`` if given, else the existing
    file's, else 0644 less the umask (what ``open()`` would have created)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = NEW_FILE_MODE & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)


def write_text_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    write_atomic(path, text.encode("utf-8"), mode=mode)


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on a directory; the rename is still atomic
    finally:
        os.close(fd)
