"""Project folders the watcher has no inotify watch for: scanned every poll interval instead.

When the user's ``fs.inotify.max_user_watches`` is reached, adding the watch of a project
folder fails (``ENOSPC``) and the transcripts in it would never be seen. The watcher keeps
such folders here; their transcripts are compared (inode, size, mtime) every
``transcripts.poll_interval_ms``, and the log (once) and ``status`` say so, with the fix. The
watcher tries to watch them again now and then, so a raised limit ends the scan by itself.
While inotify cannot be used at all, every project folder is kept here ("polling").

Only the folders sessions sit in matter, and those above them (the agent's
:class:`~memd.sources.base.Layout`: ``sessions_at`` folders below the root; Claude Code's
project folders, Codex's day folders under year and month): an unwatched one is scanned down
to that depth (sub-agent transcripts are not sessions; memory dirs and notes are read when
needed, never on an event). Nothing here costs anything while every folder is watched.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from memd.sources.base import Layout

log = logging.getLogger(__name__)

LIMIT_FILES = ("/proc/sys/fs/inotify/max_user_watches", "/proc/sys/user/max_inotify_watches")
FIX = (
    "raise the limit, e.g. `sudo sysctl fs.inotify.max_user_watches=524288` (keep it in"
    " /etc/sysctl.d/); memd then watches those folders again by itself"
)


def watch_limit() -> int | None:
    """The lowest inotify watch limit that applies (the system's, the user namespace's)."""
    limits = []
    for name in LIMIT_FILES:
        try:
            limits.append(int(Path(name).read_text()))
        except (OSError, ValueError):
            continue
    return min(limits) if limits else None


Stamp = tuple[int, int, int]  # inode, size, mtime_ns


def transcript_stamps(
    folder: str, layout: Layout | None = None, below: int = 0
) -> dict[Path, Stamp]:
    """Every transcript (as ``layout`` names them) in ``folder`` and in the real folders
    down to ``below`` levels under it, with what says it changed. Blocking."""
    names = (layout or Layout()).names
    stamps: dict[Path, Stamp] = {}
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if below > 0 and entry.is_dir(follow_symlinks=False):
                    stamps.update(transcript_stamps(entry.path, layout, below - 1))
                if not names(entry.name):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                stamps[Path(entry.path)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        pass
    return stamps


def project_folders(root: str) -> list[str]:
    """The root's folders (not links to folders). Blocking."""
    try:
        with os.scandir(root) as entries:
            return [e.path for e in entries if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _is_folder(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


@dataclass
class Gaps:
    """The folders inotify does not watch where sessions sit (or above them, below the
    ``root``), and what their transcripts looked like."""

    unwatched: set[str] = field(default_factory=set)
    stamps: dict[Path, Stamp] = field(default_factory=dict)
    root: str = ""
    layout: Layout = field(default_factory=Layout)

    def _stamps(self, folder: str) -> dict[Path, Stamp]:
        """The transcripts of an unwatched folder, down to where the layout puts sessions."""
        rel = os.path.relpath(folder, self.root) if self.root else "."
        depth = 1 if rel == "." or rel.startswith("..") else rel.count(os.sep) + 1
        return transcript_stamps(folder, self.layout, max(0, self.layout.sessions_at - depth))

    def add(self, folders: list[str], *, quiet: bool) -> None:
        """Scan ``folders`` from now on; ``quiet``: what they hold now is not news (the
        startup scan reads it), else their transcripts are reported by the next scan.
        Blocking when quiet."""
        self.unwatched.update(folders)
        if quiet:
            for folder in folders:
                self.stamps.update(self._stamps(folder))

    def scan(self) -> list[Path]:
        """Transcripts in unwatched folders that appeared, changed or went since the last
        scan; folders that are gone (or are no longer folders) are dropped. Blocking."""
        fresh: dict[Path, Stamp] = {}
        for folder in list(self.unwatched):
            if not _is_folder(folder):
                self.unwatched.discard(folder)
                continue
            fresh.update(self._stamps(folder))
        changed = [p for p, stamp in fresh.items() if self.stamps.get(p) != stamp]
        changed += [p for p in self.stamps if p not in fresh]
        self.stamps = fresh
        return changed

    def drop(self, folder: str) -> None:
        """``folder`` is watched now: no longer scanned."""
        self.unwatched.discard(folder)
        inside = folder.rstrip(os.sep) + os.sep
        self.stamps = {p: s for p, s in self.stamps.items() if not str(p).startswith(inside)}

    def forget(self) -> set[str]:
        """Drop every unwatched folder (the watcher watches them again); return them."""
        folders, self.unwatched = self.unwatched, set()
        self.stamps.clear()
        return folders
