"""A dream's change journal (R-B3): what the run wrote, so it can be undone exactly.

Before each Write, Edit or Delete the run appends an ``intent`` line (the file's relative
path); after it, a ``done`` line with the file's SHA-256 as the run left it (``null``: the
run deleted it) and, for a delete, the file it was merged into. Each line is flushed and
fsynced, so a daemon killed mid-run leaves a journal its next start can undo from.

:func:`undo` touches only the run's own changes: a journaled file is put back to its
snapshot bytes when it still holds what the run left (or when the run died in the middle of
writing it); a file someone else changed since is kept and flagged. :func:`changes` turns
a journal into the change log: created, modified and deleted files with unified diffs.
Everything here blocks; run it in a worker thread.
"""

from __future__ import annotations

import difflib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memd.dream import snapshot
from memd.writes import reporting

JOURNAL = "journal.jsonl"
MAX_DIFF_CHARS = 200_000
MAX_LINE_BYTES = 64 * 1024


@dataclass(frozen=True)
class Entry:
    relative: str
    done: bool
    after: str | None = None  # SHA-256 the run left; None: deleted
    merged_into: str | None = None


@dataclass(frozen=True)
class Change:
    relative: str
    action: Literal["created", "modified", "deleted"]
    diff: str
    merged_into: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "path": self.relative,
            "action": self.action,
            "diff": self.diff,
            "merged_into": self.merged_into,
        }


@dataclass(frozen=True)
class Undone:
    restored: tuple[str, ...]
    flagged: tuple[str, ...]  # changed by someone else since the run, or a link now: kept
    failed: tuple[str, ...] = ()  # the disk refused to put them back: to be tried again


class Journal:
    """Appends to ``<run dir>/journal.jsonl``."""

    def __init__(self, run_dir: Path) -> None:
        self.path = run_dir / JOURNAL

    def intent(self, relative: str) -> None:
        self._append({"op": "intent", "path": relative})

    def done(self, relative: str, after: str | None, merged_into: str | None = None) -> None:
        self._append({"op": "done", "path": relative, "after": after, "merged_into": merged_into})

    def _append(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=True).encode() + b"\n"
        with reporting(self.path):
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)


def read(run_dir: Path) -> dict[str, Entry]:
    """The latest entry per file; hostile lines are skipped, never raised."""
    entries: dict[str, Entry] = {}
    try:
        raw = (run_dir / JOURNAL).read_bytes()
    except OSError:
        return entries
    for line in raw.splitlines():
        record = _parse(line)
        if record is None:
            continue
        relative, op = record["path"], record["op"]
        if op == "intent":
            old = entries.get(relative)
            entries[relative] = Entry(
                relative, False, old.after if old else None, old.merged_into if old else None
            )
        else:
            after = record.get("after")
            merged = record.get("merged_into")
            entries[relative] = Entry(
                relative,
                True,
                after if isinstance(after, str) else None,
                merged if isinstance(merged, str) else None,
            )
    return entries


def _parse(line: bytes) -> dict[str, Any] | None:
    if len(line) > MAX_LINE_BYTES:
        return None
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("op") not in ("intent", "done"):
        return None
    relative = record.get("path")
    if not isinstance(relative, str) or not snapshot.safe_relative(relative):
        return None
    return record


def undo(memory_dir: Path, run_dir: Path, snapshot_dir: Path) -> Undone:
    """Put the run's own changes back (see the module docstring)."""
    saved = snapshot.load(snapshot_dir)
    before = saved.files if saved else {}
    restored: list[str] = []
    flagged: list[str] = []
    failed: list[str] = []
    for relative, entry in sorted(read(run_dir).items()):
        current = _hash(memory_dir, relative)
        original = before.get(relative)
        if current == original:
            continue
        ours = not entry.done or current == entry.after
        if not ours:
            flagged.append(relative)
            continue
        data = snapshot.saved_bytes(snapshot_dir, relative) if original else None
        if original and data is None:
            flagged.append(relative)  # the snapshot lost it: keep what is there
            continue
        done = snapshot.put_back(memory_dir, relative, data)
        if done == "put":
            restored.append(relative)
        elif done == "refused":
            flagged.append(relative)  # a link or a folder in its place: left alone
        else:
            failed.append(relative)
    if saved is not None and not failed:
        snapshot.prune_new_dirs(memory_dir, saved)
    return Undone(tuple(restored), tuple(flagged), tuple(failed))


def changes(memory_dir: Path, run_dir: Path, snapshot_dir: Path) -> list[Change]:
    """The change log of a run: each journaled file's net change, with a unified diff."""
    saved = snapshot.load(snapshot_dir)
    before = saved.files if saved else {}
    out: list[Change] = []
    for relative, entry in sorted(read(run_dir).items()):
        old = snapshot.saved_bytes(snapshot_dir, relative) if relative in before else None
        new = snapshot.memory_bytes(memory_dir, relative)
        if old == new:
            continue
        action: Literal["created", "modified", "deleted"]
        action = "created" if old is None else "deleted" if new is None else "modified"
        out.append(Change(relative, action, unified_diff(relative, old, new), entry.merged_into))
    return out


def unified_diff(relative: str, old: bytes | None, new: bytes | None) -> str:
    """A unified diff of two versions (``/dev/null`` for a missing side), cut to a budget."""
    a = _lines(old)
    b = _lines(new)
    diff = "".join(
        difflib.unified_diff(
            a,
            b,
            "/dev/null" if old is None else f"a/{relative}",
            "/dev/null" if new is None else f"b/{relative}",
        )
    )
    if len(diff) > MAX_DIFF_CHARS:
        return diff[:MAX_DIFF_CHARS] + "\n... (diff cut)\n"
    return diff


def _lines(data: bytes | None) -> list[str]:
    if data is None:
        return []
    lines = data.decode("utf-8", "replace").splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines


def _hash(memory_dir: Path, relative: str) -> str | None:
    data = snapshot.memory_bytes(memory_dir, relative)
    return snapshot.sha256(data) if data is not None else None
