"""Dream runs on disk: ``<state dir>/dream/<project folder>/<run id>/``.

Each run folder holds, in the order they are written:

* ``run.json`` (:class:`RunRecord`), state ``running``, before the consolidation lock is
  taken: from then on a kill is undone at the next start, the lock rolled back;
* ``journal.jsonl`` and ``snapshot/`` (the memory dir before the run), both on disk before
  the run changes anything; then one journal line before each change, and ``undo/`` for the
  bytes a changed file held that the snapshot does not (:mod:`memd.dream.journal`);
* at the end ``changes.json`` (the change log with diffs), then ``run.json`` with the run's
  end. A kept run is kept only once that record is on disk (:meth:`RunStore.save`); a run that
  ended otherwise is written down when the disk lets it (:meth:`RunStore.keep`), and until
  then its ``running`` record has it undone again at the next start (which finds nothing
  left to undo).

Old snapshots and undo copies are pruned to the last N ended runs; records are kept (up to
:data:`MAX_RUNS_KEPT`) as history. Every read trusts nothing: a record that does not parse is
skipped.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memd.atomic import persist, write_atomic
from memd.dream.changelog import Change
from memd.dream.journal import UNDO_DIR
from memd.dream.snapshot import sync_dir
from memd.writes import reporting

RECORD = "run.json"
CHANGES = "changes.json"
SNAPSHOT = "snapshot"
MAX_RUNS_KEPT = 50
MAX_RECORD_BYTES = 1 << 20
MAX_CHANGES_BYTES = 256 << 20  # diffs are cut per file; this bounds a hostile file
_RUN_ID = re.compile(r"^\d{8}T\d{6}-\d{6}-[a-z]+$")


UNDO_PENDING = "undo pending"


@dataclass
class RunRecord:
    run_id: str
    kind: str  # "dream" or "restore"
    project: str
    memory_dir: str
    # running, completed, failed, aborted, interrupted, restored, and UNDO_PENDING: a run that
    # failed or was interrupted whose undo the disk refused; undone again before the next dream
    # in its memory dir and at every start, until it is
    state: str = "running"
    reason: str = ""
    started_at: float = 0.0
    ended_at: float | None = None
    pid: int = 0
    prior_mtime_ns: int = 0
    forced: bool = False
    sessions: list[str] = field(default_factory=list)
    turns: int = 0
    tool_calls: int = 0
    tokens: int = 0
    files: list[str] = field(default_factory=list)
    flagged: list[str] = field(default_factory=list)
    summary: str = ""
    restored_from: str | None = None

    def as_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        end = self.ended_at or time.time()
        data["duration_s"] = round(max(0.0, end - self.started_at), 3)
        return data

    @classmethod
    def from_dict(cls, raw: Any) -> RunRecord | None:
        if not isinstance(raw, dict):
            return None
        names = {f.name: f for f in dataclasses.fields(cls)}
        try:
            record = cls(**{k: v for k, v in raw.items() if k in names})
        except TypeError:
            return None
        ok = isinstance(record.run_id, str) and _RUN_ID.match(record.run_id) is not None
        ok = ok and isinstance(record.memory_dir, str) and isinstance(record.state, str)
        ok = ok and isinstance(record.prior_mtime_ns, int) and isinstance(record.pid, int)
        return record if ok else None


def project_key(memory_dir: Path) -> str:
    """The run folder's name for a memory dir: its project folder's name."""
    return memory_dir.parent.name or "root"


class RunStore:
    """The run folders below ``<state dir>/dream``."""

    def __init__(self, state_dir: Path) -> None:
        self.root = state_dir / "dream"

    def new_run_id(self, kind: str, now: float) -> str:
        stamp = time.strftime("%Y%m%dT%H%M%S", time.gmtime(now))
        micros = int((now % 1) * 1_000_000)
        return f"{stamp}-{micros:06d}-{kind}"

    def run_dir(self, project: str, run_id: str) -> Path:
        return self.root / project / run_id

    def save(self, record: RunRecord) -> None:
        """Write the record on disk for good (a new run's folder too), or raise ``OSError``."""
        folder = self.run_dir(record.project, record.run_id)
        made = not folder.is_dir()
        folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        write_atomic(folder / RECORD, json.dumps(record.as_dict(), indent=1).encode())
        if made:
            with reporting(folder.parent):
                sync_dir(folder.parent)

    def keep(self, record: RunRecord) -> bool:
        """Write the record now or, when the disk refuses, once it takes it (never raises);
        whether it is on disk now."""
        folder = self.run_dir(record.project, record.run_id)
        return persist(folder / RECORD, json.dumps(record.as_dict(), indent=1).encode())

    def discard(self, record: RunRecord) -> None:
        """Remove a run that never started (its lock was someone else's)."""
        shutil.rmtree(self.run_dir(record.project, record.run_id), ignore_errors=True)

    def save_changes(self, record: RunRecord, changes: list[Change]) -> None:
        """Write the change log on disk for good, or raise ``OSError``."""
        write_atomic(self._changes_path(record), _changes_bytes(changes))

    def keep_changes(self, record: RunRecord, changes: list[Change]) -> bool:
        """:meth:`save_changes`, or later when the disk refuses (as :meth:`keep`)."""
        return persist(self._changes_path(record), _changes_bytes(changes))

    def _changes_path(self, record: RunRecord) -> Path:
        return self.run_dir(record.project, record.run_id) / CHANGES

    def changes(self, project: str, run_id: str) -> list[dict[str, Any]]:
        raw = _read_json(self.run_dir(project, run_id) / CHANGES, MAX_CHANGES_BYTES)
        return [c for c in raw if isinstance(c, dict)] if isinstance(raw, list) else []

    def load(self, project: str, run_id: str) -> RunRecord | None:
        if not _RUN_ID.match(run_id):
            return None
        return RunRecord.from_dict(_read_json(self.run_dir(project, run_id) / RECORD))

    def runs(self, project: str) -> list[RunRecord]:
        """The project's runs, newest first."""
        folder = self.root / project
        try:
            names = sorted((n for n in os.listdir(folder) if _RUN_ID.match(n)), reverse=True)
        except OSError:
            return []
        records = (self.load(project, name) for name in names[: MAX_RUNS_KEPT * 2])
        return [r for r in records if r is not None]

    def projects(self) -> list[str]:
        try:
            return sorted(n for n in os.listdir(self.root) if (self.root / n).is_dir())
        except OSError:
            return []

    def prune(self, project: str, keep_snapshots: int) -> None:
        """Drop snapshots beyond the newest ``keep_snapshots`` ended runs, the undo copies of
        every ended run, and old records (never what a run still to be undone needs)."""
        ended = [r for r in self.runs(project) if r.state not in ("running", UNDO_PENDING)]
        for record in ended:
            shutil.rmtree(self.run_dir(project, record.run_id) / UNDO_DIR, ignore_errors=True)
        for record in ended[max(keep_snapshots, 0) :]:
            shutil.rmtree(self.run_dir(project, record.run_id) / SNAPSHOT, ignore_errors=True)
        for record in ended[MAX_RUNS_KEPT:]:
            shutil.rmtree(self.run_dir(project, record.run_id), ignore_errors=True)


def _changes_bytes(changes: list[Change]) -> bytes:
    return json.dumps([c.as_dict() for c in changes], indent=1).encode()


def _read_json(path: Path, limit: int = MAX_RECORD_BYTES) -> Any:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                return None
            data = handle.read(limit + 1)
    except OSError:
        return None
    if len(data) > limit:
        return None
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        return None
