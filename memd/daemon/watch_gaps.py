"""Project folders the inotify watcher could not watch: found when they appear, scanned instead.

watchfiles (Rust notify) adds an inotify watch for each folder that appears under the
projects root. Once the user's ``fs.inotify.max_user_watches`` is reached that add fails
silently, and the transcripts in the folder would never be seen. So each project folder that
appears is looked up among the watches this process's inotify descriptors hold
(``/proc/self/fdinfo`` lists them, newest first: ``inotify wd:… ino:<hex> …``); one that is
missing has its transcripts scanned every ``transcripts.poll_interval_ms`` instead, and the
log (once) and ``status`` say so, with the fix. When the limit is raised, the watcher starts
again and watches everything.

Only project folders (the root's children) matter: main transcripts live there, and nothing
memd reads comes from a watch on a deeper folder (sub-agent transcripts are not sessions;
memory dirs and notes are read when needed, never on an event). Nothing here costs anything
while every folder is watched: the lookup runs when a project folder appears, the scan only
while one is not watched. Folders are matched by inode number alone: the device inotify
reports is the superblock's, which ``stat`` does not always give (btrfs subvolumes); a
watched folder on another filesystem with the same inode number is the one case a gap would
go unseen.
"""

from __future__ import annotations

import logging
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

FDINFO_CHUNK = 64 * 1024
RECHECK_S = 1.0  # notify adds a folder's watch just after it reports the folder: ask twice
LIMIT_FILES = ("/proc/sys/fs/inotify/max_user_watches", "/proc/sys/user/max_inotify_watches")
FIX = (
    "raise the limit, e.g. `sudo sysctl fs.inotify.max_user_watches=524288` (keep it in"
    " /etc/sysctl.d/); memd then watches those folders again by itself"
)


def watched_inodes(fdinfo: str) -> set[int]:
    """The inode numbers an inotify descriptor's ``fdinfo`` text lists as watched."""
    found = set()
    for line in fdinfo.splitlines():
        if not line.startswith("inotify wd:"):
            continue
        for word in line.split():
            if word.startswith("ino:"):
                found.add(int(word[4:], 16))
                break
    return found


def missing_watches(inodes: set[int]) -> set[int] | None:
    """The ones among ``inodes`` that no inotify descriptor of this process watches, or
    ``None`` when that cannot be told (no ``/proc``, no inotify descriptor). Blocking."""
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    left = set(inodes)
    seen_inotify = False
    for fd in fds:
        try:
            if os.readlink(f"/proc/self/fd/{fd}") != "anon_inode:inotify":
                continue
        except OSError:  # closed meanwhile (the listing's own descriptor, among others)
            continue
        seen_inotify = True
        left -= _read_watches(fd, left)
        if not left:
            break
    return left if seen_inotify else None


def _read_watches(fd: str, wanted: set[int]) -> set[int]:
    """Those of ``wanted`` that descriptor ``fd`` watches; stops reading once all are found
    (the newest watches come first, so a folder that just appeared is found at once)."""
    found: set[int] = set()
    tail = ""
    try:
        with open(f"/proc/self/fdinfo/{fd}", encoding="ascii", errors="replace") as f:
            while chunk := f.read(FDINFO_CHUNK):
                text, _, tail = (tail + chunk).rpartition("\n")
                found |= watched_inodes(text) & wanted
                if found == wanted:
                    break
            found |= watched_inodes(tail) & wanted
    except OSError:
        pass
    return found


def watch_limit() -> int | None:
    """The lowest inotify watch limit that applies (the system's, the user namespace's)."""
    limits = []
    for name in LIMIT_FILES:
        try:
            limits.append(int(Path(name).read_text()))
        except (OSError, ValueError):
            continue
    return min(limits) if limits else None


def folder_inode(path: str) -> int | None:
    """The inode number of the folder at ``path`` (not following a link), else ``None``."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_ino if stat.S_ISDIR(st.st_mode) else None


def root_and_projects(root: str) -> dict[int, str]:
    """The projects root and its folders, by inode number. Blocking."""
    folders: dict[int, str] = {}
    ino = folder_inode(root)
    if ino is None:
        return folders
    folders[ino] = root
    try:
        with os.scandir(root) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    folders[entry.inode()] = entry.path
    except OSError:
        pass
    return folders


Stamp = tuple[int, int, int]  # inode, size, mtime_ns


def transcript_stamps(folder: str) -> dict[Path, Stamp]:
    """Every ``*.jsonl`` in ``folder``, with what says it changed. Blocking."""
    stamps: dict[Path, Stamp] = {}
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if not entry.name.endswith(".jsonl"):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                stamps[Path(entry.path)] = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        pass
    return stamps


@dataclass
class Gaps:
    """The project folders inotify does not watch, and what their transcripts looked like."""

    unwatched: dict[str, int] = field(default_factory=dict)  # folder -> its inode number
    stamps: dict[Path, Stamp] = field(default_factory=dict)

    def scan(self) -> list[Path]:
        """Transcripts in unwatched folders that appeared, changed or went since the last
        scan; folders that are gone are dropped. Blocking."""
        fresh: dict[Path, Stamp] = {}
        for folder in list(self.unwatched):
            if not os.path.isdir(folder):
                del self.unwatched[folder]
                continue
            fresh.update(transcript_stamps(folder))
        changed = [p for p, stamp in fresh.items() if self.stamps.get(p) != stamp]
        changed += [p for p in self.stamps if p not in fresh]
        self.stamps = fresh
        return changed

    def forget(self) -> dict[str, int]:
        """Drop every unwatched folder (the watcher starts again); return them."""
        folders, self.unwatched = self.unwatched, {}
        self.stamps.clear()
        return folders
