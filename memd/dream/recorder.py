"""Record, then change: the guard of a dream's (or a restore's) areas (R-B3).

Every change memd makes to a memory dir for a run goes through an
:class:`~memd.confined.Area` opened with the run's :class:`Recorder`: the agent's Write, Edit
and Delete (and the folders a Write makes), the scrub and the citations of the files the run
wrote, a restore's files. Before each one the recorder looks at the entry as it is, keeps the
bytes a file holds (unless the run's snapshot holds exactly them), and appends a
:class:`~memd.dream.journal.Step` to the journal; only then does the area make the change.
When the state disk refuses any of it, :class:`~memd.dream.journal.RecordRefused` is raised
and the change is not made.

Only the run's memory dir is recorded: an area rooted anywhere else, the consolidation lock
(its own protocol rolls it back) and an entry the recorder cannot keep the bytes of (a link,
a hard link, a file over the snapshot's budget) are refused, never changed unrecorded.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Mapping
from pathlib import Path
from typing import assert_never

from memd.confined import Area, ChangeKind, Refused
from memd.dream import snapshot, undo
from memd.dream.journal import DIR, Journal, Step


class Recorder:
    """The :class:`~memd.confined.ChangeGuard` of one run's memory dir."""

    def __init__(self, memory_dir: Path, book: Journal, saved: Mapping[str, str]) -> None:
        self.memory_dir = Path(os.path.realpath(memory_dir))
        self.journal = book
        self._saved = saved  # the snapshot's manifest: bytes it holds need no copy
        self.merges: dict[str, str] = {}  # a file deleted → the file that holds it now

    def before_change(
        self, area: Area, kind: ChangeKind, relative: str, data: bytes | None
    ) -> None:
        where = area.path(relative)
        if Path(os.path.realpath(area.root)) != self.memory_dir:
            raise Refused(str(where), "outside the memory dir this run records")
        if snapshot.is_lock_file(relative):
            raise Refused(str(where), "the consolidation lock, which its own protocol keeps")
        state, held = undo.now(area, relative)
        if state == undo.OTHER:
            raise Refused(str(where), "an entry whose bytes the run cannot keep to undo it")
        step = _step(kind, relative, state, data, area)
        if step is None:
            return  # nothing there to change (the call fails on its own)
        if held is not None and self._saved.get(relative) != state:
            self.journal.keep(held)
        if kind == "unlink":
            step = Step(
                step.kind, relative, step.before, None, step.mode, self.merges.get(relative)
            )
        self.journal.append(step)


def _step(
    kind: ChangeKind, relative: str, state: str | None, data: bytes | None, area: Area
) -> Step | None:
    """The step ``kind`` makes of ``relative`` as it is now; ``None``: nothing to record."""
    match kind:
        case "write":
            assert data is not None
            mode = _mode(area, relative) if state not in (None, DIR) else None
            return Step("write", relative, state, snapshot.sha256(data), mode)
        case "unlink":
            if state in (None, DIR):
                return None
            return Step("unlink", relative, state, None, _mode(area, relative))
        case "mkdir":
            return Step("mkdir", relative, None, DIR) if state is None else None
        case "rmdir":
            return Step("rmdir", relative, DIR, None) if state == DIR else None
        case unreachable:
            assert_never(unreachable)


def _mode(area: Area, relative: str) -> int | None:
    info = area.lstat(relative)
    return stat.S_IMODE(info.st_mode) if info is not None else None
