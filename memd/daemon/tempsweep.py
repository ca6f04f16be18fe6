"""Remove the temp files that a crash left behind, in the directories memd writes.

Runs once at start, under the instance lock and before the event loop, so no atomic write of
this daemon can be in progress. The scan is bounded to the directories memd knows it writes:
the state dir (and its direct subdirectories), each project's memory dir (and its direct
subdirectories, e.g. ``team/``) and each session's notes dir. Symlinked directories are not
followed. Only files named by :mod:`memd.atomic`'s own pattern are removed (in the state dir,
which is memd's alone, also the pattern of earlier versions).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path

from memd.atomic import remove_stale_temps
from memd.memory.paths import MEMORY_DIRNAME
from memd.session.notes import NOTES_DIR

log = logging.getLogger(__name__)


def sweep_stale_temps(state_dir: Path, projects_root: Path) -> int:
    """Remove stale temp files of memd's atomic writes; how many (blocking)."""
    removed = remove_stale_temps(state_dir, legacy=True)
    for sub in _subdirs(state_dir):
        removed += remove_stale_temps(sub, legacy=True)
    for project in _subdirs(projects_root):
        for child in _subdirs(project):
            if child.name == MEMORY_DIRNAME:
                removed += remove_stale_temps(child)
                for inner in _subdirs(child):
                    removed += remove_stale_temps(inner)
            else:
                removed += remove_stale_temps(child / NOTES_DIR)
    if removed:
        log.info("removed %d temp file(s) left by an interrupted write", removed)
    return removed


def _subdirs(directory: Path) -> Iterator[Path]:
    """Real subdirectories (no symlinks) of ``directory``; none when it cannot be listed."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_dir(follow_symlinks=False):
                yield Path(entry.path)
        except OSError:
            continue
