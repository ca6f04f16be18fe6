"""The inotify watches on the folders transcripts sit in, and what their events mean.

The root is depth 0; how deep transcripts sit below it is the agent's :class:`~memd.sources.
base.Layout` (Claude Code: a project folder 1 holds main transcripts, a session's folder 2,
its ``subagents`` folder 3; Codex: year, month, day folders): a real folder at
``layout.depth`` or less gets a watch, nothing deeper, and only files named as the layout
says are transcripts. A link is never followed (the root itself excepted: it is the user's
setting): a symlinked project folder costs no watch and is not read (the startup scan skips
it too); it is named in ``status`` (``ingest.watcher.skipped``) with the folders memd may
not read. A symlinked transcript is reported by ingest as unreadable ("a symbolic link").

Names are bytes on disk: ``os.fsdecode`` gives the str the rest of memd uses (undecodable
bytes as surrogate escapes, which every ``os`` call turns back into the same bytes).
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from memd.changes import CHANGES
from memd.daemon.inotify import (
    APPEARED,
    IN_DELETE,
    IN_IGNORED,
    IN_ISDIR,
    IN_MOVED_FROM,
    IN_Q_OVERFLOW,
    Event,
    Inotify,
)
from memd.sources.base import Layout

LINK = "a symbolic link to a folder (not followed)"


@dataclass
class Found:
    """What adding watches or reading events turned up."""

    transcripts: list[Path] = field(default_factory=list)  # to mark for ingest
    # Folders out of watches that sessions sit in, or above them (scanned instead).
    unwatched: list[str] = field(default_factory=list)
    root_gone: bool = False  # the root's watch ended (deleted, moved, unmounted)


class Tree:
    """One inotify descriptor and the folders it watches, by watch descriptor. Blocking
    methods, called from one task at a time."""

    def __init__(self, inotify: Inotify, root: str, layout: Layout | None = None) -> None:
        self.inotify = inotify
        self.root = root
        self.layout = layout or Layout()
        self._suffix = os.fsencode(self.layout.suffix)
        self.folders: dict[int, tuple[str, int]] = {}  # wd -> (path, depth)
        self.skipped: dict[str, str] = {}  # path -> why it has no watch (not out of watches)

    @property
    def fd(self) -> int:
        return self.inotify.fd

    def close(self) -> None:
        self.inotify.close()

    def watch_root(self) -> None:
        """Watch the root itself (a link to it is followed); raises ``OSError``."""
        wd = self.inotify.add(os.fsencode(self.root), follow=True)
        self.folders[wd] = (self.root, 0)

    def fill(self, *, report: bool) -> Found:
        """Watch the folders below the watched root; ``report``: see :meth:`add`."""
        found = Found()
        for folder, depth in self._look_inside(self.root, 0, None):
            more = self.add(folder, depth, report=report)
            found.transcripts += more.transcripts
            found.unwatched += more.unwatched
        return found

    def add(self, folder: str, depth: int, *, report: bool) -> Found:
        """Watch ``folder`` (depth 1 or more) and the real folders below it down to the
        layout's depth; ``report``: the transcripts found in them are news (they may
        predate the watch)."""
        found = Found()
        pending = [(folder, depth)]
        while pending:
            path, at = pending.pop()
            try:
                wd = self.inotify.add(os.fsencode(path))
            except OSError as exc:
                self._refused(path, at, exc, found)
                continue
            self.folders[wd] = (path, at)
            if self.skipped.pop(path, None) is not None:
                CHANGES.bump()  # ``ingest.watcher.skipped`` in ``status``
            pending += self._look_inside(path, at, found if report else None)
        return found

    def _look_inside(self, path: str, depth: int, found: Found | None) -> list[tuple[str, int]]:
        below: list[tuple[str, int]] = []
        try:
            with os.scandir(path) as entries:
                for entry in entries:
                    if self.layout.names(entry.name):
                        if found is not None and depth > 0:
                            found.transcripts.append(Path(entry.path))
                    elif depth < self.layout.depth and entry.is_dir(follow_symlinks=False):
                        below.append((entry.path, depth + 1))
                    elif depth < self.layout.depth and entry.is_symlink():
                        self._note_link(entry.path)
        except OSError:  # gone again, not a folder, no access: its watch says the rest
            pass
        return below

    def _note_link(self, path: str) -> None:
        """A link met where a folder could be: skipped, and said so when it is one to a
        folder (one ``stat`` of its target, never a walk)."""
        if os.path.islink(path) and os.path.isdir(path):
            self.skipped[path] = LINK
            CHANGES.bump()

    def _refused(self, path: str, depth: int, exc: OSError, found: Found) -> None:
        if exc.errno == errno.ENOSPC:  # out of watches: scanned (where sessions may be)
            if depth <= self.layout.sessions_at:
                found.unwatched.append(path)
        elif exc.errno in (errno.ENOTDIR, errno.ELOOP):
            self._note_link(path)  # replaced by a link (or a file) since it was listed
        elif exc.errno != errno.ENOENT:
            self.skipped[path] = exc.strerror or str(exc)
            CHANGES.bump()

    def needs_io(self, events: list[Event]) -> bool:
        """Whether :meth:`handle` would touch the disk for ``events``: a folder or link that
        appeared (watches added, a look inside), lost events (every folder listed). Growth,
        new and gone transcripts are only names: handled without a thread's hop."""
        return any(
            e.mask & IN_Q_OVERFLOW or (e.mask & APPEARED and not e.name.endswith(self._suffix))
            for e in events
        )

    def handle(self, events: list[Event]) -> Found:
        """The transcripts ``events`` are about; the folders that appeared get watches."""
        found = Found()
        for event in events:
            if event.mask & IN_Q_OVERFLOW:  # events were lost: every transcript is news
                found.transcripts += self.every_transcript()
                continue
            where = self.folders.get(event.wd)
            if where is None:
                continue
            folder, depth = where
            if event.mask & IN_IGNORED:
                del self.folders[event.wd]
                found.root_gone |= depth == 0
            elif event.name:
                self._entry(os.path.join(folder, os.fsdecode(event.name)), depth, event, found)
        return found

    def _entry(self, path: str, depth: int, event: Event, found: Found) -> None:
        if self.layout.names(path):
            if depth > 0:
                found.transcripts.append(Path(path))
        elif event.mask & APPEARED and depth < self.layout.depth:
            if event.mask & IN_ISDIR:
                more = self.add(path, depth + 1, report=True)
                found.transcripts += more.transcripts
                found.unwatched += more.unwatched
            else:
                self._note_link(path)
        elif event.mask & (IN_DELETE | IN_MOVED_FROM) and self.skipped.pop(path, ""):
            CHANGES.bump()  # ``ingest.watcher.skipped`` in ``status``

    def every_transcript(self) -> list[Path]:
        """Every transcript in the watched folders below the root. Blocking."""
        every: list[Path] = []
        for folder, depth in list(self.folders.values()):
            if depth > 0:
                try:
                    with os.scandir(folder) as entries:
                        names = self.layout.names
                        every += [Path(e.path) for e in entries if names(e.name)]
                except OSError:
                    continue
        return every
