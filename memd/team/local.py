"""The memory files a sync exchanges, on this machine, through :mod:`memd.confined`.

A scope is a folder of a memory dir: ``team/`` (a team sync: its files, named relative to
it) or the memory dir less ``team/`` (a personal sync). Every file is read beneath the
folder's descriptor, never through a link (a link, a hard-linked file or a FIFO is not a
memory: it is named and left alone), at most the size limit plus one byte.

:func:`scan` lists the scope's ``*.md`` files with their identity (inode, size, mtime) and
takes each one's object id from the last sync's record while its identity is unchanged, so a
sync with nothing new reads no file. Writes replace a file only if it still holds what the
sync read (compare and swap, :meth:`memd.confined.Area.write`'s ``expected``): an agent's
write meanwhile is never overwritten; the sync stops and the next one merges it.

Blocking: call from a worker thread.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from memd.confined import Area, Refused
from memd.git import blob_id
from memd.team.entries import Limits, name_problem

Ident = tuple[int, int, int]  # inode, size, mtime_ns
ABSENT = None


@dataclass(frozen=True)
class Scope:
    """Which files of a memory dir a sync exchanges."""

    memory_dir: Path
    folder: str  # "team" or "" (the memory dir less team/)

    @property
    def root(self) -> Path:
        return self.memory_dir / self.folder if self.folder else self.memory_dir

    def skip(self, relative: str) -> bool:
        """Folders of the memory dir not in the scope (a personal sync leaves team/ out)."""
        return not self.folder and relative == "team"


@dataclass
class LocalScan:
    """The scope's files: object ids, identities, what could not be taken and why."""

    oids: dict[str, str] = field(default_factory=dict)
    idents: dict[str, Ident] = field(default_factory=dict)
    held: dict[str, str] = field(default_factory=dict)  # path → why it may not leave
    read: dict[str, bytes] = field(default_factory=dict)  # files read by this scan


def identity(info: os.stat_result) -> Ident:
    return (info.st_ino, info.st_size, info.st_mtime_ns)


@contextmanager
def opened(scope: Scope, *, create: bool = False) -> Iterator[Area | None]:
    """The scope's folder as an :class:`Area` (``None`` when it does not exist)."""
    try:
        area = Area.open(scope.root, create=create)
    except FileNotFoundError:
        yield None
        return
    with area:
        yield area


def scan(scope: Scope, known: Mapping[str, tuple[Ident, str]], limits: Limits) -> LocalScan:
    """The scope's memory files (see the module docstring). ``known``: path → (identity,
    object id) as the last sync recorded them."""
    found = LocalScan()
    with opened(scope) as area:
        if area is None:
            return found
        refused: list[str] = []
        entries = sorted(area.walk(skip_dir=scope.skip, refused=refused))
        for relative in refused:
            found.held[relative] = "it is a link, a hard-linked file or not a regular file"
        for relative, info in entries:
            if not relative.endswith(".md"):
                continue
            _take(area, relative, identity(info), known, limits, found)
    return found


def _take(
    area: Area,
    relative: str,
    ident: Ident,
    known: Mapping[str, tuple[Ident, str]],
    limits: Limits,
    found: LocalScan,
) -> None:
    problem = name_problem(os.fsencode(relative))
    if problem is None and len(found.oids) >= limits.max_files:
        problem = f"the folder holds more than team.max_files ({limits.max_files}) files"
    if problem is None and ident[1] > limits.max_file_bytes:
        problem = f"it is {ident[1]} bytes, over team.max_file_bytes ({limits.max_file_bytes})"
    if problem is not None:
        found.held[relative] = problem
        return
    cached = known.get(relative)
    if cached is not None and cached[0] == ident:
        found.oids[relative], found.idents[relative] = cached[1], ident
        return
    data = read(area, relative, limits.max_file_bytes)
    if data is None:
        return  # gone meanwhile, or not a regular file any more
    if len(data) > limits.max_file_bytes:
        found.held[relative] = f"it is over team.max_file_bytes ({limits.max_file_bytes})"
        return
    found.oids[relative], found.idents[relative] = blob_id(data), ident
    found.read[relative] = data


def read(area: Area, relative: str, max_bytes: int) -> bytes | None:
    """At most ``max_bytes + 1`` of ``relative``, ``None`` when it is gone or refused."""
    try:
        data, _ = area.read(relative, max_bytes=max_bytes + 1)
    except (FileNotFoundError, NotADirectoryError, Refused, ValueError):
        return None
    return data


def write(
    area: Area, relative: str, data: bytes | None, expected: bytes | None, *, durable: bool = True
) -> bool:
    """Make ``relative`` hold ``data`` (``None``: remove it) if it still holds ``expected``
    (``None``: no file); whether it holds ``data`` now. A file that already holds ``data``
    counts as written (a sync run again after a kill finds its own writes). ``durable``: as
    :meth:`memd.confined.Area.write` (else the caller flushes the area)."""
    current = read(area, relative, max(len(expected or b""), len(data or b"")) + 1)
    if current == data:
        return True
    if current != expected:
        return False
    if data is None:
        return area.unlink(relative) or True
    if expected is None:
        return area.write(relative, data, mode=0o600, durable=durable)
    return area.write(relative, data, expected=expected, durable=durable)


def ident_of(area: Area, relative: str) -> Ident | None:
    info = area.lstat(relative)
    return None if info is None else identity(info)


def changed(scope: Scope, known: Mapping[str, tuple[Ident, str]], limits: Limits) -> bool:
    """Whether the scope's files differ from ``known`` by name or identity (no file read):
    an automatic sync's look, every minute, for a write by an agent, a dream or a person.
    Files a sync would hold back unread (too big, a name it refuses) do not count."""
    with opened(scope) as area:
        if area is None:
            return bool(known)
        seen = 0
        for relative, info in area.walk(skip_dir=scope.skip):
            if not relative.endswith(".md") or info.st_size > limits.max_file_bytes:
                continue
            if name_problem(os.fsencode(relative)) is not None:
                continue
            seen += 1
            cached = known.get(relative)
            if cached is None or cached[0] != identity(info):
                return True
    return seen != len(known)
