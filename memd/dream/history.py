"""``memdctl dream --log`` and ``--restore``: a run's change log, and a snapshot put back.

A restore holds the memory dir like a dream does (memd's extraction waits, the consolidation
lock is taken and then rolled back: a restore is not a consolidation) and is recorded as a
run of its own, with its own journal and snapshot of what it replaced: a restore that fails
part way, or whose end the state disk will not record, is undone as a dream is.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio.to_thread

from memd.dream import claim, lock
from memd.dream.restore import pending_reason, restore_snapshot, undo_run
from memd.dream.runs import UNDO_PENDING, RunRecord, project_key
from memd.errors import NotFound

if TYPE_CHECKING:
    from memd.dream.service import DreamService


def _pick(service: DreamService, project: str, run_id: str | None, *, snapshot: bool) -> RunRecord:
    runs = service.store.runs(project)
    if run_id:
        found = [r for r in runs if r.run_id == run_id or r.run_id.startswith(run_id)]
        if len(found) != 1:
            raise NotFound(
                f"no single run {run_id!r} in {project}; `memdctl dream --log` lists them"
            )
        return found[0]
    wanted = [r for r in runs if r.kind == "dream" and r.state != "running"]
    if snapshot:
        wanted = [
            r
            for r in wanted
            if (service.store.run_dir(project, r.run_id) / "snapshot" / "manifest.json").is_file()
        ]
    if not wanted:
        raise NotFound(f"no finished dream run in {project}")
    return wanted[0]


async def dream_log(service: DreamService, memory_dir: Path, run_id: str | None) -> dict[str, Any]:
    """Without ``run_id``: the runs, newest first. With it: that run and its diffs."""
    project = project_key(memory_dir)
    if not run_id:
        runs = await anyio.to_thread.run_sync(service.store.runs, project)
        return {"memory_dir": str(memory_dir), "runs": [r.as_dict() for r in runs]}
    record = await anyio.to_thread.run_sync(lambda: _pick(service, project, run_id, snapshot=False))
    changes = await anyio.to_thread.run_sync(service.store.changes, project, record.run_id)
    return {"memory_dir": str(memory_dir), "run": record.as_dict(), "changes": changes}


async def dream_restore(
    service: DreamService, memory_dir: Path, run_id: str | None
) -> dict[str, Any]:
    """Put the snapshot of ``run_id`` (default: the latest dream) back, byte for byte."""
    found = service.find_dir(memory_dir)
    if found.running is not None:
        raise ValueError("a dream is running there; abort it first (memdctl dream --abort)")
    pending = [r.run_id for r in found.history if r.state == UNDO_PENDING]
    if pending:
        raise ValueError(f"the undo of run {pending[0]} waits for the disk; restore after it")
    project = project_key(memory_dir)
    source = await anyio.to_thread.run_sync(lambda: _pick(service, project, run_id, snapshot=True))
    async with service.exclusion.hold(found.key, "restore"):
        got = await anyio.to_thread.run_sync(
            lambda: service.acquire_recorded(found, "restore", None)
        )
        if isinstance(got, lock.Busy):
            raise ValueError(f"the consolidation lock is held: {got.reason}")
        if isinstance(got, lock.Unrecorded):
            raise ValueError(f"the restore does not start: {got.reason}")
        record = got
        record.restored_from = source.run_id
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(_restore, service, source, record)
    found.history.appendleft(record)
    return {**record.as_dict(), "changed_since_run": record.flagged}


def _restore(service: DreamService, source: RunRecord, record: RunRecord) -> None:
    """Restore, then record it; a restore that fails, or whose record the state disk refuses,
    is undone and raises (blocking)."""
    store = service.store
    try:
        done = restore_snapshot(store, source, record)
        record.state = "restored"
        record.files = [c.relative for c in done.changes]
        record.flagged = list(done.changed_since)
        record.reason = f"restored the snapshot of {source.run_id}"
        record.ended_at = service.clock_now()
        claim.release(record, False)
        store.save_changes(record, list(done.changes))
        store.save(record)
    except BaseException as exc:
        undone = undo_run(store, record)
        claim.release(record, False)
        record.state, record.reason = "failed", f"restore failed: {exc}; undone"
        if undone.failed:
            record.state = UNDO_PENDING
            record.reason = pending_reason(record.reason, undone.failed)
        record.ended_at = service.clock_now()
        store.keep(record)
        raise
