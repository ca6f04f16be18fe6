"""Putting a run's snapshot back (``memdctl dream --restore``) and undoing unsettled runs.

:func:`restore_snapshot` first makes the restore's own journal and snapshot (so a restore can
itself be undone or restored), names the files that changed since the restored run ended
(changed, but not by that run), makes the memory dir byte-identical to the chosen snapshot,
every change recorded first (:mod:`memd.dream.recorder`), and makes the change log.

:func:`recover_run` undoes a run a killed daemon left ``running`` (or one whose undo the disk
refused), from its journal: the run's own changes go back, the lock is rolled back. It writes
nothing to the state dir before the memory dir is as it was; its record is written when the
disk lets it (until then, the next start finds the run ``running`` again and undoes nothing
more). :func:`recover_all` does it at start. All of it blocks.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

from memd.dream import changelog, lock, snapshot
from memd.dream.changelog import Change
from memd.dream.journal import JOURNAL, Journal
from memd.dream.recorder import Recorder
from memd.dream.runs import SNAPSHOT, UNDO_PENDING, RunRecord, RunStore
from memd.dream.undo import Undone, undo

log = logging.getLogger(__name__)

UNSETTLED = ("running", UNDO_PENDING)


@dataclass(frozen=True)
class Restored:
    changes: tuple[Change, ...]
    changed_since: tuple[str, ...]  # files someone changed after the restored run


def restore_snapshot(store: RunStore, source: RunRecord, target: RunRecord) -> Restored:
    """Restore ``source``'s snapshot; ``target`` is the restore's own (saved) record. Raises
    ``OSError`` when it cannot: the changes made so far are the caller's to undo."""
    memory_dir = Path(source.memory_dir)
    src = store.run_dir(source.project, source.run_id) / SNAPSHOT
    saved = snapshot.load(src)
    if saved is None:
        raise FileNotFoundError(f"run {source.run_id} has no snapshot left")
    run_dir = store.run_dir(target.project, target.run_id)
    book = Journal(run_dir)
    book.create()
    own = run_dir / SNAPSHOT
    now = snapshot.take(memory_dir, own)
    by_run = {c.get("path") for c in store.changes(source.project, source.run_id)}
    changed = snapshot.restore_tree(memory_dir, src, Recorder(memory_dir, book, now.files))
    changes = tuple(
        Change(
            relative,
            "created"
            if relative not in now.files
            else "deleted"
            if relative not in saved.files
            else "modified",
            changelog.unified_diff(
                relative,
                snapshot.saved_bytes(own, relative) if relative in now.files else None,
                snapshot.saved_bytes(src, relative) if relative in saved.files else None,
            ),
        )
        for relative in changed
    )
    since = tuple(r for r in changed if r not in by_run)
    return Restored(changes, since)


def undo_run(store: RunStore, record: RunRecord) -> Undone:
    """Put a run's own changes back from its journal; an earlier version's restore, which
    kept no journal, puts its own snapshot back whole."""
    memory_dir = Path(record.memory_dir)
    run_dir = store.run_dir(record.project, record.run_id)
    journaled = (run_dir / JOURNAL).exists()
    if record.kind == "restore" and not journaled and snapshot.load(run_dir / SNAPSHOT):
        return Undone(tuple(snapshot.restore_tree(memory_dir, run_dir / SNAPSHOT)), ())
    return undo(memory_dir, run_dir, run_dir / SNAPSHOT)


def recover_run(store: RunStore, record: RunRecord) -> RunRecord:
    """Undo a run left ``running`` by a daemon that is gone, or one whose undo the disk
    refused (:data:`UNDO_PENDING`); the updated record (still pending while the disk refuses)."""
    memory_dir = Path(record.memory_dir)
    run_dir = store.run_dir(record.project, record.run_id)
    pending = record.state == UNDO_PENDING
    changes = changelog.changes(memory_dir, run_dir, run_dir / SNAPSHOT)
    undone = undo_run(store, record)
    try:
        lock.roll_back(memory_dir, record.prior_mtime_ns, own_pid=record.pid)
        lock.sweep_temps(memory_dir)
    except OSError as exc:
        log.warning("dream %s: the lock in %s stays as it is: %s", record.run_id, memory_dir, exc)
    if not pending:
        store.keep_changes(record, changes)
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
    store.keep(record)
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
    """Undo the runs left unsettled; every project's runs, newest first. Only the newest run
    of a memory dir can be unsettled for real: one older than it was settled before it began
    (a run starts only once no undo is pending there), so it is marked, not undone again."""
    found: list[RunRecord] = []
    for project in store.projects():
        newer: set[str] = set()
        for record in store.runs(project):
            if record.state in UNSETTLED and record.memory_dir in newer:
                record = _superseded(store, record)
            elif record.state in UNSETTLED:
                record = _recovered(store, record)
            newer.add(record.memory_dir)
            found.append(record)
    return found


def _recovered(store: RunStore, record: RunRecord) -> RunRecord:
    try:
        return recover_run(store, record)
    except OSError as exc:
        log.error("cannot undo the interrupted dream %s: %s", record.run_id, exc)
        return record


def _superseded(store: RunStore, record: RunRecord) -> RunRecord:
    """An unsettled record older than another run of its memory dir: its undo was done (its
    record could not say so then)."""
    record.state = "interrupted" if record.state == "running" else "failed"
    record.reason = "undone before a later run began; its record is written only now"
    record.ended_at = record.ended_at or time.time()
    store.keep(record)
    return record
