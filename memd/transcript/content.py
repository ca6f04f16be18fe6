"""Reading transcript lines back by offset, for their content (R-T6).

A :class:`~memd.transcript.conversation.Conversation` keeps each entry's structure and where
its line sits in the file (``at``, ``size``), not its content: a session of a few megabytes
would otherwise hold tens of megabytes of Python objects for as long as it is resident. When a
job needs content (compaction, notes input, memory extraction, a token estimate), the lines
are read back here:

* :class:`FileLines` reads them from the transcript, with ``pread`` over as few ranges as
  possible, and checks that the file is still the one the entries came from: the same inode,
  a newline on both sides of each line, and the same ``uuid`` in it. Anything else raises
  :class:`TranscriptChanged`, and the owner rebuilds the session from the file. The file is
  as hostile as at ingest: it is opened the same way (:mod:`memd.regular_file`) and every
  line goes through the same decoder.
* :class:`MemoryLines` keeps the lines in memory, for conversations fed from bytes that are
  in no file (tests, tools reading a copy).
* :class:`ContentCache` keeps the decoded content of recently read lines, bounded by their
  size in the file, so the jobs that follow one growth (notes, extraction, compaction) decode
  each line once.
"""

from __future__ import annotations

import itertools
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Final, Protocol, TypeAlias

from memd import regular_file
from memd.errors import TranscriptError
from memd.transcript.model import Content, Entry
from memd.transcript.parse import BadLine, line_content

__all__ = [
    "ContentCache",
    "FileLines",
    "LineStore",
    "MemoryLines",
    "TranscriptChanged",
    "read_contents",
]

DEFAULT_CACHE_BYTES: Final = 4 * 1024 * 1024
_GAP: Final = 64 * 1024  # lines closer than this are read in one pread
_RANGE_MAX: Final = 8 * 1024 * 1024
_serials: Final = itertools.count(1)  # a store's cache key: a rebuilt session never sees old lines


class TranscriptChanged(TranscriptError):
    """The file no longer holds the lines a conversation was built from (replaced, rewritten
    in place, truncated, gone): the conversation must be rebuilt from the file."""


ContentDecoder: TypeAlias = Callable[[bytes, Entry], Content]
"""An entry's content from its line (the agent's format: :func:`claude_content` for Claude
Code's); raises :class:`TranscriptChanged` when the line is no longer the entry's."""


def claude_content(line: bytes, entry: Entry) -> Content:
    """The content of a Claude Code line, checked to be the entry's (same uuid and size)."""
    try:
        uuid, content = line_content(line)
    except BadLine as exc:
        raise TranscriptChanged(f"the line of {entry.uuid} no longer parses: {exc}") from None
    if uuid != entry.uuid or len(line) != entry.size:
        raise TranscriptChanged(f"the line at byte {entry.at} is no longer {entry.uuid}")
    return content


class LineStore(Protocol):
    """Where a conversation's lines can be read back from, and how they are decoded."""

    @property
    def decode(self) -> ContentDecoder:
        """The content of an entry from its line."""
        ...

    @property
    def key(self) -> int:
        """The store's identity in the cache: a new store never shares one."""
        ...

    def read(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        """The line of each entry, by its offset; raises :class:`TranscriptChanged`."""
        ...


class MemoryLines:
    """Lines held in memory, at the offsets they would have in a file."""

    def __init__(self, decode: ContentDecoder = claude_content) -> None:
        self._lines: dict[int, bytes] = {}
        self.end = 0  # where the next line goes
        self.key = next(_serials)
        self.decode = decode

    def place(self, line: bytes) -> int:
        """The offset of ``line``, appended after the last one."""
        at = self.end
        self.end += len(line) + 1
        return at

    def keep(self, at: int, line: bytes) -> None:
        self._lines[at] = line

    def read(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        try:
            return {e.at: self._lines[e.at] for e in entries}
        except KeyError as exc:
            raise TranscriptChanged(f"no line kept at offset {exc.args[0]}") from None


class FileLines:
    """A transcript file, read by offset; ``inode`` is the file the entries came from (0:
    not known yet, set by the reader after its first read)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        inode: int = 0,
        decode: ContentDecoder = claude_content,
    ) -> None:
        self.path = os.fspath(path)
        self.inode = inode
        self.key = next(_serials)
        self.decode = decode

    def read(self, entries: Sequence[Entry]) -> dict[int, bytes]:
        try:
            with regular_file.open_regular(self.path) as file:
                st = os.fstat(file.fileno())
                if self.inode and st.st_ino != self.inode:
                    raise TranscriptChanged(f"{self.path} was replaced")
                out: dict[int, bytes] = {}
                for group in _ranges(entries):
                    out.update(_read_range(file.fileno(), group, self.path))
                return out
        except OSError as exc:
            raise TranscriptChanged(
                f"cannot read {self.path} back: {regular_file.reason(exc)}"
            ) from exc


def _ranges(entries: Sequence[Entry]) -> Iterable[list[Entry]]:
    """The entries in file order, grouped into runs read with one ``pread`` each."""
    group: list[Entry] = []
    for entry in sorted(entries, key=lambda e: e.at):
        if group:
            start, end = group[0].at, group[-1].at + group[-1].size
            if entry.at - end > _GAP or entry.at + entry.size - start > _RANGE_MAX:
                yield group
                group = []
        group.append(entry)
    if group:
        yield group


def _read_range(fd: int, group: list[Entry], path: str) -> dict[int, bytes]:
    """Each entry's line from one read, with the newline before and after it checked."""
    first = group[0].at
    start = max(0, first - 1)
    end = group[-1].at + group[-1].size + 1  # through the newline that ends the last line
    data = os.pread(fd, end - start, start)
    out: dict[int, bytes] = {}
    for entry in group:
        begin = entry.at - start
        stop = begin + entry.size
        before_ok = entry.at == 0 or (begin > 0 and data[begin - 1 : begin] == b"\n")
        if entry.at < 0 or not before_ok or data[stop : stop + 1] != b"\n":
            raise TranscriptChanged(f"{path} no longer has a line at byte {entry.at}")
        out[entry.at] = data[begin:stop]
    return out


class ContentCache:
    """Decoded content of recently read lines, least recently used out first, bounded by the
    lines' size in the file; a line larger than a quarter of the bound is not kept."""

    def __init__(self, max_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        self.max_bytes = max_bytes
        self._items: OrderedDict[tuple[int, int], tuple[int, str, Content]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: int, entry: Entry) -> Content | None:
        with self._lock:
            item = self._items.get((key, entry.at))
            if item is None or item[1] != entry.uuid:
                return None
            self._items.move_to_end((key, entry.at))
            return item[2]

    def put(self, key: int, entry: Entry, content: Content) -> None:
        if entry.size > self.max_bytes // 4:
            return
        with self._lock:
            old = self._items.pop((key, entry.at), None)
            if old is not None:
                self._bytes -= old[0]
            self._items[(key, entry.at)] = (entry.size, entry.uuid, content)
            self._bytes += entry.size
            while self._bytes > self.max_bytes and self._items:
                _, (dropped, _, _) = self._items.popitem(last=False)
                self._bytes -= dropped

    @property
    def size(self) -> int:
        """Bytes of the cached lines (as in the file)."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)


shared_cache: Final = ContentCache()
"""The daemon's one content cache (all sessions); its bound is set from the config."""


def read_contents(
    store: LineStore, entries: Iterable[Entry], cache: ContentCache | None = None
) -> dict[str, Content]:
    """The content blocks of each entry's line, by uuid (cached lines are not read again)."""
    cache = shared_cache if cache is None else cache
    out: dict[str, Content] = {}
    missing: list[Entry] = []
    for entry in entries:
        if entry.uuid in out:
            continue
        hit = cache.get(store.key, entry)
        if hit is None:
            missing.append(entry)
        else:
            out[entry.uuid] = hit
    if not missing:
        return out
    lines = store.read(missing)
    decode = store.decode
    for entry in missing:
        content = decode(lines[entry.at], entry)
        cache.put(store.key, entry, content)
        out[entry.uuid] = content
    return out
