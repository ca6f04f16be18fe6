"""Reading what was appended to a transcript since the last read (R-T3).

:class:`LineSplitter` is the pure part: bytes in, complete lines out. It splits on ``\\n``
bytes only, so a multi-byte UTF-8 character cut between two chunks is simply reassembled
(``0x0A`` never occurs inside one).

:func:`read_appended` is the I/O shell. It is synchronous (the daemon calls it in a worker
thread), keeps no state between calls, reads a bounded number of bytes per call, and returns
the new :class:`TailPosition` to store: only complete lines advance its offset, so a line
still being written is read whole once its newline is there, and the position remembers how
far that newline was looked for, so a huge incomplete line is scanned once, not from its
start on every change. :class:`Tail` makes the successive calls of one read turn through one
descriptor, carrying the incomplete last line in memory from one call to the next.
"""

from __future__ import annotations

import errno
import io
import os
from dataclasses import dataclass, field
from itertools import accumulate, repeat
from operator import add
from stat import S_ISREG
from typing import Any, Final

from memd import regular_file
from memd.errors import StateError, TranscriptError

# Bytes read per call: small batches keep the short-lived line objects few, so the long-lived
# entries built from them pack densely (RSS for 300 sessions: +31 MiB at 8 MiB, +27 at 256 KiB).
DEFAULT_MAX_BYTES: Final = 256 * 1024


class UnreadableTranscript(TranscriptError):
    """A transcript path that cannot be read: not a regular file, no permission, EMFILE….

    ``reason`` is the short text shown to the user; ``transient`` says whether retrying later
    may help without the file changing (out of file descriptors, out of memory).
    """

    def __init__(self, path: str | os.PathLike[str], reason: str, *, transient: bool) -> None:
        super().__init__(f"cannot read transcript {os.fspath(path)}: {reason}")
        self.reason = reason
        self.transient = transient

    @classmethod
    def of(cls, path: str | os.PathLike[str], exc: OSError) -> UnreadableTranscript:
        return cls(path, regular_file.reason(exc), transient=regular_file.is_transient(exc))


DEFAULT_MAX_LINE_BYTES: Final = 16 * 1024 * 1024  # config: transcripts.max_line_bytes
_BLOCK: Final = 1024 * 1024


class LineSplitter:
    """Incremental splitter: feed chunks, get the lines completed so far.

    Lines come without their ``\\n``; empty lines are dropped (a ``\\r`` before the newline
    stays: it is JSON whitespace).
    A line longer than ``max_line_bytes`` is not kept in memory: it is skipped up to its
    newline and counted in :attr:`skipped`.
    """

    def __init__(self, max_line_bytes: int = DEFAULT_MAX_LINE_BYTES, *, origin: int = 0) -> None:
        """``origin``: where the first byte fed sits in its file (offsets are counted from it)."""
        if max_line_bytes <= 0:
            raise ValueError("max_line_bytes must be positive")
        self.max_line_bytes = max_line_bytes
        self.origin = origin
        self._parts: list[bytes] = []
        self._pending = 0  # bytes held in _parts
        self._discarding = False  # inside an over-long line, waiting for its newline
        self.fed = 0  # bytes fed so far
        self.consumed = 0  # bytes fed up to and including the last newline
        self.skipped = 0  # over-long lines dropped

    @property
    def pending(self) -> int:
        """Bytes of the incomplete last line (0 when the input ended with a newline)."""
        return self.fed - self.consumed

    def feed(self, data: bytes) -> list[bytes]:
        """Add ``data``; return the lines it completed, in order."""
        return self.feed_lines(data)[1]

    def feed_at(self, data: bytes) -> list[tuple[int, bytes]]:
        """Add ``data``; return the lines it completed, each with its offset (from ``origin``)."""
        return list(zip(*self.feed_lines(data), strict=True))

    def feed_lines(self, data: bytes) -> tuple[list[int], list[bytes]]:
        """Add ``data``; return the offsets (from ``origin``) of the lines it completed, and the
        lines, in order. The offsets are summed and the lines checked in C: an empty or
        over-long line (rare) is the only case that takes a Python loop over them."""
        if not data:
            return [], []
        start = self.origin + self.consumed  # where the held line (or the first new one) begins
        base = self.origin + self.fed
        self.fed += len(data)
        lines = data.split(b"\n")
        tail = lines.pop()
        if not lines:
            self._hold(tail)
            return [], []
        self.consumed = self.fed - len(tail)
        lengths = list(map(len, lines))
        offsets = list(accumulate(map(add, lengths, repeat(1)), initial=base))
        offsets.pop()  # where the tail starts
        offsets[0] = start
        lines[0] = self._finish(lines[0])
        lengths[0] = len(lines[0])
        self._hold(tail)
        if min(lengths) == 0 or max(lengths) > self.max_line_bytes:
            return self._kept(offsets, lines)
        return offsets, lines

    def _kept(self, offsets: list[int], lines: list[bytes]) -> tuple[list[int], list[bytes]]:
        """The lines neither empty nor over-long (counted in :attr:`skipped`), and offsets."""
        limit = self.max_line_bytes
        self.skipped += sum(len(line) > limit for line in lines[1:])  # _finish counted the first
        kept = [
            (at, line) for at, line in zip(offsets, lines, strict=True) if 0 < len(line) <= limit
        ]
        return [at for at, _ in kept], [line for _, line in kept]

    def _finish(self, piece: bytes) -> bytes:
        """Complete the held line with ``piece`` (b"" when it was too long)."""
        if self._discarding or self._pending + len(piece) > self.max_line_bytes:
            self._discarding = False
            self._parts.clear()
            self._pending = 0
            self.skipped += 1
            return b""
        if not self._parts:
            return piece
        line = b"".join((*self._parts, piece))
        self._parts.clear()
        self._pending = 0
        return line

    def held(self) -> bytes | None:
        """The bytes of the incomplete last line, or ``None`` when it is being skipped."""
        if self._discarding:
            return None
        return b"".join(self._parts)

    def _hold(self, tail: bytes) -> None:
        if self._discarding or not tail:
            return
        if self._pending + len(tail) > self.max_line_bytes:
            self._parts.clear()
            self._pending = 0
            self._discarding = True
            return
        self._parts.append(tail)
        self._pending += len(tail)


@dataclass(frozen=True)
class TailPosition:
    """Where reading stopped: ``offset`` after the last complete line, the file's identity.

    ``scanned`` (0: none) is how far the search for the newline of the incomplete line at
    ``offset`` got: the bytes between them hold no newline, so the next read goes on from
    there instead of scanning the line from its start again.
    """

    offset: int
    inode: int
    size: int
    scanned: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"offset": self.offset, "inode": self.inode, "size": self.size}

    @classmethod
    def from_dict(cls, data: Any) -> TailPosition:
        """Rebuild from :meth:`to_dict` output; raise :class:`StateError` when malformed."""
        if not isinstance(data, dict):
            raise StateError(f"tail position must be a mapping, got {type(data).__name__}")
        values: dict[str, int] = {}
        for key in ("offset", "inode", "size"):
            value = data.get(key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise StateError(f"tail position {key!r} must be a whole number >= 0: {value!r}")
            values[key] = value
        return cls(**values)


@dataclass(frozen=True)
class TailRead:
    """The outcome of one :func:`read_appended` call.

    ``reset``: the file shrank or was replaced, ``lines`` start from offset 0 and whatever
    was built from the old content must be dropped. ``more``: the read stopped at its byte
    cap with unread data left; call again. ``skipped``: over-long lines dropped.
    """

    lines: list[bytes]
    position: TailPosition
    offsets: list[int] = field(default_factory=list, compare=False)  # each line's byte offset
    reset: bool = False
    more: bool = False
    skipped: int = 0
    bytes_read: int = field(default=0, compare=False)


def read_appended(
    path: str | os.PathLike[str],
    position: TailPosition | None = None,
    *,
    max_bytes: int = DEFAULT_MAX_BYTES,
    max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
) -> TailRead:
    """Read the complete lines appended to ``path`` after ``position``.

    ``position=None`` (or offset 0) reads from the start; an inode of 0 means "not known yet"
    and is never taken for a replacement. Reads about ``max_bytes`` at most, whatever the
    file holds: a line longer than that takes several calls, which remember in
    ``position.scanned`` how far its newline was looked for; it is read whole (once) when its
    newline is found, or skipped without being read when it is over ``max_line_bytes``.
    Holes of a sparse file are skipped, not read (they hold no newline).

    Only a regular file is opened, without following a link and without ever blocking
    (:func:`memd.regular_file.open_regular`). Raises :class:`FileNotFoundError` when the file
    is gone (an ordinary event: Claude Code deletes old transcripts) and
    :class:`UnreadableTranscript` when it cannot be read otherwise.
    """
    with Tail(path, position, max_bytes=max_bytes, max_line_bytes=max_line_bytes) as tail:
        return tail.read()


class Tail:
    """Successive :func:`read_appended` calls on one file, through one descriptor.

    Each :meth:`read` reads at most ``max_bytes`` new bytes, as :func:`read_appended` does
    from the position the previous one returned, and gives the same lines. Between reads the
    descriptor stays open (closed once a read reaches the end, or by :meth:`close`) and the
    incomplete last line, when the read held it whole (at most ``max_bytes``), is carried in
    memory instead of being read again (so a read may get further than a lone one would).
    Before each read the path is looked at again (``lstat``): when it no longer names the
    open file's inode as a regular file, the descriptor is dropped and the read opens the
    path as :func:`read_appended` does, so a replacement, a removal or a link swapped in
    between two reads is seen exactly as there; a truncation or a rewrite in place is told
    by the same checks on the open file (the bytes of the carried line, like the lines read
    before it, are not read again to compare).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        position: TailPosition | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        max_line_bytes: int = DEFAULT_MAX_LINE_BYTES,
    ) -> None:
        self.path = path
        self.position = position
        self.max_bytes = max_bytes
        self.max_line_bytes = max_line_bytes
        self._file: io.FileIO | None = None
        self._identity = (0, 0)  # the open file's (device, inode)
        self._cut: bytes | None = None  # the incomplete line's bytes from offset to scanned

    def __enter__(self) -> Tail:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the descriptor (the next read opens the path again); idempotent."""
        file, self._file, self._cut = self._file, None, None
        if file is not None:
            file.close()

    def read(self) -> TailRead:
        """The complete lines after :attr:`position`, which then moves past them; raises as
        :func:`read_appended`."""
        try:
            read = self._read()
        except FileNotFoundError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise UnreadableTranscript.of(self.path, exc) from exc
        self.position = read.position
        if not read.more:
            self.close()
        return read

    def _read(self) -> TailRead:
        position = self.position
        file, stat, cut = self._file, self._still_open(), self._cut
        if file is None or stat is None:
            self.close()
            file = self._file = regular_file.open_regular(self.path)
            stat, cut = os.fstat(file.fileno()), None
            self._identity = (stat.st_dev, stat.st_ino)
        fd = file.fileno()
        reset = _was_replaced(position, stat) or _not_at_line_start(fd, position)
        start = 0 if position is None or reset else position.offset
        scan = _Scan(fd, start, stat.st_size, self.max_bytes, self.max_line_bytes)
        if position is not None and not reset and start < position.scanned <= stat.st_size:
            if cut is not None and len(cut) == position.scanned - start:
                scan.carry(cut)
            else:
                scan.resume(position.scanned)
        scan.read_lines()
        self._cut = scan.cut if scan.cut is None or len(scan.cut) <= self.max_bytes else None
        return TailRead(
            lines=scan.lines,
            offsets=scan.offsets,
            position=TailPosition(
                offset=scan.consumed,
                inode=stat.st_ino,
                size=max(stat.st_size, scan.scanned),
                scanned=scan.scanned if scan.scanned > scan.consumed else 0,
            ),
            reset=reset,
            more=not scan.eof,
            skipped=scan.skipped,
            bytes_read=scan.read,
        )

    def _still_open(self) -> os.stat_result | None:
        """The path's status when it still names the open file as a regular file, else None."""
        if self._file is None:
            return None
        try:
            stat = os.lstat(self.path)
        except OSError:
            return None
        if not S_ISREG(stat.st_mode) or (stat.st_dev, stat.st_ino) != self._identity:
            return None
        return stat


def _was_replaced(position: TailPosition | None, stat: os.stat_result) -> bool:
    """Whether what was read up to ``position`` is no longer the start of this file."""
    if position is None or position.offset == 0:
        return False
    replaced = position.inode != 0 and stat.st_ino != position.inode
    return replaced or stat.st_size < position.offset


def _not_at_line_start(fd: int, position: TailPosition | None) -> bool:
    """A saved offset always follows a newline: any other byte there means the file was
    rewritten in place (same inode, e.g. deleted and re-created, or copied over)."""
    if position is None or position.offset == 0:
        return False
    return os.pread(fd, 1, position.offset - 1) != b"\n"


class _Scan:
    """One bounded read: the complete lines from ``consumed`` on (absolute offsets), and how
    far the newline of the line still incomplete was looked for (``scanned``)."""

    def __init__(self, fd: int, start: int, size: int, max_bytes: int, max_line_bytes: int) -> None:
        self.fd = fd
        self.size = size  # at open: what lies below it and is a hole stays one
        self.max_bytes = max_bytes
        self.max_line_bytes = max_line_bytes
        self.offsets: list[int] = []
        self.lines: list[bytes] = []
        self.consumed = self.scanned = start
        self.skipped = 0
        self.read = 0
        self.eof = False
        self._rest = b""  # read by resume() past the newline it looked for: the next lines
        self.cut: bytes | None = None  # the incomplete line read whole (None: not in memory)

    def carry(self, cut: bytes) -> None:
        """Go on from the incomplete line at ``consumed`` whose bytes, read before, are
        ``cut`` (no newline): its newline is looked for from where ``cut`` ends."""
        self._rest = cut

    def resume(self, scanned: int) -> None:
        """Go on looking for the newline of the line at ``consumed`` from ``scanned`` (the
        bytes between hold none); take the line once found, or skip it when over-long."""
        fd = self.fd
        at = scanned
        while self.read < self.max_bytes:
            at = _next_data(fd, at, self.size)
            block = os.pread(fd, min(_BLOCK, self.max_bytes - self.read), at)
            if not block:
                self.scanned, self.eof = at, True
                return
            self.read += len(block)
            found = block.find(b"\n")
            if found >= 0:
                self._take(at + found)
                self._rest = block[found + 1 :]
                return
            at += len(block)
        self.scanned = at

    def _take(self, newline: int) -> None:
        start, length = self.consumed, newline - self.consumed
        if length > self.max_line_bytes:
            self.skipped += 1
        elif length:
            line = os.pread(self.fd, length, start)
            self.read += len(line)
            self.offsets.append(start)
            self.lines.append(line)
        self.consumed = self.scanned = newline + 1

    def read_lines(self) -> None:
        """Split what follows ``scanned`` (at a line start here) until the cap or the end,
        starting with what :meth:`resume` read past its newline (not read twice)."""
        base, block = self.scanned, self._rest
        self._rest = b""
        if not block and (self.eof or self.read >= self.max_bytes):
            return
        fd, at = self.fd, base + len(block)
        splitter = LineSplitter(self.max_line_bytes, origin=base)
        while True:
            self._add(splitter.feed_lines(block))
            if self.read >= self.max_bytes:
                break
            block = os.pread(fd, min(_BLOCK, self.max_bytes - self.read), at)
            if not block:
                self.eof = True
                break
            self.read += len(block)
            at += len(block)
        self.skipped += splitter.skipped
        self.consumed = base + splitter.consumed
        self.scanned = base + splitter.fed
        self.cut = splitter.held()

    def _add(self, found: tuple[list[int], list[bytes]]) -> None:
        self.offsets += found[0]
        self.lines += found[1]


def _next_data(fd: int, at: int, size: int) -> int:
    """The first offset at or after ``at`` that is not in a hole (``size`` when the rest of
    the file, as it was at open, is one); ``at`` where the filesystem cannot tell."""
    try:
        return os.lseek(fd, at, os.SEEK_DATA)
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            return max(at, size)
        return at
