"""What the memory service does with the archive of unused memories (issue 36, item 3): the
sweeps that move them out, a restore, the listing, and what ``status`` shows.

A sweep weighs every memory of a memory dir whose use memd records (the dirs it recalled for
in a session, or saw an agent's session read: :meth:`memd.memory.usage.UsageRecord.tracked`)
by :func:`memd.memory.archive.due`: the last time its file changed (mtime), an agent used it
(:mod:`memd.memory.usage`), its citations verified (:mod:`memd.memory.trust`), it came back
from the archive, and since when memd records the dir's use (no memory is judged unused on
a record shorter than ``memory.archive_unused_days``). A memory due, neither pinned (its
head is read to know) nor under ``team/`` (never even listed), is moved by
:class:`~memd.memory.archive.Archive`. A sweep holds the dir as a dream or an extraction does
(one writer per dir), in a worker thread.

Sweeps run at start (after the moves a stop left unfinished are finished, and after the
dream's own start, which puts back what an interrupted dream changed), every
:data:`SWEEP_EVERY_S`, and at a reload; after a sweep the disk refused, every
:data:`RETRY_S`. A refused write stops the dir's sweep (the record could not be written:
nothing moved) and shows in ``status`` (``memory.archive.last_error``, and the write-health
rows).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import anyio.to_thread

from memd.changes import CHANGES
from memd.clock import Clock, iso_utc
from memd.config import MemoryConfig
from memd.confined import Area
from memd.memory.archive import Archive, Done, Standing, archive_dir, due
from memd.memory.frontmatter import parse_document
from memd.memory.jobs import DirHold
from memd.memory.paths import TEAM_DIRNAME
from memd.memory.scan import is_topic, opened_area, read_head
from memd.memory.usage import MemoryUsage, UsageRecord

log = logging.getLogger(__name__)

SWEEP_EVERY_S = 3_600.0
RETRY_S = 60.0
MAX_WEIGHED = 10_000  # memory files one sweep of a dir weighs
HOLDER = "memory archive"


@dataclass
class SweepStatus:
    """The last sweep, for ``status``."""

    at: float = 0.0
    archived: int = 0  # moved by the last sweep
    error: str | None = None
    count: int = 0  # sweeps since the start


@dataclass(frozen=True, slots=True)
class Restored:
    """An archived memory put back: the memory dir, its file there now, its name in the
    archive, whether its index lines came back."""

    memory_dir: Path
    restored: str
    archived: str
    index: bool

    def as_dict(self) -> dict[str, Any]:
        """The ``restore_memory`` reply."""
        return {
            "memory_dir": str(self.memory_dir),
            "restored": self.restored,
            "path": str(self.memory_dir / self.restored),
            "archived": self.archived,
            "index": self.index,
        }


class ArchiveService:
    """See the module docstring. ``verified(memory_dir)`` gives when each memory's citations
    last verified (by relative path; 0: never)."""

    def __init__(
        self,
        state_dir: Path,
        config: Callable[[], MemoryConfig],
        clock: Clock,
        usage: UsageRecord,
        verified: Callable[[Path], Callable[[str], float]],
        hold_dir: DirHold | None = None,
    ) -> None:
        self.archive = Archive(state_dir, clock.now)
        self._config = config
        self._clock = clock
        self._usage = usage
        self._verified = verified
        self._hold_dir = hold_dir
        self._wake = anyio.Event()
        self.last = SweepStatus()

    # -- the task ---------------------------------------------------------------------------------

    async def run(
        self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        """Finish the moves a stop left unfinished, then sweep now, hourly and when woken."""
        await anyio.to_thread.run_sync(self.archive.recover)
        task_status.started()
        while True:
            await self.sweep_all()
            wait = RETRY_S if self.last.error else SWEEP_EVERY_S
            with anyio.move_on_after(wait):
                await self._wake.wait()
            self._wake = anyio.Event()

    def wake(self) -> None:
        """Sweep soon (a reload: the number of days may have changed)."""
        self._wake.set()

    async def sweep_all(self) -> None:
        """One sweep of every dir whose use memd records."""
        days = self._config().archive_unused_days
        moved, error = 0, None
        if days > 0:
            left = await anyio.to_thread.run_sync(self.archive.recover)
            for memory_dir in self._usage.tracked():
                try:
                    moved += len(await self.sweep(Path(memory_dir), days))
                except OSError as exc:
                    error = f"{memory_dir}: {exc}"
                    log.warning("archive: the sweep of %s stopped: %s", memory_dir, exc)
            if left and error is None:
                error = f"{left} moves left unfinished (a disk refused them); retried"
            if self.archive.unsaved and error is None:
                why = self.archive.save_error
                error = f"{self.archive.path} is not saved yet ({why}); retried"
        self.last = SweepStatus(self._clock.now(), moved, error, self.last.count + 1)
        CHANGES.bump()

    async def sweep(self, memory_dir: Path, days: float) -> list[Done]:
        """Archive what is due in ``memory_dir`` (holding it); the moves made. ``OSError``
        when the disk refused one (the moves before it are made)."""
        async with self._held(memory_dir):
            sweep = partial(self._sweep, memory_dir, days)
            done = await anyio.to_thread.run_sync(sweep)
        for step in done:
            log.info("archive: %s/%s unused for %g days: archived", memory_dir, step.file, days)
        return done

    def _sweep(self, memory_dir: Path, days: float) -> list[Done]:
        since = self._usage.tracked_since(str(memory_dir))
        revived = self.archive.revived(memory_dir)
        with opened_area(memory_dir) as area:
            if area is None:
                return []
            standings = self._standings(area, memory_dir)
            now = self._clock.now()
            chosen = due(standings, now=now, days=days, since=since, revived=revived)
            chosen = [relative for relative in chosen if not _pinned(area, relative)]
        done: list[Done] = []
        for relative in chosen:
            moved = self.archive.archive(memory_dir, relative)
            if moved is not None:
                done.append(moved)
        return done

    def _standings(self, area: Area, memory_dir: Path) -> list[Standing]:
        """The memories of ``memory_dir`` with their signs of life (``team/`` is not entered;
        a pin is read only for those otherwise due: :func:`_pinned`)."""
        verified = self._verified(memory_dir)
        found: list[tuple[str, float]] = []
        for entry in area.walk(skip_dir=lambda rel: rel == TEAM_DIRNAME):
            if is_topic(entry.relative):
                found.append((entry.relative, entry.info.st_mtime))
                if len(found) >= MAX_WEIGHED:
                    break
        rows = self._usage.rows(f"{memory_dir}/{relative}" for relative, _ in found)
        return [
            Standing(
                relative,
                False,
                changed,
                _used(rows.get(f"{memory_dir}/{relative}")),
                verified(relative),
            )
            for relative, changed in found
        ]

    @contextlib.asynccontextmanager
    async def _held(self, memory_dir: Path) -> AsyncIterator[None]:
        if self._hold_dir is None:
            yield
            return
        async with self._hold_dir(str(memory_dir), HOLDER):
            yield

    # -- what users ask ---------------------------------------------------------------------------

    async def restore(self, memory_dir: Path, wanted: str) -> Restored:
        """Put ``wanted`` back into ``memory_dir`` (see :meth:`Archive.restore`):
        ``LookupError`` when the archive holds no such memory."""
        async with self._held(memory_dir):
            done = await anyio.to_thread.run_sync(self.archive.restore, memory_dir, wanted)
        CHANGES.bump()
        if done is None:
            raise LookupError(f"{wanted!r} could not be put back: see memd's log")
        log.info("archive: %s restored to %s/%s", done.archived, memory_dir, done.file)
        return Restored(memory_dir, done.file, done.archived, done.index)

    async def listing(self, memory_dir: Path) -> dict[str, Any]:
        """The archived memories of ``memory_dir`` (newest archived first)."""
        rows = await anyio.to_thread.run_sync(self.archive.listing, memory_dir)
        for row in rows:
            at = row.get("archived_at")
            row["archived_at"] = (iso_utc(at) or None) if isinstance(at, float) else None
        return {"archive_dir": str(archive_dir(memory_dir)), "archived": rows}

    def statistics(self) -> dict[str, Any]:
        """For ``status``: the setting, what the record holds, the last sweep."""
        days = self._config().archive_unused_days
        return {
            "unused_days": days if days > 0 else None,
            **self.archive.statistics(),
            "sweeps": self.last.count,
            "last_sweep": iso_utc(self.last.at) or None,
            "last_archived": self.last.archived,
            "last_error": self.last.error,
        }


def _used(row: MemoryUsage | None) -> float:
    return row.last_used if row is not None else 0.0


def _pinned(area: Area, relative: str) -> bool:
    """Whether the memory's frontmatter pins it (a head that cannot be read counts as
    pinned: the sweep moves only what it could read)."""
    try:
        head = read_head(area, relative)
    except OSError:
        return True
    return parse_document(head.text).meta.pinned
