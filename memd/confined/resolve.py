"""Names and the kernel: relative names that cannot climb out, what an fstat allows,
``openat2`` (``RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS``) where the kernel has it, and the
atomic replace of a name inside a folder's descriptor."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import stat
from typing import Final

from memd import regular_file

_O_CLOEXEC: Final = getattr(os, "O_CLOEXEC", 0)
_O_NOFOLLOW: Final = getattr(os, "O_NOFOLLOW", 0)
_O_DIRECTORY: Final = getattr(os, "O_DIRECTORY", 0)
_O_NOCTTY: Final = getattr(os, "O_NOCTTY", 0)
_DIR_FLAGS: Final = os.O_RDONLY | _O_DIRECTORY | _O_NOFOLLOW | _O_CLOEXEC
_READ_FLAGS: Final = os.O_RDONLY | os.O_NONBLOCK | _O_NOFOLLOW | _O_NOCTTY | _O_CLOEXEC

# linux/openat2.h
_RESOLVE_NO_MAGICLINKS: Final = 0x02
_RESOLVE_NO_SYMLINKS: Final = 0x04
_RESOLVE_BENEATH: Final = 0x08
_SYS_OPENAT2: Final = 437  # the same number on every architecture (added after the unification)

TEMP_MARK: Final = ".memd-"
_HEAD_CHUNK: Final = 4096


def split_relative(relative: str) -> list[str]:
    """The parts of a relative POSIX path; ``ValueError`` for anything that could climb out."""
    if not relative or relative.startswith("/") or "\0" in relative:
        raise ValueError(f"{relative!r} is not a relative path")
    parts = relative.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise ValueError(f"{relative!r} is not a plain relative path")
    return parts


def kind_of(info: os.stat_result, *, any_owner: bool = False) -> str | None:
    """Why a file's ``fstat`` keeps it out of an area (another user's file, unless
    ``any_owner``), or ``None`` when it may be read."""
    if not stat.S_ISREG(info.st_mode):
        return regular_file.kind_of(info.st_mode, link="a symbolic link")
    if info.st_nlink != 1:
        return f"a file with {info.st_nlink} hard links"
    if not any_owner and info.st_uid != os.getuid():
        return f"a file owned by uid {info.st_uid}"
    return None


def holds(parent: int, name: bytes, expected: bytes) -> bool:
    """The regular file ``name`` of the folder ``parent`` (a link not followed, nothing
    that could block opened) holds exactly ``expected``."""
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=parent)
    except OSError:
        return False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return False
        data = b""
        while len(data) <= len(expected):
            block = os.read(fd, len(expected) + 1 - len(data))
            if not block:
                break
            data += block
        return data == expected
    finally:
        os.close(fd)


class _OpenHow(ctypes.Structure):
    _fields_ = [
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    ]


class _Openat2:
    """``openat2`` through libc's ``syscall``, or ``None`` once the kernel says it has none."""

    def __init__(self) -> None:
        self.available = os.uname().sysname == "Linux"
        self._syscall: object = None
        if self.available:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                func = libc.syscall
                func.restype = ctypes.c_long
                self._syscall = func
            except (OSError, AttributeError):
                self.available = False

    def __call__(self, dirfd: int, name: bytes, flags: int) -> int | None:
        """The descriptor, or ``None`` when openat2 is not there (then walk instead)."""
        if not self.available:
            return None
        how = _OpenHow(flags, 0, _RESOLVE_BENEATH | _RESOLVE_NO_SYMLINKS | _RESOLVE_NO_MAGICLINKS)
        fd = self._syscall(  # type: ignore[operator]
            ctypes.c_long(_SYS_OPENAT2),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(name),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err == errno.ENOSYS:
            self.available = False  # an old kernel, or a seccomp filter that hides it
            return None
        if err == errno.EAGAIN:
            return None  # a rename raced the lookup: the walk below decides instead
        raise OSError(err, os.strerror(err), os.fsdecode(name))


_openat2 = _Openat2()


def use_openat2(enabled: bool) -> bool:
    """Turn the ``openat2`` path on or off (tests run both); returns the previous setting."""
    previous = _openat2.available
    _openat2.available = enabled and os.uname().sysname == "Linux"
    return previous


def replace_at(
    parent: int,
    name: bytes,
    data: bytes,
    mode: int,
    expected: bytes | None,
    *,
    durable: bool = True,
) -> bool:
    """Replace ``name`` in the folder ``parent`` with ``data`` (a unique temp file beside it,
    fsync, rename); with ``expected``, only while it still holds those bytes (whether it was).
    ``durable=False``: no fsync (the caller flushes many writes at once)."""
    temp = b"." + name + os.fsencode(TEMP_MARK) + secrets.token_hex(4).encode() + b".tmp"
    fd = os.open(
        temp,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_NOFOLLOW | _O_CLOEXEC,
        0o600,
        dir_fd=parent,
    )
    try:
        try:
            view = memoryview(data)
            while view:
                written = os.write(fd, view)
                view = view[written:]
            os.fchmod(fd, mode)
            if durable:
                os.fsync(fd)
        finally:
            os.close(fd)
        if expected is not None and not holds(parent, name, expected):
            os.unlink(temp, dir_fd=parent)
            return False
        os.replace(temp, name, src_dir_fd=parent, dst_dir_fd=parent)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp, dir_fd=parent)
        raise
    if durable:
        with contextlib.suppress(OSError):
            os.fsync(parent)
    return True
