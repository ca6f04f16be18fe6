"""Undoing a run from its journal (R-B3): exactly the run's own changes, newest first.

Each step of :mod:`memd.dream.journal`, newest first, looks at its entry as it is now:

* as the step found it, or as an earlier step of the run on it found or left it: nothing to
  undo here (the change was never made, or is undone already);
* as the step left it: it is put back (the bytes the file held, with its mode, written only
  while the file still holds what the run left; a file the run made is removed; a folder it
  made is removed when it is empty, one it removed is made again);
* anything else: someone else changed it since the run (a person, Claude Code), or it is a
  link now: it is kept as it is and flagged, and the run's earlier steps on it are left
  alone too.

memd's own temp files of a written name that a kill left behind are removed either way.

Undoing twice does nothing the second time, so a run whose undo was cut short (a kill, a disk
that refused) is undone again from the start. The undo writes nothing to the state dir: a
full or read-only state disk cannot stop it. Blocking.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final, Literal

from memd.confined import TEMP_MARK, Area, Refused, shown
from memd.dream import journal, snapshot
from memd.dream.journal import DIR, Step

log = logging.getLogger(__name__)

OTHER: Final = "other"  # a state no step records: a link, a special file, too large
Outcome = Literal["same", "put", "kept", "failed"]


@dataclass(frozen=True)
class Undone:
    restored: tuple[str, ...]
    flagged: tuple[str, ...]  # changed by someone else since the run, or a link now: kept
    failed: tuple[str, ...] = ()  # the disk refused to put them back: to be tried again


@dataclass
class _Tally:
    put: set[str] = field(default_factory=set)
    kept: set[str] = field(default_factory=set)
    failed: set[str] = field(default_factory=set)

    def note(self, step: Step, outcome: Outcome) -> None:
        if outcome == "put" and step.kind in ("write", "unlink"):
            self.put.add(step.relative)
        elif outcome == "kept":
            self.kept.add(step.relative)
        elif outcome == "failed":
            self.failed.add(step.relative)

    def settled(self, relative: str) -> bool:
        """Whether the run's earlier steps on ``relative`` must be left alone."""
        return relative in self.kept or relative in self.failed

    def result(self) -> Undone:
        done = self.put - self.kept - self.failed
        return Undone(tuple(sorted(done)), tuple(sorted(self.kept)), tuple(sorted(self.failed)))


def undo(memory_dir: Path, run_dir: Path, snapshot_dir: Path) -> Undone:
    """Put the run's own changes back (see the module docstring)."""
    saved = snapshot.load(snapshot_dir)
    found = journal.read(run_dir, saved.files if saved else {})
    earlier: list[frozenset[str | None]] = []  # per step: the states its entry had before it
    states: dict[str, set[str | None]] = {}
    for step in found.steps:
        had = states.setdefault(step.relative, set())
        earlier.append(frozenset(had))
        had.update((step.before, step.after))
    tally = _Tally()
    for index in reversed(range(len(found.steps))):
        step = found.steps[index]
        if not tally.settled(step.relative):
            outcome = _undo_step(memory_dir, run_dir, snapshot_dir, step, earlier[index])
            tally.note(step, outcome)
    if found.old and saved is not None and not tally.failed:
        snapshot.prune_new_dirs(memory_dir, saved)  # an old journal did not record folders
    return tally.result()


def _undo_step(
    memory_dir: Path,
    run_dir: Path,
    snapshot_dir: Path,
    step: Step,
    earlier: frozenset[str | None],
) -> Outcome:
    try:
        with Area.open(memory_dir, create=step.before is not None) as area:
            state, held = now(area, step.relative)
            if state == step.before:
                outcome: Outcome = "same"
            elif state == step.after or step.after == journal.ANY:
                outcome = _put_back(area, run_dir, snapshot_dir, step, state, held)
            elif state in earlier:
                outcome = "same"  # undone this far already (a kill, a refusal, a retry)
            else:
                outcome = "kept"
            if step.kind == "write":  # memd's own leftover, whoever holds the file now
                _sweep_temps(area, step.relative)
            return outcome
    except (Refused, ValueError) as exc:
        log.warning("cannot put %s back: %s", shown(str(memory_dir / step.relative)), exc)
        return "kept"
    except FileNotFoundError:
        return "same"  # no memory dir, and nothing to put in one
    except OSError as exc:
        log.warning("cannot put %s back yet: %s", shown(str(memory_dir / step.relative)), exc)
        return "failed"


def now(area: Area, relative: str) -> tuple[str | None, bytes | None]:
    """The state of ``relative`` (a file's SHA-256, :data:`DIR`, ``None`` when nothing is
    there, :data:`OTHER`) and a file's bytes."""
    info = area.lstat(relative)
    if info is None:
        return None, None
    if stat.S_ISDIR(info.st_mode):
        return DIR, None
    limit = snapshot.SNAPSHOT_MAX_BYTES
    try:
        data, _ = area.read(relative, max_bytes=limit + 1)
    except (OSError, ValueError):
        return OTHER, None
    return (snapshot.sha256(data), data) if len(data) <= limit else (OTHER, None)


def _put_back(
    area: Area,
    run_dir: Path,
    snapshot_dir: Path,
    step: Step,
    state: str | None,
    held: bytes | None,
) -> Outcome:
    relative = step.relative
    if step.before is None:
        if state == DIR:
            return "put" if area.rmdir(relative) else "kept"  # not empty: someone's files
        area.unlink(relative)
        return "put"
    if step.before == DIR:
        os.close(area.make_dirs(relative))
        return "put"
    data = journal.kept_bytes(run_dir, snapshot_dir, relative, step.before)
    if data is None:
        log.warning("dream: the bytes %s held before are lost; it is kept", shown(relative))
        return "kept"
    written = area.write(relative, data, mode=step.mode, expected=held)
    return "put" if written else "kept"


def _sweep_temps(area: Area, relative: str) -> None:
    """Remove the temp files a kill left of memd's atomic writes of ``relative``."""
    folder, _, name = relative.rpartition("/")
    temp = re.compile(re.escape(f".{name}{TEMP_MARK}") + r"[0-9a-f]{8}\.tmp")
    try:
        fd = area.open_dir(folder)
    except (OSError, ValueError):
        return
    try:
        for entry in os.listdir(fd):
            if temp.fullmatch(entry):
                with contextlib.suppress(OSError):
                    if stat.S_ISREG(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                        os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
