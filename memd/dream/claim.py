"""A run's claim on a memory dir: the consolidation lock taken for a run recorded first, and
given back at its end (R-D2).

The record is written before the lock's PID (its intent: a kill from then on is undone at the
next start, the lock rolled back to the prior mtime the record keeps); a lock that turns out
to be someone else's removes the record again. At the end, a kept run marks the lock, a
failed or undone one rolls it back; a lock taken over meanwhile is left to its new holder.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from memd.clock import Clock
from memd.dream import lock
from memd.dream.gates import Go
from memd.dream.runs import RunRecord, RunStore, project_key

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
) -> RunRecord | lock.Busy:
    """Take the lock for a run recorded first (blocking): the record is saved, state
    ``running``, with the lock's prior mtime before our PID is written, and removed
    again when the lock turns out to be someone else's."""
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
    if isinstance(got, lock.Busy):
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
