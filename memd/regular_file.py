"""Opening files from directories other programs write: regular files only, never blocking.

Everything memd reads under the projects tree (transcripts, memory files) is written by other
programs, and anything can sit at a path there: a FIFO (``open`` would wait for a writer
forever, and then SIGTERM cannot stop the daemon), a socket, a device, a directory, a
symlink loop or a link to anything. :func:`open_regular` refuses all of them before reading a
byte: ``lstat`` first (no open at all for what is not a regular file), then an ``open`` that
cannot block or follow a link (``O_NONBLOCK | O_NOFOLLOW | O_NOCTTY``), then ``fstat`` on the
descriptor, in case the path was swapped in between.

:func:`reason` turns the error into the short text memd shows (``memdctl session``), and
:func:`is_transient` says whether retrying later can help even if the file does not change
(out of file descriptors, out of memory).
"""

from __future__ import annotations

import errno
import io
import os
import stat
from typing import Final

from memd_client import foreign_file

_FLAGS: Final = (
    os.O_RDONLY
    | os.O_NONBLOCK
    | getattr(os, "O_NOFOLLOW", 0)
    | getattr(os, "O_NOCTTY", 0)
    | getattr(os, "O_CLOEXEC", 0)
)
_TRANSIENT: Final = frozenset(
    {errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN, errno.EINTR, errno.ENOBUFS}
)


class NotARegularFile(OSError):
    """The path names something other than a regular file; ``kind`` says what."""

    def __init__(self, path: str | os.PathLike[str], kind: str) -> None:
        super().__init__(errno.EINVAL, f"{kind}, not a regular file", os.fspath(path))
        self.kind = kind


def kind_of(mode: int, *, link: str = "a symbolic link (not followed)") -> str:
    """What a ``st_mode`` other than a regular file's describes, in words; ``link`` names a
    symbolic link (:func:`memd.confined.kind_of`, whose areas never follow one, says less)."""
    if stat.S_ISLNK(mode):
        return link
    return foreign_file.kind_of(mode)


def open_regular_target(path: str | os.PathLike[str]) -> io.FileIO:
    """Open what ``path`` names, following links, if it is a regular file; never blocks.

    For the user's own files that are often links (a CLAUDE.md linked to AGENTS.md, a file the
    session read): the open cannot block (``O_NONBLOCK``), and ``fstat`` refuses a FIFO,
    device, socket or directory before a byte is read. Raises as :func:`open_regular`.
    """
    return _regular_file(os.open(path, _FLAGS & ~getattr(os, "O_NOFOLLOW", 0)), path)


def read_text_target(path: str | os.PathLike[str], max_bytes: int) -> str | None:
    """The UTF-8 text of the regular file ``path`` names (links followed), or ``None`` when
    it cannot be read, is not a regular file, is larger than ``max_bytes`` or is not UTF-8."""
    try:
        with open_regular_target(path) as file:
            data = file.read(max_bytes + 1)
    except OSError:
        return None
    if data is None or len(data) > max_bytes:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def open_regular(path: str | os.PathLike[str]) -> io.FileIO:
    """Open ``path`` for reading if, and only if, it is a regular file (not through a link).

    Raises :class:`FileNotFoundError` when it is gone, :class:`NotARegularFile` when it is
    something else, and :class:`OSError` as ``open`` does (permissions, EMFILE, …).
    """
    before = os.lstat(path)
    if not stat.S_ISREG(before.st_mode):
        raise NotARegularFile(path, kind_of(before.st_mode))
    try:
        fd = os.open(path, _FLAGS)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # replaced by a link since the lstat
            raise NotARegularFile(path, kind_of(stat.S_IFLNK)) from None
        raise
    return _regular_file(fd, path)


def _regular_file(fd: int, path: str | os.PathLike[str]) -> io.FileIO:
    """``fd`` as a file if ``fstat`` says it is a regular file; else closed, and refused."""
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotARegularFile(path, kind_of(mode))
        return io.FileIO(fd, "r", closefd=True)
    except BaseException:
        os.close(fd)
        raise


def reason(exc: OSError) -> str:
    """A short, stable description of why a file cannot be read."""
    if isinstance(exc, NotARegularFile):
        return f"{exc.kind}, not a regular file"
    if isinstance(exc, PermissionError):
        return "permission denied"
    if exc.errno == errno.ELOOP:
        return "too many levels of symbolic links"
    if exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        return f"{os.strerror(exc.errno).lower()} ({name})"
    return str(exc)


def is_transient(exc: OSError) -> bool:
    """Whether the failure says more about memd's moment than about the file."""
    return exc.errno in _TRANSIENT


def signature(path: str | os.PathLike[str]) -> tuple[int, ...] | None:
    """What changes when someone fixes a file (mode, owner, inode, size, times); ``None``
    when the path is gone. Compared to decide when an unreadable file is worth a retry."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return (st.st_mode, st.st_uid, st.st_gid, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def read_regular(path: str | os.PathLike[str], limit: int | None = None) -> bytes:
    """The bytes of a regular file (at most ``limit``), opened as :func:`open_regular` does.

    Raises as :func:`open_regular`.
    """
    with open_regular(path) as file:
        if limit is None:
            return file.readall()
        parts: list[bytes] = []
        left = limit
        while left > 0:
            block = file.read(left)
            if not block:
                break
            parts.append(block)
            left -= len(block)
        return b"".join(parts)
