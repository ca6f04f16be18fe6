"""Scanning a memory dir for topic files (R-M4) and the selector's manifest (R-M5).

Every ``*.md`` below the memory dir except index files (``MEMORY.md``) is a topic file. For
each, only the head (the first 30 lines, which hold the frontmatter) is read, and the mtime is
taken from the same open file descriptor: one open, lazy line reads, one ``fstat``. Reading
every head and then sorting costs half the system calls of stat-sort-read for the common
case of a few hundred files. The newest 200 are kept.

The head is also capped in bytes (:data:`HEAD_MAX_BYTES`), so a file without line breaks
cannot make the scan read it whole. Hidden directories (``.git``, snapshots) and symlinked
directories are not entered.

:class:`HeaderCache` is what recall uses (issue 12): the headers of each memory dir kept by
``(inode, mtime_ns, size)``, so a recall stats the files (``scandir``), leaves out what the
session has already seen, keeps the newest 200, and reads the head of only the new or changed
ones among them. The stat pass itself is reused for ``refresh_s`` (1 s) while the memory
dir's own inode and mtime are unchanged: a file added, removed or replaced atomically shows
at once, an edit in place within a second. Only regular files are read (a FIFO named
``x.md`` would block a read).

This is a blocking I/O shell: call it from a worker thread (``anyio.to_thread.run_sync``).
"""

from __future__ import annotations

import io
import os
import stat
import threading
import time
from collections import OrderedDict
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from memd.memory.frontmatter import Document, MemoryType, parse_document
from memd.memory.paths import INDEX_FILENAME
from memd.regular_file import open_regular

DEFAULT_MAX_FILES = 200
DEFAULT_HEAD_LINES = 30
HEAD_MAX_BYTES = 64 * 1024
_READ_CHUNK = 4096


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


@dataclass(frozen=True)
class Head:
    """The first lines of a file, its mtime, and how many bytes were read from the disk."""

    text: str
    mtime_ms: int
    bytes_read: int


def read_head(path: Path, *, max_lines: int = DEFAULT_HEAD_LINES) -> Head:
    """Read at most ``max_lines`` lines (and :data:`HEAD_MAX_BYTES`) and the mtime, in one open.

    Raises ``OSError`` as ``open`` does (a file removed since the listing, a permission error)
    and for anything but a regular file (a FIFO, a device), which it never blocks on.
    """
    # A FIFO named *.md must not hang the scan (and every recall) in open(), nor a link lead
    # out of the memory dir: regular files only, opened without blocking or following links.
    with open_regular(path) as raw:
        info = os.fstat(raw.fileno())
        mtime_ms = info.st_mtime_ns // 1_000_000
        reader = io.BufferedReader(raw, buffer_size=_READ_CHUNK)
        lines: list[bytes] = []
        budget = HEAD_MAX_BYTES
        while len(lines) < max_lines and budget > 0:
            line = reader.readline(budget)
            if not line:
                break
            lines.append(line)
            budget -= len(line)
        bytes_read = raw.tell()
    return Head(b"".join(lines).decode("utf-8", errors="replace"), mtime_ms, bytes_read)


def header_from_head(path: Path, relative: str, head: Head) -> MemoryHeader:
    """Pure: the header fields from a file's head."""
    document: Document = parse_document(head.text)
    meta = document.meta
    return MemoryHeader(
        path=path,
        relative=relative,
        mtime_ms=head.mtime_ms,
        name=meta.name,
        description=meta.description,
        type=meta.type,
        body_head=document.body,
        problems=document.problems,
    )


def list_topic_files(memory_dir: Path) -> list[tuple[Path, str]]:
    """``(path, relative POSIX path)`` of every topic file below ``memory_dir``, unsorted."""
    found: list[tuple[Path, str]] = []
    for folder, dirnames, filenames in os.walk(memory_dir):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        base = Path(folder)
        for filename in filenames:
            if not filename.endswith(".md") or filename == INDEX_FILENAME:
                continue
            if filename.startswith("."):
                continue  # editor swap files and our own atomic-write temp files
            path = base / filename
            found.append((path, path.relative_to(memory_dir).as_posix()))
    return found


def scan_memories(
    memory_dir: Path,
    *,
    max_files: int = DEFAULT_MAX_FILES,
    head_lines: int = DEFAULT_HEAD_LINES,
) -> list[MemoryHeader]:
    """Headers of the newest ``max_files`` topic files, newest first (ties by path).

    A missing memory dir scans as empty. Files that vanish or cannot be read are skipped.
    """
    headers: list[MemoryHeader] = []
    for path, relative in list_topic_files(memory_dir):
        try:
            head = read_head(path, max_lines=head_lines)
        except OSError:
            continue
        headers.append(header_from_head(path, relative, head))
    return newest_first(headers)[:max_files]


# A listed topic file: (-mtime_ms, relative, path, (inode, mtime_ns, size)). A plain tuple
# sorts newest first (ties by path) as it is, and costs a third of a dataclass per file.
_Listed = tuple[int, str, str, tuple[int, int, int]]


def list_topic_stats(memory_dir: Path) -> list[_Listed]:
    """Every regular topic file below ``memory_dir`` with its identity, unsorted (same rules
    as :func:`list_topic_files`; a missing dir lists as empty)."""
    found: list[_Listed] = []
    pending = [(str(memory_dir), "")]
    while pending:
        folder, prefix = pending.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    name = entry.name
                    if name[0] == ".":
                        continue
                    if name[-3:] == ".md" and name != INDEX_FILENAME:
                        try:
                            info = entry.stat()
                        except OSError:
                            continue
                        if stat.S_ISREG(info.st_mode):
                            mtime = info.st_mtime_ns
                            key = (info.st_ino, mtime, info.st_size)
                            found.append((-(mtime // 1_000_000), prefix + name, entry.path, key))
                    elif entry.is_dir(follow_symlinks=False):
                        pending.append((entry.path, f"{prefix}{name}/"))
        except OSError:
            continue
    return found


class HeaderCache:
    """Headers per memory dir by file identity; see the module docstring. Thread-safe."""

    def __init__(self, max_dirs: int = 64, refresh_s: float = 1.0) -> None:
        self._dirs: OrderedDict[str, dict[str, tuple[tuple[int, int, int], MemoryHeader]]] = (
            OrderedDict()
        )
        self._listings: dict[str, tuple[tuple[int, int], float, list[_Listed]]] = {}
        self.refresh_s = refresh_s
        self._lock = threading.Lock()
        self._max_dirs = max_dirs
        self.heads_read = 0

    def scan(
        self,
        memory_dir: Path,
        *,
        exclude: Collection[str] = (),
        max_files: int = DEFAULT_MAX_FILES,
        head_lines: int = DEFAULT_HEAD_LINES,
    ) -> list[MemoryHeader]:
        """The newest ``max_files`` headers not in ``exclude`` (absolute paths), newest first."""
        listed = self._listing(memory_dir)
        if exclude:
            kept = [e for e in listed if e[2] not in exclude][:max_files]
        else:
            kept = listed[:max_files]
        key = str(memory_dir)
        with self._lock:
            cached = dict(self._dirs.get(key) or {})
        headers: list[MemoryHeader] = []
        for _, relative, path, identity in kept:
            hit = cached.get(relative)
            if hit is None or hit[0] != identity:
                try:
                    head = read_head(Path(path), max_lines=head_lines)
                except OSError:
                    continue
                self.heads_read += 1
                hit = (identity, header_from_head(Path(path), relative, head))
                cached[relative] = hit
            headers.append(hit[1])
        present = {e[1] for e in listed}
        with self._lock:
            self._dirs[key] = {r: v for r, v in cached.items() if r in present}
            self._dirs.move_to_end(key)
            while len(self._dirs) > self._max_dirs:
                dropped, _ = self._dirs.popitem(last=False)
                self._listings.pop(dropped, None)
        return headers

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
        listed = list_topic_stats(memory_dir)
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
