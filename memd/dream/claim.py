"""A run's claim on a memory dir: the consolidation lock taken for a run recorded first, and
given back at its end (R-D2).

The record is written before the lock's PID (its intent: a kill from then on is undone at the
next start, the lock rolled back to the prior mtime the record keeps); a lock that turns out
to be someone else's removes the record again. At the end (:func:`write_down`), a kept run
writes its change log, marks the lock, and is kept once its record says so on disk; when the
state disk refuses either, the run is undone and the lock rolled back, as for a failed or
undone run. A lock taken over meanwhile is left to its new holder.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from memd.clock import Clock
from memd.dream import lock
from memd.dream.changelog import Change
from memd.dream.gates import Go
from memd.dream.restore import pending_reason, undo_run
from memd.dream.runs import UNDO_PENDING, RunRecord, RunStore, project_key

log = logging.getLogger(__name__)


def acquire_recorded(
    store: RunStore,
    clock: Clock,
    memory_dir: Path,
    kind: str,
    go: Go | None,
    *,
    stale_s: float,
    running_here: bool,
) -> RunRecord | lock.Busy | lock.Unrecorded:
    """Take the lock for a run recorded first (blocking): the record is saved, state
    ``running``, with the lock's prior mtime before our PID is written, and removed
    again when the lock turns out to be someone else's or the record cannot be written."""
    intent: list[RunRecord] = []

    def record_intent(prior_ns: int) -> None:
        intent.append(new_record(store, clock, memory_dir, kind, prior_ns, go))
        store.save(intent[0])

    got = lock.acquire(
        memory_dir,
        stale_s=stale_s,
        running_here=running_here,
        before_write=record_intent,
    )
    if isinstance(got, lock.Busy | lock.Unrecorded):
        if intent:
            store.discard(intent[0])
        return got
    return intent[0]


def new_record(
    store: RunStore, clock: Clock, memory_dir: Path, kind: str, prior: int, go: Go | None
) -> RunRecord:
    """A ``running`` record of a run of ``kind`` in ``memory_dir`` starting now."""
    return RunRecord(
        run_id=store.new_run_id(kind, time.time()),
        kind=kind,
        project=project_key(memory_dir),
        memory_dir=os.path.realpath(memory_dir),
        started_at=clock.now(),
        pid=os.getpid(),
        prior_mtime_ns=prior,
        forced=bool(go and go.forced),
        sessions=list(go.sessions) if go else [],
    )


def finish_lock(record: RunRecord, ok: bool) -> None:
    """Mark the lock (a kept run) or roll it back to the prior mtime (blocking)."""
    memory_dir = Path(record.memory_dir)
    if ok:
        if not lock.mark_consolidated(memory_dir):
            log.warning("dream in %s: the lock was taken over during the run", memory_dir)
    elif not lock.roll_back(memory_dir, record.prior_mtime_ns):
        log.warning("dream in %s: the lock is someone else's now; left alone", memory_dir)


def release(record: RunRecord, ok: bool) -> None:
    """:func:`finish_lock`; a lock the memory dir's disk will not change stays as it is."""
    try:
        finish_lock(record, ok)
    except OSError as exc:
        log.warning("dream in %s: the lock stays as it is: %s", record.memory_dir, exc)


def write_down(store: RunStore, record: RunRecord, changes: list[Change]) -> None:
    """Write a run's end (blocking). A ``completed`` run is kept only once its change log and
    its record are on disk; when the state disk refuses, its changes are undone (from the
    journal, which needs no write there) and it ends ``failed`` (or :data:`UNDO_PENDING`)."""
    if record.state != "completed":
        release(record, False)
        store.keep_changes(record, changes)
        store.keep(record)
        return
    try:
        store.save_changes(record, changes)
        release(record, True)
        store.save(record)
    except OSError as exc:
        _undo_unrecorded(store, record, exc)


def write_stopped(store: RunStore, record: RunRecord) -> None:
    """Write the end of a run the daemon's shutdown stopped (blocking): its undo is made sure
    of first (it is done again, which changes nothing when it was done), and a run whose undo
    the disk refused is :data:`UNDO_PENDING`, tried again at the next start."""
    undone = undo_run(store, record)
    release(record, False)
    record.state, record.reason = "interrupted", "the daemon stopped during the run"
    if undone.failed:
        record.state = UNDO_PENDING
        record.reason = pending_reason(record.reason, undone.failed)
    store.keep(record)


def _undo_unrecorded(store: RunStore, record: RunRecord, exc: OSError) -> None:
    log.warning("dream %s: cannot record its end, so it is undone: %s", record.run_id, exc)
    undone = undo_run(store, record)
    release(record, False)
    record.state = "failed"
    record.reason = f"the state disk refused the record of the run's end ({exc}): undone"
    record.flagged = list(undone.flagged)
    if undone.failed:
        record.state = UNDO_PENDING
        record.reason = pending_reason(record.reason, undone.failed)
    store.keep(record)
