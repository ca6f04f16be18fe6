"""Moving a file from one folder of an :class:`~memd.confined.area.Area` to another, beneath
its root's descriptor (issue 36: a memory archived beside its memory dir, and back).

:func:`move` renames, it never copies: at every instant the file is in one place or the other,
whole (a kill between two system calls cannot leave it in both, or in neither). The target is
never replaced: ``renameat2(RENAME_NOREPLACE)`` where the kernel and the filesystem have it,
else a look that the name is free just before the rename (a name taken meanwhile by another
program would be replaced only in that window). Only a regular file of the user's with one
link is moved (checked on the entry itself, a link not followed; anything else is
:class:`~memd.confined.findings.Refused`); the folders on both sides are opened beneath the
root without following a link, and the target's are made as needed. A disk fault is
:class:`memd.errors.WriteFailed` (and in the write-health registry). ``renameat2``, called
through ctypes, raises the audit event ``os.rename`` does (``sys.addaudithook``), so what
watches memd's renames sees this one too. Blocking.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
from typing import Final

from memd.confined.area import Area
from memd.confined.findings import Refused
from memd.confined.resolve import kind_of, split_relative
from memd.writes import reporting

RENAME_NOREPLACE: Final = 1
_UNSUPPORTED: Final = frozenset({errno.EINVAL, errno.ENOSYS, errno.ENOTSUP})


def _renameat2() -> ctypes._CFuncPtr | None:  # type: ignore[name-defined]
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:  # pragma: no cover - no C library to load
        return None
    return getattr(libc, "renameat2", None)


_RENAMEAT2 = _renameat2()


def move(area: Area, source: str, target: str) -> bool:
    """Move ``source`` to ``target`` (both relative to the area's root); False when nothing
    is at ``source``. ``FileExistsError`` when something is at ``target``; ``Refused`` when
    the source is not a plain file of the user's; ``ValueError`` for a name that is not a
    plain relative path."""
    src_parts, dst_parts = split_relative(source), split_relative(target)
    src_parent = area.open_dir("/".join(src_parts[:-1]))
    try:
        name = os.fsencode(src_parts[-1])
        try:
            info = os.stat(name, dir_fd=src_parent, follow_symlinks=False)
        except FileNotFoundError:
            return False
        why = kind_of(info)
        if why is not None:
            raise Refused(str(area.path(source)), why)
        with reporting(area.path(target)):
            dst_parent = area.make_dirs("/".join(dst_parts[:-1]))
            try:
                moved = _rename(src_parent, name, dst_parent, os.fsencode(dst_parts[-1]))
                for folder in {src_parent, dst_parent} if moved else ():
                    with contextlib.suppress(OSError):
                        os.fsync(folder)
            finally:
                os.close(dst_parent)
    finally:
        os.close(src_parent)
    if not moved:
        raise FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), str(area.path(target)))
    return True


def _rename(src_dir: int, src: bytes, dst_dir: int, dst: bytes) -> bool:
    """``src`` to ``dst`` without replacing anything at ``dst``; False when ``dst`` is there."""
    if _RENAMEAT2 is not None:
        sys.audit("os.rename", src, dst, src_dir, dst_dir)
        done = _RENAMEAT2(src_dir, src, dst_dir, dst, RENAME_NOREPLACE)
        if done == 0:
            return True
        code = ctypes.get_errno()
        if code == errno.EEXIST:
            return False
        if code not in _UNSUPPORTED:
            raise OSError(code, os.strerror(code), os.fsdecode(dst))
    try:
        os.stat(dst, dir_fd=dst_dir, follow_symlinks=False)
    except FileNotFoundError:
        os.rename(src, dst, src_dir_fd=src_dir, dst_dir_fd=dst_dir)
        return True
    return False
