"""Putting a run's snapshot back (``memdctl dream --restore``) and undoing interrupted runs.

:func:`restore_snapshot` first snapshots the current state into the restore's own run folder
(so a restore can itself be restored), names the files that changed since the restored run
ended (changed, but not by that run), makes the memory dir byte-identical to the chosen
snapshot and writes the change log. :func:`recover_run` undoes a run a killed daemon left
``running``: the run's own changes go back, the lock is rolled back. Both block.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from memd.dream import journal, lock, snapshot
from memd.dream.journal import Change
from memd.dream.runs import SNAPSHOT, UNDO_PENDING, RunRecord, RunStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Restored:
    changes: tuple[Change, ...]
    changed_since: tuple[str, ...]  # files someone changed after the restored run


def restore_snapshot(store: RunStore, source: RunRecord, target: RunRecord) -> Restored:
    """Restore ``source``'s snapshot; ``target`` is the restore's own (saved) record."""
    memory_dir = Path(source.memory_dir)
    src = store.run_dir(source.project, source.run_id) / SNAPSHOT
    saved = snapshot.load(src)
    if saved is None:
        raise FileNotFoundError(f"run {source.run_id} has no snapshot left")
    own = store.run_dir(target.project, target.run_id) / SNAPSHOT
    now = snapshot.take(memory_dir, own)
    by_run = {c.get("path") for c in store.changes(source.project, source.run_id)}
    changed = snapshot.restore_tree(memory_dir, src)
    changes = tuple(
        Change(
            relative,
            "created"
            if relative not in now.files
            else "deleted"
            if relative not in saved.files
            else "modified",
            journal.unified_diff(
                relative,
                snapshot.saved_bytes(own, relative) if relative in now.files else None,
                snapshot.saved_bytes(src, relative) if relative in saved.files else None,
            ),
        )
        for relative in changed
    )
    since = tuple(r for r in changed if r not in by_run)
    return Restored(changes, since)


def recover_run(store: RunStore, record: RunRecord) -> RunRecord:
    """Undo a run left ``running`` by a daemon that is gone, or one whose undo the disk
    refused (:data:`UNDO_PENDING`); the updated record (still pending while the disk refuses)."""
    memory_dir = Path(record.memory_dir)
    run_dir = store.run_dir(record.project, record.run_id)
    pending = record.state == UNDO_PENDING
    changes = journal.changes(memory_dir, run_dir, run_dir / SNAPSHOT)
    if record.kind == "restore" and snapshot.load(run_dir / SNAPSHOT) is not None:
        put = snapshot.restore_tree(memory_dir, run_dir / SNAPSHOT)
        undone = journal.Undone(tuple(put), ())
    else:
        undone = journal.undo(memory_dir, run_dir, run_dir / SNAPSHOT)
    try:
        lock.roll_back(memory_dir, record.prior_mtime_ns, own_pid=record.pid)
    except OSError as exc:
        log.warning("dream %s: the lock in %s stays as it is: %s", record.run_id, memory_dir, exc)
    if not pending:
        store.save_changes(record, changes)
        record.files = [c.relative for c in changes]
        record.ended_at = time.time()
    if undone.failed:
        record.state = UNDO_PENDING
        record.reason = pending_reason(record.reason, undone.failed)
    elif pending:
        record.state = "failed"
        record.reason = record.reason.split("; undo pending")[0] + "; undone once the disk let it"
    else:
        record.state = "interrupted"
        record.reason = "the daemon stopped during the run; undone at the next start"
    record.flagged = list(undone.flagged)
    store.save(record)
    log.warning(
        "dream %s in %s: %s: %d files put back, %d kept, %d the disk refused",
        record.run_id,
        memory_dir,
        record.state,
        len(undone.restored),
        len(undone.flagged),
        len(undone.failed),
    )
    return record


def pending_reason(reason: str, failed: tuple[str, ...]) -> str:
    """The reason of a run whose undo waits for the disk (the files it could not put back)."""
    base = reason.split("; undo pending")[0]
    names = ", ".join(failed[:5]) + (f" and {len(failed) - 5} more" if len(failed) > 5 else "")
    return (
        f"{base}; undo pending: the disk refused to put back {names}; tried again before the "
        "next dream there and at every start"
    )


def recover_all(store: RunStore) -> list[RunRecord]:
    """Undo every run left ``running``; every project's runs, newest first."""
    found: list[RunRecord] = []
    for project in store.projects():
        for record in store.runs(project):
            if record.state in ("running", UNDO_PENDING):
                try:
                    record = recover_run(store, record)
                except OSError as exc:
                    log.error("cannot undo the interrupted dream %s: %s", record.run_id, exc)
            found.append(record)
    return found
