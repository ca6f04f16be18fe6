"""inotify with names as bytes (Linux): the watcher's own binding, through ctypes.

watchfiles (Rust notify) could not be told what memd needs: it raises on the first name that
is not UTF-8 and stays broken (every later step raises the same error), so a transcript
named ``caf\\xe9.jsonl`` crash-looped the daemon; and its recursive watch follows symbolic
links (a project folder linked to ``/usr`` cost 15,451 watches). Here a watch is added on one
folder at a time, never through a link (``IN_DONT_FOLLOW | IN_ONLYDIR``), the caller decides
how deep to go, and running out of watches is an error of that one folder (``ENOSPC``), not
silence.
"""

from __future__ import annotations

import ctypes
import os
import struct
from dataclasses import dataclass
from typing import Final

IN_MODIFY: Final = 0x00000002
IN_ATTRIB: Final = 0x00000004
IN_MOVED_FROM: Final = 0x00000040
IN_MOVED_TO: Final = 0x00000080
IN_CREATE: Final = 0x00000100
IN_DELETE: Final = 0x00000200
IN_Q_OVERFLOW: Final = 0x00004000
IN_IGNORED: Final = 0x00008000
IN_ONLYDIR: Final = 0x01000000
IN_DONT_FOLLOW: Final = 0x02000000
IN_EXCL_UNLINK: Final = 0x04000000
IN_ISDIR: Final = 0x40000000

# What a transcript folder is watched for: files that appear, grow, change mode (an
# unreadable transcript made readable is retried) or go; folders that appear.
FOLDER_EVENTS: Final = (
    IN_CREATE | IN_MODIFY | IN_ATTRIB | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE | IN_EXCL_UNLINK
)
APPEARED: Final = IN_CREATE | IN_MOVED_TO

HEADER: Final = struct.Struct("iIII")  # wd, mask, cookie, len (struct inotify_event)
READ_SIZE: Final = 64 * 1024


@dataclass(frozen=True, slots=True)
class Event:
    """One inotify event: the watch, what happened, the entry's name in that folder."""

    wd: int
    mask: int
    name: bytes


def parse_events(buf: bytes) -> list[Event]:
    """The events in what one ``read`` of an inotify descriptor returned.

    The kernel pads each name with NULs; a record cut short (never from the kernel) ends the
    list rather than raising."""
    events: list[Event] = []
    at = 0
    while at + HEADER.size <= len(buf):
        wd, mask, _cookie, length = HEADER.unpack_from(buf, at)
        at += HEADER.size
        if at + length > len(buf):
            break
        name = buf[at : at + length].split(b"\0", 1)[0]
        at += length
        events.append(Event(wd, mask, name))
    return events


class _Libc:
    """The three calls, from the C library the interpreter already has loaded."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(None, use_errno=True)
        self.init1 = lib.inotify_init1
        self.init1.argtypes = [ctypes.c_int]
        self.init1.restype = ctypes.c_int
        self.add_watch = lib.inotify_add_watch
        self.add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self.add_watch.restype = ctypes.c_int
        self.rm_watch = lib.inotify_rm_watch
        self.rm_watch.argtypes = [ctypes.c_int, ctypes.c_int]
        self.rm_watch.restype = ctypes.c_int


_libc: _Libc | None = None


def _lib() -> _Libc:
    global _libc
    if _libc is None:
        _libc = _Libc()
    return _libc


def _error(path: bytes | None = None) -> OSError:
    code = ctypes.get_errno()
    if path is None:
        return OSError(code, os.strerror(code))
    return OSError(code, os.strerror(code), os.fsdecode(path))


class Inotify:
    """One non-blocking inotify descriptor. Raises ``OSError`` as the kernel says (EMFILE:
    out of instances; ENOSYS or a missing symbol elsewhere than Linux)."""

    def __init__(self) -> None:
        try:
            lib = _lib()
        except (OSError, AttributeError) as exc:  # no such C library or call: not Linux
            raise OSError(f"inotify is not available here: {exc}") from exc
        fd = lib.init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if fd < 0:
            raise _error()
        self.fd: int = fd

    def add(self, path: bytes, *, follow: bool = False) -> int:
        """Watch the folder at ``path`` (a link is refused unless ``follow``): its wd."""
        mask = FOLDER_EVENTS | IN_ONLYDIR | (0 if follow else IN_DONT_FOLLOW)
        wd = _lib().add_watch(self.fd, path, mask)
        if wd < 0:
            raise _error(path)
        return int(wd)

    def remove(self, wd: int) -> None:
        _lib().rm_watch(self.fd, wd)  # an error means the watch is gone already

    def read(self) -> list[Event]:
        """What is waiting now (nothing when nothing is)."""
        events: list[Event] = []
        while True:
            try:
                buf = os.read(self.fd, READ_SIZE)
            except BlockingIOError:
                return events
            events += parse_events(buf)
            if len(buf) < READ_SIZE // 2:
                return events

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
