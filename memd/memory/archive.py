"""The archive of unused memories, beside the memory dir (issue 36, item 3).

A memory no agent used and no check verified for ``memory.archive_unused_days`` (28) is moved
out of the memory dir into ``<memory dir>-archive/`` beside it (``~/.claude/projects/<project>/
memory-archive/``), and its lines in ``MEMORY.md`` with it; nothing is ever deleted, and
:meth:`Archive.restore` puts it back, lines and all. Which memories are due is :func:`due`
(pure; :mod:`memd.memory.archive_service` gathers what it weighs).

Record, then change; mark, then act. Each move is written down first, in memd's own state
(``<state>/archive.json``, replaced atomically and fsynced by :func:`memd.atomic.write_atomic`,
which raises when the disk refuses: then nothing moves): which memory, under which name on
the other side, the file's identity (device, inode, size, mtime: a rename keeps them, a file
written anew on a reused inode does not) and the index lines that go with it. Then the file
is renamed beneath the project folder's descriptor, never replacing anything
(:func:`memd.confined.move.move`), then the index is rewritten (compare and swap), then the
record says it is done. A move found unfinished (a kill -9 at any instant, a disk that
refused a step) is finished from where it stopped, at the next start or sweep: the file is
in one place or the other, whole, and the record says which (the same file at the target:
moved); the index lines go or come back once; the name on the other side
was chosen before anything moved, so nothing is archived twice. A move that can no longer be
made (the file gone or replaced, the name taken meanwhile) is dropped, nothing changed.

The record also keeps, per memory dir, what it archived (for the listing and to put the index
lines back) and when a restored memory came back (it is not due again for as long). Blocking:
call from a worker thread; one move at a time.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal

import msgspec

from memd.atomic import write_atomic
from memd.config import MAX_NUMBER
from memd.confined import Area, Refused, kind_of
from memd.confined.move import move
from memd.memory.frontmatter import parse_document
from memd.memory.index import IndexEntry, parse_entry, render_entry, upsert_entry
from memd.memory.paths import INDEX_FILENAME, TEAM_DIRNAME
from memd.records import load_record

log = logging.getLogger(__name__)

ARCHIVE_FILE = "archive.json"
ARCHIVE_SUFFIX = "-archive"
DAY_S = 86_400.0
MAX_FILE_BYTES = 16 * 1024 * 1024
MAX_KEPT = 20_000  # archived memories remembered, over every dir
MAX_NAMES = 100  # names tried for one memory on the other side (x.md, x.2.md, …)
MAX_INDEX_BYTES = 4 * 1024 * 1024
MAX_LISTED = 2_000  # archived memories one listing shows
MAX_LINES = 16  # index lines kept for one memory
CAS_TRIES = 3
HEAD_LINES = 30
HEAD_BYTES = 64 * 1024

Stamp = Annotated[float, msgspec.Meta(ge=0, le=MAX_NUMBER)]
Whole = Annotated[
    int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)
]  # a stat field (an mtime may be < 0)


class Move(msgspec.Struct, frozen=True):
    """A move written down before it is made: ``file`` in the memory dir, ``archived`` in
    the archive, the file's identity (device, inode, size and mtime, which a rename keeps and
    a file written anew under a reused inode does not) and the index ``lines`` that go with
    it (an archive: as they were; a restore: as they come back)."""

    op: Literal["archive", "restore"]
    memory_dir: str
    file: str
    archived: str
    identity: tuple[Whole, Whole, Whole, Whole]
    lines: list[str]
    at: Stamp


class Kept(msgspec.Struct):
    """An archived memory: where it was, since when, the index lines it had."""

    file: str
    at: Stamp
    lines: list[str] = []


class ArchiveState(msgspec.Struct):
    version: int = 1
    moves: list[Move] = []
    kept: dict[str, dict[str, Kept]] = {}  # memory dir -> archived name -> what it was
    revived: dict[str, Stamp] = {}  # memory path -> when it was restored


@dataclass(frozen=True)
class Standing:
    """What a sweep knows of one memory: its file, its pin, and the times it showed life
    (seconds since the epoch; 0: never)."""

    relative: str
    pinned: bool
    changed: float  # the file's mtime
    used: float
    verified: float


def due(
    standings: Iterable[Standing],
    *,
    now: float,
    days: float,
    since: float,
    revived: Callable[[str], float],
) -> list[str]:
    """The memories to archive, sorted: neither pinned nor the team's, and no sign of life
    (changed, used, verified, restored, or memd's record of use begun: ``since``) within
    ``days`` (0: none is ever due)."""
    if days <= 0:
        return []
    cut = now - days * DAY_S
    return sorted(
        s.relative
        for s in standings
        if not s.pinned
        and not s.relative.startswith(TEAM_DIRNAME + "/")
        and max(s.changed, s.used, s.verified, since, revived(s.relative)) <= cut
    )


def archive_dir(memory_dir: Path) -> Path:
    """Where ``memory_dir``'s archived memories go: the folder beside it."""
    return memory_dir.with_name(memory_dir.name + ARCHIVE_SUFFIX)


@dataclass(frozen=True)
class Done:
    """A move made: the memory's file in the memory dir, its name in the archive, whether
    ``MEMORY.md`` changed with it."""

    file: str
    archived: str
    index: bool


class Archive:
    """The archive record and its moves (see the module docstring)."""

    def __init__(self, state_dir: Path, clock: Callable[[], float]) -> None:
        self.path = state_dir / ARCHIVE_FILE
        self._clock = clock
        self._lock = threading.Lock()
        self._state = _load(self.path)
        self._unsaved = False  # done moves the disk has not taken yet (saved with the next)
        self.save_error = ""  # why it did not take them

    # -- moving --------------------------------------------------------------------------------

    def archive(self, memory_dir: Path, relative: str) -> Done | None:
        """Move ``relative`` out of ``memory_dir`` (its index lines too); None when it is not
        there any more, or was not moved (see :meth:`_finish`). ``OSError`` (``WriteFailed``)
        when the record cannot be written: then nothing moved."""
        with self._lock, Area.open(memory_dir.parent) as area:
            folder = memory_dir.name
            found = area.lstat(f"{folder}/{relative}")
            if found is None or kind_of(found) is not None:
                return None  # gone, or not a memory memd moves (a link, a hard link)
            try:
                name = _free_name(area, archive_dir(memory_dir).name, relative)
            except FileExistsError as exc:  # a retry would find them taken too
                log.warning("archive: %s stays: %s", relative, exc)
                return None
            lines = _index_lines(area, folder, relative)
            step = Move(
                "archive", str(memory_dir), relative, name, _identity(found), lines, self._now()
            )
            self._begin(step)
            return self._finish(area, step)

    def restore(self, memory_dir: Path, wanted: str) -> Done | None:
        """Put the archived memory ``wanted`` (its name in the archive, its old file, or its
        name) back; None when it could not be moved. ``LookupError`` when the archive holds
        none such; ``OSError`` as for :meth:`archive`."""
        with self._lock, Area.open(memory_dir.parent) as area:
            folder, out = memory_dir.name, archive_dir(memory_dir).name
            archived = self._find(area, memory_dir, wanted)
            found = area.lstat(f"{out}/{archived}")
            if found is None:
                raise LookupError(f"{archive_dir(memory_dir) / archived} is gone")
            kept = self._state.kept.get(str(memory_dir), {}).get(archived)
            file = _free_name(area, folder, kept.file if kept else archived)
            lines = _retarget(kept.lines, file) if kept and kept.lines else []
            if not lines:  # its line is not known: one from its frontmatter
                row = _row(area, out, archived, {})
                title = str(row["name"] or Path(file).stem)
                lines = [render_entry(IndexEntry(title, file, str(row["description"] or "")))]
            step = Move(
                "restore", str(memory_dir), file, archived, _identity(found), lines, self._now()
            )
            self._begin(step)
            return self._finish(area, step)

    def recover(self) -> int:
        """Finish the moves a stop (or a refused step) left unfinished, and save what the disk
        did not take; how many moves are still unfinished (blocking; at start, then before
        each sweep)."""
        with self._lock:
            for step in list(self._state.moves):
                try:
                    with Area.open(Path(step.memory_dir).parent) as area:
                        self._finish(area, step)
                except FileNotFoundError:  # the project folder is gone: nothing to move
                    self._drop(step)
                except OSError as exc:
                    log.warning("archive: the move of %s stays unfinished: %s", step.file, exc)
            if self._unsaved:
                self._settle()
            return len(self._state.moves)

    def _begin(self, step: Move) -> None:
        """Write the move down (raises when the disk refuses: then nothing moves)."""
        self._state.moves.append(step)
        try:
            self._save()
        except BaseException:
            self._state.moves.remove(step)
            raise

    def _finish(self, area: Area, step: Move) -> Done | None:
        """Make ``step`` where it is not made yet, then record it done (or dropped: the file
        is not the one recorded any more, or its name on the other side was taken). A disk
        fault (``OSError``) leaves it unfinished, to be finished later."""
        folder, out = Path(step.memory_dir).name, archive_dir(Path(step.memory_dir)).name
        inside, outside = f"{folder}/{step.file}", f"{out}/{step.archived}"
        source, target = (inside, outside) if step.op == "archive" else (outside, inside)
        moved = _same(area.lstat(target), step)
        if not moved and _same(area.lstat(source), step):
            try:
                moved = move(area, source, target)
            except (FileExistsError, Refused) as exc:
                log.info("archive: %s not moved: %s", source, exc)
        index = _rewrite_index(area, folder, step) if moved else False
        kept = self._state.kept.setdefault(step.memory_dir, {})
        if moved and step.op == "archive":
            kept[step.archived] = Kept(step.file, step.at, step.lines[:MAX_LINES])
        elif moved:
            kept.pop(step.archived, None)
            self._state.revived[f"{step.memory_dir}/{step.file}"] = step.at
        self._drop(step)
        return Done(step.file, step.archived, index) if moved else None

    def _drop(self, step: Move) -> None:
        """``step`` is over: off the record (saved now, or with the next save)."""
        self._state.moves = [m for m in self._state.moves if m != step]
        self._bound()
        self._unsaved = True
        self._settle()

    def _settle(self) -> None:
        """Save the record; a disk that refuses leaves it for the next save (a move it
        still lists is finished again, which changes nothing)."""
        try:
            self._save()
        except OSError as exc:
            self.save_error = exc.strerror or str(exc)
            log.warning("archive: the record %s is not saved yet: %s", self.path, exc)

    # -- reading ------------------------------------------------------------------------------

    def _find(self, area: Area, memory_dir: Path, wanted: str) -> str:
        rows = self._listing(area, memory_dir, self._state.kept.get(str(memory_dir), {}))
        wanted = wanted.strip()
        for key in ("archived", "file", "name"):
            found = [r["archived"] for r in rows if r.get(key) == wanted]
            if found:
                return str(found[0])
        raise LookupError(f"no archived memory {wanted!r} in {archive_dir(memory_dir)}")

    def listing(self, memory_dir: Path) -> list[dict[str, object]]:
        """The archived memories of ``memory_dir`` (newest archived first, at most
        :data:`MAX_LISTED`): each one's name in the archive, its old file, when it was
        archived (None: not known), its name, description and type from its frontmatter
        (none when the project folder is not there)."""
        with self._lock:
            kept = dict(self._state.kept.get(str(memory_dir), {}))
        try:
            with Area.open(memory_dir.parent) as area:
                return self._listing(area, memory_dir, kept)
        except FileNotFoundError:
            return []

    def _listing(
        self, area: Area, memory_dir: Path, kept: dict[str, Kept]
    ) -> list[dict[str, object]]:
        folder = archive_dir(memory_dir).name
        rows = [_row(area, folder, name, kept) for name in _archived(area, folder)]
        return sorted(rows, key=lambda r: (-_stamp(r["archived_at"]), str(r["archived"])))

    def revived(self, memory_dir: Path) -> Callable[[str], float]:
        """When each memory of ``memory_dir`` (by its relative path) was last restored."""
        prefix = f"{memory_dir}/"
        with self._lock:
            found = {
                k[len(prefix) :]: v for k, v in self._state.revived.items() if k.startswith(prefix)
            }
        return lambda relative: found.get(relative, 0.0)

    @property
    def unsaved(self) -> bool:
        """Whether moves were made that the record on disk does not show done yet."""
        return self._unsaved

    def statistics(self) -> dict[str, int]:
        with self._lock:
            kept = sum(len(k) for k in self._state.kept.values())
            return {"archived": kept, "unfinished": len(self._state.moves)}

    # -- the record -----------------------------------------------------------------------------

    def _now(self) -> float:
        return max(0.0, min(self._clock(), float(MAX_NUMBER)))

    def _save(self) -> None:
        write_atomic(self.path, msgspec.json.encode(self._state), mode=0o600)
        self._unsaved = False

    def _bound(self) -> None:
        state = self._state
        total = sum(len(k) for k in state.kept.values())
        for folder in list(state.kept):
            while total > MAX_KEPT and state.kept[folder]:
                state.kept[folder].pop(next(iter(state.kept[folder])))
                total -= 1
        state.kept = {k: v for k, v in state.kept.items() if v}
        state.revived = dict(list(state.revived.items())[-MAX_KEPT:])


def _load(path: Path) -> ArchiveState:
    """The record on disk; empty when there is none, and when it cannot be read (moved aside
    as ``archive.json.corrupt``: the archived files stay where they are, and are listed)."""
    return load_record(path, MAX_FILE_BYTES, "the archive record", _decode) or ArchiveState()


def _decode(raw: bytes) -> ArchiveState:
    data = msgspec.json.decode(raw, type=ArchiveState)
    if data.version != 1:
        raise ValueError(f"unknown version {data.version}")
    return data


# ---------------------------------------------------------------------------------------------
# Files, names and the index


def _identity(found: os.stat_result) -> tuple[int, int, int, int]:
    return found.st_dev, found.st_ino, found.st_size, found.st_mtime_ns


def _same(found: os.stat_result | None, step: Move) -> bool:
    """Whether ``found`` is the file ``step`` moves (a rename keeps its identity)."""
    return found is not None and _identity(found) == tuple(step.identity)


def _free_name(area: Area, folder: str, relative: str) -> str:
    """``relative``, or ``<stem>.<n>.md``, the first not taken in ``folder``."""
    stem, dot, suffix = relative.rpartition(".")
    if not dot:
        stem, suffix = relative, ""
    for number in range(1, MAX_NAMES + 1):
        name = relative if number == 1 else f"{stem}.{number}{dot}{suffix}"
        if area.lstat(f"{folder}/{name}") is None:
            return name
    raise FileExistsError(f"{folder}/{relative}: {MAX_NAMES} names taken")


def _index_lines(area: Area, folder: str, relative: str) -> list[str]:
    text = _index(area, folder)
    lines = [line for line in (text or "").splitlines() if _names(line, relative)]
    return lines[:MAX_LINES]


def _names(line: str, relative: str) -> bool:
    entry = parse_entry(line)
    return entry is not None and entry.file.strip().removeprefix("./") == relative


def _retarget(lines: Sequence[str], file: str) -> list[str]:
    """The index lines an archived memory had, pointing at ``file`` (where it comes back)."""
    entries = [e for e in (parse_entry(line) for line in lines) if e is not None]
    return [render_entry(IndexEntry(e.title, file, e.hook)) for e in entries]


def _stamp(value: object) -> float:
    return float(value) if isinstance(value, int | float) else 0.0


def _index(area: Area, folder: str) -> str | None:
    try:
        return area.read_text(f"{folder}/{INDEX_FILENAME}", max_bytes=MAX_INDEX_BYTES)
    except (OSError, ValueError):
        return None


def _rewrite_index(area: Area, folder: str, step: Move) -> bool:
    """Take the memory's lines out of ``MEMORY.md`` (archived) or put them back (restored),
    compare and swap; whether the index changed. A missing index stays missing."""
    for _ in range(CAS_TRIES):
        text = _index(area, folder)
        if text is None:
            return False
        if step.op == "archive":
            lines = text.splitlines(keepends=True)
            new = "".join(line for line in lines if not _names(line, step.file))
        else:
            new = text
            for line in step.lines:
                entry = parse_entry(line)
                if entry is not None:
                    new = upsert_entry(new, entry)
        if new == text:
            return False
        if area.write(f"{folder}/{INDEX_FILENAME}", new.encode(), expected=text.encode()):
            return True
    return False


def _archived(area: Area, folder: str) -> list[str]:
    """The memory files in the archive ``folder`` (relative to it, at most
    :data:`MAX_LISTED`), found beneath its own descriptor (a link is not followed, nor
    listed)."""
    try:
        fd = area.open_dir(folder)
    except (OSError, ValueError):
        return []
    try:
        inner = Area(area.path(folder), fd)
        names: list[str] = []
        for entry in inner.walk():
            if entry.relative.endswith(".md"):
                names.append(entry.relative)
                if len(names) >= MAX_LISTED:
                    break
        return names
    except OSError:
        return []
    finally:
        os.close(fd)


def _row(area: Area, folder: str, archived: str, kept: dict[str, Kept]) -> dict[str, object]:
    """One archived memory as the listing shows it."""
    try:
        head, _ = area.read_head(f"{folder}/{archived}", max_lines=HEAD_LINES, max_bytes=HEAD_BYTES)
    except (OSError, ValueError):
        head = b""
    meta = parse_document(head.decode("utf-8", errors="replace")).meta
    known = kept.get(archived)
    return {
        "archived": archived,
        "path": str(area.path(f"{folder}/{archived}")),
        "file": known.file if known else archived,
        "archived_at": known.at if known else None,
        "name": meta.name,
        "description": meta.description,
        "type": meta.type,
    }
