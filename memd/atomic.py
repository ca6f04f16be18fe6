"""Atomic file replacement: a reader sees the old file or the new one, never a mix.

Unique temp file in the same directory, fsync, ``os.replace``, then fsync the directory so the
rename itself survives a crash.

A crash between the temp file's creation and the rename leaves the temp file behind. Its name
has a pattern no other program uses (``.<name>.memd-<8 random>.tmp``), so that
:func:`remove_stale_temps` can remove exactly memd's own leftovers at start, while no write is
running, and nothing else.

Every write reports to :mod:`memd.writes`: :func:`write_atomic` records a failure and raises
it (a job's write: the job fails); :func:`persist` (memd's own state) records it, keeps the
bytes and never raises, and :func:`retry_kept` writes the kept bytes when they are due.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import tempfile
import threading
import time
from pathlib import Path

from memd.writes import WRITES, Kept, reporting, shown

log = logging.getLogger(__name__)

TEMP_PREFIX_MARK = ".memd-"
TEMP_SUFFIX = ".tmp"
# mkstemp's random part: 8 characters of [a-z0-9_]
STALE_TEMP = re.compile(r"\..+\.memd-[a-z0-9_]{8}\.tmp")
# The pattern before it was made distinctive; matched only in directories memd owns whole.
LEGACY_TEMP = re.compile(r"\..+\.[a-z0-9_]{8}\.tmp")


# Writes of one path and its retries take the same lock, so older kept bytes never replace
# newer ones; a few locks shared by hash bound them whatever the number of paths.
_STRIPES = tuple(threading.Lock() for _ in range(16))


def write_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Replace ``path`` with ``data``; keep the existing file's mode unless ``mode`` is given.
    A failure is recorded in :data:`memd.writes.WRITES` and raised (a disk fault as
    :class:`memd.errors.WriteFailed`, which is an ``OSError`` too)."""
    with reporting(path):
        _replace(path, data, mode)


def persist(path: Path, data: bytes, *, mode: int | None = None) -> bool:
    """Write one of memd's own state files; True when it is on disk now (blocking).

    Never raises ``OSError``: a failed write keeps ``data`` in :data:`memd.writes.WRITES`
    and :func:`retry_kept` writes it (or newer bytes of the same path) when it is due; while
    the path waits for that, this only replaces the kept bytes.
    """
    kept = Kept(os.fspath(path), data, mode)
    with _stripe(kept.path):
        if WRITES.hold(kept):
            return False
        return _attempt(kept)


def retry_kept(at_exit: bool = False) -> int:
    """Write the kept bytes that are due (``at_exit``: all of them, and log what is lost);
    how many remain unwritten (blocking). After a refusal the other due paths wait for the
    same retry: a full disk is asked once, not once per file."""
    paths = WRITES.due(time.time(), every=at_exit)
    for index, path in enumerate(paths):
        with _stripe(path):
            kept = WRITES.kept(path)
            if kept is None or _attempt(kept):
                continue
        if not at_exit:
            WRITES.postpone(paths[index + 1 :], behind=path)
            break
    left = WRITES.due(0.0, every=True)
    if at_exit and left:
        log.error(
            "memd stops with %d files it could not write (they are lost): %s",
            len(left),
            ", ".join(shown(p) for p in left[:5]),
        )
    return len(left)


def _attempt(kept: Kept) -> bool:
    try:
        _replace(Path(kept.path), kept.data, kept.mode)
    except OSError as exc:
        WRITES.failed(kept.path, exc, keep=kept)
        return False
    WRITES.succeeded(kept.path)
    return True


def _stripe(path: str) -> threading.Lock:
    return _STRIPES[hash(path) % len(_STRIPES)]


def _replace(path: Path, data: bytes, mode: int | None) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if mode is None:
        try:
            mode = path.stat().st_mode & 0o7777
        except FileNotFoundError:
            mode = 0o600
    fd, tmp = tempfile.mkstemp(
        dir=path.parent, prefix=f".{path.name}{TEMP_PREFIX_MARK}", suffix=TEMP_SUFFIX
    )
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):  # gone, or the disk turned read-only meanwhile
            os.unlink(tmp)
        raise
    fsync_dir(path.parent)


def write_text_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    write_atomic(path, text.encode("utf-8"), mode=mode)


def fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some filesystems refuse fsync on directories; the rename is still atomic
    finally:
        os.close(fd)


def remove_stale_temps(directory: Path, *, legacy: bool = False) -> int:
    """Remove memd's leftover temp files directly in ``directory``; how many (blocking).

    Only regular files (never symlinks or directories) whose name matches memd's own pattern
    (and, with ``legacy``, the pattern of earlier versions; for directories memd owns whole).
    Call it only while no atomic write can run in ``directory``.
    """
    patterns = (STALE_TEMP, LEGACY_TEMP) if legacy else (STALE_TEMP,)
    removed = 0
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return 0
    for entry in entries:
        if not any(pattern.fullmatch(entry.name) for pattern in patterns):
            continue
        try:
            if not entry.is_file(follow_symlinks=False):
                continue
            os.unlink(entry.path)
        except OSError as exc:
            log.warning("cannot remove the stale temp file %s: %s", entry.path, exc)
            continue
        removed += 1
    return removed
