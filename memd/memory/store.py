"""Reading and writing one project's memory dir: topic files and the MEMORY.md index.

A thin blocking I/O shell over the pure cores (:mod:`frontmatter`, :mod:`index`): call it from
a worker thread. Writes are atomic (unique temp file in the same directory, fsync,
``os.replace``), so a reader sees the old file or the new one, never a mix. Text is scrubbed
of ``<private>`` spans and likely secrets before it is written (R-B4) unless the store was
made with ``redact=False``.

Nothing here deletes a memory (R-M8): removing memories is the user's decision, made with
ordinary file tools or the consolidation run, never an automatic one.

Relative paths name files inside the memory dir (``feedback_testing.md``,
``team/deploy.md``); a path that is absolute, climbs out with ``..``, goes through a hidden
folder, is not ``*.md``, or resolves (through symlinks) outside the dir is refused with
``ValueError``.
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from memd.atomic import write_text_atomic
from memd.errors import NotFound
from memd.memory.frontmatter import (
    Document,
    Frontmatter,
    FrontmatterForm,
    parse_document,
    render_document,
)
from memd.memory.index import (
    DEFAULT_MAX_BYTES,
    DEFAULT_MAX_LINES,
    IndexEntry,
    LoadedIndex,
    load_index,
    upsert_entry,
)
from memd.memory.paths import INDEX_FILENAME
from memd.memory.scan import list_topic_files
from memd.privacy import scrub_text


@dataclass(frozen=True)
class MemoryFile:
    relative: str
    path: Path
    document: Document
    mtime_ms: int


class MemoryStore:
    """One memory dir. The directory is created on the first write, not before."""

    def __init__(
        self, memory_dir: Path, *, redact: bool = True, form: FrontmatterForm = "metadata"
    ) -> None:
        self.root = memory_dir
        self.redact = redact
        self.form: FrontmatterForm = form  # where the type goes in files this store writes

    @property
    def index_path(self) -> Path:
        return self.root / INDEX_FILENAME

    def topic_path(self, relative: str) -> Path:
        """The absolute path for ``relative``; ``ValueError`` when it is not a topic file."""
        pure = PurePosixPath(relative.replace("\\", "/"))
        parts = pure.parts
        if not parts or pure.is_absolute() or any(p in ("", ".", "..") for p in parts):
            raise ValueError(f"{relative!r} is not a path inside the memory dir")
        if any(p.startswith(".") for p in parts) or pure.suffix != ".md":
            raise ValueError(f"{relative!r}: memory files are visible *.md files")
        if pure.name == INDEX_FILENAME:
            raise ValueError(f"{relative!r} is an index, not a topic file")
        path = self.root.joinpath(*parts)
        real_root = os.path.realpath(self.root)
        if os.path.commonpath([real_root, os.path.realpath(path)]) != real_root:
            raise ValueError(f"{relative!r} resolves outside the memory dir")
        return path

    def read(self, relative: str) -> MemoryFile:
        """The whole topic file, parsed. ``NotFound`` when it does not exist."""
        path = self.topic_path(relative)
        try:
            with path.open("rb") as handle:
                mtime_ms = os.fstat(handle.fileno()).st_mtime_ns // 1_000_000
                text = handle.read().decode("utf-8", errors="replace")
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise NotFound(f"no memory {relative!r} in {self.root}") from exc
        return MemoryFile(PurePosixPath(relative).as_posix(), path, parse_document(text), mtime_ms)

    def write(self, relative: str, meta: Frontmatter, body: str) -> Path:
        """Create or replace a topic file atomically; returns its path."""
        path = self.topic_path(relative)
        write_text_atomic(path, self._clean(render_document(meta, body, form=self.form)))
        return path

    def list_topics(self) -> list[str]:
        """Relative paths of all topic files, sorted."""
        return sorted(relative for _, relative in list_topic_files(self.root))

    def read_index(self) -> str:
        """MEMORY.md as it is on disk; ``""`` when there is none yet."""
        try:
            # O_NONBLOCK and a type check: a FIFO named MEMORY.md must not hang its reader.
            fd = os.open(self.index_path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        except FileNotFoundError:
            return ""
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise OSError(errno.EINVAL, "not a regular file", str(self.index_path))
            return handle.read().decode("utf-8", errors="replace")

    def load_index(
        self, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> LoadedIndex:
        """The index as it goes into context: cut to the limits, with the notice if cut."""
        return load_index(self.read_index(), max_lines=max_lines, max_bytes=max_bytes)

    def update_index(self, entry: IndexEntry) -> None:
        """Replace the index line of ``entry.file`` or append one; other lines untouched.

        Read-modify-write: the caller serialises writers of one project's memory dir.
        """
        self.topic_path(entry.file)
        updated = upsert_entry(self.read_index(), entry)
        write_text_atomic(self.index_path, self._clean(updated))

    def save(self, relative: str, meta: Frontmatter, body: str, *, hook: str = "") -> Path:
        """Write a topic file and point the index at it (title = name, hook = description)."""
        path = self.write(relative, meta, body)
        title = meta.name or PurePosixPath(relative).stem
        self.update_index(IndexEntry(title, relative, hook or meta.description or ""))
        return path

    def _clean(self, text: str) -> str:
        return scrub_text(text) if self.redact else text
