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
folder or is not ``*.md`` is refused with ``ValueError``. Every read and write goes through
:class:`memd.confined.Area`: nothing beneath the memory dir is followed, and a link, a
hard-linked file or a special file is never read, written through or replaced. A reader
skips it (a ``MEMORY.md`` that is a link reads as no index); a writer raises
:class:`~memd.confined.Refused`, whose message names the path and what it is.
"""

from __future__ import annotations

import errno
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from memd.confined import Area, Refused
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
from memd.memory.scan import list_topic_files, opened_area
from memd.privacy import scrub_text

TOPIC_MAX_BYTES = 4 * 1024 * 1024  # read back whole by the store (its frontmatter, an update)
INDEX_READ_MAX_BYTES = 8 * 1024 * 1024  # an index larger than this is not rewritten


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
        """The absolute path for ``relative`` (shown, never opened); ``ValueError`` when it is
        not a topic file."""
        return self.root / topic_relative(relative)

    def read(self, relative: str) -> MemoryFile:
        """The whole topic file (up to :data:`TOPIC_MAX_BYTES`), parsed. ``NotFound`` when it
        does not exist or is not a memory (a link, a hard link, a special file)."""
        name = topic_relative(relative)
        try:
            with Area.open(self.root) as area:
                data, info = area.read(name, max_bytes=TOPIC_MAX_BYTES)
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError) as exc:
            raise NotFound(f"no memory {relative!r} in {self.root}") from exc
        except Refused as exc:
            raise NotFound(f"{exc.filename} is {exc.kind}, not a memory memd reads") from exc
        text = data.decode("utf-8", errors="replace")
        mtime_ms = info.st_mtime_ns // 1_000_000
        return MemoryFile(name, self.root / name, parse_document(text), mtime_ms)

    def write(self, relative: str, meta: Frontmatter, body: str) -> Path:
        """Create or replace a topic file atomically; returns its path. :class:`Refused` when
        something other than a memory file of the user's is in its place."""
        name = topic_relative(relative)
        text = self._clean(render_document(meta, body, form=self.form))
        with Area.open(self.root, create=True) as area:
            area.write(name, text.encode("utf-8"))
        return self.root / name

    def list_topics(self) -> list[str]:
        """Relative paths of all topic files, sorted."""
        with opened_area(self.root) as area:
            return [] if area is None else sorted(list_topic_files(area))

    def read_index(self) -> str:
        """MEMORY.md as it is on disk; ``""`` when there is none yet, or when what is there
        is not a file memd reads (a link, a hard link, a FIFO: skipped and reported)."""
        with opened_area(self.root) as area:
            if area is None:
                return ""
            try:
                return self._index(area)
            except Refused:
                return ""

    def index_for_update(self) -> str:
        """MEMORY.md before a change to it: as :meth:`read_index`, but :class:`Refused` when
        it is not a file memd may replace, and ``OSError`` when it is too large to rewrite
        whole (so nothing is written next to an index that cannot take its line)."""
        with opened_area(self.root) as area:
            return "" if area is None else self._index(area, whole=True)

    def _index(self, area: Area, *, whole: bool = False) -> str:
        try:
            data, info = area.read(INDEX_FILENAME, max_bytes=INDEX_READ_MAX_BYTES)
        except (FileNotFoundError, NotADirectoryError):
            return ""
        if whole and info.st_size > INDEX_READ_MAX_BYTES:
            raise OSError(
                errno.EFBIG,
                f"larger than {INDEX_READ_MAX_BYTES:,} bytes; memd does not rewrite it",
                str(self.index_path),
            )
        return data.decode("utf-8", errors="replace")

    def load_index(
        self, *, max_lines: int = DEFAULT_MAX_LINES, max_bytes: int = DEFAULT_MAX_BYTES
    ) -> LoadedIndex:
        """The index as it goes into context: cut to the limits, with the notice if cut."""
        return load_index(self.read_index(), max_lines=max_lines, max_bytes=max_bytes)

    def update_index(self, entry: IndexEntry) -> None:
        """Replace the index line of ``entry.file`` or append one; other lines untouched.

        Read-modify-write: the caller serialises writers of one project's memory dir.
        """
        topic_relative(entry.file)
        updated = upsert_entry(self.index_for_update(), entry)
        with Area.open(self.root, create=True) as area:
            area.write(INDEX_FILENAME, self._clean(updated).encode("utf-8"))

    def save(self, relative: str, meta: Frontmatter, body: str, *, hook: str = "") -> Path:
        """Write a topic file and point the index at it (title = name, hook = description).
        Nothing is written when the index cannot be (:meth:`index_for_update` raises)."""
        self.index_for_update()
        path = self.write(relative, meta, body)
        title = meta.name or PurePosixPath(relative).stem
        self.update_index(IndexEntry(title, relative, hook or meta.description or ""))
        return path

    def _clean(self, text: str) -> str:
        return scrub_text(text) if self.redact else text


def topic_relative(relative: str) -> str:
    """``relative`` as a plain POSIX path of a topic file; ``ValueError`` when it is not one
    (absolute, climbing out, hidden, not ``*.md``, an index)."""
    pure = PurePosixPath(relative.replace("\\", "/"))
    parts = pure.parts
    if not parts or pure.is_absolute() or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"{relative!r} is not a path inside the memory dir")
    if any(p.startswith(".") for p in parts) or pure.suffix != ".md":
        raise ValueError(f"{relative!r}: memory files are visible *.md files")
    if pure.name == INDEX_FILENAME:
        raise ValueError(f"{relative!r} is an index, not a topic file")
    return pure.as_posix()
