"""A run's change log (``memdctl dream --log``): the files it created, modified and deleted,
each with a unified diff against the run's snapshot. Blocking."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from memd.dream import journal, snapshot

MAX_DIFF_CHARS = 200_000


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


def changes(memory_dir: Path, run_dir: Path, snapshot_dir: Path) -> list[Change]:
    """The net change of each file the run's journal names, with a unified diff."""
    saved = snapshot.load(snapshot_dir)
    before = saved.files if saved else {}
    merged: dict[str, str | None] = {}
    for step in journal.read(run_dir, before).steps:
        if step.kind in ("write", "unlink"):
            merged[step.relative] = step.merged_into
    out: list[Change] = []
    for relative, into in sorted(merged.items()):
        old = snapshot.saved_bytes(snapshot_dir, relative) if relative in before else None
        new = snapshot.memory_bytes(memory_dir, relative)
        if old == new:
            continue
        action: Literal["created", "modified", "deleted"]
        action = "created" if old is None else "deleted" if new is None else "modified"
        out.append(Change(relative, action, unified_diff(relative, old, new), into))
    return out


def unified_diff(relative: str, old: bytes | None, new: bytes | None) -> str:
    """A unified diff of two versions (``/dev/null`` for a missing side), cut to a budget."""
    diff = "".join(
        difflib.unified_diff(
            _lines(old),
            _lines(new),
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
