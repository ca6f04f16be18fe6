"""A tree beneath an area, for the agents' tools."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from memd.confined.area import Area, Entry
from memd.confined.findings import Refused, findings
from memd.confined.resolve import kind_of

# -- a tree beneath an area, for the agents' tools ------------------------------------------


@dataclass(frozen=True)
class Folder:
    """A folder beneath an area as a listing found it (entered later, through its own open)."""

    relative: str
    info: os.stat_result


@dataclass(frozen=True)
class Skipped:
    """An entry :func:`tree` passed over: a link, a hard link, a special file, a folder that
    could not be entered; ``kind`` says which (also recorded in :data:`findings`)."""

    relative: str
    kind: str


def tree(
    area: Area, relative: str = "", *, skip: frozenset[str] = frozenset(), max_depth: int = 16
) -> Iterator[Entry | Folder | Skipped]:
    """Everything beneath the folder ``relative`` of ``area``, depth first in name order.

    Files come as :class:`Entry` (regular, one link, the user's: checked on their own
    ``fstatat``; open them with :meth:`Area.open_file`, which checks again on the descriptor),
    folders as :class:`Folder` before what they hold, and the rest as :class:`Skipped`. Names
    in ``skip`` (``.git``) are passed over silently. Each folder is opened afresh beneath the
    root (:meth:`Area.open_dir`), so one descriptor at a time is held whatever the breadth,
    and a folder swapped for a link meanwhile is refused by that open, not entered. Raises
    as :meth:`Area.open_dir` for ``relative`` itself.
    """
    first = True
    pending: list[tuple[str, int]] = [(relative, 0)]
    while pending:
        where, depth = pending.pop()
        try:
            fd = area.open_dir(where)
        except (OSError, ValueError) as exc:
            if first:
                raise
            yield Skipped(where, exc.kind if isinstance(exc, Refused) else "a folder that changed")
            continue
        first = False
        folders: list[str] = []
        try:
            yield from _tree_level(fd, where, depth + 1 < max_depth, skip, folders, area)
        finally:
            os.close(fd)
        pending.extend((folder, depth + 1) for folder in reversed(folders))


def _tree_level(
    fd: int, where: str, descend: bool, skip: frozenset[str], folders: list[str], area: Area
) -> Iterator[Entry | Folder | Skipped]:
    try:
        names = sorted(os.listdir(fd))
    except OSError:
        return
    for name in names:
        if name in skip:
            continue
        relative = f"{where}/{name}" if where else name
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except OSError:
            continue
        if stat.S_ISDIR(info.st_mode):
            if descend:
                folders.append(relative)
                yield Folder(relative, info)
            continue
        why = kind_of(info)
        if why is not None:
            findings.record(str(area.root / relative), why)
            yield Skipped(relative, why)
            continue
        yield Entry(relative, info)
