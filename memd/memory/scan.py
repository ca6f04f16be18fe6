"""Scanning a memory dir for topic files (R-M4) and the selector's manifest (R-M5).

Every ``*.md`` below the memory dir except index files (``MEMORY.md``) is a topic file. For
each, only the head (the first 30 lines, which hold the frontmatter) is read, and the mtime is
taken from the same open file descriptor: one open, lazy line reads, one ``fstat``. Reading
every head and then sorting costs half the system calls of stat-sort-read for the common
case of a few hundred files. The newest 200 are kept.

The head is also capped in bytes (:data:`HEAD_MAX_BYTES`), so a file without line breaks
cannot make the scan read it whole. Hidden directories (``.git``, snapshots) are not entered.
Everything goes through :class:`memd.confined.Area`: the memory dir is opened once and
nothing beneath it is followed; a link, a hard-linked file or a FIFO is not a memory (it is
skipped, and shown by ``status`` and ``doctor``).

:class:`HeaderCache` is what recall uses (issue 12): the headers of each memory dir kept by
``(inode, mtime_ns, size)``, so a recall stats the files (``scandir``), leaves out what the
session has already seen, keeps the newest 200, and reads the head of only the new or changed
ones among them. The stat pass itself is reused for ``refresh_s`` (1 s) while the memory
dir's own inode and mtime are unchanged: a file added, removed or replaced atomically shows
at once, an edit in place within a second. The stat pass is the confined walk (``fstatat``
on each listed folder's descriptor, with the link-count and owner checks), and a head is read
only through :meth:`~memd.confined.Area.read_head`, which checks the file it opened again.

This is a blocking I/O shell: call it from a worker thread (``anyio.to_thread.run_sync``).
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memd.confined import Area, ChangeGuard
from memd.memory.frontmatter import Document, MemoryType, parse_document
from memd.memory.paths import INDEX_FILENAME
from memd.team.provenance import provenance

DEFAULT_MAX_FILES = 200
DEFAULT_HEAD_LINES = 30
HEAD_MAX_BYTES = 64 * 1024


@dataclass(frozen=True)
class MemoryHeader:
    """What the scan knows about one topic file without reading all of it."""

    path: Path
    relative: str  # POSIX path relative to the memory dir, e.g. "team/ci.md"
    mtime_ms: int
    name: str | None
    description: str | None
    type: MemoryType | None
    body_head: str  # the part of the body inside the head lines (used by the lexical ranker)
    problems: tuple[str, ...]
    pinned: bool = False  # metadata.pinned: loaded into every session (issue 25)
    modified: str | None = None  # the frontmatter's ISO ``modified``, when it has one
    author: str | None = None  # issue 37: who shared it (``metadata.author``)
    agent: str | None = None  # and with which agent


@dataclass(frozen=True)
class Head:
    """The first lines of a file, its mtime, and how many bytes were read from the disk."""

    text: str
    mtime_ms: int
    bytes_read: int


def read_head(area: Area, relative: str, *, max_lines: int = DEFAULT_HEAD_LINES) -> Head:
    """Read at most ``max_lines`` lines (and :data:`HEAD_MAX_BYTES`) and the mtime, in one open.

    Raises ``OSError`` as ``open`` does (a file removed since the listing, a permission error)
    and :class:`~memd.confined.Refused` for anything but a regular, one-link file of the
    user's (a FIFO, a link, a hard link), which it never blocks on or follows.
    """
    data, info = area.read_head(relative, max_lines=max_lines, max_bytes=HEAD_MAX_BYTES)
    mtime_ms = info.st_mtime_ns // 1_000_000
    return Head(data.decode("utf-8", errors="replace"), mtime_ms, len(data))


def header_from_head(path: Path, relative: str, head: Head) -> MemoryHeader:
    """Pure: the header fields from a file's head."""
    document: Document = parse_document(head.text)
    meta = document.meta
    said = provenance(meta)
    return MemoryHeader(
        path=path,
        relative=relative,
        mtime_ms=head.mtime_ms,
        name=meta.name,
        description=meta.description,
        type=meta.type,
        body_head=document.body,
        problems=document.problems,
        pinned=meta.pinned,
        modified=meta.modified,
        author=said.author,
        agent=said.agent,
    )


def is_topic(relative: str) -> bool:
    """A visible ``*.md`` that is not an index (``MEMORY.md``, in any folder)."""
    return relative[-3:] == ".md" and relative.rpartition("/")[2] != INDEX_FILENAME


def list_topic_files(area: Area) -> list[str]:
    """The relative POSIX path of every topic file below the area, unsorted."""
    return [entry.relative for entry in area.walk() if is_topic(entry.relative)]


def scan_memories(
    memory_dir: Path,
    *,
    max_files: int | None = DEFAULT_MAX_FILES,
    head_lines: int = DEFAULT_HEAD_LINES,
) -> list[MemoryHeader]:
    """Headers of the newest ``max_files`` topic files (all with ``None``), newest first (ties
    by path).

    A missing memory dir scans as empty. Files that vanish, cannot be read or are refused
    (links, hard links, special files) are skipped.
    """
    headers: list[MemoryHeader] = []
    with opened_area(memory_dir) as area:
        if area is None:
            return []
        for relative in list_topic_files(area):
            try:
                head = read_head(area, relative, max_lines=head_lines)
            except OSError:
                continue
            headers.append(header_from_head(memory_dir / relative, relative, head))
    return newest_first(headers)[:max_files]


@contextmanager
def opened_area(memory_dir: Path, guard: ChangeGuard | None = None) -> Iterator[Area | None]:
    """The memory dir as an :class:`Area` (its changes told to ``guard``), ``None`` when it
    is missing, not a folder or not the user's (a memory dir that cannot be opened scans as
    empty)."""
    try:
        area = Area.open(memory_dir, guard=guard)
    except OSError:
        yield None
        return
    with area:
        yield area


# A listed topic file: (-mtime_ms, relative, path, (inode, mtime_ns, size)). A plain tuple
# sorts newest first (ties by path) as it is, and costs a third of a dataclass per file.
_Listed = tuple[int, str, str, tuple[int, int, int]]


def list_topic_stats(area: Area) -> list[_Listed]:
    """Every topic file below the area with its identity, unsorted (as
    :func:`list_topic_files`)."""
    base = str(area.root) + "/"
    found: list[_Listed] = []
    for relative, info in area.walk():
        if is_topic(relative):
            mtime = info.st_mtime_ns
            key = (info.st_ino, mtime, info.st_size)
            found.append((-(mtime // 1_000_000), relative, base + relative, key))
    return found


class HeaderCache:
    """Headers per memory dir by file identity; see the module docstring. Thread-safe.

    A subclass learns of every header read and every file gone through :meth:`_changed`
    (called under the lock), which :class:`memd.memory.rank_index.RecallCache` uses to keep
    its index up to date.
    """

    def __init__(self, max_dirs: int = 64, refresh_s: float = 1.0) -> None:
        self._dirs: OrderedDict[str, dict[str, tuple[tuple[int, int, int], MemoryHeader]]] = (
            OrderedDict()
        )
        self._listings: dict[str, tuple[tuple[int, int], float, list[_Listed]]] = {}
        # The last whole scan of a dir: (its listing, head_lines, headers), reused while a new
        # stat pass lists the same files with the same (inode, mtime_ns, size).
        self._whole: dict[str, tuple[list[_Listed], int, list[MemoryHeader]]] = {}
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._max_dirs = max_dirs
        self.heads_read = 0

    def scan(
        self,
        memory_dir: Path,
        *,
        exclude: Collection[str] = (),
        max_files: int | None = DEFAULT_MAX_FILES,
        head_lines: int = DEFAULT_HEAD_LINES,
    ) -> list[MemoryHeader]:
        """The newest ``max_files`` headers (all with ``None``) not in ``exclude`` (absolute
        paths), newest first."""
        listed = self._listing(memory_dir)
        key = str(memory_dir)
        whole = max_files is None and not exclude
        if whole:
            with self._lock:
                known = self._whole.get(key)
            if known is not None and known[1] == head_lines and known[0] == listed:
                return known[2]  # the same files with the same identities: nothing to read
        if exclude:
            kept = [e for e in listed if e[2] not in exclude][:max_files]
        else:
            kept = listed[:max_files]
        with self._lock:
            before = self._dirs.get(key) or {}
        cached = dict(before)
        missing = [e for e in kept if (hit := cached.get(e[1])) is None or hit[0] != e[3]]
        if missing:
            self._read_heads(memory_dir, missing, head_lines, cached)
        present = {e[1] for e in listed}
        with self._lock:
            now = {r: v for r, v in cached.items() if r in present}
            self._changed(key, before, now)
            self._dirs[key] = now
            headers = [hit[1] for e in kept if (hit := now.get(e[1])) is not None]
            if whole:
                self._whole[key] = (listed, head_lines, headers)
            self._dirs.move_to_end(key)
            while len(self._dirs) > self._max_dirs:
                dropped, _ = self._dirs.popitem(last=False)
                self._listings.pop(dropped, None)
                self._whole.pop(dropped, None)
                self._changed(dropped, {}, {})
        return headers

    def _changed(
        self,
        key: str,
        before: Mapping[str, tuple[tuple[int, int, int], MemoryHeader]],
        after: dict[str, tuple[tuple[int, int, int], MemoryHeader]],
    ) -> None:
        """The headers of dir ``key`` went from ``before`` to ``after`` (both empty: the dir
        was evicted). Called under the lock; a subclass may replace headers in ``after``
        (what the cache keeps and returns). Nothing to do here."""

    def _read_heads(
        self,
        memory_dir: Path,
        listed: Sequence[_Listed],
        head_lines: int,
        cached: dict[str, tuple[tuple[int, int, int], MemoryHeader]],
    ) -> None:
        """Read the heads of ``listed`` into ``cached`` (through one opened area)."""
        with opened_area(memory_dir) as area:
            if area is None:
                return
            for _, relative, path, identity in listed:
                try:
                    head = read_head(area, relative, max_lines=head_lines)
                except OSError:
                    cached.pop(relative, None)
                    continue
                self.heads_read += 1
                cached[relative] = (identity, header_from_head(Path(path), relative, head))

    def _listing(self, memory_dir: Path) -> list[_Listed]:
        """The sorted stat pass, reused while fresh (see the module docstring)."""
        key = str(memory_dir)
        try:
            info = os.stat(memory_dir)
        except OSError:
            return []
        root = (info.st_ino, info.st_mtime_ns)
        now = time.monotonic()
        with self._lock:
            known = self._listings.get(key)
        if known is not None and known[0] == root and now - known[1] < self.refresh_s:
            return known[2]
        with opened_area(memory_dir) as area:
            listed = [] if area is None else list_topic_stats(area)
        listed.sort()
        with self._lock:
            self._listings[key] = (root, now, listed)
        return listed


def newest_first(headers: Iterable[MemoryHeader]) -> list[MemoryHeader]:
    return sorted(headers, key=lambda h: (-h.mtime_ms, h.relative))


def iso_mtime(mtime_ms: int) -> str:
    """``2026-03-15T10:30:00.000Z``: UTC with milliseconds, as JavaScript prints dates."""
    moment = datetime.fromtimestamp(mtime_ms // 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{mtime_ms % 1000:03d}Z"


def manifest_line(header: MemoryHeader) -> str:
    """``- [type] relative/path.md (ISO-8601 mtime): description`` (tag and text optional)."""
    tag = f"[{header.type}] " if header.type else ""
    line = f"- {tag}{header.relative} ({iso_mtime(header.mtime_ms)})"
    return f"{line}: {header.description}" if header.description else line


def format_manifest(headers: Sequence[MemoryHeader]) -> str:
    """One manifest line per header, in the given order."""
    return "\n".join(manifest_line(h) for h in headers)
